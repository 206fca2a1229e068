//! Minion requests on the request port (spec §4 and §7): decode, check, dispatch,
//! encrypt the reply. I/O-free: [`handle`] maps a request body and the master's read
//! state to the reply body and the records that must be committed before it is sent.
//!
//! Every failure of decoding, crypto or validation is answered with the string
//! `"bad load"` (which makes a stock minion re-authenticate) and logged; nothing is
//! written for it.

use std::sync::Arc;

use rmpv::Value;

use halite_storage::format::{now_ns, GrainsReport, JobPublished, JobReturn, Record};
use halite_storage::id::validate_minion_id;
use halite_storage::keys::BankState;
use halite_storage::state::StateMachine;

use crate::auth::{self, AuthContext};
use crate::config::MasterConfig;
use crate::crypto::{Crypticle, EncAlgo, PublicKey, SigAlgo, PICKLE};
use crate::events::{event, Event};
use crate::fileserver;
use crate::masterkeys::{MasterKeys, PublishKey};
use crate::payload::{self, bin, encode, get, get_text, map, take};
use crate::sessions::Sessions;

/// The master's state a handler reads.
pub struct Core {
    pub cfg: MasterConfig,
    pub keys: MasterKeys,
    /// The publish (AES) key, handed to minions at auth.
    pub aes: std::sync::RwLock<Arc<PublishKey>>,
    pub sessions: Sessions,
    /// Nonces of side-effecting requests already applied (replay protection).
    pub nonces: std::sync::Mutex<crate::replay::Nonces>,
    /// Minions counted against `max_minions`: accepted at sign-in since this master
    /// started, until their key is rejected or deleted.
    pub signed_in: std::sync::Mutex<std::collections::HashSet<String>>,
    pub sm: Arc<StateMachine>,
    /// Largest request body accepted, in bytes.
    pub max_request: usize,
    /// A cluster member: the session key of every minion is the cluster AES key.
    pub cluster: bool,
}

impl Core {
    /// The key a minion's requests and their replies are encrypted with.
    pub fn session_key(&self, id: &str) -> Crypticle {
        if self.cluster {
            self.aes.read().unwrap_or_else(|p| p.into_inner()).aes.clone()
        } else {
            self.sessions.get(id)
        }
    }
}

/// What handling a request produced.
#[derive(Debug)]
pub struct Handled {
    /// The msgpack reply body.
    pub reply: Vec<u8>,
    /// Records to commit before the reply is sent.
    pub records: Vec<Record>,
    /// Events to fire once the records are committed.
    pub events: Vec<Event>,
    /// For the log: the command and the minion.
    pub cmd: String,
    pub id: String,
    /// The nonce of an authenticated AES request, remembered (see [`crate::replay`]) once
    /// its records are committed.
    pub nonce: Option<String>,
}

fn bad_load(why: impl std::fmt::Display, cmd: &str, id: &str) -> Handled {
    tracing::warn!(cmd, id, "refusing a request: {why}");
    Handled { reply: encode(&Value::from("bad load")), records: vec![], events: vec![], cmd: cmd.to_string(), id: id.to_string(), nonce: None }
}

/// Handles one request body.
pub fn handle(core: &Core, body: &[u8]) -> Handled {
    if body.len() > core.max_request {
        return bad_load(format!("request of {} bytes exceeds the {}-byte limit", body.len(), core.max_request), "?", "?");
    }
    let env = match payload::decode(body) {
        Ok(v @ Value::Map(_)) => v,
        Ok(_) => return bad_load("the envelope is not a map", "?", "?"),
        Err(e) => return bad_load(e, "?", "?"),
    };
    let (Some(enc), Some(load)) = (get_text(&env, "enc"), get(&env, "load")) else {
        return bad_load("the envelope lacks enc or load", "?", "?");
    };
    let version = get(&env, "version").and_then(Value::as_i64).unwrap_or(0);
    if version < 3 {
        return bad_load(format!("protocol version {version} is below the minimum 3"), "?", "?");
    }
    match enc {
        "clear" => handle_clear(core, load),
        "aes" => handle_aes(core, &env, load),
        other => bad_load(format!("unknown enc {other:?}"), "?", "?"),
    }
}

