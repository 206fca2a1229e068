//! Tests of the raft log (`log.rs`).

use super::*;
use raft::eraftpb::ConfChange;

fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
    Entry { index, term, data: data.to_vec().into(), ..Default::default() }
}

#[test]
fn storage_round_trip_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = RaftLog::open(dir.path()).unwrap();
    assert!(log.is_new().unwrap());
    let hs = HardState { term: 1, commit: 3, ..Default::default() };
    let cs = ConfState { voters: vec![1], ..Default::default() };
    log.append(&[entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 1, b"c")], Some(&hs), Some(&cs), true).unwrap();
    drop(log);
    let log = RaftLog::open(dir.path()).unwrap();
    assert!(!log.is_new().unwrap());
    assert_eq!(Storage::first_index(&log).unwrap(), 1);
    assert_eq!(Storage::last_index(&log).unwrap(), 3);
    assert_eq!(log.term(2).unwrap(), 1);
    let st = log.initial_state().unwrap();
    assert_eq!(st.hard_state.commit, 3);
    assert_eq!(st.conf_state.voters, vec![1]);
    let es = log.entries(1, 4, None, GetEntriesContext::empty(false)).unwrap();
    assert_eq!(es.len(), 3);
    assert_eq!(&es[2].data[..], b"c");
    // Size-limited reads still return one entry.
    let es = log.entries(1, 4, Some(1), GetEntriesContext::empty(false)).unwrap();
    assert_eq!(es.len(), 1);
    // A conflicting suffix is replaced.
    log.append(&[entry(3, 2, b"C"), entry(4, 2, b"d")], None, None, true).unwrap();
    assert_eq!(log.term(3).unwrap(), 2);
    assert_eq!(Storage::last_index(&log).unwrap(), 4);
    assert!(log.entries(0, 2, None, GetEntriesContext::empty(false)).is_err());
}

/// What a compaction keeps of the membership entries: per node its last change and
/// its last address, nothing of a removed node; and the bytes round-trip.
#[test]
fn membership_entries_fold_to_what_the_address_book_needs() {
    let change = |index: u64, node: u64, t: raft::eraftpb::ConfChangeType, ctx: &[u8]| {
        let mut cc = ConfChange::default();
        cc.set_change_type(t);
        cc.node_id = node;
        let mut e = Entry { index, term: 1, data: cc.write_to_bytes().unwrap().into(), context: ctx.to_vec().into(), ..Default::default() };
        e.set_entry_type(EntryType::EntryConfChange);
        e
    };
    use raft::eraftpb::ConfChangeType::*;
    let addr = [&[0u8; 16][..], b"127.0.0.2:4520"].concat();
    let es = vec![
        change(1, 1, AddNode, &addr),
        change(2, 2, AddLearnerNode, &addr),
        change(3, 3, AddLearnerNode, &addr),
        change(4, 2, AddNode, &[0u8; 16]),
        change(5, 3, RemoveNode, &[0u8; 16]),
    ];
    let kept: Vec<u64> = fold_members(es).iter().map(|e| e.index).collect();
    assert_eq!(kept, vec![1, 2, 4]);
    let enc = encode_members(&[change(1, 1, AddNode, &addr)]);
    assert_eq!(decode_members(&enc).unwrap()[0].context.to_vec(), addr);
    assert!(decode_members(&enc[..enc.len() - 1]).is_err());
    assert!(decode_members(&[0xff, 0xff, 0xff, 0xff]).is_err());
}

#[test]
fn incarnation_grows_at_every_start_even_if_the_clock_goes_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = RaftLog::open(dir.path()).unwrap();
    let first = log.next_incarnation(1_000).unwrap();
    assert_eq!(first, 1_000);
    drop(log);
    let log = RaftLog::open(dir.path()).unwrap();
    assert_eq!(log.next_incarnation(500).unwrap(), 1_001, "a clock that went back never repeats an incarnation");
    assert_eq!(log.next_incarnation(5_000).unwrap(), 5_000);
    // The hard state and entries are untouched by it, and a new log is still new.
    let fresh = tempfile::tempdir().unwrap();
    let log = RaftLog::open(fresh.path()).unwrap();
    log.next_incarnation(7).unwrap();
    assert!(log.is_new().unwrap());
}

