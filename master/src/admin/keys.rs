//! `salt-key`'s verbs: `key.list`, `key.select` (which keys a glob and the include flags
//! reach, as salt-key's `_filter_ret` decides) and `key.apply` (accept, reject or delete
//! them through the log, Salt's `change_state` and `delete_key`).
//!
//! A committed reject or delete also fires `salt/key`, stops counting the minion
//! against `max_minions` and, with `rotate_aes_key` (Salt's default), replaces the
//! publish key so the minion that lost its key stops reading publishes.

use serde_json::{json, Map, Value};

use halite_storage::format::{KeySet, KeyState, Record};
use halite_storage::keys::{salt_sort, KeyListing};
use halite_storage::state::StateMachine;

use super::{AdminView, Effect, Plan};
use crate::error::{Error, Result};
use crate::events::event;
use crate::glob::fnmatch;

pub const ACC: &str = "minions";
pub const PEND: &str = "minions_pre";
pub const REJ: &str = "minions_rejected";
pub const DEN: &str = "minions_denied";

/// Most key records in one proposal.
pub const GROUP: usize = 4096;

/// A `key.*` request.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyCmd {
    List,
    Select { cmd: Cmd, pattern: String, include: Include },
    Apply { cmd: Cmd, selected: Map<String, Value> },
}

impl KeyCmd {
    pub fn parse(req: &Value) -> Result<KeyCmd> {
        let flag = |k: &str| req.get(k).and_then(Value::as_bool).unwrap_or(false);
        let action = || Cmd::parse(req.get("action").and_then(Value::as_str).unwrap_or(""));
        Ok(match req.get("cmd").and_then(Value::as_str).unwrap_or("") {
            "key.list" => KeyCmd::List,
            "key.select" => KeyCmd::Select {
                cmd: action()?,
                pattern: req.get("match").and_then(Value::as_str).unwrap_or("").to_string(),
                include: Include { accepted: flag("include_accepted"), rejected: flag("include_rejected"), denied: flag("include_denied") },
            },
            _ => KeyCmd::Apply { cmd: action()?, selected: req.get("selected").and_then(Value::as_object).cloned().unwrap_or_default() },
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let sm = view.state();
        match self {
            KeyCmd::List => {
                let l = state_listing(sm)?;
                Ok(Plan::answer(json!({ "listing": { "minions_pre": l.minions_pre, "minions_rejected": l.minions_rejected, "minions": l.minions, "minions_denied": l.minions_denied } })))
            }
            KeyCmd::Select { cmd, pattern, include } => Ok(Plan::answer(json!({ "selected": select(&state_listing(sm)?, cmd, &pattern, include) }))),
            KeyCmd::Apply { cmd, selected } => {
                let (records, done, invalid) = records_for(sm, cmd, &selected, view.now_ns())?;
                let mut plan = Plan::answer(json!({ "done": done, "invalid": invalid }));
                plan.proposals = records.chunks(GROUP).map(<[Record]>::to_vec).collect();
                plan.events = done.iter().map(|id| event("salt/key", json!({ "result": true, "act": cmd.verb(), "id": id }))).collect();
                if cmd != Cmd::Accept && !done.is_empty() {
                    plan.effects.push(Effect::Uncount(done.clone()));
                    if rotate_aes_key(view.config()) {
                        plan.effects.push(Effect::RotateAes);
                    }
                }
                Ok(plan)
            }
        }
    }
}

/// Salt's `rotate_aes_key` (default True): deleting or rejecting a key replaces the
/// publish key, so the minion that lost its key stops understanding publishes.
pub fn rotate_aes_key(cfg: &crate::config::MasterConfig) -> bool {
    !matches!(cfg.raw.get("rotate_aes_key"), Some(serde_yaml::Value::Bool(false)))
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

/// The state machine's listing (the truth the node acts on).
pub fn state_listing(sm: &StateMachine) -> Result<KeyListing> {
    let keys = sm.keys()?.into_iter().map(|(id, k)| (id, k.state));
    let denied = sm.denied()?.into_iter().map(|(id, _, _)| id);
    Ok(KeyListing::build(keys, denied))
}

/// Which buckets a command acts on, as salt-key's `_filter_ret` decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
    pub fn parse(s: &str) -> Result<Cmd> {
        match s {
            "accept" => Ok(Cmd::Accept),
            "reject" => Ok(Cmd::Reject),
            "delete" => Ok(Cmd::Delete),
            other => Err(Error::refused(format!("unknown key action {other:?}"))),
        }
    }

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
/// `delete_key`), the ids changed, and the ids skipped because their stored key does not
/// look like a PEM public key (salt-key prints "Unable to accept invalid key for ID.").
pub fn records_for(sm: &StateMachine, cmd: Cmd, selected: &Map<String, Value>, time_ns: u64) -> Result<(Vec<Record>, Vec<String>, Vec<String>)> {
    let mut recs = Vec::new();
    let mut done = Vec::new();
    let mut invalid = Vec::new();
    let t = time_ns;
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
                        invalid.push(id);
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
    Ok((recs, done, invalid))
}

/// A cheap structural check that a stored key is a PEM public key (the full RSA parse
/// arrives with the master's crypto).
pub fn looks_like_public_key(p: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(p) else { return false };
    let s = s.trim();
    (s.starts_with("-----BEGIN PUBLIC KEY-----") && s.ends_with("-----END PUBLIC KEY-----"))
        || (s.starts_with("-----BEGIN RSA PUBLIC KEY-----") && s.ends_with("-----END RSA PUBLIC KEY-----"))
}
