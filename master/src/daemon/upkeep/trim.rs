//! Giving the memory a burst freed back to the system.
//!
//! The Rust heap is mimalloc's (`crate::alloc`): it gives a page back once it has been
//! free for its purge delay, but only when a thread next allocates pages, so every
//! [`EVERY`] the master also hands back every free page of it ([`crate::alloc::collect`]).
//! glibc's heap holds what the C and C++ libraries allocate: RocksDB's memtables and
//! caches, OpenSSL. What follows was measured with everything on glibc's heap, and
//! applies to what it holds.
//!
//! glibc's `free` returns memory to the kernel only from the top of a heap: after a
//! burst (8,000 minions signing in, a job's 8,000 returns decrypted and stored at once)
//! the freed chunks in the middle of the heaps stay resident, as free memory of the
//! process, until they are reused. Measured at 8,000 simulated minions after five
//! `test.ping`s, everything on glibc's heap: 97.5 MiB taken from the
//! system by the allocator, 65 MiB of it in use; a `malloc_trim(0)` gave back 11.7 MiB
//! of resident memory. (The arenas are not the cause: the master uses two, whatever its
//! thread count, so `M_ARENA_MAX` changes nothing.)
//!
//! Two things keep that memory small. At start, [`fix_mmap_threshold`] keeps glibc's
//! mmap threshold at its starting 128 KiB, so large blocks (RocksDB's 1 MiB memtable
//! blocks, large buffers) keep getting mappings of their own, unmapped when freed (glibc
//! would raise the threshold at the first such free and put them in the heaps from then
//! on). And every [`EVERY`] the master calls `malloc_trim(0)`, which hands the whole free pages
//! inside the heaps back to the kernel (`MADV_DONTNEED`; the address space stays, a later
//! allocation faults a zeroed page in again). It takes about a millisecond for a heap of
//! a hundred MiB; the pages given back and taken again after each burst cost a page fault
//! each. Other allocators (and other C libraries) have nothing to trim: [`trim`] does
//! nothing there.

use std::time::Duration;

/// How often the heap's free pages are given back.
pub const EVERY: Duration = Duration::from_secs(1);

/// Gives free pages back every [`EVERY`], for ever: glibc's ([`trim`]) and mimalloc's.
pub async fn run() {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let started = std::time::Instant::now();
        trim();
        crate::alloc::collect();
        let took = started.elapsed();
        if took > Duration::from_millis(20) {
            tracing::warn!(ms = took.as_millis() as u64, "giving free heap pages back took long");
        }
    }
}

/// Allocations of at least this many bytes get their own mapping (glibc's
/// `M_MMAP_THRESHOLD`), given back to the kernel as soon as they are freed.
pub const MMAP_THRESHOLD: i32 = 128 << 10;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD`] (its starting value). Left alone,
/// glibc raises it to the size of each large block freed (up to 32 MiB), so after the
/// first RocksDB memtable is flushed its 1 MiB arena blocks, and every large buffer
/// after them, come from the heaps, where what they leave behind when freed stays
/// resident. Call it before any thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn fix_mmap_threshold() {
    // SAFETY: mallopt takes two integers; called at start, before other threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

/// Nothing to fix with this C library.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn fix_mmap_threshold() {}

/// Hands the free pages of every heap back to the kernel; whether any were.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim() -> bool {
    // SAFETY: malloc_trim takes no pointer and may be called at any time from any thread.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Hands the free pages of every heap back to the kernel: nothing to do with this C
/// library.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    /// Resident bytes of the mapping of this process that holds `addr`
    /// (`/proc/self/smaps`): the heap the burst below was allocated in, so other tests
    /// allocating at the same time in other heaps do not count.
    fn resident_around(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-').filter(|(lo, hi)| !lo.is_empty() && !hi.is_empty() && lo.chars().all(|c| c.is_ascii_hexdigit())) {
                let (lo, hi) = (usize::from_str_radix(lo, 16).unwrap(), usize::from_str_radix(hi, 16).unwrap());
                inside = lo <= addr && addr < hi;
            } else if inside && line.starts_with("Rss:") {
                let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
                return kib * 1024;
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    /// Whether glibc gave the block at `ptr` a mapping of its own: the `IS_MMAPPED` bit
    /// (2) of the size word glibc keeps just before every block it hands out.
    fn own_mapping(ptr: *const u8) -> bool {
        // SAFETY: `ptr` is a live block from malloc; the word before it is its chunk's
        // size field, which glibc writes for every block (reading it changes nothing).
        unsafe { (ptr as *const usize).sub(1).read() & 2 != 0 }
    }

    /// With the threshold fixed, a 1 MiB block freed and asked for again still gets a
    /// mapping of its own (glibc would otherwise raise the threshold at the first free
    /// and serve the next ones from a heap).
    ///
    /// glibc serves a large request from any free chunk big enough before it considers a
    /// mapping, and the other tests of this binary, running at the same time, leave such
    /// chunks in the heaps. So the check runs in a process of its own: this test binary
    /// again, running only this test.
    #[test]
    fn large_blocks_keep_their_own_mappings() {
        const CHILD: &str = "HALITE_TRIM_TEST_CHILD";
        const NAME: &str = "daemon::upkeep::trim::tests::large_blocks_keep_their_own_mappings";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([NAME, "--exact", "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && stdout.contains("1 passed"), "the check in a process of its own:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
            return;
        }
        super::fix_mmap_threshold();
        for round in 0..3 {
            // `black_box`: the block must really be allocated (an optimized build may drop an
            // allocation whose bytes are never read, as only the word before it is).
            let block = std::hint::black_box(vec![1u8; 1 << 20]);
            assert!(own_mapping(block.as_ptr()), "round {round}: a 1 MiB block came from a heap");
        }
    }

    /// A burst of small allocations freed but for the last (so `free` cannot shrink the
    /// heap from its top): the memory stays resident until `trim` gives it back.
    #[test]
    fn a_freed_burst_is_given_back() {
        std::thread::spawn(|| {
            let mut burst: Vec<Box<[u8; 4000]>> = (0..16_384).map(|_| Box::new([7u8; 4000])).collect();
            let addr = &*burst[8_000] as *const [u8; 4000] as usize;
            let last = burst.pop();
            let before = resident_around(addr);
            drop(burst);
            let freed = resident_around(addr);
            super::trim();
            let after = resident_around(addr);
            drop(last);
            // 64 MB was freed in the middle of the heap; nearly all of it stayed resident
            // until the trim.
            assert!(before.saturating_sub(freed) < 16 << 20, "free alone gave back {} of 64 MB", before.saturating_sub(freed));
            assert!(freed.saturating_sub(after) > 48 << 20, "the trim gave back only {} bytes", freed.saturating_sub(after));
        })
        .join()
        .unwrap();
    }
}
