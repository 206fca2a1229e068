//! Mine updates applied to a real state machine: send (merge and clear), delete, flush,
//! each minion's mine kept apart from ids that share a prefix, and the record's bounds.

use crate::format::{MineEntry, MineOp, MineUpdate, Record, MAX_MINE_BYTES, MAX_MINE_FUNS};
use crate::state::StateMachine;

fn update(id: &str, op: MineOp, clear: bool, entries: &[(&str, &[u8])]) -> Record {
    let entries = entries.iter().map(|(f, d)| MineEntry { fun: f.to_string(), data: d.to_vec() }).collect();
    Record::MineUpdate(MineUpdate { id: id.into(), op, clear, entries, time_ns: 1 })
}

fn funs(sm: &StateMachine, id: &str) -> Vec<(String, Vec<u8>)> {
    sm.mine(id).unwrap()
}

#[test]
fn send_merges_clear_replaces_delete_and_flush_remove() {
    let sm = StateMachine::open_in_memory("mine-apply").unwrap();
    let mut index = 0;
    let mut apply = |recs: Vec<Record>| {
        let batch: Vec<(u64, Record)> = recs.into_iter().map(|r| { index += 1; (index, r) }).collect();
        sm.apply(&batch).unwrap();
    };
    apply(vec![
        update("m1", MineOp::Send, false, &[("test.ping", b"\xc3"), ("grains.items", b"\x80")]),
        // An id that extends another's must not be touched by the other's flush.
        update("m10", MineOp::Send, false, &[("test.ping", b"\xc3")]),
    ]);
    assert_eq!(funs(&sm, "m1"), vec![("grains.items".to_string(), b"\x80".to_vec()), ("test.ping".to_string(), b"\xc3".to_vec())]);
    apply(vec![update("m1", MineOp::Send, false, &[("test.ping", b"\xc2")])]);
    assert_eq!(funs(&sm, "m1").len(), 2, "a send without clear merges");
    assert_eq!(funs(&sm, "m1")[1].1, b"\xc2");
    // A clear and its puts in one batch: the puts stay.
    apply(vec![update("m1", MineOp::Send, true, &[("network.ip_addrs", b"\x90")])]);
    assert_eq!(funs(&sm, "m1"), vec![("network.ip_addrs".to_string(), b"\x90".to_vec())]);
    apply(vec![update("m1", MineOp::Send, false, &[("a", b"\x01")]), update("m1", MineOp::Delete, false, &[("network.ip_addrs", b"")])]);
    assert_eq!(funs(&sm, "m1"), vec![("a".to_string(), b"\x01".to_vec())]);
    apply(vec![update("m1", MineOp::Flush, false, &[])]);
    assert!(funs(&sm, "m1").is_empty());
    assert_eq!(funs(&sm, "m10").len(), 1, "another minion's mine is untouched");
}

#[test]
fn mine_records_are_bounded_and_round_trip() {
    let ok = update("m1", MineOp::Send, true, &[("test.ping", b"\xc3")]);
    let bytes = ok.encode().unwrap();
    assert_eq!(bytes[3], 16);
    assert_eq!(Record::decode(&bytes).unwrap(), ok);
    for bad in [
        update("../x", MineOp::Send, false, &[("f", b"\x01")]),
        update("m1", MineOp::Send, false, &[("", b"\x01")]),
        update("m1", MineOp::Send, false, &[("a\0b", b"\x01")]),
        update("m1", MineOp::Delete, false, &[("f", b"\x01")]),
        update("m1", MineOp::Flush, false, &[("f", b"")]),
        update("m1", MineOp::Delete, true, &[("f", b"")]),
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
    let many: Vec<(String, Vec<u8>)> = (0..=MAX_MINE_FUNS).map(|i| (format!("f{i}"), vec![])).collect();
    let many: Vec<(&str, &[u8])> = many.iter().map(|(f, d)| (f.as_str(), d.as_slice())).collect();
    assert!(update("m1", MineOp::Send, false, &many).validate().is_err());
    let big = vec![0u8; MAX_MINE_BYTES + 1];
    assert!(update("m1", MineOp::Send, false, &[("f", &big)]).validate().is_err());
}