/// The entries raft-rs reads back (`Storage::entries`) are the log's, whichever of the
/// cache of the newest entries (`log_cache.rs`) and the log's files serves them, through
/// appends that replace suffixes, applies, compactions and snapshot installs; and a read
/// of the newest entries is served from memory (the very bytes appended, not a copy).
#[test]
fn entries_read_back_are_the_logs_whether_cached_or_not() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config as PtConfig, TestRunner};
    #[derive(Debug, Clone)]
    enum Op {
        Append { back: u64, n: u64, bytes: usize },
        Applied { back: u64 },
        Compact { back: u64 },
        Install { ahead: u64 },
    }
    let op = prop_oneof![
        6 => (0u64..4, 1u64..6, 0usize..3000).prop_map(|(back, n, bytes)| Op::Append { back, n, bytes }),
        2 => (0u64..8).prop_map(|back| Op::Applied { back }),
        1 => (0u64..8).prop_map(|back| Op::Compact { back }),
        1 => (0u64..3).prop_map(|ahead| Op::Install { ahead }),
    ];
    let mut runner = TestRunner::new(PtConfig { cases: 48, ..PtConfig::default() });
    runner
        .run(&proptest::collection::vec(op, 1..40), |ops| {
            let dir = tempfile::tempdir().unwrap();
            let log = RaftLog::open(dir.path()).unwrap();
            let ctx = || GetEntriesContext::empty(false);
            let mut term = 1;
            for op in ops {
                let first = Storage::first_index(&log).unwrap();
                let last = Storage::last_index(&log).unwrap();
                match op {
                    Op::Append { back, n, bytes } => {
                        let at = (last + 1).saturating_sub(back).max(first);
                        term += 1;
                        let es: Vec<Entry> = (at..at + n).map(|i| entry(i, term, &vec![(i + term) as u8; bytes])).collect();
                        log.append(&es, None, None, false).unwrap();
                        // Served from memory: the bytes appended, not a copy read back.
                        let got = log.entries(at, at + n, None, ctx()).unwrap();
                        prop_assert!(got.iter().zip(&es).all(|(g, e)| g.data.as_ptr() == e.data.as_ptr() || e.data.is_empty()));
                    }
                    Op::Applied { back } => log.applied_through(last.saturating_sub(back)),
                    Op::Compact { back } => {
                        let to = last.saturating_sub(back);
                        if to >= first && to > 0 {
                            let meta = SnapshotMetadata { index: to, term: log.term(to).unwrap(), ..Default::default() };
                            log.compact_through(&meta, &[]).unwrap();
                        }
                    }
                    Op::Install { ahead } => {
                        term += 1;
                        let meta = SnapshotMetadata { index: last + ahead, term, ..Default::default() };
                        log.install_snapshot(&meta, &[]).unwrap();
                    }
                }
                let (first, last) = (Storage::first_index(&log).unwrap(), Storage::last_index(&log).unwrap());
                for lo in first..=last {
                    for hi in lo + 1..=last + 1 {
                        let got: Vec<(u64, u64, Vec<u8>)> = log.entries(lo, hi, None, ctx()).unwrap().into_iter().map(|e| (e.index, e.term, e.data.to_vec())).collect();
                        let want: Vec<(u64, u64, Vec<u8>)> = log.read_entries(lo, hi, None).unwrap().into_iter().map(|e| (e.index, e.term, e.data.to_vec())).collect();
                        prop_assert_eq!(got, want, "entries {}..{}", lo, hi);
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}