fn handle_clear(core: &Core, load: &Value) -> Handled {
    let cmd = get_text(load, "cmd").unwrap_or("").to_string();
    match cmd.as_str() {
        "_auth" => {
            let id = get_text(load, "id").unwrap_or("");
            let valid = validate_minion_id(id).is_ok();
            let stored = if valid { core.sm.get_key(id).ok().flatten() } else { None };
            let denied_exists = valid && core.sm.get_denied(id).ok().flatten().is_some();
            let aes = core.aes.read().unwrap_or_else(|p| p.into_inner()).clone();
            // max_minions: a new id reserves its place before the (slow) decision, so
            // concurrent sign-ins cannot overshoot; the place is given back unless it
            // ends in an accept.
            let (full, reserved) = if core.cfg.max_minions > 0 && valid {
                let mut s = core.signed_in.lock().unwrap_or_else(|p| p.into_inner());
                if s.contains(id) {
                    (false, false)
                } else if s.len() as u64 >= core.cfg.max_minions {
                    (true, false)
                } else {
                    (false, s.insert(id.to_string()))
                }
            } else {
                (false, false)
            };
            let ctx = AuthContext { cfg: &core.cfg, keys: &core.keys, aes: &aes, full };
            let out = auth::decide(load, stored.as_ref(), denied_exists, &ctx, |id| core.session_key(id));
            if reserved && out.act != "accept" {
                core.signed_in.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
            }
            tracing::info!(id = %out.id, act = out.act, "salt/auth");
            let ev = event(
                "salt/auth",
                serde_json::json!({
                    "result": out.act == "accept" || out.act == "pend",
                    "act": out.act,
                    "id": out.id,
                    "pub": get_text(load, "pub").unwrap_or("").trim(),
                }),
            );
            Handled { reply: encode(&out.reply), records: out.records, events: vec![ev], cmd, id: out.id, nonce: None }
        }
        "ping" => Handled { reply: encode(load), records: vec![], events: vec![], cmd, id: String::new(), nonce: None },
        // Everything else on the clear channel: the reference's CLI-facing commands
        // (publish, runner, wheel, ...) and the internal ones behind CVE-2020-11651
        // (_send_pub, _prep_auth_info). Halite serves none of them to the network.
        _ => {
            tracing::warn!(cmd = %cmd.escape_debug(), "clear command refused");
            Handled { reply: encode(&Value::Map(vec![])), records: vec![], events: vec![], cmd, id: String::new(), nonce: None }
        }
    }
}

