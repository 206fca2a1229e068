//! Fuzzing of the request port's decoders, as property tests on stable Rust: random bodies,
//! random msgpack values in a valid-looking envelope, and byte mutations of requests a
//! stock minion sends (a sign-in, a signed-in minion's AES return). Each goes through the
//! whole of `handle()` with an in-memory view. What must hold for every input: no panic,
//! and nothing is recorded for a request that did not authenticate.
//!
//! The default run is short (proptest's 256 cases per property). The long run is a
//! documented command (`docs/benchmarks.md`, "Hostile-input bounds"):
//! `PROPTEST_CASES=200000 cargo test --release -p halite-master fuzz_`.

use std::sync::OnceLock;

use proptest::prelude::*;
use rmpv::Value;

use halite_storage::format::Record;

use super::{handle, Effect, Outcome};
use super::tests::{signed_in, Minion};
use crate::view::memory::MemoryView;
use crate::wire::crypto::Crypticle;
use crate::wire::payload::{bin, encode, map};

/// One view with a signed-in minion `m1`, and a stranger's sign-in, made once (RSA key
/// generation is the slow part).
struct Fixture {
    view: MemoryView,
    minion: Minion,
    session: Crypticle,
    stranger: Minion,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let mut view = MemoryView::new();
        let (minion, session) = signed_in(&mut view, "m1");
        Fixture { view, minion, session, stranger: Minion::new("stranger") }
    })
}

/// A return a stock minion sends, sealed under its session key.
fn good_return(f: &Fixture) -> Vec<u8> {
    let inner = vec![
        (Value::from("jid"), Value::from("20261123000000000001")),
        (Value::from("fun"), Value::from("test.ping")),
        (Value::from("return"), Value::Boolean(true)),
    ];
    f.minion.aes(&f.session, "_return", inner)
}

/// msgpack values of every kind, nested a few levels.
fn value() -> impl Strategy<Value = Value> {
    crate::wire::test_values::values(crate::wire::test_values::Shape { text: "[a-z_]{0,12}", max_bin: 63, ext: false, depth: 4, size: 64, items: 8, text_keys: false })
}

/// Whether a request made a session key (only an accepted sign-in may).
fn made_session(o: &Outcome) -> bool {
    o.effects.iter().any(|e| matches!(e, Effect::SessionKey { .. }))
}

/// The records a request made that an unauthenticated sender could not have caused.
fn stored_returns(records: &[Record]) -> usize {
    records.iter().filter(|r| matches!(r, Record::JobReturn(_) | Record::JobPublished(_))).count()
}

/// What each stored return says (its time left out).
fn returns(records: &[Record]) -> Vec<(String, String, Vec<u8>)> {
    records.iter().filter_map(|r| if let Record::JobReturn(j) = r { Some((j.jid.clone(), j.id.clone(), j.load.clone())) } else { None }).collect()
}

proptest! {
    /// Any bytes at all: answered, never a panic, nothing recorded.
    #[test]
    fn fuzz_random_bodies_record_nothing(body in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let o = handle(&fixture().view, &body);
        prop_assert!(o.records.is_empty(), "{:?}", o.records);
        prop_assert!(!made_session(&o), "a session key for bytes that authenticate nothing");
        prop_assert!(!o.reply.is_empty());
    }

    /// A well-formed envelope around any load: the command dispatch and every accessor
    /// meet values of the wrong type.
    #[test]
    fn fuzz_any_load_in_an_envelope(enc in prop_oneof![Just("clear".to_string()), Just("aes".to_string()), "[a-z]{0,5}"], load in value(), id in "[a-z0-9.*?]{0,10}") {
        let f = fixture();
        let body = encode(&map([("enc", Value::from(enc)), ("load", load), ("id", Value::from(id)), ("version", Value::from(3))]));
        let o = handle(&f.view, &body);
        // No AES load a test makes up decrypts under m1's session key, so nothing is
        // stored; a clear load may at most be a sign-in (a pending key).
        prop_assert_eq!(stored_returns(&o.records), 0);
        prop_assert!(o.records.iter().all(|r| matches!(r, Record::KeySet(_))), "{:?}", o.records);
        prop_assert!(!made_session(&o), "a session key for an id that did not sign in");
    }

    /// A signed-in minion's return, one byte changed and/or cut short: the AES and
    /// msgpack layers and the checks after decryption meet every prefix and flip. A
    /// change may leave the request valid (the envelope's `version` 3 → 5, say), but it
    /// can never change what is stored.
    #[test]
    fn fuzz_mutated_returns(pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>()) {
        let f = fixture();
        let good = good_return(f);
        let expected = returns(&handle(&f.view, &good).records);
        prop_assert_eq!(expected.len(), 1);
        let mut b = good.clone();
        let p = pos % b.len();
        b[p] = val;
        let c = cut % (b.len() + 1);
        for body in [&b[..], &b[..c], &good[..c]] {
            let o = handle(&f.view, body);
            let got = returns(&o.records);
            prop_assert!(got.is_empty() || got == expected, "a changed request stored {:?}", got);
            prop_assert!(o.records.iter().all(|r| matches!(r, Record::JobReturn(_))), "{:?}", o.records);
        }
    }

    /// A stranger's sign-in, one byte changed and/or cut short.
    #[test]
    fn fuzz_mutated_sign_ins(pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>()) {
        let f = fixture();
        let good = encode(&map([("enc", Value::from("clear")), ("load", f.stranger.auth_load(vec![])), ("version", Value::from(3))]));
        let mut b = good.clone();
        let p = pos % b.len();
        b[p] = val;
        let c = cut % (b.len() + 1);
        for body in [&b[..], &b[..c]] {
            let o = handle(&f.view, body);
            prop_assert!(o.records.iter().all(|r| matches!(r, Record::KeySet(_))), "{:?}", o.records);
            prop_assert!(o.records.len() <= 1);
            // The stranger's key is not accepted: whatever the change, no session key.
            prop_assert!(!made_session(&o), "a session key for a pending sign-in");
        }
    }

    /// An AES envelope whose load is any bytes (not made by the session key).
    #[test]
    fn fuzz_aes_garbage(load in proptest::collection::vec(any::<u8>(), 0..512)) {
        let body = encode(&map([("enc", Value::from("aes")), ("load", bin(load)), ("id", Value::from("m1")), ("version", Value::from(3))]));
        let o = handle(&fixture().view, &body);
        prop_assert!(o.records.is_empty());
        prop_assert!(!made_session(&o));
    }
}
