//! `salt-key`'s logic: listings and fingerprints read the configured key view (so they
//! work with the master stopped, like Salt's own salt-key); accept, reject and delete
//! are key records committed through the log, then mirrored into the view.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use halite_master::glob::fnmatch;
use halite_master::{store, MasterConfig};
use halite_replication::Node;
use halite_storage::format::{now_ns, ImportMarker, ImportPhase, KeySet, KeyState, Record};
use halite_storage::keys::{salt_sort, BankState, KeyListing};

use crate::common::{Failure, Result};
use crate::output::listing_value;

pub const ACC: &str = "minions";
pub const PEND: &str = "minions_pre";
pub const REJ: &str = "minions_rejected";
pub const DEN: &str = "minions_denied";

/// The `salt-key -L` listing from the configured view.
pub fn listing(cfg: &MasterConfig) -> Result<KeyListing> {
    Ok(store::key_view(cfg)?.list()?)
}

/// `-l ARG`: one bucket (or all).
pub fn list_status(l: &KeyListing, arg: &str) -> Result<Value> {
    let all = listing_value(l);
    let pick = |k: &str| {
        let mut m = Map::new();
        m.insert(k.to_string(), all[k].clone());
        Value::Object(m)
    };
    Ok(match arg {
        "acc" | "accepted" => pick(ACC),
        "pre" | "un" | "unaccepted" => pick(PEND),
        "rej" | "rejected" => pick(REJ),
        "den" | "denied" => pick(DEN),
        "all" => all,
        other => return Err(Failure::new(format!("'{other}' is not a valid argument to '--list'"), 2)),
    })
}

/// `glob_match`: buckets restricted to ids matching any comma-separated pattern.
pub fn glob_match(l: &KeyListing, pattern: &str) -> Map<String, Value> {
    let pats: Vec<&str> = pattern.split(',').collect();
    let mut out = Map::new();
    for (name, ids) in [(PEND, &l.minions_pre), (REJ, &l.minions_rejected), (ACC, &l.minions), (DEN, &l.minions_denied)] {
        let hits: Vec<Value> = ids.iter().filter(|id| pattern == "*" || pats.iter().any(|p| fnmatch(p, id))).map(|s| Value::String(s.clone())).collect();
        if !hits.is_empty() {
            out.insert(name.to_string(), Value::Array(hits));
        }
    }
    out
}

/// Salt's `pem_finger` over the exact stored bytes: sha256 hex, `:` every two digits.
pub fn finger(pub_key: &[u8]) -> String {
    let hex = hex::encode(Sha256::digest(pub_key));
    hex.as_bytes().chunks(2).map(|c| std::str::from_utf8(c).unwrap_or("")).collect::<Vec<_>>().join(":")
}

/// `-f GLOB` / `-F`: fingerprints per bucket.
pub fn fingers(cfg: &MasterConfig, pattern: &str) -> Result<Value> {
    let view = store::key_view(cfg)?;
    let l = view.list()?;
    let matched = glob_match(&l, pattern);
    let mut out = Map::new();
    for (bucket, ids) in matched {
        let mut m = Map::new();
        for id in ids.as_array().into_iter().flatten().filter_map(Value::as_str) {
            let pub_key = if bucket == DEN { view.get_denied(id)? } else { view.get_key(id)?.map(|e| e.pub_key) };
            if let Some(p) = pub_key {
                m.insert(id.to_string(), Value::String(finger(&p)));
            }
        }
        out.insert(bucket, Value::Object(m));
    }
    Ok(Value::Object(out))
}

/// Starts the node over the configured view, first importing into the log any key the
/// view holds that the state machine does not: on the first use of Halite on a pki dir a
/// Salt master filled, that is every key; later, keys an operator placed by hand (Salt's
/// way of pre-seeding a minion key into `minions/`). The log is the truth from then on.
pub fn open_node(cfg: &MasterConfig) -> Result<Node> {
    let (keys, denied) = store::key_view(cfg)?.entries()?;
    let node = store::start_node(cfg, store::views(cfg, store::key_view(cfg)?)).map_err(crate::pki::in_use(cfg))?;
    let sm = node.state();
    let mut recs = Vec::new();
    for e in keys {
        if sm.get_key(&e.id)?.is_some() {
            continue;
        }
        let state = match e.state {
            BankState::Accepted => KeyState::Accepted,
            BankState::Pending => KeyState::Pending,
            BankState::Rejected => KeyState::Rejected,
        };
        recs.push(Record::KeySet(KeySet { id: e.id, state, pub_key: e.pub_key, time_ns: now_ns() }));
    }
    for (id, p) in denied {
        if sm.get_denied(&id)?.is_none() {
            recs.push(Record::KeySet(KeySet { id, state: KeyState::Denied, pub_key: p, time_ns: now_ns() }));
        }
    }
    if !recs.is_empty() {
        let source = format!("{}:{}", store::key_view(cfg)?.driver(), cfg.keys_dir().display());
        tracing::info!(entries = recs.len(), "importing keys found in {source} that the log does not hold yet");
        recs.insert(0, Record::ImportMarker(ImportMarker { source: source.clone(), phase: ImportPhase::Begin, counts: Default::default(), time_ns: now_ns() }));
        recs.push(Record::ImportMarker(ImportMarker { source, phase: ImportPhase::End, counts: Default::default(), time_ns: now_ns() }));
        for chunk in recs.chunks(4096) {
            node.propose(chunk)?;
        }
    }
    Ok(node)
}

