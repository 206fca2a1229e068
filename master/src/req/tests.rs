//! `handle()` driven with an in-memory view: every command and every check a request
//! passes, without a socket, a disk or a clock.

use rmpv::Value;

use halite_storage::format::{KeyState, Record, RootsTree};
use halite_storage::keys::BankState;

use super::{handle, Claim, Effect, Outcome};
use crate::view::memory::MemoryView;
use crate::wire::crypto::{sha256_hex, Crypticle, EncAlgo, PrivateKey, SigAlgo, PICKLE};
use crate::wire::payload::{self, bin, decode, encode, get, get_bytes, get_text, map};

pub(super) const NONCE: &str = "0123456789abcdef0123456789abcdef";

/// A minion: its key pair and, once signed in, its session key.
pub(super) struct Minion {
    pub(super) id: String,
    pub(super) key: PrivateKey,
}

impl Minion {
    pub(super) fn new(id: &str) -> Self {
        Minion { id: id.to_string(), key: PrivateKey::generate(2048).unwrap() }
    }

    pub(super) fn pub_pem(&self) -> Vec<u8> {
        self.key.public_pem().unwrap()
    }

    pub(super) fn auth_load(&self, extra: Vec<(Value, Value)>) -> Value {
        let mut m = vec![
            (Value::from("cmd"), Value::from("_auth")),
            (Value::from("id"), Value::from(self.id.as_str())),
            (Value::from("nonce"), Value::from(NONCE)),
            (Value::from("enc_algo"), Value::from("OAEP-SHA1")),
            (Value::from("sig_algo"), Value::from("PKCS1v15-SHA1")),
            (Value::from("pub"), Value::from(String::from_utf8(self.pub_pem()).unwrap())),
        ];
        m.extend(extra);
        Value::Map(m)
    }

    pub(super) fn auth(&self, extra: Vec<(Value, Value)>) -> Vec<u8> {
        clear(self.auth_load(extra))
    }

    /// An AES request with `inner` (plus id, nonce and a valid tok) under `session`.
    pub(super) fn aes(&self, session: &Crypticle, cmd: &str, mut inner: Vec<(Value, Value)>) -> Vec<u8> {
        inner.push((Value::from("cmd"), Value::from(cmd)));
        inner.push((Value::from("id"), Value::from(self.id.as_str())));
        inner.push((Value::from("nonce"), Value::from(NONCE)));
        inner.push((Value::from("tok"), bin(self.key.x931_sign(b"salt").unwrap())));
        self.seal(session, Value::Map(inner))
    }

    pub(super) fn seal(&self, session: &Crypticle, inner: Value) -> Vec<u8> {
        let mut p = PICKLE.to_vec();
        p.extend_from_slice(&encode(&inner));
        encode(&map([("enc", Value::from("aes")), ("load", bin(session.encrypt(&p).unwrap())), ("id", Value::from(self.id.as_str())), ("version", Value::from(3))]))
    }
}

fn clear(load: Value) -> Vec<u8> {
    encode(&map([("enc", Value::from("clear")), ("load", load), ("version", Value::from(3))]))
}

/// The inner load of a signed clear reply, its signature checked.
pub(super) fn signed_inner(v: &MemoryView, o: &Outcome) -> Value {
    let reply = decode(&o.reply).unwrap();
    let load = get_bytes(&reply, "load").expect("a signed reply");
    let sig = get_bytes(&reply, "sig").unwrap();
    assert!(v.keys.private.public_key().unwrap().verify(load, sig, SigAlgo::Pkcs1v15Sha1).unwrap());
    decode(load).unwrap()
}

/// The value of an AES reply, decrypted and its nonce checked.
pub(super) fn aes_reply(session: &Crypticle, o: &Outcome) -> Value {
    let ct = decode(&o.reply).unwrap();
    let plain = session.decrypt(payload::bytes(&ct).expect("an encrypted reply")).unwrap();
    let rest = plain.strip_prefix(PICKLE).unwrap().strip_prefix(NONCE.as_bytes()).expect("the nonce");
    decode(rest).unwrap()
}

fn key_states(o: &Outcome) -> Vec<KeyState> {
    o.records.iter().map(|r| if let Record::KeySet(k) = r { k.state } else { panic!("{r:?}") }).collect()
}

