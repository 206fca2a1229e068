//! The keys bank in the state machine (real RocksDB): key changes decided from a stale
//! read, the pending-key cap decided at apply, the reads by state, damaged entries, and
//! the in-memory key prints the request path reads.

use crate::format::{KeyExpect, KeySet, KeyState, Record};
use crate::keys::BankState;
use crate::state::{KeyPrint, StateMachine};
use crate::state_tests::{key, numbered};

/// The scenario of a member that is behind: it decided from a state the log has moved
/// past. Its conditional records change nothing, identically wherever they apply; the
/// ones whose expectation still holds apply.
#[test]
fn key_changes_decided_from_a_stale_read_change_nothing() {
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let pubk = |s: &str| format!("PUB {s}").into_bytes();
    let cond = |id: &str, state, expect| Record::KeySet(KeySet::new(id, state, pubk(id), 10).expecting(expect));
    let holds = |state, id: &str| KeyExpect::Holds { state, pub_key: pubk(id) };
    sm.apply(&numbered(vec![key("m", KeyState::Pending, 1), key("m", KeyState::Accepted, 2), key("gone", KeyState::Accepted, 3), key("gone", KeyState::Deleted, 4)], 1)).unwrap();
    let fx = sm
        .apply(&numbered(
            vec![
                // A member that never saw "m" signs it in as new: pending, expecting nothing.
                cond("m", KeyState::Pending, KeyExpect::Absent),
                // salt-key on a member that still lists "m" as pending rejects it.
                cond("m", KeyState::Rejected, holds(KeyState::Pending, "m")),
                // A member that still lists "gone" accepts it again.
                cond("gone", KeyState::Accepted, holds(KeyState::Pending, "gone")),
                // A deleted key cannot be deleted "again" into a state.
                Record::KeySet(KeySet::new("gone", KeyState::Deleted, vec![], 11).expecting(holds(KeyState::Accepted, "gone"))),
                // Another key, or another public key, is not what was read.
                Record::KeySet(KeySet::new("m", KeyState::Deleted, vec![], 12).expecting(KeyExpect::Holds { state: KeyState::Accepted, pub_key: b"OTHER".to_vec() })),
            ],
            5,
        ))
        .unwrap();
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(sm.applied_index().unwrap(), 9);
    assert_eq!(sm.get_key("m").unwrap().unwrap().state, BankState::Accepted);
    assert!(sm.get_key("gone").unwrap().is_none());

    // Expectations that hold apply, and later records of one batch see earlier ones.
    let fx = sm
        .apply(&numbered(
            vec![
                cond("new", KeyState::Pending, KeyExpect::Absent),
                cond("new", KeyState::Accepted, holds(KeyState::Pending, "new")),
                // The second of two identical sign-ins of a new id finds it pending.
                cond("new", KeyState::Pending, KeyExpect::Absent),
                Record::KeySet(KeySet::new("m", KeyState::Deleted, vec![], 13).expecting(holds(KeyState::Accepted, "m"))),
                cond("m", KeyState::Pending, KeyExpect::Absent),
                Record::KeySet(KeySet::new("m", KeyState::Denied, b"THIEF".to_vec(), 14)),
                Record::KeySet(KeySet::new("m", KeyState::DeniedCleared, vec![], 15).expecting(KeyExpect::Holds { state: KeyState::Denied, pub_key: b"NOT THIEF".to_vec() })),
            ],
            10,
        ))
        .unwrap();
    assert_eq!(fx.len(), 5, "{fx:?}");
    assert_eq!(sm.get_key("new").unwrap().unwrap().state, BankState::Accepted);
    assert_eq!(sm.get_key("m").unwrap().unwrap().state, BankState::Pending);
    assert_eq!(sm.get_denied("m").unwrap().unwrap().1, b"THIEF");
}

/// `halite_max_pending_keys` decided at apply: new pending keys past the cap change
/// nothing, whichever batch they arrive in; a pending key that stops being pending
/// (accepted, rejected, deleted) frees its place; the count survives a reopen.
#[test]
fn new_pending_keys_past_the_cap_change_nothing() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("s");
    let sm = StateMachine::open(&path).unwrap();
    let new = |id: &str| Record::KeySet(KeySet::new(id, KeyState::Pending, format!("PUB {id}").into_bytes(), 1).expecting(KeyExpect::Absent).pending_below(3));
    // Two already pending, then four new ones in one batch: one more fits.
    sm.apply(&numbered(vec![key("a", KeyState::Pending, 1), key("b", KeyState::Pending, 1), key("ok", KeyState::Accepted, 1)], 1)).unwrap();
    assert_eq!(sm.pending_keys(), 2);
    sm.apply(&numbered(vec![new("c"), new("d"), new("e"), key("z", KeyState::Rejected, 1)], 4)).unwrap();
    let pending = sm.count_keys(BankState::Pending).unwrap();
    assert_eq!((pending, sm.pending_keys()), (3, 3));
    assert!(sm.get_key("c").unwrap().is_some() && sm.get_key("d").unwrap().is_none() && sm.get_key("e").unwrap().is_none());
    // Re-recording a key that is already pending is not a new place.
    sm.apply(&numbered(vec![Record::KeySet(KeySet::new("a", KeyState::Pending, b"PUB a".to_vec(), 2).pending_below(3))], 8)).unwrap();
    assert_eq!(sm.pending_keys(), 3);
    // Accepting one and deleting another frees two places, in the same batch as the
    // new keys that take them.
    sm.apply(&numbered(vec![key("a", KeyState::Accepted, 3), key("b", KeyState::Deleted, 3), new("d"), new("e"), new("f")], 9)).unwrap();
    assert!(sm.get_key("d").unwrap().is_some() && sm.get_key("e").unwrap().is_some() && sm.get_key("f").unwrap().is_none());
    assert_eq!(sm.pending_keys(), 3);
    // Unconditional records (imports, tools on a stopped master) are never capped.
    sm.apply(&numbered(vec![key("g", KeyState::Pending, 4)], 14)).unwrap();
    assert_eq!(sm.pending_keys(), 4);
    drop(sm);
    let sm = StateMachine::open(&path).unwrap();
    assert_eq!(sm.pending_keys(), 4, "counted again at open");
    sm.apply(&numbered(vec![new("h")], 15)).unwrap();
    assert!(sm.get_key("h").unwrap().is_none());
}

