//! The master's heap: mimalloc (v3, the `mimalloc` crate) for everything Rust allocates.
//!
//! **Why.** Under a `salt '*' test.ping` to 8,000 minions, glibc's `malloc` and `free`
//! are about a quarter of the master's CPU (`perf`): every allocation larger than about 1 KiB made glibc merge its
//! small free chunks (`malloc_consolidate`) and walk its free lists (`unlink_chunk`), and
//! a return allocates many small and a few large buffers (frames, the decrypted load,
//! its msgpack tree, the record). mimalloc keeps free lists per page and per thread: the
//! same run took a quarter less CPU (the table below).
//!
//! **Memory.** With its defaults mimalloc kept 25–50 MiB more resident at 8,000 minions
//! than glibc (130–153 MiB against 102–106 after the pings): it commits its arenas
//! eagerly and gives freed pages back to the kernel after a second. Eager commit is off
//! (`MI_DEFAULT_ARENA_EAGER_COMMIT=0`, a define of mimalloc's C source that
//! `.cargo/config.toml` passes to its build: the option is read when the process loads,
//! before `main`, so setting it here comes too late: 120–130 MiB), and
//! [`configure`] makes freed pages go back at once. Measured the same hour
//! (`benches/scripts/ping_cpu.py`), the same code apart from the allocator:
//!
//! | heap | master CPU per 8,000-minion `test.ping` | RSS after, 8,000 | RSS after, 500 |
//! |---|---|---|---|
//! | glibc | 0.90–0.95 s | 98–106 MiB | 37.3 MiB |
//! | mimalloc, purge after 100 ms | 0.67–0.69 s | 101–104 MiB | |
//! | mimalloc, purge after 10 ms | 0.70–0.73 s | 101–105 MiB | 44.8 MiB |
//! | **mimalloc, purge at once** | **0.72 s** | **97.7 MiB** | **41.6 MiB** |
//!
//! So about a quarter less CPU, for a few MiB more at small fleets (each thread that
//! allocated keeps partly used pages of its own). What C and C++ libraries allocate
//! (RocksDB's memtables and caches, OpenSSL) still comes from glibc's heap, which
//! `daemon::trim` keeps small.
//!
//! On the AMD machine (three alternated pairs at 8,000 minions, judged by the master's
//! CPU over the swarm's in the same runs) a purge delay of 100 ms saves nothing and
//! keeps 10 MiB more (docs/benchmarks.md, "Allocator and OpenSSL settings"), so the
//! purge is at once.
//!
//! **Start-up.** Purging at once costs a start: reading a log's tail allocates and frees
//! an entry's buffers (up to megabytes each) again and again, and each allocation
//! faults its pages in anew (with 74 MiB of tail, page faults and purges were half of a
//! start's CPU, 413 ms to ready against 128 ms empty). So until the master serves,
//! freed pages stay [`STARTUP_PURGE_DELAY_MS`] (mimalloc's own default) and are reused;
//! [`serving`] sets the purge back to at once (docs/benchmarks.md "Start-up after large
//! returns").
//!
//! The option numbers are mimalloc v3's (`mi_option_t` in its `mimalloc.h`; the sys crate
//! names only some, with v2's numbers): the test below checks them against their
//! distinctive defaults, so a mimalloc upgrade that renumbers them fails the test
//! instead of setting the wrong option.

/// `mi_option_arena_eager_commit` (v3): commit arena memory when it is reserved (default
/// 2: when the system overcommits).
const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
/// `mi_option_purge_delay` (v3): milliseconds before freed pages go back to the kernel
/// (default 1,000).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays resident before mimalloc gives it back, once serving.
pub const PURGE_DELAY_MS: i64 = 0;
/// The same until the master serves (see the module docs).
pub const STARTUP_PURGE_DELAY_MS: i64 = 1000;

/// Sets mimalloc's options (see the module docs), each unless the environment sets it
/// (`MIMALLOC_ARENA_EAGER_COMMIT`, `MIMALLOC_PURGE_DELAY`: mimalloc reads them when the
/// process loads, so an operator's choice stands). Call it first thing in `main`, before
/// any thread starts (mimalloc's option setters are not thread-safe).
///
/// It allocates nothing (`getenv`, not `std::env`): the first allocation makes mimalloc
/// reserve its first arena, which must already see `arena_eager_commit` off.
pub fn configure() {
    // `arena_eager_commit` again, in case a build without the define runs (too late for
    // the first arena, in time for the next).
    let options: [(libmimalloc_sys::mi_option_t, &std::ffi::CStr, i64); 2] = [(ARENA_EAGER_COMMIT, c"MIMALLOC_ARENA_EAGER_COMMIT", 0), (PURGE_DELAY, c"MIMALLOC_PURGE_DELAY", STARTUP_PURGE_DELAY_MS)];
    for (option, env, value) in options {
        // SAFETY: getenv reads the environment (no other thread runs yet to change it);
        // mi_option_set is a plain integer setter of the linked mimalloc.
        unsafe {
            if libc::getenv(env.as_ptr()).is_null() {
                libmimalloc_sys::mi_option_set(option, value as _);
            }
        }
    }
}

/// The master serves: freed pages go back to the kernel at once from now on (see the
/// module docs), unless the environment chose (`MIMALLOC_PURGE_DELAY`).
///
/// Other threads run by now: the option is one aligned machine word that mimalloc's
/// option getter reads plainly after its first initialisation (done in [`configure`]),
/// so a thread reads the old delay or the new one, never a mix.
pub fn serving() {
    // SAFETY: getenv reads the environment (nothing in the master sets it); mi_option_set
    // stores an integer of the linked mimalloc (see above).
    unsafe {
        if libc::getenv(c"MIMALLOC_PURGE_DELAY".as_ptr()).is_null() {
            libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_DELAY_MS as _);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers name the options meant: `purge_delay` has mimalloc v3's default
    /// (1,000), `arena_eager_commit` the build's (0, from `.cargo/config.toml`; mimalloc's
    /// own is 2), and `configure` sets them. (This test binary does not use mimalloc as
    /// its allocator; the options are the linked library's all the same.)
    #[test]
    fn the_option_numbers_are_mimalloc_v3s_and_the_build_define_arrived() {
        if std::env::var_os("MIMALLOC_ARENA_EAGER_COMMIT").is_some() || std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return; // the environment chose; nothing of the build to check
        }
        // SAFETY: integer getters of the linked library.
        let (eager, delay) = unsafe { (libmimalloc_sys::mi_option_get(ARENA_EAGER_COMMIT), libmimalloc_sys::mi_option_get(PURGE_DELAY)) };
        assert_eq!((eager, delay), (0, 1000), "arena_eager_commit from the build's define, purge_delay mimalloc's default");
        configure();
        let (eager, delay) = unsafe { (libmimalloc_sys::mi_option_get(ARENA_EAGER_COMMIT), libmimalloc_sys::mi_option_get(PURGE_DELAY)) };
        assert_eq!((eager, delay as i64), (0, STARTUP_PURGE_DELAY_MS));
        serving();
        let delay = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        assert_eq!(delay as i64, PURGE_DELAY_MS);
    }
}
