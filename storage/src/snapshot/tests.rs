//! Snapshot tests on real RocksDB, raft-engine and files: build → chunks → receive →
//! install gives the same state (digest); hostile manifests and chunks are refused; a
//! crash at each step of an install is repaired at start; compaction keeps raft-rs's
//! `Storage` answers right, across a reopen, and a restart reads the snapshot and the
//! tail only.

use std::path::Path;

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, ConfState, Entry, EntryType, HardState};
use raft::{GetEntriesContext, Storage, StorageError};

use super::*;
use crate::compaction::{compact, decide, CompactionLimits, Decision, LogFacts};
use crate::error::Error;
use crate::format::{KeySet, KeyState, Record, RootsTree};
use crate::log::RaftLog;
use crate::state::{roots_records, StateMachine};

/// Entry 1: the founding `AddNode 1` (with an address in its context); entries 2..: a
/// record each (keys, and a 2.5 MiB roots file so some files span several chunks).
fn entries(n: u64) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut cc = ConfChange::default();
    cc.set_change_type(ConfChangeType::AddNode);
    cc.node_id = 1;
    let mut e = Entry::default();
    e.set_entry_type(EntryType::EntryConfChange);
    e.index = 1;
    e.term = 1;
    e.data = cc.write_to_bytes().unwrap().into();
    e.context = b"address of node 1".to_vec().into();
    out.push(e);
    // Pseudo-random bytes, so that RocksDB's compression cannot shrink them.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let content = crate::noise_tests::noise(&mut x, 5 << 19);
    let mut roots = roots_records(RootsTree::File, "base", "big/file.bin", 0o644, &content).into_iter();
    for i in 2..=n {
        let rec = match roots.next() {
            Some(r) => r,
            None => Record::KeySet(KeySet::new(format!("minion-{i}"), KeyState::Accepted, format!("PUB {i}").into_bytes(), i)),
        };
        out.push(Entry { index: i, term: 2, data: rec.encode().unwrap().into(), ..Default::default() });
    }
    out
}

/// A member's data dir with `n` entries in its log, `applied` of them applied.
struct Member {
    log: RaftLog,
    sm: Option<StateMachine>,
    store: SnapshotStore,
    state: std::path::PathBuf,
}

impl Member {
    fn new(root: &Path) -> Member {
        let log = RaftLog::open(&root.join("log")).unwrap();
        let state = root.join("state");
        let store = SnapshotStore::open(&root.join("snapshots")).unwrap();
        Member { log, sm: Some(StateMachine::open(&state).unwrap()), store, state }
    }

    fn with_log(root: &Path, n: u64, applied: u64) -> Member {
        let m = Member::new(root);
        let es = entries(n);
        let hs = HardState { term: 2, commit: n, ..Default::default() };
        let cs = ConfState { voters: vec![1], ..Default::default() };
        m.log.append(&es, Some(&hs), Some(&cs), true).unwrap();
        m.apply(2, applied);
        m
    }

    fn sm(&self) -> &StateMachine {
        self.sm.as_ref().unwrap()
    }

    /// Applies log entries `from..=to` as the driver would.
    fn apply(&self, from: u64, to: u64) {
        let mut batch = Vec::new();
        self.log.for_each_record(from, Some(to + 1), |i, r| {
            batch.push((i, r?));
            Ok(())
        })
        .unwrap();
        self.sm().apply(&batch).unwrap();
        self.sm().advance_applied(to).unwrap();
    }
}

/// Sends `snap` through a source and a receiver into `store`.
fn transfer(snap: &Snapshot, store: &SnapshotStore) -> Snapshot {
    let mut src = SnapshotSource::new(snap);
    let mut rx = Receiver::begin(store, &src.manifest_bytes(), ReceiveLimits::default()).unwrap();
    let mut chunks = 0;
    while let Some(c) = src.next_chunk().unwrap() {
        assert!(c.len() <= CHUNK_HEADER_LEN + CHUNK_MAX);
        rx.accept(&c).unwrap();
        chunks += 1;
    }
    assert!(chunks > 1);
    let p = rx.progress();
    assert!(p.complete);
    assert_eq!(p.bytes, src.total_bytes());
    rx.finish().unwrap()
}