pub(super) fn is_bad_load(o: &Outcome) -> bool {
    decode(&o.reply).unwrap() == Value::from("bad load") && o.records.is_empty() && o.effects.is_empty()
}

pub(super) fn session_of(o: &Outcome) -> Crypticle {
    o.effects.iter().find_map(|e| if let Effect::SessionKey { key, .. } = e { Some(key.clone()) } else { None }).expect("a new session key")
}

#[test]
fn a_new_key_is_pending_and_recorded() {
    let v = MemoryView::new();
    let m = Minion::new("m1");
    let o = handle(&v, &m.auth(vec![]));
    assert_eq!(key_states(&o), vec![KeyState::Pending]);
    let i = signed_inner(&v, &o);
    assert_eq!(get(&i, "ret"), Some(&Value::Boolean(true)));
    assert_eq!(get_text(&i, "nonce"), Some(NONCE));
    assert_eq!(o.events[0].tag, "salt/auth");
    assert_eq!(o.events[0].data()["act"], "pend");
    // A new pending key holds a place under halite_max_pending_keys while in flight.
    assert!(o.effects.is_empty());
    assert_eq!(o.claims, vec![Claim::Pending("m1".into())]);
}

/// A sign-in decided on a member that is behind: its record names the (stale) read, the
/// log decides, and the answer is the request handled again on the applied state.
#[test]
fn a_sign_in_is_decided_at_apply_and_answered_from_what_applied() {
    use halite_storage::format::KeyExpect;
    use halite_storage::state::StateMachine;
    let mut stale = MemoryView::new();
    let m = Minion::new("m1");
    let first = handle(&stale, &m.auth(vec![]));
    assert!(first.recheck && !first.signed_in);
    let Record::KeySet(k) = &first.records[0] else { panic!() };
    assert_eq!((k.state, &k.expect), (KeyState::Pending, &Some(KeyExpect::Absent)));
    // The log already holds the key accepted (an operator accepted it through another
    // member): the pending record changes nothing there.
    let sm = StateMachine::open_in_memory("auth-at-apply").unwrap();
    let accepted = Record::KeySet(halite_storage::format::KeySet::new("m1", KeyState::Accepted, k.pub_key.clone(), 1));
    sm.apply(&[(1, accepted), (2, first.records[0].clone())]).unwrap();
    let held = sm.get_key("m1").unwrap().unwrap();
    assert_eq!(held.state, BankState::Accepted);
    // This member has now applied up to its record: handled again, the minion is in.
    stale.minion_keys.insert("m1".into(), held);
    assert!(!first.applied_as_decided(&stale), "pending was decided, accepted applied");
    let again = handle(&stale, &m.auth(vec![]));
    assert!(again.records.is_empty() && again.signed_in);
    let done = first.settled(again).expect("nothing left to commit");
    assert_eq!(done.events[0].data()["act"], "accept");
    assert!(get_bytes(&signed_inner(&stale, &done), "aes").is_some(), "the accept carries the publish key");
    // When the state moved so that another record is needed, that one is committed next.
    let mut moved = MemoryView::new();
    let first = handle(&moved, &m.auth(vec![]));
    moved.set_key("m1", BankState::Accepted, &Minion::new("m1").pub_pem());
    let again = handle(&moved, &m.auth(vec![]));
    assert_eq!(key_states(&again), vec![KeyState::Denied]);
    assert!(first.settled(again).is_err());
}

/// The stub that let a key in is used up even though the answer is read afterwards.
#[test]
fn a_stub_accept_settles_with_the_stub_consumed() {
    let mut v = MemoryView::new();
    let m = Minion::new("m1");
    v.stubs.insert("m1".into());
    let first = handle(&v, &m.auth(vec![]));
    assert!(!first.applied_as_decided(&v), "not committed yet");
    v.set_key("m1", BankState::Accepted, &m.pub_pem());
    assert!(first.applied_as_decided(&v), "committed as decided: the first reply stands");
    let again = handle(&v, &m.auth(vec![]));
    let done = first.settled(again).unwrap();
    assert!(done.effects.iter().any(|e| matches!(e, Effect::ConsumeAutosignStub { id } if id == "m1")));
}

#[test]
fn a_pending_key_stays_pending_without_a_record() {
    let mut v = MemoryView::new();
    let m = Minion::new("m1");
    v.set_key("m1", BankState::Pending, &m.pub_pem());
    let o = handle(&v, &m.auth(vec![]));
    assert!(o.records.is_empty());
    assert_eq!(o.events[0].data()["act"], "pend");
}

