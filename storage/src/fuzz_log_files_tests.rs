//! Fuzzing of the readers of raft-engine's log files that Halite wrote itself: the file
//! framing (`framing.rs`: the file header, batch offsets, every entries block's checksum,
//! what `halite-ctl verify` reports) and the torn-tail check (`tail.rs`), on a real log's
//! newest file with one byte changed, cut short, or followed by any bytes, and on any
//! bytes after a valid file header. What must hold: no panic; every offset reported lies
//! inside the file; the check without repair leaves the file as it was; after a repair
//! the log opens or is refused with an error, never a crash.
//!
//! The default run is short (proptest's 256 cases); the long run is
//! `PROPTEST_CASES=N cargo test -p halite-storage --lib fuzz_log_files`
//! (`docs/benchmarks.md`, "Hostile-input bounds").

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use raft::eraftpb::{Entry, HardState};

use crate::framing::{bad_entry_blocks, batch_offsets, file_header_len, newest_log_file};
use crate::log::RaftLog;
use crate::tail::check_tail;

/// A real log's newest file (its name and bytes): five entries, one batch each.
fn template() -> &'static (String, Vec<u8>) {
    static T: OnceLock<(String, Vec<u8>)> = OnceLock::new();
    T.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        let log = RaftLog::open(d.path()).unwrap();
        for i in 1..=5u64 {
            let e = Entry { index: i, term: 1, data: format!("entry-{i}").into_bytes().into(), ..Default::default() };
            log.append(&[e], Some(&HardState { term: 1, commit: i, ..Default::default() }), None, true).unwrap();
        }
        drop(log);
        let f = newest_log_file(d.path()).unwrap().unwrap();
        let data = std::fs::read(&f).unwrap();
        // Cut to its last whole batch (raft-engine preallocates zeros after it).
        let end = batch_offsets(&data).last().map(|at| {
            let h: [u8; 16] = data[*at as usize..*at as usize + 16].try_into().unwrap();
            at + crate::framing::batch_len(&h).unwrap()
        });
        let data = data[..end.unwrap() as usize].to_vec();
        (f.file_name().unwrap().to_string_lossy().into_owned(), data)
    })
}

/// Writes `bytes` as the log file of a new log directory.
fn log_dir(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join(&template().0);
    std::fs::write(&f, bytes).unwrap();
    (d, f)
}

fn check(dir: &Path, file: &Path, bytes: &[u8]) -> Result<(), TestCaseError> {
    let len = bytes.len() as u64;
    let _ = file_header_len(bytes);
    prop_assert!(batch_offsets(bytes).iter().all(|at| *at < len));
    prop_assert!(bad_entry_blocks(bytes).iter().all(|at| *at < len));
    let _ = crate::framing::first_bad_batch(file);
    // Checked without repair: nothing changes on disk.
    let _ = check_tail(dir, false);
    let on_disk = std::fs::read(file).ok();
    prop_assert_eq!(on_disk.as_deref(), Some(bytes));
    // Repaired: the log then opens and reads, or says why not.
    if check_tail(dir, true).is_ok() {
        if let Ok(log) = RaftLog::open(dir) {
            let last = log.last_entry_index().unwrap_or(0);
            let _ = log.read_entries(1, last + 1, None);
        }
    }
    Ok(())
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64), ..ProptestConfig::default() })]

    #[test]
    fn fuzz_log_files(pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>(), tail in bytes(256), how in 0u8..4) {
        let good = &template().1;
        let header = file_header_len(good).unwrap() as usize;
        let bad = match how {
            // One byte changed anywhere.
            0 => { let mut b = good.clone(); let p = pos % b.len(); b[p] = val; b }
            // Cut short anywhere.
            1 => good[..cut % (good.len() + 1)].to_vec(),
            // Any bytes after the last batch.
            2 => [good.as_slice(), &tail].concat(),
            // Any bytes after a valid file header.
            _ => [&good[..header], tail.as_slice()].concat(),
        };
        let (d, f) = log_dir(&bad);
        check(d.path(), &f, &bad)?;
    }
}
