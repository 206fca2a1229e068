//! Requests an attacker would send, through `handle()` with an in-memory view: the
//! checks made after a request decrypts (each against a request that passes every
//! earlier check, so the check named is the one that refuses it), returns of jobs a
//! minion started itself, and the cap on pending keys.

use rmpv::Value;

use halite_storage::format::Record;
use halite_storage::keys::BankState;

use super::handle;
use super::tests::{is_bad_load, signed_in, signed_inner, Minion, NONCE};
use crate::view::memory::MemoryView;
use crate::wire::payload::{bin, decode, get, get_text};

const JID: &str = "20261123000000000001";

/// A `_return`'s inner load as a stock minion builds it, from parts a test may change:
/// the inner `id`, the `nonce`, the `tok` (`None`: left out).
fn inner(id: &str, nonce: Option<Value>, tok: Option<Value>) -> Value {
    let mut m = vec![
        (Value::from("cmd"), Value::from("_return")),
        (Value::from("id"), Value::from(id)),
        (Value::from("jid"), Value::from(JID)),
        (Value::from("fun"), Value::from("test.ping")),
        (Value::from("return"), Value::Boolean(true)),
    ];
    if let Some(n) = nonce {
        m.push((Value::from("nonce"), n));
    }
    if let Some(t) = tok {
        m.push((Value::from("tok"), t));
    }
    Value::Map(m)
}

fn tok(m: &Minion) -> Value {
    bin(m.key.x931_sign(b"salt").unwrap())
}

/// The request passes: it is stored.
fn stored(v: &MemoryView, body: &[u8]) -> bool {
    let o = handle(v, body);
    matches!(&o.records[..], [Record::JobReturn(_)])
}

/// `halite_refused_total{port="request",reason="bad_load"}` so far (the process's
/// metrics: other tests running at once only add to it).
fn bad_loads_counted() -> u64 {
    crate::metrics::metrics().refused.get_or_create(&crate::metrics::RefusedLabels { port: "request".into(), reason: "bad_load".into() }).get()
}

#[test]
fn every_check_after_decryption_refuses_a_request_that_passes_the_earlier_ones() {
    let counted_before = bad_loads_counted();
    let mut v = MemoryView::new();
    let (m, s) = signed_in(&mut v, "m1");
    let (m2, _) = signed_in(&mut v, "m2");
    let good = || inner("m1", Some(Value::from(NONCE)), Some(tok(&m)));
    // The control: the same request with nothing changed is stored.
    assert!(stored(&v, &m.seal(&s, good())));

    // The inner id is not the envelope's (m2 is a signed-in minion too).
    assert!(is_bad_load(&handle(&v, &m.seal(&s, inner("m2", Some(Value::from(NONCE)), Some(tok(&m)))))));
    assert!(is_bad_load(&handle(&v, &m.seal(&s, inner("", Some(Value::from(NONCE)), Some(tok(&m)))))));

    // tok: missing, not bytes, not a signature, signed by another accepted minion.
    assert!(is_bad_load(&handle(&v, &m.seal(&s, inner("m1", Some(Value::from(NONCE)), None)))));
    assert!(is_bad_load(&handle(&v, &m.seal(&s, inner("m1", Some(Value::from(NONCE)), Some(Value::from("salt")))))));
    assert!(is_bad_load(&handle(&v, &m.seal(&s, inner("m1", Some(Value::from(NONCE)), Some(bin(vec![0; 256])))))));
    assert!(is_bad_load(&handle(&v, &m.seal(&s, inner("m1", Some(Value::from(NONCE)), Some(tok(&m2)))))));

    // nonce: missing, short, long, not hex, not a string.
    for n in [None, Some(Value::from(&NONCE[1..])), Some(Value::from(format!("{NONCE}0"))), Some(Value::from("g".repeat(32))), Some(Value::from(7))] {
        assert!(is_bad_load(&handle(&v, &m.seal(&s, inner("m1", n.clone(), Some(tok(&m)))))), "nonce {n:?}");
    }

    // The key is not accepted (any more): pending, rejected, deleted, while the minion
    // still holds a session key.
    for state in [Some(BankState::Pending), Some(BankState::Rejected), None] {
        match state {
            Some(st) => v.set_key("m1", st, &m.pub_pem()),
            None => {
                v.minion_keys.remove("m1");
            }
        }
        assert!(is_bad_load(&handle(&v, &m.seal(&s, good()))), "key {state:?}");
    }
    v.set_key("m1", BankState::Accepted, &m.pub_pem());
    assert!(stored(&v, &m.seal(&s, good())), "accepted again, the same request passes");
    assert!(!v.toks.is_empty(), "the live path: a good tok is remembered");
    // Another key accepted under the id: the tok remembered for the old key is checked
    // again, against the new key, and refused.
    v.set_key("m1", BankState::Accepted, &m2.pub_pem());
    assert!(is_bad_load(&handle(&v, &m.seal(&s, good()))), "a remembered tok does not outlive its key");
    v.set_key("m1", BankState::Accepted, &m.pub_pem());
    assert!(stored(&v, &m.seal(&s, good())));
    // Each of the 15 refusals above was counted (`halite_refused_total`).
    assert!(bad_loads_counted() - counted_before >= 15, "every refusal counted");
}

