//! `_auth`: the sign-in decision (Salt's `salt/channel/server.py`, `_auth`).
//!
//! The minion presents its id and public key; the answer depends on what the keys bank
//! holds for the id and on the master's options:
//!
//! | bank holds | options | answer | record |
//! |---|---|---|---|
//! | nothing | `autoreject_file` lists it | reject | rejected key |
//! | nothing | `auto_accept`, `autosign_file`, a stub, `autosign_grains_dir` | accept | accepted key |
//! | nothing | | pending (`ret: True`) | pending key |
//! | pending, same key | autosign as above | accept | accepted key |
//! | pending, same key | | pending | — |
//! | pending or accepted, another key | | denied | denied key (the first only) |
//! | accepted, same key | | accept | — |
//! | rejected | | reject | — |
//!
//! With `open_mode` every key is accepted. With `max_minions` reached, a minion not yet
//! counted gets `full`. With `halite_max_pending_keys` pending keys held, a new id that
//! would become pending gets `full` too (the stock minion waits and signs in again) and
//! nothing is written: an unauthenticated sender cannot grow the keys bank without
//! bound. The cap is decided at apply: the pending key's record carries it
//! (`KeySet::pending_below`) and changes nothing if the cap is reached at its log
//! position, so it holds exactly across every member of a cluster; the sign-in is then
//! handled again on the applied state and answered `full`. (This member's own count and
//! the places held by its sign-ins in flight only keep a flood from being proposed.) An accept hands over the publish key and the minion's session
//! key, both RSA-encrypted to its key; every reply is signed with the master key.
//! Accepted keys never touch the log on re-auth.
//!
//! **Decided at apply.** The table is read from this member's state, which may be
//! behind the log (a restarted or cut-off member). So every keys-bank record names the
//! entry it was decided from (`KeySet::expect`) and changes nothing if the log holds
//! something else at its position; the outcome is marked [`Outcome::recheck`] and the
//! daemon, once the record is committed (this member has then applied everything up to
//! it), handles the request again and answers from what applied.

use rmpv::Value;

use halite_storage::format::{KeySet, KeyState, Record};
use halite_storage::id::validate_minion_id;
use halite_storage::keys::BankState;
use halite_storage::state::StoredKey;

use super::{Claim, Effect, Outcome};
use crate::events::event;
use crate::glob::fnmatch;
use crate::view::{Admission, Autosign, View};
use crate::wire::crypto::{clean_key, EncAlgo, PublicKey, SigAlgo};
use crate::wire::payload::{bin, encode, get, get_bytes, get_text, map};

/// An `_auth` request.
pub struct Auth {
    load: Value,
}

/// The act Salt's `salt/auth` event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Pend,
    Accept,
    Reject,
    Denied,
    Full,
    Error,
}

impl Act {
    pub fn as_str(self) -> &'static str {
        match self {
            Act::Pend => "pend",
            Act::Accept => "accept",
            Act::Reject => "reject",
            Act::Denied => "denied",
            Act::Full => "full",
            Act::Error => "error",
        }
    }
}

/// Whether `id` matches a line of an autosign/autoreject text (`#` comments skipped;
/// each line a shell glob or, failing that, an anchored regex: Salt's rule).
pub fn listed_in(text: Option<&str>, id: &str) -> bool {
    let Some(text) = text else { return false };
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).any(|l| line_matches(l, id))
}

fn line_matches(line: &str, value: &str) -> bool {
    line == value || fnmatch(line, value) || regex::Regex::new(&format!("^(?:{line})$")).map(|r| r.is_match(value)).unwrap_or(false)
}

/// `autosign_grains_dir`: the minion's `autosign_grains` value for a grain file named
/// like the grain matches one of its lines (at most 64 grains are looked at).
fn autosign_by_grains(view: &dyn View, load: &Value) -> bool {
    let Some(Value::Map(grains)) = get(load, "autosign_grains") else { return false };
    grains.iter().take(64).any(|(k, v)| {
        let (Some(name), Some(val)) = (crate::wire::payload::text(k), crate::wire::payload::text(v)) else { return false };
        listed_in(view.autosign_text(Autosign::Grain(name)).as_deref(), val)
    })
}

/// How a new or pending key would be accepted without an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AutoSign {
    No,
    Yes,
    /// By the one-shot stub, which is then used up.
    Stub,
}

impl Auth {
    pub fn parse(load: &Value) -> Self {
        Auth { load: load.clone() }
    }

