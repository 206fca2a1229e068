//! Installing a snapshot into a running state machine (`install_running`): the state
//! becomes exactly the snapshot's, by moving its checkpoint into place; and a crash at
//! each step (simulated by a directory switch that stops part way) leaves either the old
//! state or the new one once start-up recovery has run.

use std::path::{Path, PathBuf};

use raft::eraftpb::ConfState;

use super::install::{prepare, switch};
use super::*;
use crate::error::Error;
use crate::format::{KeySet, KeyState, Record, RootsTree};
use crate::keys::BankState;
use crate::log::RaftLog;
use crate::state::{roots_records, StateDigest, StateMachine};

fn key(id: &str, state: KeyState) -> Record {
    Record::KeySet(KeySet::new(id, state, format!("PUB {id}").into_bytes(), 1))
}

fn apply(sm: &StateMachine, recs: Vec<Record>) {
    let from = sm.applied_index().unwrap() + 1;
    let batch: Vec<(u64, Record)> = recs.into_iter().enumerate().map(|(i, r)| (from + i as u64, r)).collect();
    sm.apply(&batch).unwrap();
}

/// A member (log, store, running state machine holding other keys) and a snapshot of
/// another state machine in its store, as if received.
struct Setup {
    _d: tempfile::TempDir,
    log: RaftLog,
    store: SnapshotStore,
    state: PathBuf,
    sm: StateMachine,
    snap: Snapshot,
    want: StateDigest,
}

fn setup(src_recs: Vec<Record>) -> Setup {
    let d = tempfile::tempdir().unwrap();
    let src = StateMachine::open(&d.path().join("src")).unwrap();
    apply(&src, src_recs);
    // Past the member's own applied index, whatever the records.
    src.advance_applied(src.applied_index().unwrap() + 4).unwrap();
    let store = SnapshotStore::open(&d.path().join("snapshots")).unwrap();
    let snap = store.begin_build(&src).unwrap().finish(1, &ConfState { voters: vec![1], ..Default::default() }, &[]).unwrap();
    let want = src.digest().unwrap();
    drop(src);
    let state = d.path().join("state");
    let sm = StateMachine::open(&state).unwrap();
    apply(&sm, vec![key("old-1", KeyState::Pending), key("old-2", KeyState::Pending), key("old-3", KeyState::Pending)]);
    sm.set_views_index(3).unwrap();
    let log = RaftLog::open(&d.path().join("log")).unwrap();
    Setup { _d: d, log, store, state, sm, snap, want }
}

fn src_records() -> Vec<Record> {
    let mut recs = vec![key("new", KeyState::Accepted), key("new-pending", KeyState::Pending)];
    recs.extend(roots_records(RootsTree::File, "base", "big.bin", 0o644, &vec![7u8; 3 * crate::format::ROOTS_CHUNK_LEN + 5]));
    recs
}

fn same_state(sm: &StateMachine, want: &StateDigest) {
    let got = sm.digest().unwrap();
    assert_eq!((got.items, got.sha256, got.applied_index), (want.items, want.sha256, want.applied_index));
}

#[test]
fn a_running_install_takes_exactly_the_snapshots_state() {
    let s = setup(src_records());
    assert_eq!(s.sm.pending_keys(), 3);
    // Remembered before the install (the request path's prints, `state/key_prints.rs`).
    assert!(s.sm.key_print("old-1").unwrap().is_some());
    install_running(&s.snap, &s.log, &s.sm).unwrap();
    assert!(s.sm.key_print("old-1").unwrap().is_none(), "no print outlives a replaced state");
    same_state(&s.sm, &s.want);
    assert!(s.sm.get_key("old-1").unwrap().is_none());
    assert_eq!(s.sm.get_key("new").unwrap().unwrap().state, BankState::Accepted);
    assert_eq!(s.sm.views_index().unwrap(), 0, "views must be rebuilt after an install");
    assert_eq!(s.sm.pending_keys(), 1, "the pending count is the installed state's");
    let est = s.sm.estimated_items().unwrap();
    assert!((s.want.items..=s.want.items + 2).contains(&est), "{est} items estimated, {} in the state (and two indexes)", s.want.items);
    assert_eq!(s.log.snapshot_meta().unwrap().index, s.snap.index());
    // Nothing left beside the state machine; the snapshot stays whole in the store.
    for ext in ["installing", "replaced"] {
        assert!(!s.state.with_extension(ext).exists(), "{ext} left behind");
    }
    s.snap.verify(|_| {}).unwrap();
    // It goes on: applies, and reads the same after a reopen from disk.
    apply(&s.sm, vec![key("after", KeyState::Accepted)]);
    let want = s.sm.digest().unwrap();
    let Setup { sm, state, .. } = s;
    drop(sm);
    assert_eq!(StateMachine::open(&state).unwrap().digest().unwrap(), want);
}

