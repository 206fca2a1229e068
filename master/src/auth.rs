//! `_auth`: the sign-in decision (spec `minion-protocol.md` §5), I/O-free.
//!
//! [`decide`] takes the request load and what the state machine holds for the id, and
//! returns the reply and the key records to commit before sending it (a new pending key,
//! a denied key...). Accepted keys never touch the log on re-auth.

use rmpv::Value;

use halite_storage::format::{now_ns, KeySet, KeyState, Record};
use halite_storage::id::validate_minion_id;
use halite_storage::keys::BankState;
use halite_storage::state::StoredKey;

use crate::config::MasterConfig;
use crate::crypto::{clean_key, Crypticle, EncAlgo, PublicKey, SigAlgo};
use crate::glob::fnmatch;
use crate::masterkeys::{MasterKeys, PublishKey};
use crate::payload::{bin, encode, get, get_bytes, get_text, map};

/// What the auth path decided, for the reply, the log and the `salt/auth` event.
#[derive(Debug)]
pub struct AuthOutcome {
    pub reply: Value,
    pub records: Vec<Record>,
    /// `pend`, `accept`, `reject`, `denied`, `error`.
    pub act: &'static str,
    pub id: String,
}

/// Everything `_auth` reads besides the request.
pub struct AuthContext<'a> {
    pub cfg: &'a MasterConfig,
    pub keys: &'a MasterKeys,
    pub aes: &'a PublishKey,
    /// `max_minions` is reached and the requesting id is not among the minions counted:
    /// the answer is `full` whatever the key's state.
    pub full: bool,
}

/// Whether `id` matches a line of an autosign/autoreject file (`#` comments skipped; each
/// line is a shell glob or an anchored regex). Files writable by group or others are
/// ignored, as Salt does.
pub fn listed_in(path: Option<&std::path::Path>, id: &str) -> bool {
    let Some(path) = path else { return false };
    let Ok(meta) = std::fs::metadata(path) else { return false };
    use std::os::unix::fs::PermissionsExt;
    if meta.permissions().mode() & 0o022 != 0 {
        tracing::warn!(file = %path.display(), "ignoring an autosign/autoreject file writable by group or others");
        return false;
    }
    let Ok(text) = std::fs::read_to_string(path) else { return false };
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).any(|l| line_matches(l, id))
}

/// Salt's autosign line rule: a shell glob, or failing that an anchored regex.
fn line_matches(line: &str, value: &str) -> bool {
    line == value || fnmatch(line, value) || regex::Regex::new(&format!("^(?:{line})$")).map(|r| r.is_match(value)).unwrap_or(false)
}

/// `autosign_grains_dir`: the minion's `autosign_grains` value for a grain file named
/// like the grain matches one of its lines.
pub fn autosign_by_grains(dir: Option<&std::path::Path>, load: &Value) -> bool {
    let (Some(dir), Some(Value::Map(grains))) = (dir, get(load, "autosign_grains")) else { return false };
    for (k, v) in grains.iter().take(64) {
        let (Some(name), Some(val)) = (crate::payload::text(k), crate::payload::text(v)) else { continue };
        if halite_storage::id::validate_minion_id(name).is_err() {
            continue;
        }
        if listed_in(Some(&dir.join(name)), val) {
            return true;
        }
    }
    false
}

fn signed(inner: Value, ctx: &AuthContext, sig: SigAlgo) -> Value {
    let load = encode(&inner);
    match ctx.keys.private.sign(&load, sig) {
        Ok(s) => map([("enc", Value::from("clear")), ("load", bin(load)), ("sig", bin(s))]),
        Err(e) => {
            tracing::error!("cannot sign an auth reply: {e}");
            Value::from("bad load")
        }
    }
}

fn ret(value: Value, nonce: &Value, ctx: &AuthContext, sig: SigAlgo) -> Value {
    signed(map([("ret", value), ("nonce", nonce.clone())]), ctx, sig)
}

