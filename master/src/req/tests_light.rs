//! Opened requests: which are light (answered on the daemon's event loop), that an
//! opened request answers what `handle` answers, and that bad input is refused when a
//! request is opened or answered.

use rmpv::Value;

use halite_storage::format::Record;

use super::tests::{aes_reply, is_bad_load, signed_in, Minion, NONCE};
use super::{handle, open, Opened, Outcome, LIGHT_MAX_BYTES};
use crate::view::memory::MemoryView;
use crate::wire::payload::{encode, map};

const JID: &str = "20261124000000000001";

/// `body` opened and, if it is light, answered; `None` for a request left to the pool.
fn handle_light(v: &MemoryView, body: &[u8]) -> Option<Outcome> {
    match open(v, body) {
        Err(out) => Some(out),
        Ok(Opened::Clear(c)) => c.is_light().then(|| c.answer(v)),
        Ok(Opened::Aes(a)) => a.is_light().then(|| a.answer(v)),
    }
}

fn ret(big: usize) -> Vec<(Value, Value)> {
    vec![
        (Value::from("jid"), Value::from(JID)),
        (Value::from("fun"), Value::from("test.ping")),
        (Value::from("return"), Value::from("x".repeat(big))),
    ]
}

#[test]
fn a_return_is_light_and_answered_as_handle_answers_it() {
    let mut v = MemoryView::new();
    let (m, s) = signed_in(&mut v, "m1");
    let body = m.aes(&s, "_return", ret(10));
    let light = handle_light(&v, &body).expect("a return is light");
    let full = handle(&v, &body);
    assert!(matches!(&light.records[..], [Record::JobReturn(r)] if r.jid == JID && r.id == "m1"));
    assert_eq!(
        format!("{:?}", light.records),
        format!("{:?}", full.records)
    );
    assert_eq!(aes_reply(&s, &light), aes_reply(&s, &full));
    assert_eq!((light.cmd.as_str(), light.id.as_str()), ("_return", "m1"));

    // A minion event too.
    let ev = m.aes(
        &s,
        "_minion_event",
        vec![
            (Value::from("tag"), Value::from("custom/a")),
            (Value::from("data"), Value::Map(vec![])),
        ],
    );
    let light = handle_light(&v, &ev).expect("a minion event is light");
    assert_eq!(light.events.len(), handle(&v, &ev).events.len());
}

#[test]
fn heavy_requests_are_left_to_handle() {
    let mut v = MemoryView::new();
    let (m, s) = signed_in(&mut v, "m1");
    // A sign-in (RSA), a pillar (compilation), a file request: not answered here.
    assert!(handle_light(&v, &Minion::new("m2").auth(vec![])).is_none());
    assert!(handle_light(
        &v,
        &m.aes(
            &s,
            "_pillar",
            vec![(Value::from("grains"), Value::Map(vec![]))]
        )
    )
    .is_none());
    assert!(handle_light(
        &v,
        &m.aes(
            &s,
            "_file_list",
            vec![(Value::from("saltenv"), Value::from("base"))]
        )
    )
    .is_none());
    // A return over the size bound: left to the pool, where it is stored all the same.
    let big = m.aes(&s, "_return", ret(LIGHT_MAX_BYTES));
    assert!(big.len() > LIGHT_MAX_BYTES);
    assert!(handle_light(&v, &big).is_none());
    assert!(matches!(
        &handle(&v, &big).records[..],
        [Record::JobReturn(_)]
    ));
    // A clear ping is light.
    let ping = encode(&map([
        ("enc", Value::from("clear")),
        ("load", map([("cmd", Value::from("ping"))])),
        ("version", Value::from(3)),
    ]));
    assert!(handle_light(&v, &ping).is_some());
}

#[test]
fn a_clear_request_answers_again_from_the_same_opened_request() {
    let v = MemoryView::new();
    let auth = Minion::new("m3").auth(vec![]);
    let Ok(Opened::Clear(c)) = open(&v, &auth) else { panic!("a sign-in opens as a clear request") };
    let (first, again) = (c.answer(&v), c.answer(&v));
    assert_eq!(format!("{:?}", first.records), format!("{:?}", again.records));
    assert_eq!(first.cmd, "_auth");
}

#[test]
fn a_copy_whose_nonce_was_claimed_first_is_answered_as_a_replay() {
    let mut v = MemoryView::new();
    let (m, s) = signed_in(&mut v, "m1");
    let out = handle(&v, &m.aes(&s, "_return", ret(1)));
    assert_eq!((out.records.len(), out.claims.len()), (1, 1));
    let reply = aes_reply(&s, &out);
    let replayed = out.replayed();
    assert!(replayed.records.is_empty() && replayed.events.is_empty() && replayed.claims.is_empty());
    assert_eq!(aes_reply(&s, &replayed), reply, "the same reply");
}

#[test]
fn bad_input_is_refused_on_the_light_path_as_on_the_full_one() {
    let mut v = MemoryView::new();
    let (m, s) = signed_in(&mut v, "m1");
    // Not msgpack; a session key that is not the minion's; a tok of another key.
    assert!(is_bad_load(
        &handle_light(&v, b"\xc1garbage").expect("answered")
    ));
    let other = crate::wire::crypto::Crypticle::generate();
    assert!(is_bad_load(
        &handle_light(&v, &m.aes(&other, "_return", ret(1))).expect("answered")
    ));
    let (m2, _) = signed_in(&mut v, "m2");
    let mut inner = ret(1);
    inner.push((Value::from("cmd"), Value::from("_return")));
    inner.push((Value::from("id"), Value::from("m1")));
    inner.push((Value::from("nonce"), Value::from(NONCE)));
    inner.push((
        Value::from("tok"),
        crate::wire::payload::bin(m2.key.x931_sign(b"salt").unwrap()),
    ));
    let forged = m.seal(&s, Value::Map(inner));
    let out = handle_light(&v, &forged).expect("answered");
    assert!(is_bad_load(&out) && out.records.is_empty());
}