fn handle_aes(core: &Core, env: &Value, load: &Value) -> Handled {
    let id = get_text(env, "id").unwrap_or("").to_string();
    if let Err(e) = validate_minion_id(&id) {
        return bad_load(e, "aes", &id);
    }
    let Some(ct) = payload::bytes(load) else { return bad_load("the load is not a byte string", "aes", &id) };
    let session = core.session_key(&id);
    let plain = match session.decrypt(ct) {
        Ok(p) => p,
        Err(_) => return bad_load("the load does not decrypt with the session key", "aes", &id),
    };
    let Some(msg) = plain.strip_prefix(PICKLE) else { return bad_load("no pickle:: prefix", "aes", &id) };
    let mut inner = match payload::decode(msg) {
        Ok(v @ Value::Map(_)) => v,
        _ => return bad_load("the decrypted load is not a map", "aes", &id),
    };
    let cmd = get_text(&inner, "cmd").unwrap_or("").to_string();
    let nonce = take(&mut inner, "nonce").and_then(|n| payload::text(&n).map(String::from)).unwrap_or_default();
    if nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return bad_load("missing or malformed nonce", &cmd, &id);
    }
    if get_text(&inner, "id") != Some(id.as_str()) {
        return bad_load("inner id differs from the envelope id", &cmd, &id);
    }
    let Some(tok) = take(&mut inner, "tok") else { return bad_load("no tok", &cmd, &id) };
    let stored = match core.sm.get_key(&id) {
        Ok(Some(k)) if k.state == BankState::Accepted => k,
        _ => return bad_load("the minion's key is not accepted", &cmd, &id),
    };
    let minion_pub = match PublicKey::from_pem(&stored.pub_key) {
        Ok(k) => k,
        Err(e) => return bad_load(format!("the accepted key does not parse: {e}"), &cmd, &id),
    };
    if payload::bytes(&tok).and_then(|t| minion_pub.x931_recover(t)).as_deref() != Some(b"salt") {
        return bad_load("bad tok", &cmd, &id);
    }
    // Salt's request_server_ttl: refuse requests older than that many seconds.
    if core.cfg.request_server_ttl > 0 {
        let ts = get(&inner, "ts").and_then(Value::as_i64).unwrap_or(0);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
        if now.saturating_sub(ts) > core.cfg.request_server_ttl as i64 {
            return bad_load(format!("stale request: ts {ts} is {}s old (request_server_ttl {})", now.saturating_sub(ts), core.cfg.request_server_ttl), &cmd, &id);
        }
    }
    let replayed = core.nonces.lock().unwrap_or_else(|p| p.into_inner()).seen(&id, &nonce);
    let enc = EncAlgo::parse(get_text(env, "enc_algo").unwrap_or("OAEP-SHA1")).unwrap_or(EncAlgo::OaepSha1);
    let sig = SigAlgo::parse(get_text(env, "sig_algo").unwrap_or("PKCS1v15-SHA1")).unwrap_or(SigAlgo::Pkcs1v15Sha1);
    let req = AesRequest { core, id: &id, inner: &inner, nonce: &nonce, minion_pub: &minion_pub, enc, sig };
    let mut events = Vec::new();
    let (result, mut records, private) = match dispatch(&req, &cmd, &mut events) {
        Ok(Answer::Encrypted(v, r)) => (v, r, false),
        Ok(Answer::Private(v, r)) => (v, r, true),
        Err(e) => return bad_load(e, &cmd, &id),
    };
    if replayed && !(records.is_empty() && events.is_empty()) {
        // Answered (a minion resending after a lost reply needs it), but the first
        // copy's effects are the only ones.
        tracing::info!(cmd = %cmd, id = %id, nonce = %nonce, "replayed request: answered, nothing written");
        records.clear();
        events.clear();
    }
    let nonce_kept = Some(nonce.clone());
    if private {
        return Handled { reply: encode(&result), records, events, cmd, id, nonce: nonce_kept };
    }
    let mut plain = Vec::with_capacity(64);
    plain.extend_from_slice(PICKLE);
    plain.extend_from_slice(nonce.as_bytes());
    plain.extend_from_slice(&encode(&result));
    match session.encrypt(&plain) {
        Ok(ct) => Handled { reply: encode(&bin(ct)), records, events, cmd, id, nonce: nonce_kept },
        Err(e) => bad_load(format!("cannot encrypt the reply: {e}"), &cmd, &id),
    }
}

struct AesRequest<'a> {
    core: &'a Core,
    id: &'a str,
    inner: &'a Value,
    nonce: &'a str,
    minion_pub: &'a PublicKey,
    enc: EncAlgo,
    sig: SigAlgo,
}

enum Answer {
    /// Session-encrypted with the nonce (the normal reply).
    Encrypted(Value, Vec<Record>),
    /// Sent as is (the pillar's own encryption).
    Private(Value, Vec<Record>),
}