fn refused(e: Error, what: &str) {
    match e {
        Error::SnapshotRefused(m) => assert!(m.contains(what), "{m:?} does not mention {what:?}"),
        other => panic!("expected a refusal mentioning {what:?}, got {other}"),
    }
}

fn staging_dirs(store: &SnapshotStore) -> usize {
    std::fs::read_dir(store.dir()).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".staging-")).count()
}

#[test]
fn build_transfer_install_gives_the_same_state() {
    let d = tempfile::tempdir().unwrap();
    let a = Member::with_log(&d.path().join("a"), 300, 250);
    let c = compact(&a.log, a.sm(), &a.store, |_, _| {}).unwrap().unwrap();
    let snap = c.snapshot;
    assert_eq!(snap.index(), 250);
    assert_eq!(snap.manifest().term, 2);
    assert!(snap.manifest().total_bytes() > 2 << 20);
    snap.verify(|_| {}).unwrap();
    assert_eq!(a.store.list().unwrap(), vec![250]);
    assert_eq!(staging_dirs(&a.store), 0);

    // A joiner with an empty log receives it and installs it.
    let b_root = d.path().join("b");
    let mut b = Member::new(&b_root);
    let got = transfer(&snap, &b.store);
    assert_eq!(got.manifest().files, snap.manifest().files);
    b.sm = None;
    install(&got, &b.log, &b.state).unwrap();
    let sm_b = StateMachine::open(&b.state).unwrap();
    assert_eq!(sm_b.digest().unwrap(), a.sm().digest().unwrap());
    assert_eq!(sm_b.views_index().unwrap(), 0, "views must be rebuilt after an install");
    assert_eq!(sm_b.roots_file(RootsTree::File, "base", "big/file.bin").unwrap().unwrap().1.len(), 5 << 19);
    // Its log starts after the snapshot and answers raft-rs as the leader's does.
    assert_eq!(b.log.first_index().unwrap(), 251);
    assert_eq!(b.log.last_index().unwrap(), 250);
    assert_eq!(b.log.term(250).unwrap(), 2);
    assert_eq!(b.log.initial_state().unwrap().conf_state.voters, vec![1]);
    assert_eq!(b.log.hard_state().unwrap().commit, 250);
    assert_eq!(b.log.snapshot(0, 0).unwrap().get_metadata().index, 250);
    let members = b.log.retained_members().unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(&members[0].context[..], b"address of node 1");
    // Then the tail: entries 251.. are appended after the snapshot.
    let tail: Vec<Entry> = entries(300).into_iter().skip(250).collect();
    b.log.append(&tail, None, None, true).unwrap();
    let mut batch = Vec::new();
    b.log.for_each_record(251, None, |i, r| {
        batch.push((i, r?));
        Ok(())
    })
    .unwrap();
    sm_b.apply(&batch).unwrap();
    a.apply(251, 300);
    assert_eq!(sm_b.digest().unwrap(), a.sm().digest().unwrap());
    assert_eq!(sm_b.digest().unwrap().applied_index, 300);
}

#[test]
fn hostile_manifests_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let a = Member::with_log(&d.path().join("a"), 40, 40);
    let snap = a.store.begin_build(a.sm()).unwrap().finish(2, &ConfState { voters: vec![1], ..Default::default() }, &[]).unwrap();
    let rx_store = SnapshotStore::open(&d.path().join("rx")).unwrap();
    let good = snap.manifest().clone();
    let with = |f: &dyn Fn(&mut Manifest)| {
        let mut m = good.clone();
        f(&mut m);
        m.encode()
    };
    let begin = |b: &[u8], limits| Receiver::begin(&rx_store, b, limits).err().expect("refused");
    let lim = ReceiveLimits::default();
    for bad in ["state/../../escaped", "/etc/passwd", "state/a/b", "state/..", "other/x", "state/", "state/a\0b"] {
        refused(begin(&with(&|m| m.files[0].path = bad.into()), lim), bad.split('/').next().unwrap_or(""));
    }
    refused(begin(&with(&|m| m.files[1].path = m.files[0].path.clone()), lim), "twice");
    refused(begin(&with(&|m| m.files[0].sha256 = "zz".into()), lim), "sha256");
    refused(begin(&with(&|m| m.files[0].size = u64::MAX), lim), "bound");
    refused(begin(&good.encode(), ReceiveLimits { max_total_bytes: good.total_bytes() - 1 }), "bound");
    refused(begin(&with(&|m| m.format = "v0".into()), lim), "format");
    refused(begin(&with(&|m| m.members = "00ffffff".into()), lim), "membership");
    refused(begin(&vec![b' '; MAX_MANIFEST_BYTES + 1], lim), "bound");
    refused(begin(b"{not json", lim), "not a manifest");
    assert!(!d.path().join("escaped").exists());
    assert_eq!(staging_dirs(&rx_store), 0);
    assert!(rx_store.list().unwrap().is_empty());
}

