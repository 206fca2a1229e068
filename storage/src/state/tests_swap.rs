//! The database swap under a running state machine (`handle.rs`), with threads: an
//! operation that holds the old database finishes on it, whole, while the swap waits;
//! an operation that starts during the swap waits and sees the new database; a nested
//! call during the swap does not deadlock.

use std::sync::mpsc;
use std::sync::Arc;

use raft::eraftpb::ConfState;

use super::{StateMachine, CF_KEYS};
use crate::format::{KeySet, KeyState, Record};
use crate::log::RaftLog;
use crate::snapshot::{install_running, SnapshotStore};

fn key(id: &str) -> Record {
    Record::KeySet(KeySet::new(id, KeyState::Accepted, format!("PUB {id}").into_bytes(), 1))
}

#[test]
fn a_reader_holding_the_old_database_finishes_on_it_and_later_ones_see_the_new() {
    let d = tempfile::tempdir().unwrap();
    let src = StateMachine::open(&d.path().join("src")).unwrap();
    src.apply(&[(1, key("new"))]).unwrap();
    let store = SnapshotStore::open(&d.path().join("snapshots")).unwrap();
    let snap = store.begin_build(&src).unwrap().finish(1, &ConfState { voters: vec![1], ..Default::default() }, &[]).unwrap();
    drop(src);
    let log = Arc::new(RaftLog::open(&d.path().join("log")).unwrap());
    let sm = Arc::new(StateMachine::open(&d.path().join("state")).unwrap());
    sm.apply(&[(1, key("old"))]).unwrap();

    // A reader takes the database and keeps it.
    let (held_tx, held_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let reader = {
        let sm = sm.clone();
        std::thread::spawn(move || {
            let db = sm.db().unwrap();
            held_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            // During the swap: the database it holds is open and whole, and a nested
            // call (another method of the state machine) reads the same one.
            let direct = db.get_cf(db.cf(CF_KEYS).unwrap(), b"old").unwrap().is_some();
            let nested = (sm.get_key("old").unwrap().is_some(), sm.get_key("new").unwrap().is_some());
            drop(db);
            (direct, nested)
        })
    };
    held_rx.recv().unwrap();
    let installer = {
        let (sm, log) = (sm.clone(), log.clone());
        std::thread::spawn(move || install_running(&snap, &log, &sm))
    };
    while !sm.db.swapping() {
        std::thread::yield_now();
    }
    // A reader that starts now waits for the swap, then reads the installed state.
    let late = {
        let sm = sm.clone();
        std::thread::spawn(move || (sm.get_key("old").unwrap().is_some(), sm.get_key("new").unwrap().is_some()))
    };
    assert!(!installer.is_finished(), "the swap waits for the reader that holds the old database");
    go_tx.send(()).unwrap();
    let (direct, nested) = reader.join().unwrap();
    assert!(direct, "the old database stayed open under its reader");
    assert_eq!(nested, (true, false), "a nested call reads the database its thread holds");
    installer.join().unwrap().unwrap();
    assert_eq!(late.join().unwrap(), (false, true), "a reader that waited sees the installed state");
    assert!(sm.get_key("old").unwrap().is_none());
    assert!(sm.get_key("new").unwrap().is_some());
}

#[test]
fn a_swap_from_inside_an_operation_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("state")).unwrap();
    let db = sm.db().unwrap();
    let e = sm.reopen_after(|| Ok(())).unwrap_err();
    assert!(e.to_string().contains("cannot be swapped"), "{e}");
    drop(db);
    // Without a guard held, the same swap (here: the same directory again) works.
    sm.apply(&[(1, key("k"))]).unwrap();
    // Not flushed by the swap: the WAL is off.
    sm.flush().unwrap();
    sm.reopen_after(|| Ok(())).unwrap();
    assert!(sm.get_key("k").unwrap().is_some());
}