    /// Decides the sign-in; the outcome carries the signed reply, the key record (if
    /// any), the `salt/auth` event, a `max_minions` claim and the session key.
    pub fn answer(&self, view: &dyn View) -> Outcome {
        let load = &self.load;
        let id = get_text(load, "id").unwrap_or("").to_string();
        let valid = validate_minion_id(&id).is_ok();
        let stored = if valid { view.key(&id).ok().flatten() } else { None };
        let denied_exists = valid && view.denied(&id).unwrap_or(false);
        let admission = if view.config().max_minions > 0 && valid { view.admission(&id) } else { Admission::Counted };
        let d = decide(view, load, &id, stored.as_ref(), denied_exists, admission == Admission::Full);
        tracing::info!(id = %id, act = d.act.as_str(), "salt/auth");
        let ev = event(
            "salt/auth",
            serde_json::json!({
                "result": matches!(d.act, Act::Accept | Act::Pend),
                "act": d.act.as_str(),
                "id": id,
                "pub": get_text(load, "pub").unwrap_or("").trim(),
            }),
        );
        let new_pending = d.act == Act::Pend && d.records.iter().any(|r| matches!(r, Record::KeySet(k) if k.state == KeyState::Pending));
        let mut out = Outcome::reply(encode(&d.reply), "_auth", &id);
        if new_pending && view.config().halite_max_pending_keys > 0 {
            out.claims.push(Claim::Pending(id.clone()));
        }
        // The records were decided from this member's read: answer from what applied.
        out.recheck = !d.records.is_empty();
        out.signed_in = d.act == Act::Accept;
        out.records = d.records;
        out.events = vec![ev];
        out.effects = d.effects;
        if d.act == Act::Accept && admission == Admission::Room {
            out.claims.push(Claim::Count(id));
        }
        out
    }
}

/// What [`decide`] decided.
pub struct Decision {
    pub reply: Value,
    pub records: Vec<Record>,
    pub effects: Vec<Effect>,
    pub act: Act,
}

fn signed(view: &dyn View, inner: Value, sig: SigAlgo) -> Value {
    let load = encode(&inner);
    match view.master_keys().private.sign(&load, sig) {
        Ok(s) => map([("enc", Value::from("clear")), ("load", bin(load)), ("sig", bin(s))]),
        Err(e) => {
            tracing::error!("cannot sign an auth reply: {e}");
            Value::from("bad load")
        }
    }
}

fn ret(view: &dyn View, value: Value, nonce: &Value, sig: SigAlgo) -> Value {
    signed(view, map([("ret", value), ("nonce", nonce.clone())]), sig)
}

