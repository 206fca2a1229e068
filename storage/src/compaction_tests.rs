//! The policy on made-up facts (large entries, limits the log cannot get under), and the
//! byte limit on a real log, state machine and snapshot store on disk: the log's files
//! stay within the limit plus one file however large the entries, and a reopen finds
//! only the snapshot and the tail.

use raft::eraftpb::{ConfState, Entry, HardState};

use std::path::Path;

use super::*;
use crate::format::{JobReturn, Record};
use crate::snapshot::recover_at_start;

fn facts(first: u64, last: u64, applied: u64, snap: u64, bytes: u64, compacted: u64) -> LogFacts {
    LogFacts { first_index: first, last_index: last, applied_index: applied, snapshot_index: snap, log_bytes: bytes, compacted_bytes: compacted }
}

const MIB: u64 = 1 << 20;

#[test]
fn policy() {
    let l = CompactionLimits { max_entries: Some(100), max_bytes: Some(10 * MIB), min_entries: 10 };
    assert_eq!(decide(facts(1, 100, 100, 0, 10, 0), l), Decision::Keep);
    assert!(matches!(decide(facts(1, 101, 95, 0, 10, 0), l), Decision::Compact { through: 95, .. }));
    assert!(matches!(decide(facts(1, 50, 50, 0, 10 * MIB + 1, 0), l), Decision::Compact { through: 50, .. }));
    // Limits off.
    let off = CompactionLimits { max_entries: None, max_bytes: None, min_entries: 1 };
    assert_eq!(decide(facts(1, 10_000_000, 10_000_000, 0, u64::MAX, 0), off), Decision::Keep);
    // Never past the applied index, and nothing when nothing was applied since the
    // last snapshot.
    assert!(matches!(decide(facts(1, 500, 200, 0, 0, 0), l), Decision::Compact { through: 200, .. }));
    assert_eq!(decide(facts(46, 5000, 45, 45, 50 * MIB, 0), l), Decision::Keep);
}

/// Tiny limits: at least `min_entries` entries, or 1 MiB, given back by a compaction.
#[test]
fn a_tiny_limit_compacts_no_more_often_than_the_minimum() {
    let l = CompactionLimits { max_entries: Some(1), max_bytes: Some(1000), min_entries: 1000 };
    assert_eq!(decide(facts(1, 999, 999, 0, 2000, 0), l), Decision::Keep);
    assert!(matches!(decide(facts(1, 1000, 1000, 0, 2000, 0), l), Decision::Compact { through: 1000, .. }));
    // The byte limit alone: 1 MiB appended since the last compaction.
    let b = CompactionLimits { max_entries: None, ..l };
    assert_eq!(decide(facts(1001, 1500, 1500, 1000, MIB + 4000, 5000), b), Decision::Keep);
    assert!(matches!(decide(facts(1001, 1500, 1500, 1000, MIB + 5000, 5000), b), Decision::Compact { through: 1500, .. }));
}

/// Returns of 8 KB, a hundred to an entry: 600 MB of log in 750
/// entries. The byte limit compacts it whatever the count of entries, and again once
/// half a limit was appended after the compaction.
#[test]
fn large_entries_are_compacted_by_the_byte_limit() {
    let l = CompactionLimits::default();
    assert!(matches!(decide(facts(1, 750, 750, 0, 600 * MIB, 0), l), Decision::Compact { through: 750, .. }));
    // Even one entry over the limit, once it is applied.
    assert!(matches!(decide(facts(1, 1, 1, 0, 300 * MIB, 0), l), Decision::Compact { through: 1, .. }));
    assert_eq!(decide(facts(1, 1, 0, 0, 300 * MIB, 0), l), Decision::Keep);
    // After a compaction that left 64 MiB (the file being written): 200 MiB more.
    assert!(matches!(decide(facts(751, 1000, 1000, 750, 264 * MIB, 64 * MIB), l), Decision::Compact { through: 1000, .. }));
    assert_eq!(decide(facts(751, 900, 900, 750, 250 * MIB, 64 * MIB), l), Decision::Keep);
}

