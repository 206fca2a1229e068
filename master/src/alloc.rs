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
//! eagerly and keeps freed pages for a second. Eager commit is off (`MI_DEFAULT_ARENA_EAGER_COMMIT=0`, a define of
//! mimalloc's C source that `.cargo/config.toml` passes to its build: the option is read
//! when the process loads, before `main`, so setting it here comes too late: 120–130
//! MiB).
//!
//! **Freed pages.** mimalloc gives a freed page back to the kernel (`madvise`) once it
//! has stayed free for its purge delay, [`PURGE_DELAY_MS`] (mimalloc's default second),
//! so a page freed and taken again within a burst is reused, not faulted in anew. With
//! the pages given back at once instead, a blast of returns spent 7 % of the master's CPU
//! in page faults and `madvise` (`perf record`) and 9–12 % more CPU a return
//! (docs/benchmarks.md, "Freed pages kept a second"); reading a log's tail at start faulted every entry's
//! buffers in again (page faults and purges were half of a start's CPU). mimalloc purges
//! what expired only when a thread next allocates pages, so an idle master would keep a
//! burst's pages: [`collect`], called every second (`daemon::trim`), gives back every
//! free page at once, and a burst's memory is back with the kernel a second or two after
//! it ends. What C and C++ libraries allocate (RocksDB's memtables and caches, OpenSSL)
//! comes from glibc's heap, which `daemon::trim` keeps small.
//!
//! Measured the same hour (`benches/scripts/ping_cpu.py`, RSS read right after the
//! pings), the same code apart from the allocator:
//!
//! | heap | master CPU per 8,000-minion `test.ping` | RSS after, 8,000 | RSS after, 500 |
//! |---|---|---|---|
//! | glibc | 0.90–0.95 s | 98–106 MiB | 37.3 MiB |
//! | mimalloc, purge after 100 ms | 0.67–0.69 s | 101–104 MiB | |
//! | mimalloc, purge after 10 ms | 0.70–0.73 s | 101–105 MiB | 44.8 MiB |
//! | mimalloc, purge at once | 0.72 s | 97.7 MiB | 41.6 MiB |
//!
//! So about a quarter less CPU, for a few MiB more at small fleets (each thread that
//! allocated keeps partly used pages of its own).
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

/// How long a freed page stays resident before mimalloc gives it back (see the module
/// docs; [`collect`] gives back every free page at once).
pub const PURGE_DELAY_MS: i64 = 1000;

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
    let options: [(libmimalloc_sys::mi_option_t, &std::ffi::CStr, i64); 2] = [(ARENA_EAGER_COMMIT, c"MIMALLOC_ARENA_EAGER_COMMIT", 0), (PURGE_DELAY, c"MIMALLOC_PURGE_DELAY", PURGE_DELAY_MS)];
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

/// Gives every free page of mimalloc's arenas back to the kernel now, whatever its purge
/// delay, and the calling thread's free pages with them (see the module docs). Safe to
/// call from any thread at any time; a few microseconds when little is free.
pub fn collect() {
    // SAFETY: mi_collect takes no pointer; mimalloc allows it from any thread.
    unsafe { libmimalloc_sys::mi_collect(true) }
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
        assert_eq!((eager, delay as i64), (0, PURGE_DELAY_MS));
    }

    /// Pages of `len` bytes at `ptr` that are resident (`mincore`).
    fn resident_pages(ptr: *mut u8, len: usize) -> usize {
        let page = 4096;
        let mut vec = vec![0u8; len.div_ceil(page)];
        // SAFETY: `ptr` is page-aligned and the range lies in a mapping mimalloc keeps
        // (its arena stays mapped after a free); mincore only reports on it.
        let rc = unsafe { libc::mincore(ptr.cast(), len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|v| *v & 1 == 1).count()
    }

    /// A block freed stays resident for the purge delay (reused if asked for again), and
    /// `collect` gives it back to the kernel at once. (Allocated from mimalloc directly:
    /// this test binary's allocator is the system's.)
    #[test]
    fn a_freed_block_stays_for_the_delay_and_collect_gives_it_back() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some_and(|v| v == "0") {
            return; // the environment gives pages back at once
        }
        let len = 8 << 20;
        // SAFETY: a fresh block of `len` bytes, written in full, freed once, then only
        // its (still mapped) address range is looked at.
        let ptr = unsafe { libmimalloc_sys::mi_malloc_aligned(len, 4096) } as *mut u8;
        assert!(!ptr.is_null());
        unsafe { std::ptr::write_bytes(ptr, 1, len) };
        assert_eq!(resident_pages(ptr, len), len / 4096);
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) };
        assert!(resident_pages(ptr, len) > len / 4096 / 2, "a freed block stays resident for the purge delay");
        collect();
        assert_eq!(resident_pages(ptr, len), 0, "collect gives every free page back");
    }
}