/// The ids in a state, read from the state byte in place, are what the whole keys say,
/// in id order, and a count of them is their number.
#[test]
fn ids_in_a_state_are_the_whole_keys_in_that_state() {
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let states = [KeyState::Accepted, KeyState::Pending, KeyState::Rejected];
    let recs: Vec<Record> = (0..60).map(|i| key(&format!("m{i:02}"), states[i % 3], 1)).collect();
    sm.apply(&numbered(recs, 1)).unwrap();
    sm.apply(&numbered(vec![key("m03", KeyState::Deleted, 2), key("m04", KeyState::Accepted, 2)], 61)).unwrap();
    for state in [BankState::Accepted, BankState::Pending, BankState::Rejected] {
        let whole: Vec<String> = sm.keys().unwrap().into_iter().filter(|(_, k)| k.state == state).map(|(id, _)| id).collect();
        assert_eq!(sm.ids_in(state).unwrap(), whole, "{state:?}");
        assert_eq!(sm.count_keys(state).unwrap(), whole.len() as u64);
    }
    assert_eq!(sm.ids_in(BankState::Accepted).unwrap().len(), 20, "m03 deleted, m04 accepted from pending");
}

/// A damaged key entry (here two bytes: a state byte and one more) is in no state for
/// the reads by state either, as for a read of the key itself: it is not targeted.
#[test]
fn a_damaged_key_entry_is_in_no_state() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("s");
    {
        let sm = StateMachine::open(&path).unwrap();
        sm.apply(&numbered(vec![key("m1", KeyState::Accepted, 1)], 1)).unwrap();
    }
    {
        let opts = rocksdb::Options::default();
        let db = rocksdb::DB::open_cf(&opts, &path, crate::state::ALL_CFS).unwrap();
        db.put_cf(db.cf_handle("keys").unwrap(), b"m2", [BankState::Accepted.mmap_byte(), 0]).unwrap();
        db.flush_cf(db.cf_handle("keys").unwrap()).unwrap();
    }
    let sm = StateMachine::open(&path).unwrap();
    assert!(sm.get_key("m2").is_err(), "the entry is damaged");
    assert_eq!(sm.ids_in(BankState::Accepted).unwrap(), vec!["m1".to_string()]);
    assert_eq!(sm.count_keys(BankState::Accepted).unwrap(), 1);
}


/// The request path reads a key's state and PEM digest from memory (`state/key_prints.rs`);
/// every apply that changes a key must show at once, also while other threads read.
#[test]
fn key_prints_follow_every_applied_change() {
    let d = tempfile::tempdir().unwrap();
    let sm = std::sync::Arc::new(StateMachine::open(&d.path().join("s")).unwrap());
    let set = |id: &str, state, pem: &str| Record::KeySet(KeySet { id: id.into(), state, pub_key: pem.as_bytes().to_vec(), time_ns: 1, expect: None, pending_below: None });
    let direct = |sm: &StateMachine, id: &str| sm.get_key(id).unwrap().map(|k| KeyPrint::of(&k));
    assert_eq!(sm.key_print("m").unwrap(), None);
    let steps = [
        set("m", KeyState::Pending, "PEM 1"),
        set("m", KeyState::Accepted, "PEM 1"),
        set("m", KeyState::Rejected, "PEM 1"),
        set("m", KeyState::Deleted, ""),
        set("m", KeyState::Accepted, "PEM 2"),
    ];
    let mut index = 1;
    for rec in steps.iter().cloned() {
        let accepted = matches!(&rec, Record::KeySet(k) if k.state == KeyState::Accepted);
        sm.apply(&[(index, rec)]).unwrap();
        index += 1;
        // An accepted key's print is set by the apply itself: the minion's first
        // request reads nothing. Any other state is read on use.
        assert_eq!(sm.key_print_remembered("m"), accepted, "after step {index}");
        assert_eq!(sm.key_print("m").unwrap(), direct(&sm, "m"), "after step {index}");
        assert_eq!(sm.key_print("m").unwrap(), direct(&sm, "m"), "remembered after step {index}");
    }
    // Readers racing the applies: after each apply, what is remembered is what the state
    // holds.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (sm, stop) = (sm.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for id in ["m", "n"] {
                        let _ = sm.key_print(id).unwrap();
                    }
                }
            })
        })
        .collect();
    for round in 0..1500 {
        let pem = format!("PEM {round}");
        let state = if round % 3 == 0 { KeyState::Rejected } else { KeyState::Accepted };
        sm.apply(&[(index, set("m", state, &pem)), (index + 1, set("n", KeyState::Accepted, &pem))]).unwrap();
        index += 2;
        // No write until the next round: a reader that read before this apply must not
        // have left its (old) print behind.
        for id in ["m", "n"] {
            assert_eq!(sm.key_print(id).unwrap(), direct(&sm, id), "{id} in round {round}");
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    for id in ["m", "n"] {
        assert_eq!(sm.key_print(id).unwrap(), direct(&sm, id), "{id} after the race");
    }
}