#[test]
fn in_a_cluster_tok_is_what_tells_minions_apart() {
    // Every minion of a cluster holds the same AES key, so m2 can seal a request that
    // claims to be m1's; only tok (m1's signature) can prove it is m1's.
    let mut v = MemoryView::new();
    v.cfg.cluster_id = Some("c1".into());
    let (m1, m2) = (Minion::new("m1"), Minion::new("m2"));
    v.set_key("m1", BankState::Accepted, &m1.pub_pem());
    v.set_key("m2", BankState::Accepted, &m2.pub_pem());
    // The key every minion of the cluster is handed at sign-in.
    let s2 = v.publish.aes.clone();
    // m2 seals with the key it was handed, under m1's id (sealing needs no key pair).
    let forger = Minion::new("m1");
    let as_m1 = |t: Value| forger.seal(&s2, inner("m1", Some(Value::from(NONCE)), Some(t)));
    assert!(is_bad_load(&handle(&v, &as_m1(tok(&m2)))));
    // The control: with m1's own tok the same bytes pass.
    assert!(stored(&v, &as_m1(tok(&m1))));
}

#[test]
fn a_job_a_minion_started_is_stored_and_never_published() {
    let mut v = MemoryView::new();
    // A glob as an id: Salt allows it, and it must not become a target.
    for id in ["m1", "*", "web[0-9]?"] {
        let (m, s) = signed_in(&mut v, id);
        let o = handle(&v, &m.aes(&s, "_return", vec![(Value::from("jid"), Value::from("req")), (Value::from("fun"), Value::from("cmd.run")), (Value::from("fun_args"), Value::Array(vec![Value::from("id")])), (Value::from("return"), Value::from("uid=0"))]));
        let [Record::JobPublished(j), Record::JobReturn(r)] = &o.records[..] else { panic!("{:?}", o.records) };
        assert_eq!(j.jid, r.jid);
        assert_ne!(j.jid, "req");
        assert_eq!(j.started_by.as_deref(), Some(id));
        assert!(!crate::jobs::publishable(j), "{id}: a minion's own job is stored, not published");
        let load = decode(&j.load).unwrap();
        assert_eq!((get_text(&load, "tgt"), get_text(&load, "tgt_type")), (Some(id), Some("glob")));
        assert!(o.events.iter().any(|e| e.tag == format!("salt/job/{}/ret/{id}", j.jid)));
    }
}

#[test]
fn new_ids_beyond_the_pending_cap_are_answered_full_and_nothing_is_written() {
    let mut v = MemoryView::new();
    v.cfg.halite_max_pending_keys = 2;
    let (a, b) = (Minion::new("p1"), Minion::new("p2"));
    v.set_key("p1", BankState::Pending, &a.pub_pem());
    v.set_key("p2", BankState::Pending, &b.pub_pem());
    let o = handle(&v, &Minion::new("p3").auth(vec![]));
    assert_eq!(get_text(&signed_inner(&v, &o), "ret"), Some("full"));
    assert!(o.records.is_empty() && o.effects.is_empty(), "{:?}", o.records);
    // A pending id signing in again is still pending (nothing new to keep).
    let o = handle(&v, &a.auth(vec![]));
    assert_eq!(get(&signed_inner(&v, &o), "ret"), Some(&Value::Boolean(true)));
    // Accepted minions and auto-accepted new ids are not held back by it.
    let (c, _) = signed_in(&mut v, "c1");
    assert_eq!(get_text(&signed_inner(&v, &handle(&v, &c.auth(vec![]))), "enc"), Some("pub"));
    v.cfg.auto_accept = true;
    let o = handle(&v, &Minion::new("p4").auth(vec![]));
    assert_eq!(get_text(&signed_inner(&v, &o), "enc"), Some("pub"));
    // Below the cap, or with 0 (no cap), a new id is pending again.
    v.cfg.auto_accept = false;
    v.minion_keys.remove("p2");
    assert!(!handle(&v, &Minion::new("p5").auth(vec![])).records.is_empty());
    v.set_key("p2", BankState::Pending, &b.pub_pem());
    v.cfg.halite_max_pending_keys = 0;
    assert!(!handle(&v, &Minion::new("p6").auth(vec![])).records.is_empty());
}