#[test]
fn another_key_for_a_known_id_is_denied_and_recorded_once() {
    for st in [BankState::Pending, BankState::Accepted] {
        let mut v = MemoryView::new();
        let m = Minion::new("m1");
        v.set_key("m1", st, &Minion::new("other").pub_pem());
        let o = handle(&v, &m.auth(vec![]));
        assert_eq!(key_states(&o), vec![KeyState::Denied]);
        assert_eq!(get(&signed_inner(&v, &o), "ret"), Some(&Value::Boolean(false)));
        v.denied.insert("m1".into());
        let o = handle(&v, &m.auth(vec![]));
        assert!(o.records.is_empty(), "only the first denied key is kept");
        assert_eq!(o.events[0].data()["act"], "denied");
    }
}

#[test]
fn a_rejected_key_stays_rejected() {
    let mut v = MemoryView::new();
    let m = Minion::new("m1");
    v.set_key("m1", BankState::Rejected, &m.pub_pem());
    let o = handle(&v, &m.auth(vec![]));
    assert!(o.records.is_empty());
    assert_eq!(o.events[0].data()["act"], "reject");
}

#[test]
fn an_accepted_key_gets_the_publish_key_a_session_key_and_its_token_back() {
    let mut v = MemoryView::new();
    let m = Minion::new("m1");
    v.set_key("m1", BankState::Accepted, &m.pub_pem());
    let token = v.keys.private.public_key().unwrap().encrypt_oaep(b"minion-token", EncAlgo::OaepSha1).unwrap();
    let o = handle(&v, &m.auth(vec![(Value::from("token"), bin(token))]));
    assert!(o.records.is_empty(), "an accepted key never touches the log on re-auth");
    let i = signed_inner(&v, &o);
    assert_eq!(get_text(&i, "pub_key").unwrap().as_bytes(), &v.keys.pub_clean[..]);
    assert_eq!(m.key.decrypt_oaep(get_bytes(&i, "aes").unwrap(), EncAlgo::OaepSha1).unwrap(), v.publish.aes.key_string().as_bytes());
    let session = session_of(&o);
    assert_eq!(m.key.decrypt_oaep(get_bytes(&i, "session").unwrap(), EncAlgo::OaepSha1).unwrap(), session.key_string().as_bytes());
    assert_eq!(m.key.decrypt_oaep(get_bytes(&i, "token").unwrap(), EncAlgo::OaepSha1).unwrap(), b"minion-token");
    let sig = v.keys.private.public_key().unwrap().x931_recover(get_bytes(&i, "sig").unwrap()).unwrap();
    assert_eq!(sig, sha256_hex(v.publish.aes.key_string().as_bytes()).as_bytes());
    // A minion with a fresh session key keeps it.
    v.sessions.insert("m1".into(), session.clone());
    let o = handle(&v, &m.auth(vec![]));
    assert!(o.effects.is_empty(), "{:?}", o.effects);
    let i = signed_inner(&v, &o);
    assert_eq!(m.key.decrypt_oaep(get_bytes(&i, "session").unwrap(), EncAlgo::OaepSha1).unwrap(), session.key_string().as_bytes());
}

#[test]
fn with_master_sign_pubkey_an_accept_carries_the_public_keys_signature_for_the_minions_algorithm() {
    use crate::keyfiles::signing::Signer;
    use base64::Engine;
    let mut v = MemoryView::new();
    let m = Minion::new("m1");
    v.set_key("m1", BankState::Accepted, &m.pub_pem());
    assert!(get(&signed_inner(&v, &handle(&v, &m.auth(vec![]))), "pub_sig").is_none(), "no signature unless master_sign_pubkey");
    let signing = PrivateKey::generate(2048).unwrap();
    v.keys.pubkey_signature = Some(Signer::Key(signing.clone()).sign(&v.keys.pub_clean).unwrap());
    for (name, algo) in [("PKCS1v15-SHA1", SigAlgo::Pkcs1v15Sha1), ("PKCS1v15-SHA224", SigAlgo::Pkcs1v15Sha224)] {
        let mut load = m.auth_load(vec![]);
        if let Value::Map(entries) = &mut load {
            entries.retain(|(k, _)| k.as_str() != Some("sig_algo"));
            entries.push((Value::from("sig_algo"), Value::from(name)));
        }
        let o = handle(&v, &clear(load));
        let reply = decode(&o.reply).unwrap();
        let i = decode(get_bytes(&reply, "load").unwrap()).unwrap();
        let text = get_bytes(&i, "pub_sig").expect("pub_sig in the accept");
        let sig = base64::engine::general_purpose::STANDARD.decode(std::str::from_utf8(text).unwrap().trim_end()).unwrap();
        assert!(signing.public_key().unwrap().verify(get_text(&i, "pub_key").unwrap().as_bytes(), &sig, algo).unwrap(), "{name}");
    }
    // A pending minion is handed no key, so no signature either.
    let o = handle(&v, &Minion::new("m2").auth(vec![]));
    assert!(get(&signed_inner(&v, &o), "pub_sig").is_none());
}