fn dispatch(r: &AesRequest, cmd: &str, events: &mut Vec<Event>) -> Result<Answer, String> {
    let none = |v: Value| Ok(Answer::Encrypted(v, vec![]));
    match cmd {
        "_pillar" => {
            events.push(event(format!("minion/refresh/{}", r.id), serde_json::json!({ "Minion data cache refresh": r.id })));
            pillar(r)
        }
        "_return" => {
            let jid = get_text(r.inner, "jid").unwrap_or("");
            if jid == "nocache" || jid.is_empty() {
                tracing::debug!(id = r.id, jid, "return not stored");
                return none(Value::Nil);
            }
            let mut recs = Vec::with_capacity(2);
            let mut load = r.inner.clone();
            let jid = if jid == "req" {
                // A job the minion ran on its own (the scheduler, salt-call with
                // return_job): it gets a jid here and a load targeting just that minion.
                let jid = crate::jobs::new_jid();
                let fun_args = get(&load, "arg").or_else(|| get(&load, "fun_args")).cloned().unwrap_or(Value::Array(vec![]));
                for (k, v) in [("arg", fun_args), ("tgt_type", Value::from("glob")), ("tgt", Value::from(r.id)), ("jid", Value::from(jid.as_str()))] {
                    take(&mut load, k);
                    if let Value::Map(m) = &mut load {
                        m.push((Value::from(k), v));
                    }
                }
                recs.push(Record::JobPublished(JobPublished { jid: jid.clone(), load: encode(&load), minions: vec![r.id.to_string()], time_ns: now_ns() }));
                jid
            } else {
                jid.to_string()
            };
            recs.push(Record::JobReturn(JobReturn { jid: jid.clone(), id: r.id.to_string(), load: encode(&load), time_ns: now_ns() }));
            for rec in &recs {
                if let Err(e) = rec.validate() {
                    return Err(format!("return refused: {e}"));
                }
            }
            events.push(event(format!("salt/job/{jid}/ret/{}", r.id), payload::to_json(&load)));
            Ok(Answer::Encrypted(Value::Nil, recs))
        }
        "_minion_event" => {
            minion_events(r, events);
            none(Value::Nil)
        }
        "_register_resources" => none(Value::Boolean(true)),
        "_master_opts" => none(master_opts(&r.core.cfg, get(r.inner, "env_only").and_then(Value::as_bool).unwrap_or(false))),
        "_master_tops" => none(Value::Map(vec![])),
        "_file_envs" => none(Value::Array(r.core.cfg.file_roots.keys().map(|k| Value::from(k.as_str())).collect())),
        "_file_list" | "_file_list_emptydirs" | "_dir_list" | "_symlink_list" => {
            let l = fileserver::list(&r.core.cfg, saltenv(r));
            let prefix = get_text(r.inner, "prefix").unwrap_or("");
            none(match cmd {
                "_file_list" => fileserver::with_prefix(&l.files, prefix),
                "_file_list_emptydirs" => fileserver::with_prefix(&l.empty_dirs, prefix),
                "_dir_list" => fileserver::with_prefix(&l.dirs, prefix),
                _ => Value::Map(
                    l.links
                        .iter()
                        .filter(|(k, _)| k.starts_with(prefix.trim_matches('/')))
                        .map(|(k, v)| (Value::from(k.as_str()), Value::from(v.as_str())))
                        .collect(),
                ),
            })
        }
        "_file_hash" => none(fileserver::file_hash(&r.core.cfg, get_text(r.inner, "path").unwrap_or(""), saltenv(r))),
        "_file_hash_and_stat" => none(fileserver::file_hash_and_stat(&r.core.cfg, get_text(r.inner, "path").unwrap_or(""), saltenv(r))),
        "_file_find" => none(fileserver::file_find(&r.core.cfg, get_text(r.inner, "path").unwrap_or(""), saltenv(r))),
        "_serve_file" => {
            let loc = get(r.inner, "loc").and_then(Value::as_u64).unwrap_or(0);
            none(fileserver::serve_file(&r.core.cfg, get_text(r.inner, "path").unwrap_or(""), saltenv(r), loc))
        }
        "_mine" | "_mine_delete" | "_mine_flush" => none(Value::Boolean(true)),
        "_mine_get" => none(Value::Map(vec![])),
        other => {
            tracing::debug!(cmd = %other.escape_debug(), id = r.id, "unknown command");
            none(Value::Map(vec![]))
        }
    }
}