#[test]
fn hostile_chunks_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let a = Member::with_log(&d.path().join("a"), 40, 40);
    let snap = a.store.begin_build(a.sm()).unwrap().finish(2, &ConfState { voters: vec![1], ..Default::default() }, &[]).unwrap();
    let rx_store = SnapshotStore::open(&d.path().join("rx")).unwrap();
    let chunks: Vec<Vec<u8>> = {
        let mut s = SnapshotSource::new(&snap);
        std::iter::from_fn(|| s.next_chunk().unwrap()).collect()
    };
    let begin = || Receiver::begin(&rx_store, &snap.manifest().encode(), ReceiveLimits::default()).unwrap();

    // A flipped byte: the CRC.
    let mut bad = chunks[0].clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    refused(begin().accept(&bad).unwrap_err(), "CRC");
    // A declared length over the bound, with few bytes behind it: refused before use.
    let mut huge = chunks[0][..CHUNK_HEADER_LEN].to_vec();
    huge[16..20].copy_from_slice(&((CHUNK_MAX as u32) + 1).to_be_bytes());
    refused(begin().accept(&huge).unwrap_err(), "declared length");
    refused(begin().accept(&chunks[0][..10]).unwrap_err(), "shorter");
    // Out of order: the second chunk first.
    refused(begin().accept(&chunks[1]).unwrap_err(), "expected file 0 at 0");
    // Well-formed (valid CRC) but altered data: the file's sha256.
    let c0 = Chunk::decode(&chunks[0]).unwrap();
    let mut rx = begin();
    let mut altered = c0.clone();
    altered.data[0] ^= 1;
    let mut err = rx.accept(&altered.encode()).err();
    for c in chunks.iter().skip(1) {
        if err.is_some() {
            break;
        }
        err = rx.accept(c).err();
    }
    refused(err.expect("altered data refused"), "sha256");
    drop(rx);
    // Past the end of its file (valid CRC).
    let size0 = snap.manifest().files[0].size as usize;
    let long = Chunk { file: 0, offset: 0, data: vec![7; size0 + 1] };
    refused(begin().accept(&long.encode()).unwrap_err(), "past the end");
    // A transfer that stops early does not become a snapshot.
    let mut rx = begin();
    rx.accept(&chunks[0]).unwrap();
    refused(rx.finish().unwrap_err(), "ended early");
    // Every refused transfer left nothing behind.
    assert_eq!(staging_dirs(&rx_store), 0);
    assert!(rx_store.list().unwrap().is_empty());
    // And the real chunks still make a snapshot.
    let mut rx = begin();
    for c in &chunks {
        rx.accept(c).unwrap();
    }
    assert_eq!(rx.finish().unwrap().index(), 40);
}