/// A limit the log cannot get under (files not deleted yet, entries not applied yet)
/// makes the node snapshot once per half a limit of new log, not at every check.
#[test]
fn a_limit_the_log_cannot_get_under_does_not_snapshot_again_and_again() {
    let l = CompactionLimits { max_entries: None, max_bytes: Some(100 * MIB), min_entries: DEFAULT_MIN_ENTRIES };
    // A compaction left 150 MiB of files: over the limit, and thousands of entries
    // applied since, but compacting can give back at most the 30 MiB appended.
    assert_eq!(decide(facts(5001, 9000, 9000, 5000, 180 * MIB, 150 * MIB), l), Decision::Keep);
    assert!(matches!(decide(facts(5001, 9500, 9500, 5000, 200 * MIB, 150 * MIB), l), Decision::Compact { through: 9500, .. }));
    // The count limit: the applied index lags the log; compacting through it drops
    // fewer than half the limit's entries.
    let n = CompactionLimits { max_entries: Some(100), max_bytes: None, min_entries: 10 };
    assert_eq!(decide(facts(1, 500, 30, 0, 0, 0), n), Decision::Keep);
    assert!(matches!(decide(facts(1, 500, 60, 0, 0, 0), n), Decision::Compact { through: 60, .. }));
    assert_eq!(decide(facts(61, 520, 80, 60, 0, 0), n), Decision::Keep);
    assert!(matches!(decide(facts(61, 520, 110, 60, 0, 0), n), Decision::Compact { through: 110, .. }));
}

#[test]
fn the_log_files_follow_the_byte_limit() {
    let f = |max_bytes| CompactionLimits { max_entries: None, max_bytes, min_entries: 1 }.file_bytes();
    assert_eq!(f(Some(256 * MIB)), 64 * MIB);
    assert_eq!(f(Some(8 * MIB)), 2 * MIB);
    assert_eq!(f(Some(1000)), MIN_FILE_BYTES);
    assert_eq!(f(Some(u64::MAX)), crate::log::DEFAULT_FILE_BYTES);
    assert_eq!(f(None), crate::log::DEFAULT_FILE_BYTES);
}

/// The byte limit reads what the log's files hold, not raft-engine's whole-file
/// estimate (two files of 128 MiB for a log of a few entries).
#[test]
fn the_byte_figure_is_what_the_files_hold() {
    let dir = tempfile::tempdir().unwrap();
    let log = crate::log::RaftLog::open(dir.path()).unwrap();
    let small = LogFacts::of(&log, 0).unwrap().log_bytes;
    assert!(small < 16 << 20, "a new log reads as {small} bytes");
    let es: Vec<Entry> = (1..=64).map(|i| Entry { index: i, term: 1, data: vec![7u8; 64 << 10].into(), ..Default::default() }).collect();
    log.append(&es, None, None, true).unwrap();
    let grown = LogFacts::of(&log, 0).unwrap().log_bytes;
    assert!(grown >= small + (4 << 20), "64 entries of 64 KiB: {small} -> {grown}");
}

/// `n` returns of `bytes` random bytes (nothing compresses them), for entry `index`.
fn returns(index: u64, n: u64, bytes: usize) -> Vec<Record> {
    let mut x = index.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|k| {
            let load = crate::noise_tests::noise(&mut x, bytes);
            Record::JobReturn(JobReturn { jid: format!("2026112900{index:010}"), id: format!("minion-{k}"), load, time_ns: index, first_only: false })
        })
        .collect()
}