#[test]
fn an_empty_snapshot_replaces_a_full_state() {
    let s = setup(vec![]);
    install_running(&s.snap, &s.log, &s.sm).unwrap();
    assert!(s.sm.get_key("old-1").unwrap().is_none());
    assert_eq!(s.sm.count("keys").unwrap(), 0);
    assert_eq!(s.sm.pending_keys(), 0);
}

fn crash() -> Error {
    Error::Invalid("simulated crash".into())
}

/// Runs an install that fails (as a crash would) after `steps` of the directory switch;
/// the state machine is left closed.
fn fail_after(steps: usize) -> Setup {
    let s = setup(src_records());
    s.log.install_snapshot(&s.snap.metadata(), &s.snap.manifest().members().unwrap()).unwrap();
    prepare(&s.snap, &s.state).unwrap();
    let state = s.state.clone();
    let e = s
        .sm
        .reopen_after(|| {
            match steps {
                0 => {}
                1 => std::fs::rename(&state, state.with_extension("replaced")).unwrap(),
                _ => switch(&state).unwrap(),
            }
            Err(crash())
        })
        .unwrap_err();
    assert!(e.to_string().contains("simulated crash"), "{e}");
    s
}

/// Runs an install that stops (as a crash would) after `steps` of the directory switch,
/// then what a restart does: recovery, then open.
fn crash_after(steps: usize) -> (Setup, Recovered, StateMachine) {
    let s = fail_after(steps);
    // The state machine is closed: every operation says so, none reads a half state.
    let closed = s.sm.get_key("new").unwrap_err().to_string();
    assert!(closed.contains("closed"), "{closed}");
    let rec = recover_at_start(&s.store, &s.log, &s.state).unwrap();
    let sm = StateMachine::open(&s.state).unwrap();
    (s, rec, sm)
}

fn no_leftovers(state: &Path) {
    for ext in ["installing", "replaced"] {
        assert!(!state.with_extension(ext).exists(), "{ext} left behind");
    }
}

#[test]
fn a_crash_at_each_step_of_a_running_install_leaves_the_old_or_the_new_state() {
    // Before the switch: the prepared directory is dropped ("undone"); the state machine
    // is behind the log's snapshot, so the snapshot is installed at start.
    let (s, rec, sm) = crash_after(0);
    assert_eq!(rec.swap, Some("undone"));
    assert_eq!(rec.installed, Some(s.snap.index()));
    same_state(&sm, &s.want);
    no_leftovers(&s.state);

    // Between renaming the old state away and renaming the new one in: finished.
    let (s, rec, sm) = crash_after(1);
    assert_eq!(rec.swap, Some("finished"));
    assert_eq!(rec.installed, None);
    same_state(&sm, &s.want);
    assert_eq!(sm.views_index().unwrap(), 0);
    no_leftovers(&s.state);

    // After the switch, before the old state is removed: finished (the old one removed).
    let (s, rec, sm) = crash_after(2);
    assert_eq!(rec.swap, Some("finished"));
    same_state(&sm, &s.want);
    no_leftovers(&s.state);
}

/// The process goes on after an install failed at each step of the directory switch
/// (the state machine closed, as after an open that met a full disk): running the state
/// step again opens exactly the snapshot's state, with nothing left beside it.
#[test]
fn an_install_that_failed_part_way_is_run_again_in_place() {
    for steps in 0..=2 {
        let s = fail_after(steps);
        assert!(s.sm.get_key("new").is_err(), "closed after the failure at step {steps}");
        install_state(&s.snap, &s.sm).unwrap();
        same_state(&s.sm, &s.want);
        assert_eq!(s.sm.pending_keys(), 1);
        no_leftovers(&s.state);
    }
}
