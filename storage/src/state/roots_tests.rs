//! `cluster.sync_roots` as one unit, at apply: real RocksDB state machines.

use crate::format::{Record, RootsSync, RootsTombstone, RootsTree, ROOTS_CHUNK_LEN};
use crate::state::{roots_records, staged_records, sync_file, Effect, StateMachine};

const A: [u8; 16] = [1; 16];
const B: [u8; 16] = [2; 16];

fn sm(d: &tempfile::TempDir, name: &str) -> StateMachine {
    StateMachine::open(&d.path().join(name)).unwrap()
}

/// Applies `recs` as one entry at `index`.
fn entry(sm: &StateMachine, index: u64, recs: Vec<Record>) -> Vec<Effect> {
    sm.apply_entries(&[crate::entry::LogEntry::plain(index, recs)]).unwrap().effects
}

fn live(sm: &StateMachine) -> Vec<(String, Vec<u8>)> {
    sm.roots_files()
        .unwrap()
        .into_iter()
        .map(|(t, e, p, _)| (format!("{}/{e}/{p}", t.as_str()), sm.roots_file(t, &e, &p).unwrap().unwrap().1))
        .collect()
}

fn tomb(path: &str) -> RootsTombstone {
    RootsTombstone { tree: RootsTree::File, saltenv: "base".into(), path: path.into() }
}

fn commit(sync: [u8; 16], files: &[(&str, &[u8])], remove: &[&str]) -> Record {
    Record::RootsSync(RootsSync {
        sync: sync.to_vec(),
        trees: vec![RootsTree::File],
        files: files.iter().map(|(p, c)| sync_file(RootsTree::File, "base", p, 0o644, c)).collect(),
        remove: remove.iter().map(|p| tomb(p)).collect(),
        commits: Vec::new(),
    })
}

fn stage(sync: [u8; 16], path: &str, content: &[u8]) -> Vec<Record> {
    staged_records(&sync, RootsTree::File, "base", path, 0o644, content)
}

/// A sync in several entries: nothing is live until its commit applies; then exactly
/// the named files are, the unnamed one it expected to remove is gone, the unchanged
/// one was not re-sent, and the staging area is empty.
#[test]
fn a_sync_is_live_only_once_its_commit_applies() {
    let d = tempfile::tempdir().unwrap();
    let s = sm(&d, "s");
    let mut first = roots_records(RootsTree::File, "base", "keep.sls", 0o644, b"same");
    first.extend(roots_records(RootsTree::File, "base", "old.sls", 0o644, b"old"));
    first.extend(roots_records(RootsTree::File, "base", "change.sls", 0o644, b"v1"));
    entry(&s, 1, first);
    let big = vec![9u8; 2 * ROOTS_CHUNK_LEN + 3];
    entry(&s, 2, stage(A, "big.bin", &big[..]));
    entry(&s, 3, stage(A, "change.sls", b"v2"));
    // Staged, not live.
    assert_eq!(live(&s).iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), ["file/base/change.sls", "file/base/keep.sls", "file/base/old.sls"]);
    assert_eq!(s.roots_file(RootsTree::File, "base", "change.sls").unwrap().unwrap().1, b"v1");
    let fx = entry(&s, 4, vec![commit(A, &[("keep.sls", b"same"), ("change.sls", b"v2"), ("big.bin", &big)], &["old.sls"])]);
    assert_eq!(live(&s), vec![("file/base/big.bin".to_string(), big.clone()), ("file/base/change.sls".into(), b"v2".to_vec()), ("file/base/keep.sls".into(), b"same".to_vec())]);
    let written = fx.iter().filter(|e| matches!(e, Effect::RootsWritten { .. })).count();
    let removed = fx.iter().filter(|e| matches!(e, Effect::RootsRemoved { .. })).count();
    assert_eq!((written, removed), (2, 1), "{fx:?}");
    assert_eq!(s.staged_items().unwrap(), 0);
}

/// Content neither live nor staged, or a live file the sync did not expect (added by a
/// newer sync than the state its proposer read): the whole sync changes nothing, and
/// its staging is dropped.
#[test]
fn a_sync_decided_from_a_stale_state_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let s = sm(&d, "s");
    entry(&s, 1, roots_records(RootsTree::File, "base", "a.sls", 0o644, b"a1"));
    // A newer sync (B) added b.sls.
    let mut recs = stage(B, "b.sls", b"b1");
    recs.push(commit(B, &[("a.sls", b"a1"), ("b.sls", b"b1")], &[]));
    entry(&s, 2, recs);
    let before = live(&s);
    // A proposer that read the state before B: it stages a.sls v2, keeps nothing else,
    // and does not know b.sls.
    entry(&s, 3, stage(A, "a.sls", b"a2"));
    let fx = entry(&s, 4, vec![commit(A, &[("a.sls", b"a2")], &[])]);
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(live(&s), before);
    assert_eq!(s.staged_items().unwrap(), 0);
    // Content it claims is live but is not: nothing either.
    entry(&s, 5, vec![commit(A, &[("a.sls", b"zz"), ("b.sls", b"b1")], &[])]);
    assert_eq!(live(&s), before);
}