#[test]
fn auto_accept_and_open_mode_accept_new_keys() {
    for (auto_accept, open_mode) in [(true, false), (false, true)] {
        let mut v = MemoryView::new();
        v.cfg.auto_accept = auto_accept;
        v.cfg.open_mode = open_mode;
        let o = handle(&v, &Minion::new("m1").auth(vec![]));
        assert_eq!(key_states(&o), vec![KeyState::Accepted]);
        assert_eq!(o.events[0].data()["act"], "accept");
    }
}

#[test]
fn autosign_and_autoreject_inputs() {
    let m = Minion::new("web01");
    let mut v = MemoryView::new();
    v.autosign_file = Some("# comment\nweb*\ndb[0-9]+\\.example\\.com\n".into());
    assert_eq!(key_states(&handle(&v, &m.auth(vec![]))), vec![KeyState::Accepted], "a glob line");
    assert_eq!(key_states(&handle(&v, &Minion::new("db12.example.com").auth(vec![]))), vec![KeyState::Accepted], "a regex line");
    assert_eq!(key_states(&handle(&v, &Minion::new("db12.example.org").auth(vec![]))), vec![KeyState::Pending]);
    v.autoreject_file = Some("web01\n".into());
    let o = handle(&v, &m.auth(vec![]));
    assert_eq!((key_states(&o), o.events[0].data()["act"].as_str()), (vec![KeyState::Rejected], Some("reject")), "autoreject wins");
    // A pending key listed for autoreject is rejected with its stored key.
    v.set_key("web01", BankState::Pending, &m.pub_pem());
    assert_eq!(key_states(&handle(&v, &m.auth(vec![]))), vec![KeyState::Rejected]);
    // Grains: the minion's autosign_grains value listed in the grain's file.
    let mut v = MemoryView::new();
    v.autosign_grains.insert("uuid".into(), "1234-abcd\n".into());
    let grains = |val: &str| vec![(Value::from("autosign_grains"), map([("uuid", Value::from(val))]))];
    assert_eq!(key_states(&handle(&v, &m.auth(grains("1234-abcd")))), vec![KeyState::Accepted]);
    assert_eq!(key_states(&handle(&v, &m.auth(grains("nope")))), vec![KeyState::Pending]);
}

#[test]
fn a_one_shot_stub_accepts_once_and_is_consumed_after_the_commit() {
    let mut v = MemoryView::new();
    let m = Minion::new("m1");
    v.stubs.insert("m1".into());
    let o = handle(&v, &m.auth(vec![]));
    assert_eq!(key_states(&o), vec![KeyState::Accepted]);
    assert!(o.effects.iter().any(|e| matches!(e, Effect::ConsumeAutosignStub { id } if id == "m1")));
    // A stub is not used when something else accepts the key (Salt's order).
    v.cfg.auto_accept = true;
    let o = handle(&v, &m.auth(vec![]));
    assert!(!o.effects.iter().any(|e| matches!(e, Effect::ConsumeAutosignStub { .. })));
    // Nor when the key is refused.
    v.cfg.auto_accept = false;
    v.set_key("m1", BankState::Rejected, &m.pub_pem());
    let o = handle(&v, &m.auth(vec![]));
    assert!(o.effects.is_empty());
}