/// Decides an `_auth` request. `stored` is the id's entry in the keys bank and
/// `denied_exists` whether it already has a denied key (only the first is kept, so no
/// further denied record is written). `session` yields the id's session key (only
/// called on accept).
pub fn decide(load: &Value, stored: Option<&StoredKey>, denied_exists: bool, ctx: &AuthContext, session: impl FnOnce(&str) -> Crypticle) -> AuthOutcome {
    let id = get_text(load, "id").unwrap_or("").to_string();
    let nonce = get(load, "nonce").cloned().unwrap_or(Value::Nil);
    let out = |reply, records, act| AuthOutcome { reply, records, act, id: id.clone() };
    let Some(enc) = EncAlgo::parse(get_text(load, "enc_algo").unwrap_or("OAEP-SHA1")) else {
        return out(map([("enc", Value::from("clear")), ("load", map([("ret", Value::from("bad enc algo"))]))]), vec![], "error");
    };
    let Some(sig) = SigAlgo::parse(get_text(load, "sig_algo").unwrap_or("PKCS1v15-SHA1")) else {
        return out(map([("enc", Value::from("clear")), ("load", map([("ret", Value::from("bad sig algo"))]))]), vec![], "error");
    };
    if let Err(e) = validate_minion_id(&id) {
        tracing::warn!("auth refused: {e}");
        return out(ret(Value::Boolean(false), &nonce, ctx, sig), vec![], "error");
    }
    if ctx.full {
        tracing::warn!(id = %id, max_minions = ctx.cfg.max_minions, "auth refused: max_minions reached");
        return out(ret(Value::from("full"), &nonce, ctx, sig), vec![], "full");
    }
    let presented = get_bytes(load, "pub").map(|p| String::from_utf8_lossy(p).trim().as_bytes().to_vec()).unwrap_or_default();
    let minion_pub = match PublicKey::from_pem(&presented) {
        Ok(k) if !presented.is_empty() => k,
        _ => {
            tracing::warn!(id = %id, "auth refused: the presented public key does not parse");
            return out(ret(Value::Boolean(false), &nonce, ctx, sig), vec![], "error");
        }
    };
    let same = |k: &StoredKey| clean_key(&k.pub_key) == clean_key(&presented);
    let key = |state: KeyState| Record::KeySet(KeySet { id: id.clone(), state, pub_key: presented.clone(), time_ns: now_ns() });
    let deny = || if denied_exists { vec![] } else { vec![key(KeyState::Denied)] };
    let auto_reject = listed_in(ctx.cfg.autoreject_file.as_deref(), &id);
    let auto_sign = ctx.cfg.auto_accept
        || listed_in(ctx.cfg.autosign_file.as_deref(), &id)
        || autosign_by_grains(ctx.cfg.autosign_grains_dir.as_deref(), load)
        || consume_autosign_stub(ctx.cfg, &id);
    let refuse = |act| (ret(Value::Boolean(false), &nonce, ctx, sig), act);
    let (records, verdict): (Vec<Record>, Result<(), (Value, &'static str)>) = if ctx.cfg.open_mode {
        match stored {
            Some(k) if k.state == BankState::Accepted && same(k) => (vec![], Ok(())),
            _ => (vec![key(KeyState::Accepted)], Ok(())),
        }
    } else {
        match stored {
            Some(k) if k.state == BankState::Rejected => (vec![], Err(refuse("reject"))),
            Some(k) if k.state == BankState::Accepted && same(k) => (vec![], Ok(())),
            Some(k) if k.state == BankState::Accepted => (deny(), Err(refuse("denied"))),
            None if auto_reject => (vec![key(KeyState::Rejected)], Err(refuse("reject"))),
            None if auto_sign => (vec![key(KeyState::Accepted)], Ok(())),
            None => (vec![key(KeyState::Pending)], Err((ret(Value::Boolean(true), &nonce, ctx, sig), "pend"))),
            Some(k) if auto_reject => {
                let rec = Record::KeySet(KeySet { id: id.clone(), state: KeyState::Rejected, pub_key: k.pub_key.clone(), time_ns: now_ns() });
                (vec![rec], Err(refuse("reject")))
            }
            Some(k) if !same(k) => (deny(), Err(refuse("denied"))),
            Some(_) if auto_sign => (vec![key(KeyState::Accepted)], Ok(())),
            Some(_) => (vec![], Err((ret(Value::Boolean(true), &nonce, ctx, sig), "pend"))),
        }
    };
    if let Err((reply, act)) = verdict {
        return out(reply, records, act);
    }
    // Accepted: hand over the publish key and this minion's session key.
    let session = session(&id);
    let enc_to_minion = |data: &[u8]| minion_pub.encrypt_oaep(data, enc);
    let (aes_ct, session_ct) = match (enc_to_minion(ctx.aes.aes.key_string().as_bytes()), enc_to_minion(session.key_string().as_bytes())) {
        (Ok(a), Ok(s)) => (a, s),
        (a, s) => {
            tracing::error!(id = %id, "auth: encryption failed: {:?} {:?}", a.err(), s.err());
            return out(Value::from("bad load"), vec![], "error");
        }
    };
    let mut inner = vec![
        (Value::from("enc"), Value::from("pub")),
        (Value::from("pub_key"), Value::from(String::from_utf8_lossy(&ctx.keys.pub_clean).into_owned())),
        (Value::from("publish_port"), Value::from(ctx.cfg.publish_port)),
        (Value::from("aes"), bin(aes_ct)),
        (Value::from("session"), bin(session_ct)),
    ];
    if let Some(tok) = get_bytes(load, "token") {
        match ctx.keys.private.decrypt_oaep(tok, enc).and_then(|plain| minion_pub.encrypt_oaep(&plain, enc)) {
            Ok(t) => inner.push((Value::from("token"), bin(t))),
            Err(e) => tracing::warn!(id = %id, "auth: the minion's token does not decrypt with this master's key: {e}"),
        }
    }
    inner.push((Value::from("sig"), bin(ctx.aes.sig.clone())));
    inner.push((Value::from("nonce"), nonce.clone()));
    out(signed(Value::Map(inner), ctx, sig), records, "accept")
}

/// Consumes `minions_autosign/<id>` if present (one-shot autosign stub).
fn consume_autosign_stub(cfg: &MasterConfig, id: &str) -> bool {
    let stub = cfg.keys_dir().join("minions_autosign").join(id);
    match std::fs::symlink_metadata(&stub) {
        Ok(m) if m.is_file() => std::fs::remove_file(&stub).is_ok(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{sha256_hex, PrivateKey};
    use crate::payload::decode;

    struct Fixture {
        cfg: MasterConfig,
        keys: MasterKeys,
        aes: PublishKey,
        minion: PrivateKey,
    }

    fn fixture() -> Fixture {
        let d = std::env::temp_dir();
        let cfg = MasterConfig::from_mapping(&d, Default::default(), Default::default()).unwrap();
        let private = PrivateKey::generate(2048).unwrap();
        let pub_clean = clean_key(&private.public_pem().unwrap());
        let keys = MasterKeys { private, pub_clean };
        let aes = PublishKey::new(Crypticle::generate(), &keys).unwrap();
        Fixture { cfg, keys, aes, minion: PrivateKey::generate(2048).unwrap() }
    }

    fn load(id: &str, minion: &PrivateKey, extra: Vec<(Value, Value)>) -> Value {
        let mut m = vec![
            (Value::from("cmd"), Value::from("_auth")),
            (Value::from("id"), Value::from(id)),
            (Value::from("nonce"), Value::from("0123456789abcdef0123456789abcdef")),
            (Value::from("enc_algo"), Value::from("OAEP-SHA1")),
            (Value::from("sig_algo"), Value::from("PKCS1v15-SHA1")),
            (Value::from("pub"), Value::from(String::from_utf8(minion.public_pem().unwrap()).unwrap())),
        ];
        m.extend(extra);
        Value::Map(m)
    }

    fn stored(state: BankState, k: &PrivateKey) -> StoredKey {
        StoredKey { state, time_ns: 1, pub_key: clean_key(&k.public_pem().unwrap()) }
    }

    /// Verifies the outer signature and returns the inner load.
    fn inner(f: &Fixture, reply: &Value) -> Value {
        let load = get_bytes(reply, "load").expect("signed reply");
        let sig = get_bytes(reply, "sig").unwrap();
        assert!(f.keys.private.public_key().unwrap().verify(load, sig, SigAlgo::Pkcs1v15Sha1).unwrap());
        decode(load).unwrap()
    }

    fn state_of(r: &[Record]) -> Vec<KeyState> {
        r.iter().map(|r| if let Record::KeySet(k) = r { k.state } else { panic!() }).collect()
    }

    #[test]
    fn decision_table() {
        let f = fixture();
        let ctx = AuthContext { cfg: &f.cfg, keys: &f.keys, aes: &f.aes, full: false };
        let other = PrivateKey::generate(2048).unwrap();
        let sess = Crypticle::generate();
        let l = load("m1", &f.minion, vec![]);
        // New key: pending, recorded.
        let o = decide(&l, None, false, &ctx, |_| sess.clone());
        assert_eq!((o.act, state_of(&o.records)), ("pend", vec![KeyState::Pending]));
        assert_eq!(get(&inner(&f, &o.reply), "ret"), Some(&Value::Boolean(true)));
        assert_eq!(get_text(&inner(&f, &o.reply), "nonce"), Some("0123456789abcdef0123456789abcdef"));
        // Still pending: nothing written.
        let o = decide(&l, Some(&stored(BankState::Pending, &f.minion)), false, &ctx, |_| sess.clone());
        assert_eq!((o.act, o.records.len()), ("pend", 0));
        // Another key for a pending or accepted id: denied, recorded once.
        for st in [BankState::Pending, BankState::Accepted] {
            let o = decide(&l, Some(&stored(st, &other)), false, &ctx, |_| sess.clone());
            assert_eq!((o.act, state_of(&o.records)), ("denied", vec![KeyState::Denied]));
            assert_eq!(get(&inner(&f, &o.reply), "ret"), Some(&Value::Boolean(false)));
            let o = decide(&l, Some(&stored(st, &other)), true, &ctx, |_| sess.clone());
            assert_eq!((o.act, o.records.len()), ("denied", 0));
        }
        // Rejected stays rejected.
        let o = decide(&l, Some(&stored(BankState::Rejected, &f.minion)), false, &ctx, |_| sess.clone());
        assert_eq!((o.act, o.records.len()), ("reject", 0));
        // Accepted: keys the minion can decrypt, the X9.31 sig of the AES key, the token echoed.
        let token = f.keys.private.public_key().unwrap().encrypt_oaep(b"minion-token", EncAlgo::OaepSha1).unwrap();
        let l2 = load("m1", &f.minion, vec![(Value::from("token"), bin(token))]);
        let o = decide(&l2, Some(&stored(BankState::Accepted, &f.minion)), false, &ctx, |_| sess.clone());
        assert_eq!((o.act, o.records.len()), ("accept", 0));
        let i = inner(&f, &o.reply);
        assert_eq!(get_text(&i, "pub_key").unwrap().as_bytes(), &f.keys.pub_clean[..]);
        assert_eq!(f.minion.decrypt_oaep(get_bytes(&i, "aes").unwrap(), EncAlgo::OaepSha1).unwrap(), f.aes.aes.key_string().as_bytes());
        assert_eq!(f.minion.decrypt_oaep(get_bytes(&i, "session").unwrap(), EncAlgo::OaepSha1).unwrap(), sess.key_string().as_bytes());
        assert_eq!(f.minion.decrypt_oaep(get_bytes(&i, "token").unwrap(), EncAlgo::OaepSha1).unwrap(), b"minion-token");
        let sig = f.keys.private.public_key().unwrap().x931_recover(get_bytes(&i, "sig").unwrap()).unwrap();
        assert_eq!(sig, sha256_hex(f.aes.aes.key_string().as_bytes()).as_bytes());
        // auto_accept: a new key is accepted and recorded.
        let mut cfg = f.cfg.clone();
        cfg.auto_accept = true;
        let ctx2 = AuthContext { cfg: &cfg, keys: &f.keys, aes: &f.aes, full: false };
        let o = decide(&l, None, false, &ctx2, |_| sess.clone());
        assert_eq!((o.act, state_of(&o.records)), ("accept", vec![KeyState::Accepted]));
        // max_minions reached: "full", signed, nothing written, even for an accepted key.
        let full = AuthContext { full: true, ..ctx2 };
        for st in [None, Some(stored(BankState::Accepted, &f.minion))] {
            let o = decide(&l, st.as_ref(), false, &full, |_| sess.clone());
            assert_eq!((o.act, o.records.len()), ("full", 0));
            assert_eq!(get_text(&inner(&f, &o.reply), "ret"), Some("full"));
        }
        // Refusals that write nothing.
        for bad in [load("../x", &f.minion, vec![]), load("a/b", &f.minion, vec![])] {
            let o = decide(&bad, None, false, &ctx, |_| sess.clone());
            assert_eq!((o.act, o.records.len()), ("error", 0));
        }
        let garbage = Value::Map(vec![(Value::from("id"), Value::from("m2")), (Value::from("pub"), Value::from("not a key"))]);
        assert_eq!(decide(&garbage, None, false, &ctx, |_| sess.clone()).records.len(), 0);
        let mut bad_algo = load("m1", &f.minion, vec![]);
        if let Value::Map(m) = &mut bad_algo {
            for (k, v) in m.iter_mut() {
                if k.as_str() == Some("enc_algo") {
                    *v = Value::from("ROT13");
                }
            }
        }
        let o = decide(&bad_algo, None, false, &ctx, |_| sess.clone());
        assert_eq!(get(get(&o.reply, "load").unwrap(), "ret"), Some(&Value::from("bad enc algo")));
        assert_eq!(o.records.len(), 0);
    }

    #[test]
    fn autosign_files_and_grains() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("autosign.conf");
        std::fs::write(&f, "# comment\nweb*\ndb[0-9]+\\.example\\.com\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(listed_in(Some(&f), "web01"));
        assert!(listed_in(Some(&f), "db12.example.com"), "regex lines");
        assert!(!listed_in(Some(&f), "db12.example.org"));
        assert!(!listed_in(Some(&f), "# comment"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(!listed_in(Some(&f), "web01"), "a world-writable file is ignored");
        let gd = d.path().join("grains");
        std::fs::create_dir_all(&gd).unwrap();
        std::fs::write(gd.join("uuid"), "1234-abcd\n").unwrap();
        std::fs::set_permissions(gd.join("uuid"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let load = Value::Map(vec![(Value::from("autosign_grains"), Value::Map(vec![(Value::from("uuid"), Value::from("1234-abcd"))]))]);
        assert!(autosign_by_grains(Some(&gd), &load));
        let other = Value::Map(vec![(Value::from("autosign_grains"), Value::Map(vec![(Value::from("uuid"), Value::from("nope"))]))]);
        assert!(!autosign_by_grains(Some(&gd), &other));
        let escape = Value::Map(vec![(Value::from("autosign_grains"), Value::Map(vec![(Value::from("../uuid"), Value::from("1234-abcd"))]))]);
        assert!(!autosign_by_grains(Some(&gd), &escape));
    }
}