#[test]
fn a_crash_at_each_step_of_an_install_is_repaired_at_start() {
    let d = tempfile::tempdir().unwrap();
    let a = Member::with_log(&d.path().join("a"), 60, 50);
    let snap = compact(&a.log, a.sm(), &a.store, |_, _| {}).unwrap().unwrap().snapshot;
    let want = a.sm().digest().unwrap();

    // Crash after the log recorded the snapshot, before the swap: the state machine
    // (here: none at all) is behind the log's snapshot, so it is installed at start.
    let b = d.path().join("b");
    let mut m = Member::new(&b);
    m.sm = None;
    let got = transfer(&snap, &m.store);
    m.log.install_snapshot(&got.metadata(), &got.manifest().members().unwrap()).unwrap();
    std::fs::remove_dir_all(&m.state).unwrap();
    let rec = recover_at_start(&m.store, &m.log, &m.state).unwrap();
    assert_eq!(rec.installed, Some(50));
    assert_eq!(StateMachine::open(&m.state).unwrap().digest().unwrap(), want);

    // Crash between renaming `state` away and renaming `state.installing` in: finished.
    swap_in(&got, &b.join("complete")).unwrap();
    std::fs::rename(&m.state, b.join("state.replaced")).unwrap();
    std::fs::rename(b.join("complete"), b.join("state.installing")).unwrap();
    let rec = recover_at_start(&m.store, &m.log, &m.state).unwrap();
    assert_eq!(rec.swap, Some("finished"));
    assert!(!b.join("state.replaced").exists() && !b.join("state.installing").exists());
    assert_eq!(StateMachine::open(&m.state).unwrap().digest().unwrap(), want);

    // Crash while `state.installing` was being filled: dropped, `state` untouched; and
    // staging directories of an interrupted transfer are removed.
    std::fs::create_dir_all(b.join("state.installing")).unwrap();
    std::fs::write(b.join("state.installing/000001.sst"), b"half").unwrap();
    {
        let mut src = SnapshotSource::new(&snap);
        let mut rx = Receiver::begin(&m.store, &src.manifest_bytes(), ReceiveLimits::default()).unwrap();
        rx.accept(&src.next_chunk().unwrap().unwrap()).unwrap();
        std::mem::forget(rx); // a crash: no destructor runs
    }
    assert_eq!(staging_dirs(&m.store), 1);
    let rec = recover_at_start(&m.store, &m.log, &m.state).unwrap();
    assert_eq!(rec.swap, Some("undone"));
    assert_eq!(rec.staging_removed, 1);
    assert_eq!(rec.installed, None);
    assert_eq!(StateMachine::open(&m.state).unwrap().digest().unwrap(), want);
    assert_eq!(staging_dirs(&m.store), 0);
}

#[test]
fn compaction_keeps_raft_storage_right_and_restart_reads_snapshot_and_tail() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("a");
    let a = Member::with_log(&root, 400, 300);
    let hs_before = a.log.hard_state().unwrap();
    let facts = LogFacts::of(&a.log, 300).unwrap();
    assert_eq!(facts.entries(), 400);
    let limits = CompactionLimits { max_entries: Some(100), max_bytes: None, min_entries: 10 };
    assert!(matches!(decide(facts, limits), Decision::Compact { through: 300, .. }));
    let c = compact(&a.log, a.sm(), &a.store, |_, _| {}).unwrap().unwrap();
    assert_eq!(c.dropped, 300);
    // Nothing more to do at the same applied index.
    assert!(compact(&a.log, a.sm(), &a.store, |_, _| {}).unwrap().is_none());
    assert_eq!(decide(LogFacts::of(&a.log, 300).unwrap(), limits), Decision::Keep);

    let check = |log: &RaftLog| {
        assert_eq!(log.first_index().unwrap(), 301);
        assert_eq!(log.last_index().unwrap(), 400);
        assert_eq!(log.term(300).unwrap(), 2);
        assert_eq!(log.term(301).unwrap(), 2);
        assert!(matches!(log.term(299), Err(raft::Error::Store(StorageError::Compacted))));
        assert!(matches!(log.entries(299, 310, None, GetEntriesContext::empty(false)), Err(raft::Error::Store(StorageError::Compacted))));
        assert_eq!(log.entries(301, 401, None, GetEntriesContext::empty(false)).unwrap().len(), 100);
        let snap = log.snapshot(0, 1).unwrap();
        // A member the snapshot's conf state does not name would refuse it: not yet.
        assert!(matches!(log.snapshot(0, 2), Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable))));
        assert_eq!((snap.get_metadata().index, snap.get_metadata().term), (300, 2));
        assert_eq!(snap.get_metadata().get_conf_state().voters, vec![1]);
        let st = log.initial_state().unwrap();
        assert_eq!(st.hard_state, hs_before);
        assert_eq!(st.conf_state.voters, vec![1]);
        assert_eq!(log.retained_members().unwrap().len(), 1);
        // Record reading starts at the tail.
        let mut first = None;
        log.for_each_record(1, None, |i, _| {
            first.get_or_insert(i);
            Ok(())
        })
        .unwrap();
        assert_eq!(first, Some(301));
    };
    check(&a.log);
    let want_at_400 = {
        a.apply(301, 400);
        a.sm().digest().unwrap()
    };

    // Restart on a state machine that is gone (a lost disk for `state/`, or a crash
    // before it was flushed): the snapshot is installed, then the tail applied.
    let Member { log, sm, store, state } = a;
    drop(sm);
    drop(log);
    std::fs::remove_dir_all(&state).unwrap();
    let log = RaftLog::open(&root.join("log")).unwrap();
    check(&log);
    assert_eq!(log.check_all().unwrap(), 100);
    let rec = recover_at_start(&store, &log, &state).unwrap();
    assert_eq!(rec.installed, Some(300));
    let m = Member { log, sm: Some(StateMachine::open(&state).unwrap()), store, state };
    assert_eq!(m.sm().applied_index().unwrap(), 300);
    m.apply(301, 400);
    assert_eq!(m.sm().digest().unwrap(), want_at_400);

    // The log goes on after the compaction: new entries append, and a second
    // compaction keeps the membership entries and prunes the older snapshot.
    let next = Entry { index: 401, term: 3, data: Record::KeySet(KeySet::new("late", KeyState::Pending, b"PUB late".to_vec(), 1)).encode().unwrap().into(), ..Default::default() };
    m.log.append(&[next], None, None, true).unwrap();
    m.apply(401, 401);
    let c2 = compact(&m.log, m.sm(), &m.store, |_, _| {}).unwrap().unwrap();
    assert_eq!(c2.snapshot.index(), 401);
    assert_eq!(c2.pruned, 1);
    assert_eq!(m.store.list().unwrap(), vec![401]);
    assert_eq!(m.log.term(401).unwrap(), 3);
    assert_eq!(m.log.first_index().unwrap(), 402);
    assert_eq!(m.log.last_index().unwrap(), 401);
    assert_eq!(m.log.retained_members().unwrap().len(), 1);
    let e = Entry { index: 402, term: 3, ..Default::default() };
    m.log.append(&[e], None, None, true).unwrap();
    assert_eq!(m.log.last_index().unwrap(), 402);
}