#[test]
fn max_minions_claims_a_place_on_accept_and_answers_full_when_reached() {
    let mut v = MemoryView::new();
    let m = Minion::new("m1");
    v.cfg.max_minions = 1;
    v.set_key("m1", BankState::Accepted, &m.pub_pem());
    let o = handle(&v, &m.auth(vec![]));
    assert_eq!(o.claims, vec![Claim::Count("m1".into())]);
    v.counted.insert("m1".into());
    assert!(handle(&v, &m.auth(vec![])).claims.is_empty(), "already counted");
    let m2 = Minion::new("m2");
    v.set_key("m2", BankState::Accepted, &m2.pub_pem());
    let o = handle(&v, &m2.auth(vec![]));
    assert_eq!(get_text(&signed_inner(&v, &o), "ret"), Some("full"));
    assert!(o.records.is_empty() && o.effects.is_empty() && o.claims.is_empty());
    // A pending answer claims no max_minions place (only a pending-key place).
    v.counted.clear();
    assert_eq!(handle(&v, &Minion::new("m3").auth(vec![])).claims, vec![Claim::Pending("m3".into())]);
}

#[test]
fn bad_auth_requests_write_nothing() {
    let v = MemoryView::new();
    let m = Minion::new("m1");
    for id in ["../x", "a/b", ""] {
        let mut l = m.auth_load(vec![]);
        if let Value::Map(e) = &mut l {
            e.retain(|(k, _)| k.as_str() != Some("id"));
            e.push((Value::from("id"), Value::from(id)));
        }
        let o = handle(&v, &clear(l));
        assert!(o.records.is_empty(), "{id:?}");
        assert_eq!(o.events[0].data()["act"], "error");
    }
    let garbage = map([("cmd", Value::from("_auth")), ("id", Value::from("m2")), ("pub", Value::from("not a key"))]);
    assert!(handle(&v, &clear(garbage)).records.is_empty());
    let mut l = m.auth_load(vec![]);
    if let Value::Map(e) = &mut l {
        for (k, val) in e.iter_mut() {
            if k.as_str() == Some("enc_algo") {
                *val = Value::from("ROT13");
            }
        }
    }
    let o = handle(&v, &clear(l));
    assert_eq!(get(get(&decode(&o.reply).unwrap(), "load").unwrap(), "ret"), Some(&Value::from("bad enc algo")));
    assert!(o.records.is_empty());
}

#[test]
fn clear_channel_serves_only_auth_and_ping() {
    let v = MemoryView::new();
    let ping = map([("cmd", Value::from("ping")), ("x", Value::from(1))]);
    assert_eq!(decode(&handle(&v, &clear(ping.clone())).reply).unwrap(), ping);
    // CVE-2020-11651: the internal and CLI-facing clear commands are refused.
    for cmd in ["_send_pub", "_prep_auth_info", "publish", "runner", "wheel", "_file_list"] {
        let o = handle(&v, &clear(map([("cmd", Value::from(cmd))])));
        assert_eq!(decode(&o.reply).unwrap(), Value::Map(vec![]), "{cmd}");
        assert!(o.records.is_empty() && o.events.is_empty());
    }
    let old = encode(&map([("enc", Value::from("clear")), ("load", map([("cmd", Value::from("ping"))])), ("version", Value::from(2))]));
    assert!(is_bad_load(&handle(&v, &old)));
    let mut small = MemoryView::new();
    small.cfg.halite_max_request_bytes = 16;
    assert!(is_bad_load(&handle(&small, &clear(map([("cmd", Value::from("ping")), ("pad", Value::from("x".repeat(64)))])))));
}

/// A signed-in minion: accepted, with a session key the view knows.
pub(super) fn signed_in(v: &mut MemoryView, id: &str) -> (Minion, Crypticle) {
    let m = Minion::new(id);
    v.set_key(id, BankState::Accepted, &m.pub_pem());
    let s = session_of(&handle(v, &m.auth(vec![])));
    v.sessions.insert(id.into(), s.clone());
    (m, s)
}