/// Two syncs staged at once: the first commit clears the other's staging, so the other
/// fails whole; the same records give the same state on every member.
#[test]
fn overlapping_syncs_apply_the_first_commit_and_agree_everywhere() {
    let d = tempfile::tempdir().unwrap();
    let (m1, m2) = (sm(&d, "m1"), sm(&d, "m2"));
    let log: Vec<Vec<Record>> = vec![
        roots_records(RootsTree::File, "base", "x.sls", 0o644, b"x"),
        stage(A, "a.sls", b"from A"),
        stage(B, "b.sls", b"from B"),
        vec![commit(B, &[("x.sls", b"x"), ("b.sls", b"from B")], &[])],
        vec![commit(A, &[("x.sls", b"x"), ("a.sls", b"from A")], &[])],
    ];
    for m in [&m1, &m2] {
        for (i, recs) in log.iter().enumerate() {
            entry(m, i as u64 + 1, recs.clone());
        }
    }
    assert_eq!(live(&m1).iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), ["file/base/b.sls", "file/base/x.sls"]);
    let (d1, d2) = (m1.digest().unwrap(), m2.digest().unwrap());
    assert_eq!((d1.items, d1.sha256), (d2.items, d2.sha256));
}

/// Staging and commit in one entry (a small sync), pillar untouched by a file-only sync,
/// and the records' own checks.
#[test]
fn a_small_sync_in_one_entry_and_the_records_checks() {
    let d = tempfile::tempdir().unwrap();
    let s = sm(&d, "s");
    entry(&s, 1, roots_records(RootsTree::Pillar, "base", "top.sls", 0o644, b"p"));
    let mut recs = stage(A, "new.sls", b"n");
    recs.push(commit(A, &[("new.sls", b"n")], &[]));
    entry(&s, 2, recs);
    assert_eq!(live(&s).iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), ["file/base/new.sls", "pillar/base/top.sls"]);
    // Checks: a short sync id, a file outside the trees, a removal of a kept file.
    let mut bad = commit(A, &[("new.sls", b"n")], &[]);
    if let Record::RootsSync(sy) = &mut bad {
        sy.sync.pop();
    }
    assert!(bad.validate().is_err());
    let Record::RootsSync(mut sy) = commit(A, &[("new.sls", b"n")], &["new.sls"]) else { unreachable!() };
    assert!(Record::RootsSync(sy.clone()).validate().is_err());
    sy.remove.clear();
    sy.files[0].tree = RootsTree::Pillar;
    assert!(Record::RootsSync(sy).validate().is_err());
    // Round trip through the record bytes.
    let good = commit(A, &[("new.sls", b"n")], &["gone.sls"]);
    let bytes = good.encode().unwrap();
    assert_eq!(Record::decode(&bytes).unwrap(), good);
}

/// A range of a file is read from the chunks that hold it, across chunk boundaries, and
/// is empty past the end.
#[test]
fn a_range_reads_only_its_chunks() {
    let sm = StateMachine::open_in_memory("roots-range").unwrap();
    let len = crate::format::ROOTS_CHUNK_LEN;
    let body: Vec<u8> = (0..len * 2 + len / 2).map(|i| (i % 251) as u8).collect();
    let entries: Vec<(u64, Record)> = roots_records(RootsTree::Gitfs, "base", "k/big.bin", 0o644, &body).into_iter().enumerate().map(|(i, r)| (i as u64 + 1, r)).collect();
    sm.apply(&entries).unwrap();
    let range = |off: usize, max: usize| sm.roots_file_range(RootsTree::Gitfs, "base", "k/big.bin", off as u64, max as u64).unwrap().unwrap();
    assert_eq!(range(0, 10), body[..10]);
    assert_eq!(range(len - 3, 6), body[len - 3..len + 3], "across a chunk boundary");
    assert_eq!(range(len, len * 5), body[len..], "to the end");
    assert!(range(body.len(), 1).is_empty() && range(body.len() + 5, 1).is_empty());
    assert_eq!(sm.roots_file_range(RootsTree::Gitfs, "base", "k/none", 0, 1).unwrap(), None);
}
