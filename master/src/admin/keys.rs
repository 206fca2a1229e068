//! `salt-key`'s verbs: `key.list`, `key.select` (which keys a glob and the include flags
//! reach, as salt-key's `_filter_ret` decides) and `key.apply` (accept, reject or delete
//! them through the log, Salt's `change_state` and `delete_key`).
//!
//! A committed reject or delete also fires `salt/key`, stops counting the minion
//! against `max_minions` and, with `rotate_aes_key` (Salt's default), replaces the
//! publish key so the minion that lost its key stops reading publishes.

use serde_json::{json, Map, Value, Value as J};

use halite_storage::format::{KeyExpect, KeySet, KeyState, Record};
use halite_storage::keys::{salt_sort, BankState, KeyListing};
use halite_storage::state::{StateRead, StoredKey};

use super::{AdminView, Answer, Effect, Plan, Settled};
use crate::error::{Error, Result};
use crate::events::event;
use crate::glob::fnmatch;

pub const ACC: &str = "minions";
pub const PEND: &str = "minions_pre";
pub const REJ: &str = "minions_rejected";
pub const DEN: &str = "minions_denied";

/// Most key records in one proposal (one log entry; [`Record::fit_groups`] also keeps
/// it under the entry size bound).
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
                let Change { records, intents, invalid } = records_for(sm, cmd, &selected, view.now_ns())?;
                let rotate = rotate_aes_key(view.config());
                let mut plan = Plan::answer(J::Null);
                plan.proposals = Record::fit_groups(records, GROUP, halite_storage::entry::MAX_ENTRY_LEN)?;
                // What is reported, and followed up, is what applied: a change decided
                // from a listing the log has since moved past did nothing.
                plan.answer = Answer::After(Box::new(move |v: &dyn AdminView| {
                    let done = applied(v.state(), &intents)?;
                    let mut settled = Settled::from(json!({ "done": done, "invalid": invalid }));
                    settled.events = done.iter().map(|id| event("salt/key", json!({ "result": true, "act": cmd.verb(), "id": id }))).collect();
                    if cmd != Cmd::Accept && !done.is_empty() {
                        settled.effects.push(Effect::Uncount(done.clone()));
                        if rotate {
                            settled.effects.push(Effect::RotateAes);
                        }
                    }
                    Ok(settled)
                }));
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
pub fn state_listing(sm: &dyn StateRead) -> Result<KeyListing> {
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

/// What a `key.apply` proposes: the records, what each selected id should look like
/// once they apply, and the ids skipped because their stored key does not look like a
/// PEM public key (salt-key prints "Unable to accept invalid key for ID.").
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub records: Vec<Record>,
    pub intents: Vec<(String, Intent)>,
    pub invalid: Vec<String>,
}

/// What an id's banks should show once a key change applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// The keys bank holds this state and public key.
    Holds(BankState, Vec<u8>),
    /// The keys bank holds nothing for the id.
    Gone,
    /// The denied bank holds nothing for the id.
    DeniedGone,
}

/// The records that carry out `cmd` on the selected keys (Salt's `change_state` and
/// `delete_key`). Each names the entry it acts on as its expectation (accept what is
/// pending with this key, delete what exists), so a listing that is out of date by the
/// time the records apply changes nothing: see [`applied`].
pub fn records_for(sm: &dyn StateRead, cmd: Cmd, selected: &Map<String, Value>, time_ns: u64) -> Result<Change> {
    let mut ch = Change { records: Vec::new(), intents: Vec::new(), invalid: Vec::new() };
    let t = time_ns;
    for (bucket, ids) in selected {
        let mut ids: Vec<String> = ids.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect();
        salt_sort(&mut ids);
        for id in ids {
            let stored = sm.get_key(&id)?;
            let denied = if bucket == DEN { sm.get_denied(&id)?.map(|(_, p)| p) } else { None };
            let clear_denied = |p: &Vec<u8>| Record::KeySet(KeySet::new(id.as_str(), KeyState::DeniedCleared, Vec::new(), t).expecting(KeyExpect::Holds { state: KeyState::Denied, pub_key: p.clone() }));
            match cmd {
                Cmd::Delete if bucket == DEN => {
                    let Some(p) = &denied else { continue };
                    ch.records.push(clear_denied(p));
                    ch.intents.push((id, Intent::DeniedGone));
                }
                Cmd::Delete => {
                    let Some(k) = &stored else { continue };
                    ch.records.push(Record::KeySet(KeySet::new(id.as_str(), KeyState::Deleted, Vec::new(), t).expecting(StoredKey::expectation(Some(k)))));
                    ch.intents.push((id, Intent::Gone));
                }
                Cmd::Accept | Cmd::Reject => {
                    let pub_key = if bucket == DEN { denied.clone() } else { stored.as_ref().map(|k| k.pub_key.clone()) };
                    let Some(pub_key) = pub_key else { continue };
                    if !looks_like_public_key(&pub_key) {
                        ch.invalid.push(id);
                        continue;
                    }
                    if bucket == DEN {
                        ch.records.push(clear_denied(&pub_key));
                    }
                    let state = if cmd == Cmd::Accept { KeyState::Accepted } else { KeyState::Rejected };
                    let bank = if cmd == Cmd::Accept { BankState::Accepted } else { BankState::Rejected };
                    ch.records.push(Record::KeySet(KeySet::new(id.as_str(), state, pub_key.clone(), t).expecting(StoredKey::expectation(stored.as_ref()))));
                    ch.intents.push((id, Intent::Holds(bank, pub_key)));
                }
            }
        }
    }
    Ok(ch)
}

/// The ids whose banks, read after the commit, show what [`records_for`] intended.
pub fn applied(sm: &dyn StateRead, intents: &[(String, Intent)]) -> Result<Vec<String>> {
    let mut done = Vec::new();
    for (id, intent) in intents {
        let ok = match intent {
            Intent::Holds(state, p) => sm.get_key(id)?.is_some_and(|k| k.state == *state && k.pub_key == *p),
            Intent::Gone => sm.get_key(id)?.is_none(),
            Intent::DeniedGone => sm.get_denied(id)?.is_none(),
        };
        if ok {
            done.push(id.clone());
        }
    }
    Ok(done)
}

/// A cheap structural check that a stored key is a PEM public key (the full RSA parse
/// arrives with the master's crypto).
pub fn looks_like_public_key(p: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(p) else { return false };
    let s = s.trim();
    (s.starts_with("-----BEGIN PUBLIC KEY-----") && s.ends_with("-----END PUBLIC KEY-----"))
        || (s.starts_with("-----BEGIN RSA PUBLIC KEY-----") && s.ends_with("-----END RSA PUBLIC KEY-----"))
}