#[test]
fn a_return_is_recorded_answered_under_the_session_key_and_its_nonce_remembered() {
    let mut v = MemoryView::new();
    let (m, s) = signed_in(&mut v, "m1");
    let o = handle(&v, &m.aes(&s, "_return", vec![(Value::from("jid"), Value::from("20261123000000000001")), (Value::from("return"), Value::from(true))]));
    assert_eq!(aes_reply(&s, &o), Value::Nil);
    let [Record::JobReturn(r)] = &o.records[..] else { panic!("{:?}", o.records) };
    assert_eq!((r.jid.as_str(), r.id.as_str(), r.time_ns), ("20261123000000000001", "m1", v.now_ns));
    assert_eq!(get(&decode(&r.load).unwrap(), "return"), Some(&Value::Boolean(true)));
    assert_eq!(o.events[0].tag, "salt/job/20261123000000000001/ret/m1");
    assert!(matches!(&o.claims[..], [Claim::Nonce(key)] if *key == crate::view::replay_key::ReplayKey::of("m1", NONCE)));
    assert!(o.effects.is_empty());
    // A resend with the same nonce is answered but writes nothing.
    v.replayed.insert(crate::view::replay_key::ReplayKey::of("m1", NONCE));
    let o = handle(&v, &m.aes(&s, "_return", vec![(Value::from("jid"), Value::from("20261123000000000001")), (Value::from("return"), Value::from(true))]));
    assert_eq!(aes_reply(&s, &o), Value::Nil);
    assert!(o.records.is_empty() && o.events.is_empty() && o.effects.is_empty() && o.claims.is_empty());
}

#[test]
fn a_scheduled_return_gets_a_jid_and_nocache_is_not_stored() {
    let mut v = MemoryView::new();
    let (m, s) = signed_in(&mut v, "m1");
    let o = handle(&v, &m.aes(&s, "_return", vec![(Value::from("jid"), Value::from("req")), (Value::from("fun"), Value::from("test.ping")), (Value::from("fun_args"), Value::Array(vec![])), (Value::from("return"), Value::Boolean(true))]));
    let [Record::JobPublished(j), Record::JobReturn(r)] = &o.records[..] else { panic!("{:?}", o.records) };
    assert_eq!((j.jid.as_str(), j.minions.as_slice()), (r.jid.as_str(), &["m1".to_string()][..]));
    assert_eq!(get_text(&decode(&j.load).unwrap(), "tgt"), Some("m1"));
    let o = handle(&v, &m.aes(&s, "_return", vec![(Value::from("jid"), Value::from("nocache"))]));
    assert!(o.records.is_empty() && o.effects.is_empty());
}

#[test]
fn aes_requests_that_fail_a_check_get_bad_load() {
    let mut v = MemoryView::new();
    let (m, s) = signed_in(&mut v, "m1");
    let ret = || vec![(Value::from("jid"), Value::from("20261123000000000001"))];
    // No session key: the minion never signed in (nothing is made for it).
    let stranger = Minion::new("m9");
    assert!(is_bad_load(&handle(&v, &stranger.aes(&s, "_return", ret()))));
    // Sealed with another key.
    assert!(is_bad_load(&handle(&v, &m.aes(&Crypticle::generate(), "_return", ret()))));
    // The inner id is not the envelope's.
    let mut inner = vec![(Value::from("cmd"), Value::from("_return")), (Value::from("id"), Value::from("m2")), (Value::from("nonce"), Value::from(NONCE))];
    inner.push((Value::from("tok"), bin(m.key.x931_sign(b"salt").unwrap())));
    assert!(is_bad_load(&handle(&v, &m.seal(&s, Value::Map(inner)))));
    // A tok made with another key (in a cluster tok is the only per-minion proof).
    let mut inner = vec![(Value::from("cmd"), Value::from("_return")), (Value::from("id"), Value::from("m1")), (Value::from("nonce"), Value::from(NONCE))];
    inner.push((Value::from("tok"), bin(Minion::new("x").key.x931_sign(b"salt").unwrap())));
    assert!(is_bad_load(&handle(&v, &m.seal(&s, Value::Map(inner)))));
    // A malformed nonce.
    let inner = map([("cmd", Value::from("_return")), ("id", Value::from("m1")), ("nonce", Value::from("xyz")), ("tok", bin(m.key.x931_sign(b"salt").unwrap()))]);
    assert!(is_bad_load(&handle(&v, &m.seal(&s, inner))));
    // A key that is no longer accepted.
    v.set_key("m1", BankState::Rejected, &m.pub_pem());
    assert!(is_bad_load(&handle(&v, &m.aes(&s, "_return", ret()))));
    v.set_key("m1", BankState::Accepted, &m.pub_pem());
    // request_server_ttl: a request older than the ttl.
    v.cfg.request_server_ttl = 60;
    let now_s = (v.now_ns / 1_000_000_000) as i64;
    let mut old = ret();
    old.push((Value::from("ts"), Value::from(now_s - 61)));
    assert!(is_bad_load(&handle(&v, &m.aes(&s, "_return", old))));
    let mut fresh = ret();
    fresh.push((Value::from("ts"), Value::from(now_s - 5)));
    assert!(!is_bad_load(&handle(&v, &m.aes(&s, "_return", fresh))));
}