/// The sign-in decision for `id`: `stored` is its entry in the keys bank,
/// `denied_exists` whether it already has a denied key, `full` whether `max_minions`
/// refuses it.
pub fn decide(view: &dyn View, load: &Value, id: &str, stored: Option<&StoredKey>, denied_exists: bool, full: bool) -> Decision {
    let cfg = view.config();
    let nonce = get(load, "nonce").cloned().unwrap_or(Value::Nil);
    let out = |reply, records, act| Decision { reply, records, effects: vec![], act };
    let Some(enc) = EncAlgo::parse(get_text(load, "enc_algo").unwrap_or("OAEP-SHA1")) else {
        return out(map([("enc", Value::from("clear")), ("load", map([("ret", Value::from("bad enc algo"))]))]), vec![], Act::Error);
    };
    let Some(sig) = SigAlgo::parse(get_text(load, "sig_algo").unwrap_or("PKCS1v15-SHA1")) else {
        return out(map([("enc", Value::from("clear")), ("load", map([("ret", Value::from("bad sig algo"))]))]), vec![], Act::Error);
    };
    if let Err(e) = validate_minion_id(id) {
        tracing::warn!("auth refused: {e}");
        return out(ret(view, Value::Boolean(false), &nonce, sig), vec![], Act::Error);
    }
    if full {
        tracing::warn!(id = %id, max_minions = cfg.max_minions, "auth refused: max_minions reached");
        return out(ret(view, Value::from("full"), &nonce, sig), vec![], Act::Full);
    }
    let presented = get_bytes(load, "pub").map(|p| String::from_utf8_lossy(p).trim().as_bytes().to_vec()).unwrap_or_default();
    let minion_pub = match PublicKey::from_pem(&presented) {
        Ok(k) if !presented.is_empty() => k,
        _ => {
            tracing::warn!(id = %id, "auth refused: the presented public key does not parse");
            return out(ret(view, Value::Boolean(false), &nonce, sig), vec![], Act::Error);
        }
    };
    let now = view.now_ns();
    let same = |k: &StoredKey| clean_key(&k.pub_key) == clean_key(&presented);
    // Every keys-bank change names the entry it was decided from: applied only if the
    // log still holds that at its position (a member that is behind cannot undo an
    // accept or bring back a deleted key); the reply is read after the commit.
    let read = StoredKey::expectation(stored);
    let key = |state: KeyState| Record::KeySet(KeySet::new(id, state, presented.clone(), now).expecting(read.clone()));
    // The denied bank keeps the first conflicting key presented: no expectation needed.
    let deny = || if denied_exists { vec![] } else { vec![Record::KeySet(KeySet::new(id, KeyState::Denied, presented.clone(), now))] };
    let auto_reject = listed_in(view.autosign_text(Autosign::Reject).as_deref(), id);
    // Salt's order: auto_accept, autosign_file, the one-shot stub, autosign_grains_dir.
    let auto_sign = || {
        if cfg.auto_accept || listed_in(view.autosign_text(Autosign::File).as_deref(), id) {
            AutoSign::Yes
        } else if view.autosign_stub(id) {
            AutoSign::Stub
        } else if autosign_by_grains(view, load) {
            AutoSign::Yes
        } else {
            AutoSign::No
        }
    };
    let refuse = |act| (ret(view, Value::Boolean(false), &nonce, sig), act);
    let pend = || (ret(view, Value::Boolean(true), &nonce, sig), Act::Pend);
    let mut by_stub = false;
    let cap = cfg.halite_max_pending_keys;
    let pending_full = || cap > 0 && view.pending_keys() >= cap;
    let mut accept_if_auto = |stored_pending: bool| -> (Vec<Record>, Result<(), (Value, Act)>) {
        match auto_sign() {
            AutoSign::No if stored_pending => (vec![], Err(pend())),
            AutoSign::No if pending_full() => {
                crate::metrics::refuse(
                    crate::metrics::Port::Request,
                    "pending keys",
                    "pending_keys_cap",
                    &format_args!("{cap} keys are pending (halite_max_pending_keys): new ids such as {:?} are answered full until keys are accepted, rejected or deleted", id.escape_debug().to_string()),
                );
                (vec![], Err((ret(view, Value::from("full"), &nonce, sig), Act::Full)))
            }
            // The cap is decided again where the record applies (`pending_below`): the
            // count read here may be behind, or other members may fill the last places.
            AutoSign::No if cap > 0 => match key(KeyState::Pending) {
                Record::KeySet(k) => (vec![Record::KeySet(k.pending_below(cap))], Err(pend())),
                other => (vec![other], Err(pend())),
            },
            AutoSign::No => (vec![key(KeyState::Pending)], Err(pend())),
            how => {
                by_stub = how == AutoSign::Stub;
                (vec![key(KeyState::Accepted)], Ok(()))
            }
        }
    };
    let (records, verdict): (Vec<Record>, Result<(), (Value, Act)>) = if cfg.open_mode {
        match stored {
            Some(k) if k.state == BankState::Accepted && same(k) => (vec![], Ok(())),
            _ => (vec![key(KeyState::Accepted)], Ok(())),
        }
    } else {
        match stored {
            Some(k) if k.state == BankState::Rejected => (vec![], Err(refuse(Act::Reject))),
            Some(k) if k.state == BankState::Accepted && same(k) => (vec![], Ok(())),
            Some(k) if k.state == BankState::Accepted => (deny(), Err(refuse(Act::Denied))),
            None if auto_reject => (vec![key(KeyState::Rejected)], Err(refuse(Act::Reject))),
            None => accept_if_auto(false),
            Some(k) if auto_reject => {
                let rec = Record::KeySet(KeySet::new(id, KeyState::Rejected, k.pub_key.clone(), now).expecting(read.clone()));
                (vec![rec], Err(refuse(Act::Reject)))
            }
            Some(k) if !same(k) => (deny(), Err(refuse(Act::Denied))),
            Some(_) => accept_if_auto(true),
        }
    };
    if let Err((reply, act)) = verdict {
        return out(reply, records, act);
    }
    // Accepted: hand over the publish key and this minion's session key.
    let mut effects = Vec::new();
    let session = match view.session_key(id) {
        Some(k) => k,
        None => {
            let k = view.fresh_key();
            effects.push(Effect::SessionKey { id: id.to_string(), key: k.clone() });
            k
        }
    };
    if by_stub {
        effects.push(Effect::ConsumeAutosignStub { id: id.to_string() });
    }
    let publish = view.publish_key();
    let [aes_ct, session_ct] = match minion_pub.encrypt_oaep_each([publish.aes.key_string().as_bytes(), session.key_string().as_bytes()], enc) {
        Ok(cts) => cts,
        Err(e) => {
            tracing::error!(id = %id, "auth: encryption failed: {e}");
            return out(Value::from("bad load"), vec![], Act::Error);
        }
    };
    let keys = view.master_keys();
    let mut inner = vec![
        (Value::from("enc"), Value::from("pub")),
        (Value::from("pub_key"), Value::from(String::from_utf8_lossy(&keys.pub_clean).into_owned())),
        (Value::from("publish_port"), Value::from(cfg.publish_port)),
    ];
    // Salt's multi-master PKI: the public key's signature by the signing key pair.
    if let Some(s) = &keys.pubkey_signature {
        inner.push((Value::from("pub_sig"), s.value(sig)));
    }
    inner.push((Value::from("aes"), bin(aes_ct)));
    inner.push((Value::from("session"), bin(session_ct)));
    if let Some(tok) = get_bytes(load, "token") {
        match keys.private.decrypt_oaep(tok, enc).and_then(|plain| minion_pub.encrypt_oaep(&plain, enc)) {
            Ok(t) => inner.push((Value::from("token"), bin(t))),
            Err(e) => tracing::warn!(id = %id, "auth: the minion's token does not decrypt with this master's key: {e}"),
        }
    }
    inner.push((Value::from("sig"), bin(publish.sig.clone())));
    inner.push((Value::from("nonce"), nonce.clone()));
    Decision { reply: signed(view, Value::Map(inner), sig), records, effects, act: Act::Accept }
}