/// The state machine's listing (the truth the node acts on).
pub fn state_listing(node: &Node) -> Result<KeyListing> {
    let sm = node.state();
    let keys = sm.keys()?.into_iter().map(|(id, k)| (id, k.state));
    let denied = sm.denied()?.into_iter().map(|(id, _, _)| id);
    Ok(KeyListing::build(keys, denied))
}

/// Which buckets a command acts on, as salt-key's `_filter_ret` decides.
#[derive(Debug, Clone, Copy, Default)]
pub struct Include {
    pub accepted: bool,
    pub rejected: bool,
    pub denied: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    Accept,
    Reject,
    Delete,
}

impl Cmd {
    pub fn verb(self) -> &'static str {
        match self {
            Cmd::Accept => "accept",
            Cmd::Reject => "reject",
            Cmd::Delete => "delete",
        }
    }
}

/// The keys a command would touch.
pub fn select(l: &KeyListing, cmd: Cmd, pattern: &str, inc: Include) -> Map<String, Value> {
    let m = glob_match(l, pattern);
    if cmd == Cmd::Delete {
        return m;
    }
    let mut out = Map::new();
    for (k, v) in m {
        let keep = match k.as_str() {
            PEND => true,
            ACC => cmd == Cmd::Reject && inc.accepted,
            REJ => cmd == Cmd::Accept && inc.rejected,
            DEN => inc.denied,
            _ => false,
        };
        if keep {
            out.insert(k, v);
        }
    }
    out
}

/// The records that carry out `cmd` on the selected keys (Salt's `change_state` and
/// `delete_key`). Keys whose pub does not parse as a PEM public key are skipped with
/// Salt's message.
pub fn records_for(node: &Node, cmd: Cmd, selected: &Map<String, Value>) -> Result<(Vec<Record>, Vec<String>)> {
    let sm = node.state();
    let mut recs = Vec::new();
    let mut done = Vec::new();
    let t = now_ns();
    for (bucket, ids) in selected {
        let mut ids: Vec<String> = ids.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect();
        salt_sort(&mut ids);
        for id in ids {
            match cmd {
                Cmd::Delete => {
                    let state = if bucket == DEN { KeyState::DeniedCleared } else { KeyState::Deleted };
                    recs.push(Record::KeySet(KeySet { id: id.clone(), state, pub_key: Vec::new(), time_ns: t }));
                    done.push(id);
                }
                Cmd::Accept | Cmd::Reject => {
                    let pub_key = if bucket == DEN { sm.get_denied(&id)?.map(|(_, p)| p) } else { sm.get_key(&id)?.map(|k| k.pub_key) };
                    let Some(pub_key) = pub_key else { continue };
                    if !looks_like_public_key(&pub_key) {
                        eprintln!("Unable to {} invalid key for {id}.", cmd.verb());
                        continue;
                    }
                    if bucket == DEN {
                        recs.push(Record::KeySet(KeySet { id: id.clone(), state: KeyState::DeniedCleared, pub_key: Vec::new(), time_ns: t }));
                    }
                    let state = if cmd == Cmd::Accept { KeyState::Accepted } else { KeyState::Rejected };
                    recs.push(Record::KeySet(KeySet { id: id.clone(), state, pub_key, time_ns: t }));
                    done.push(id);
                }
            }
        }
    }
    Ok((recs, done))
}

/// A cheap structural check that a stored key is a PEM public key (the full RSA parse
/// arrives with the master's crypto).
pub fn looks_like_public_key(p: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(p) else { return false };
    let s = s.trim();
    (s.starts_with("-----BEGIN PUBLIC KEY-----") && s.ends_with("-----END PUBLIC KEY-----"))
        || (s.starts_with("-----BEGIN RSA PUBLIC KEY-----") && s.ends_with("-----END RSA PUBLIC KEY-----"))
}

/// Applies `cmd` through the log; returns the ids changed.
pub fn apply(node: &Node, cmd: Cmd, selected: &Map<String, Value>) -> Result<Vec<String>> {
    let (recs, done) = records_for(node, cmd, selected)?;
    for chunk in recs.chunks(4096) {
        node.propose(chunk)?;
    }
    Ok(done)
}