/// `web01` signed in, and a pillar for `web*` made from the `os` grain.
fn web_pillar() -> (MemoryView, Minion, Crypticle) {
    let mut v = MemoryView::new();
    let (m, s) = signed_in(&mut v, "web01");
    v.roots.put(RootsTree::Pillar, "base", "top.sls", b"base:\n  'web*':\n    - web\n");
    v.roots.put(RootsTree::Pillar, "base", "web.sls", b"role: {{ grains['os'] }}-web\n");
    (v, m, s)
}

#[test]
fn pillar_is_compiled_from_the_roots_and_sealed_for_the_minion_alone() {
    let (v, m, s) = web_pillar();
    let o = handle(&v, &m.aes(&s, "_pillar", vec![(Value::from("grains"), map([("os", Value::from("Debian"))]))]));
    let [Record::GrainsReport(g), Record::PillarCache(p)] = &o.records[..] else { panic!("{:?}", o.records) };
    assert_eq!(g.id, "web01");
    assert_eq!((p.id.as_str(), payload::to_json(&decode(&p.pillar).unwrap())), ("web01", serde_json::json!({"role": "Debian-web"})), "the pillar cache holds what was compiled");
    assert_eq!(o.events[0].tag, "minion/refresh/web01");
    let reply = decode(&o.reply).unwrap();
    let k = m.key.decrypt_oaep(get_bytes(&reply, "key").unwrap(), EncAlgo::OaepSha1).unwrap();
    let k = Crypticle::from_key_string(std::str::from_utf8(&k).unwrap()).unwrap();
    let plain = k.decrypt(get_bytes(&reply, "pillar").unwrap()).unwrap();
    let outer = decode(plain.strip_prefix(PICKLE).unwrap()).unwrap();
    let data = get_bytes(&outer, "data").unwrap();
    assert!(v.keys.private.public_key().unwrap().verify(data, get_bytes(&outer, "sig").unwrap(), SigAlgo::Pkcs1v15Sha1).unwrap());
    let data = decode(data).unwrap();
    assert_eq!(get_text(&data, "nonce"), Some(NONCE));
    assert_eq!(get_text(get(&data, "pillar").unwrap(), "role"), Some("Debian-web"));
}

/// Grains over `MAX_GRAINS_LEN` serve that request's pillar and are not recorded.
#[test]
fn grains_too_large_to_record_still_compile_the_pillar() {
    let (v, m, s) = web_pillar();
    let big = Value::from("x".repeat(halite_storage::format::MAX_GRAINS_LEN));
    let o = handle(&v, &m.aes(&s, "_pillar", vec![(Value::from("grains"), map([("os", Value::from("Debian")), ("big", big)]))]));
    let [Record::PillarCache(p)] = &o.records[..] else { panic!("{:?}", o.records.iter().map(|r| r.kind()).collect::<Vec<_>>()) };
    assert_eq!(payload::to_json(&decode(&p.pillar).unwrap()), serde_json::json!({"role": "Debian-web"}));
}