/// `_minion_event`: a single `tag` + `data` fires the whole load under that tag; an
/// `events` list fires each `data` under its `tag` (blacklisted tags dropped); with a
/// `pretag` each is also fired as `<pretag>/<tag>`.
fn minion_events(r: &AesRequest, events: &mut Vec<Event>) {
    let pretag = get_text(r.inner, "pretag").map(String::from);
    let fire = |tag: &str, data: serde_json::Value, events: &mut Vec<Event>| {
        if tag.is_empty() || tag.len() > 1024 {
            return;
        }
        if let Some(p) = &pretag {
            events.push(event(format!("{p}/{tag}"), data.clone()));
        }
        events.push(event(tag, data));
    };
    if let Some(tag) = get_text(r.inner, "tag") {
        fire(tag, payload::to_json(r.inner), events);
    }
    if let Some(Value::Array(list)) = get(r.inner, "events") {
        for e in list.iter().take(1000) {
            let Some(tag) = get_text(e, "tag") else { continue };
            if crate::events::blacklisted(tag) {
                tracing::warn!(id = r.id, tag, "minion event with a reserved tag dropped");
                continue;
            }
            fire(tag, get(e, "data").map(payload::to_json).unwrap_or(serde_json::Value::Null), events);
        }
    }
}

/// The request's saltenv (Salt's default `base`).
fn saltenv<'a>(r: &'a AesRequest) -> &'a str {
    get_text(r.inner, "saltenv").unwrap_or("base")
}

/// `_pillar`: records the minion's grains and answers with its pillar (compiled from
/// `pillar_roots`), privately encrypted (spec §7.2).
fn pillar(r: &AesRequest) -> Result<Answer, String> {
    let grains = get(r.inner, "grains").cloned().unwrap_or(Value::Map(vec![]));
    let rec = Record::GrainsReport(GrainsReport { id: r.id.to_string(), grains: encode(&grains), time_ns: now_ns() });
    let mut grains_json = payload::to_json(&grains);
    if let Some(m) = grains_json.as_object_mut() {
        m.insert("id".into(), serde_json::Value::String(r.id.to_string()));
    }
    let pillar = payload::from_json(&crate::pillar::compile(&r.core.cfg, r.id, &grains_json));
    let k = Crypticle::generate();
    let enc_k = r.minion_pub.encrypt_oaep(k.key_string().as_bytes(), r.enc).map_err(|e| e.to_string())?;
    let data = encode(&map([("key", bin(enc_k.clone())), ("pillar", pillar), ("nonce", Value::from(r.nonce))]));
    let sig = r.core.keys.private.sign(&data, r.sig).map_err(|e| e.to_string())?;
    let mut plain = PICKLE.to_vec();
    plain.extend_from_slice(&encode(&map([("data", bin(data)), ("sig", bin(sig))])));
    let blob = k.encrypt(&plain).map_err(|e| e.to_string())?;
    Ok(Answer::Private(map([("key", bin(enc_k)), ("pillar", bin(blob))]), vec![rec]))
}

/// `_master_opts` (spec §7.4).
pub fn master_opts(cfg: &MasterConfig, env_only: bool) -> Value {
    let roots = Value::Map(cfg.file_roots.keys().map(|k| (Value::from(k.as_str()), Value::Array(vec![]))).collect());
    let mut m = vec![
        (Value::from("file_roots"), roots),
        (Value::from("top_file_merging_strategy"), Value::from("merge")),
        (Value::from("env_order"), Value::Array(vec![])),
        (Value::from("default_top"), Value::from("base")),
    ];
    if !env_only {
        for (k, v) in [
            ("renderer", Value::from("jinja|yaml")),
            ("failhard", Value::Boolean(false)),
            ("state_top", Value::from("top.sls")),
            ("state_top_saltenv", Value::Nil),
            ("nodegroups", Value::Map(vec![])),
            ("state_auto_order", Value::Boolean(true)),
            ("state_events", Value::Boolean(false)),
            ("state_aggregate", Value::Boolean(false)),
            ("jinja_env", Value::Map(vec![])),
            ("jinja_sls_env", Value::Map(vec![])),
            ("jinja_lstrip_blocks", Value::Boolean(false)),
            ("jinja_trim_blocks", Value::Boolean(false)),
        ] {
            m.push((Value::from(k), v));
        }
    }
    Value::Map(m)
}

