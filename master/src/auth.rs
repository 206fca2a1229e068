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
use crate::crypto::{clean_key, sha256_hex, Crypticle, EncAlgo, PublicKey, SigAlgo};
use crate::glob::fnmatch;
use crate::masterkeys::MasterKeys;
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
    pub aes: &'a Crypticle,
}

/// Whether `id` matches a line of an autosign/autoreject file (`#` comments skipped; each
/// line is a shell glob). Files writable by group or others are ignored, as Salt does.
pub fn listed_in(path: Option<&std::path::Path>, id: &str) -> bool {
    let Some(path) = path else { return false };
    let Ok(meta) = std::fs::metadata(path) else { return false };
    use std::os::unix::fs::PermissionsExt;
    if meta.permissions().mode() & 0o022 != 0 {
        tracing::warn!(file = %path.display(), "ignoring an autosign/autoreject file writable by group or others");
        return false;
    }
    let Ok(text) = std::fs::read_to_string(path) else { return false };
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).any(|l| l == id || fnmatch(l, id))
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
/// `denied_exists` whether it already has a denied key. `session` yields the id's
/// session key (only called on accept).
pub fn decide(load: &Value, stored: Option<&StoredKey>, ctx: &AuthContext, session: impl FnOnce(&str) -> Crypticle) -> AuthOutcome {
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
    let auto_reject = listed_in(ctx.cfg.autoreject_file.as_deref(), &id);
    let auto_sign = ctx.cfg.auto_accept || listed_in(ctx.cfg.autosign_file.as_deref(), &id) || consume_autosign_stub(ctx.cfg, &id);
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
            Some(k) if k.state == BankState::Accepted => (vec![key(KeyState::Denied)], Err(refuse("denied"))),
            None if auto_reject => (vec![key(KeyState::Rejected)], Err(refuse("reject"))),
            None if auto_sign => (vec![key(KeyState::Accepted)], Ok(())),
            None => (vec![key(KeyState::Pending)], Err((ret(Value::Boolean(true), &nonce, ctx, sig), "pend"))),
            Some(k) if auto_reject => {
                let rec = Record::KeySet(KeySet { id: id.clone(), state: KeyState::Rejected, pub_key: k.pub_key.clone(), time_ns: now_ns() });
                (vec![rec], Err(refuse("reject")))
            }
            Some(k) if !same(k) => (vec![key(KeyState::Denied)], Err(refuse("denied"))),
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
    let (aes_ct, session_ct, x931) = match (
        enc_to_minion(ctx.aes.key_string().as_bytes()),
        enc_to_minion(session.key_string().as_bytes()),
        ctx.keys.private.x931_sign(sha256_hex(ctx.aes.key_string().as_bytes()).as_bytes()),
    ) {
        (Ok(a), Ok(s), Ok(x)) => (a, s, x),
        (a, s, x) => {
            tracing::error!(id = %id, "auth: encryption failed: {:?} {:?} {:?}", a.err(), s.err(), x.err());
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
    inner.push((Value::from("sig"), bin(x931)));
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