/// Feeds a log, state machine and snapshot store in `dir` as a node feeds them: entries
/// of `per_entry` returns of 8 KiB, the state machine `lag` entries behind the log (what
/// a node appends while a snapshot is built), the policy asked after every entry and its
/// compactions done. Asserts after every entry that the log's files hold at most `bound`
/// bytes. Returns the compactions and the log's `compacted_bytes`.
fn feed(dir: &Path, limits: CompactionLimits, (entries, per_entry): (u64, u64), lag: u64, bound: u64) -> (u64, u64) {
    let log = RaftLog::open_with(&dir.join("log"), limits.file_bytes()).unwrap();
    let sm = StateMachine::open(&dir.join("state")).unwrap();
    let store = SnapshotStore::open(&dir.join("snapshots")).unwrap();
    let cs = ConfState { voters: vec![1], ..Default::default() };
    log.append(&[], None, Some(&cs), true).unwrap();
    log.next_incarnation(1).unwrap();
    let mut compactions = 0;
    for index in 1..=entries {
        let recs = returns(index, per_entry, 8 << 10);
        let e = Entry { index, term: 1, data: Record::encode_batch(&recs).unwrap().into(), ..Default::default() };
        log.append(&[e], Some(&HardState { term: 1, vote: 1, commit: index, ..Default::default() }), None, false).unwrap();
        if index > lag {
            let applied = index - lag;
            let recs = if lag == 0 { recs } else { returns(applied, per_entry, 8 << 10) };
            sm.apply(&recs.into_iter().map(|r| (applied, r)).collect::<Vec<_>>()).unwrap();
            sm.advance_applied(applied).unwrap();
            if let Decision::Compact { through, .. } = decide(LogFacts::of(&log, applied).unwrap(), limits) {
                assert_eq!(through, applied);
                compact(&log, &sm, &store, |_, _| {}).unwrap().unwrap();
                compactions += 1;
                let after = LogFacts::of(&log, applied).unwrap();
                assert_eq!(after.appended_bytes(), 0, "the figure a compaction leaves is the log's bytes after it");
            }
        }
        let bytes = log.disk_bytes();
        assert!(bytes <= bound, "entry {index}: {bytes} bytes of log files, over {bound}");
    }
    (compactions, log.compacted_bytes().unwrap())
}

/// Entries of 256 KiB through a log with a byte limit of 8 MiB, six times the limit in
/// all: the log's files never hold more than the limit plus one file (2 MiB), and a
/// reopen finds the snapshot and the tail only.
#[test]
fn the_log_stays_within_its_byte_limit_whatever_the_entry_size() {
    let limit = 8 * MIB;
    let limits = CompactionLimits { max_entries: None, max_bytes: Some(limit), min_entries: DEFAULT_MIN_ENTRIES };
    let bound = limit + limits.file_bytes();
    let d = tempfile::tempdir().unwrap();
    let entries = 6 * limit / (256 << 10);
    let (compactions, compacted_bytes) = feed(d.path(), limits, (entries, 32), 0, bound);
    // At least one compaction per limit, at most one per half a limit.
    assert!((6..=12).contains(&compactions), "{compactions} compactions");

    // What start-up reads: the files (within the bound), the entries after the
    // snapshot, and the state machine from the snapshot when it is gone.
    let state = d.path().join("state");
    std::fs::remove_dir_all(&state).unwrap();
    let log = RaftLog::open_with(&d.path().join("log"), limits.file_bytes()).unwrap();
    let snap = log.snapshot_meta().unwrap().index;
    assert!(log.disk_bytes() <= bound);
    assert_eq!(log.compacted_bytes().unwrap(), compacted_bytes);
    assert_eq!(log.first_entry_index(), Some(snap + 1).filter(|f| *f <= entries));
    assert_eq!(log.last_entry_index().unwrap_or(snap), entries);
    assert!((entries - snap) * (256 << 10) <= limit, "the tail is entries {}..={entries}", snap + 1);
    let store = SnapshotStore::open(&d.path().join("snapshots")).unwrap();
    let rec = recover_at_start(&store, &log, &state).unwrap();
    assert_eq!(rec.installed, Some(snap));
    assert_eq!(StateMachine::open(&state).unwrap().applied_index().unwrap(), snap);
}

/// The state machine 100 entries of 32 KiB (3.2 MiB) behind the log: every compaction
/// leaves those entries, more than raft-engine moves out of the way by itself (32), in
/// the files before the newest. The files older than the first of them are still
/// deleted (the log's small values, written once long ago, do not keep the oldest
/// file), so the log stays within the limit, one file and the entries not applied.
#[test]
fn entries_not_applied_yet_keep_only_their_own_files() {
    let limit = 8 * MIB;
    let limits = CompactionLimits { max_entries: None, max_bytes: Some(limit), min_entries: DEFAULT_MIN_ENTRIES };
    let lag = 100;
    let bound = limit + limits.file_bytes() + lag * (32 << 10);
    let d = tempfile::tempdir().unwrap();
    let entries = 6 * limit / (32 << 10);
    let (compactions, _) = feed(d.path(), limits, (entries, 4), lag, bound);
    assert!((5..=12).contains(&compactions), "{compactions} compactions");
}