#[test]
fn a_snapshot_that_disagrees_with_the_log_drops_the_whole_log() {
    let d = tempfile::tempdir().unwrap();
    let a = Member::with_log(&d.path().join("a"), 100, 80);
    let snap = compact(&a.log, a.sm(), &a.store, |_, _| {}).unwrap().unwrap().snapshot;
    // A follower whose log has entries 1..=90 at a different term at index 80.
    let b = Member::new(&d.path().join("b"));
    let mut es = entries(90);
    for e in es.iter_mut().skip(60) {
        e.term = 1;
    }
    b.log.append(&es, None, None, true).unwrap();
    let got = transfer(&snap, &b.store);
    b.log.install_snapshot(&got.metadata(), &got.manifest().members().unwrap()).unwrap();
    assert_eq!(b.log.first_index().unwrap(), 81);
    assert_eq!(b.log.last_index().unwrap(), 80);
    assert_eq!(b.log.first_entry_index(), None);
    assert_eq!(b.log.term(80).unwrap(), 2);
    // The leader's tail appends right after.
    let tail: Vec<Entry> = entries(100).into_iter().skip(80).collect();
    b.log.append(&tail, None, None, true).unwrap();
    assert_eq!((b.log.first_index().unwrap(), b.log.last_index().unwrap()), (81, 100));
}

#[test]
fn digest_ignores_bookkeeping_and_sees_state() {
    let d = tempfile::tempdir().unwrap();
    let a = Member::with_log(&d.path().join("a"), 20, 20);
    let before = a.sm().digest().unwrap();
    a.sm().set_views_index(7).unwrap();
    assert_eq!(a.sm().digest().unwrap(), before);
    let late = Record::KeySet(KeySet::new("minion-5", KeyState::Rejected, b"PUB 5".to_vec(), 9));
    a.sm().apply(&[(21, late)]).unwrap();
    let after = a.sm().digest().unwrap();
    assert_ne!(after.sha256, before.sha256);
    assert_eq!(after.applied_index, 21);
}