#[test]
fn the_file_server_serves_inside_the_roots_only() {
    let mut v = MemoryView::new();
    let (m, s) = signed_in(&mut v, "m1");
    v.roots.put(RootsTree::File, "base", "top.sls", b"base: {}\n");
    v.roots.put(RootsTree::File, "base", "web/init.sls", b"x");
    let ask = |cmd: &str, extra: Vec<(Value, Value)>| aes_reply(&s, &handle(&v, &m.aes(&s, cmd, extra)));
    let path = |p: &str| vec![(Value::from("path"), Value::from(p)), (Value::from("saltenv"), Value::from("base"))];
    assert_eq!(ask("_file_envs", vec![]), Value::Array(vec![Value::from("base")]));
    assert_eq!(ask("_file_list", vec![(Value::from("saltenv"), Value::from("base")), (Value::from("prefix"), Value::from("/web/"))]), Value::Array(vec![Value::from("web/init.sls")]));
    assert_eq!(ask("_dir_list", vec![]), Value::Array(vec![Value::from("web")]));
    let h = ask("_file_hash", path("top.sls"));
    assert_eq!(get_text(&h, "hsum"), Some(sha256_hex(b"base: {}\n").as_str()));
    let served = ask("_serve_file", path("salt://web/init.sls"));
    assert_eq!((get_bytes(&served, "data"), get_text(&served, "dest")), (Some(&b"x"[..]), Some("web/init.sls")));
    let mut at_end = path("web/init.sls");
    at_end.push((Value::from("loc"), Value::from(1)));
    assert_eq!(get_bytes(&ask("_serve_file", at_end), "data"), Some(&b""[..]));
    assert!(get(&ask("_file_find", path("top.sls?saltenv=base")), "stat").is_some(), "a ?saltenv= query");
    for bad in ["../etc/passwd", "/etc/passwd", "web/../../x", "a\0b", "", "."] {
        assert_eq!(ask("_file_hash", path(bad)), Value::from(""), "{bad:?}");
        assert_eq!(get_text(&ask("_serve_file", path(bad)), "dest"), Some(""), "{bad:?}");
    }
    let dev = vec![(Value::from("path"), Value::from("top.sls")), (Value::from("saltenv"), Value::from("dev"))];
    assert_eq!(ask("_file_hash", dev), Value::from(""), "an unconfigured saltenv");
}

#[test]
fn minion_events_fire_with_pretags_and_never_under_reserved_tags() {
    let mut v = MemoryView::new();
    let (m, s) = signed_in(&mut v, "m1");
    let events = Value::Array(vec![
        map([("tag", Value::from("my/tag")), ("data", map([("x", Value::from(1))]))]),
        map([("tag", Value::from("salt/key")), ("data", map([]))]),
        map([("tag", Value::from("salt/job/1/new")), ("data", map([]))]),
    ]);
    let o = handle(&v, &m.aes(&s, "_minion_event", vec![(Value::from("events"), events), (Value::from("pretag"), Value::from("pre"))]));
    assert_eq!(super::events::tags(&o.events), vec!["pre/my/tag", "my/tag"]);
    assert_eq!(*o.events[1].data(), serde_json::json!({"x": 1}));
    assert!(o.records.is_empty());
    // A single reserved tag is dropped too: a minion cannot pose as a cluster member.
    for tag in ["cluster/event/10.0.0.1/salt/key", "salt/key"] {
        let o = handle(&v, &m.aes(&s, "_minion_event", vec![(Value::from("tag"), Value::from(tag)), (Value::from("data"), map([]))]));
        assert!(o.events.is_empty(), "{tag}: {:?}", o.events);
    }
}

#[test]
fn small_commands_answer_in_salts_shapes() {
    let mut v = MemoryView::new();
    let (m, s) = signed_in(&mut v, "m1");
    let opts = aes_reply(&s, &handle(&v, &m.aes(&s, "_master_opts", vec![])));
    assert_eq!(get_text(&opts, "renderer"), Some("jinja|yaml"));
    let env_only = aes_reply(&s, &handle(&v, &m.aes(&s, "_master_opts", vec![(Value::from("env_only"), Value::Boolean(true))])));
    assert!(get(&env_only, "renderer").is_none() && get(&env_only, "file_roots").is_some());
    assert_eq!(aes_reply(&s, &handle(&v, &m.aes(&s, "_master_tops", vec![]))), Value::Map(vec![]));
    // `_mine` without data is refused (Salt's False); with data it is a record for the
    // sender (the envelope's authenticated id).
    let refused = handle(&v, &m.aes(&s, "_mine", vec![]));
    assert_eq!((aes_reply(&s, &refused), refused.records.len()), (Value::Boolean(false), 0));
    let sent = handle(&v, &m.aes(&s, "_mine", vec![(Value::from("data"), map([("test.ping", Value::Boolean(true))]))]));
    assert_eq!(aes_reply(&s, &sent), Value::Boolean(true));
    assert!(matches!(&sent.records[..], [halite_storage::format::Record::MineUpdate(u)] if u.id == "m1"), "{:?}", sent.records);
    assert_eq!(aes_reply(&s, &handle(&v, &m.aes(&s, "_mine_get", vec![(Value::from("tgt"), Value::from("*")), (Value::from("fun"), Value::from("test.ping"))]))), Value::Map(vec![]));
    assert_eq!(aes_reply(&s, &handle(&v, &m.aes(&s, "_no_such_thing", vec![]))), Value::Map(vec![]));
}
