//! The mine commands through `req::handle`-level pieces: records from loads (the id is
//! the requester's, bounds refused), reads with Salt's answer shapes, the `mine_get`
//! option and the minion-side ACL.

use rmpv::Value;
use serde_json::json;

use halite_storage::format::{MineOp, Record};
use halite_storage::keys::BankState;

use super::{get_mine, Query};
use crate::view::memory::MemoryView;
use crate::wire::payload::{encode, from_json, map, to_json};

fn view() -> MemoryView {
    let mut v = MemoryView::new();
    for id in ["m1", "m2", "web1"] {
        v.set_key(id, BankState::Accepted, b"-----BEGIN PUBLIC KEY-----\nX\n-----END PUBLIC KEY-----\n");
    }
    let put = |v: &mut MemoryView, id: &str, fun: &str, data: serde_json::Value| v.mine.entry(id.into()).or_default().push((fun.into(), encode(&from_json(&data))));
    put(&mut v, "m1", "test.ping", json!(true));
    put(&mut v, "m2", "test.ping", json!(true));
    put(&mut v, "m1", "grains.item", json!({"os": "Debian"}));
    // Salt 3008 minions wrap their data: one entry open to all, one only to web*.
    put(&mut v, "web1", "test.ping", json!({"__saltmine_acl__": 1, "__data__": "pong"}));
    put(&mut v, "web1", "secret", json!({"__saltmine_acl__": 1, "__data__": "s", "allow_tgt": "web*"}));
    v
}

fn ask(v: &MemoryView, who: &str, load: serde_json::Value) -> serde_json::Value {
    let q = Query::from_load(who, &from_json(&load)).expect("a complete load");
    to_json(&get_mine(&v.cfg, v, &q).unwrap())
}

#[test]
fn reads_have_salts_shapes_and_acls() {
    let v = view();
    assert_eq!(ask(&v, "m1", json!({"tgt": "*", "fun": "test.ping"})), json!({"m1": true, "m2": true, "web1": "pong"}));
    assert_eq!(ask(&v, "m1", json!({"tgt": "m*", "fun": "test.ping,grains.item"})), json!({"test.ping": {"m1": true, "m2": true}, "grains.item": {"m1": {"os": "Debian"}}}));
    assert_eq!(ask(&v, "m1", json!({"tgt": ["m2"], "fun": ["test.ping"], "tgt_type": "list"})), json!({"test.ping": {"m2": true}}));
    // A function named twice in a string is one function: answered by minion.
    assert_eq!(ask(&v, "m1", json!({"tgt": "m2", "fun": "test.ping,test.ping"})), json!({"m2": true}));
    // The minion-side ACL: only web* may read web1's secret.
    assert_eq!(ask(&v, "m1", json!({"tgt": "*", "fun": "secret"})), json!({}));
    assert_eq!(ask(&v, "web1", json!({"tgt": "*", "fun": "secret"})), json!({"web1": "s"}));
    assert!(Query::from_load("m1", &from_json(&json!({"tgt": "*"}))).is_none());

    // The master's mine_get option: m1 may read test.* only, others nothing.
    let mut v = v;
    v.cfg.raw.insert("mine_get".into(), serde_yaml::from_str("{'m1': ['test\\..*']}").unwrap());
    assert_eq!(ask(&v, "m1", json!({"tgt": "*", "fun": "test.ping,grains.item"})), json!({"test.ping": {"m1": true, "m2": true, "web1": "pong"}}));
    assert_eq!(ask(&v, "m2", json!({"tgt": "*", "fun": "test.ping"})), json!({}));
    v.cfg.raw.insert("mine_get".into(), serde_yaml::from_str("[not, a, map]").unwrap());
    assert_eq!(ask(&v, "m1", json!({"tgt": "*", "fun": "test.ping"})), json!({}));
}

#[test]
fn writes_are_records_for_the_sender_and_bounded() {
    let load = map([("id", Value::from("someone-else")), ("data", from_json(&json!({"test.ping": true}))), ("clear", Value::Boolean(true))]);
    let Record::MineUpdate(m) = super::send("m1", &load, 5).unwrap() else { panic!("not a mine update") };
    assert_eq!((m.id.as_str(), m.op, m.clear, m.entries.len()), ("m1", MineOp::Send, true, 1));
    assert_eq!(m.entries[0].data, encode(&Value::Boolean(true)));
    let Record::MineUpdate(d) = super::delete("m1", &map([("fun", Value::from("test.ping"))]), 5).unwrap() else { panic!() };
    assert_eq!((d.op, d.entries[0].fun.as_str()), (MineOp::Delete, "test.ping"));
    assert!(matches!(super::flush("m1", 5).unwrap(), Record::MineUpdate(f) if f.op == MineOp::Flush && f.entries.is_empty()));
    // No data map, a function that is not a name, too much data.
    assert!(super::send("m1", &map([("data", Value::from(3))]), 5).is_err());
    assert!(super::send("m1", &map([("data", Value::Map(vec![(Value::from(""), Value::Nil)]))]), 5).is_err());
    assert!(super::delete("m1", &map([("fun", Value::from(7))]), 5).is_err());
    let big = Value::Binary(vec![0; halite_storage::format::MAX_MINE_BYTES]);
    assert!(super::send("m1", &map([("data", Value::Map(vec![(Value::from("f"), big)]))]), 5).is_err());
}
