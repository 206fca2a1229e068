//! The Salt mine: what minions publish about themselves (`mine.send`, `mine_functions`)
//! for other minions and the operator to read (`mine.get`).
//!
//! Writes are records: `_mine`, `_mine_delete` and `_mine_flush` (`crate::req::mine`)
//! become one `mine_update` record each (kind 16), for the minion that sent the request
//! (the authenticated id, never a field of the load). Applied in log order they are the
//! same state on every member of a cluster, so any member answers a read the same.
//!
//! Reads ([`get_mine`]) follow Salt's `_mine_get`: `fun` is one function, a comma-separated
//! list or a list (a single function answers `{minion: data}`, several
//! `{fun: {minion: data}}`); the minions are those the target matches among the accepted
//! keys (`crate::jobs::expected_minions`: glob, list, pcre, grain, grain_pcre, compound;
//! pillar targets match nothing, the master keeps no pillar cache); the master's
//! `mine_get` option (`{requester id regex: [function regex, ...]}`), when set, limits
//! what a requester may read; and data a minion stored with an `allow_tgt` (Salt's
//! minion-side ACL, `__saltmine_acl__`) is given only to the minions that target names.

use rmpv::Value;
use serde_json::Value as J;

use halite_storage::format::{MineEntry, MineOp, MineUpdate, Record, MAX_MINE_BYTES, MAX_MINE_FUNS, MAX_MINE_FUN_LEN};
use halite_storage::state::{StateMachine, StateRead};

use crate::config::MasterConfig;
use crate::error::{Error, Result};
use crate::wire::payload::{self, get, text};

/// The key Salt puts in a mine entry that carries its own ACL, and the one holding the data.
const ACL_ID: &str = "__saltmine_acl__";
const ACL_DATA: &str = "__data__";

/// What a mine read needs from the master's state.
pub trait MineRead {
    /// A minion's mine: (function, msgpack data) pairs.
    fn mine(&self, id: &str) -> Result<Vec<(String, Vec<u8>)>>;
    /// The accepted minions a target matches.
    fn target(&self, tgt: &J, tgt_type: &str) -> Result<Vec<String>>;
}

impl MineRead for StateMachine {
    fn mine(&self, id: &str) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(StateMachine::mine(self, id)?)
    }
    fn target(&self, tgt: &J, tgt_type: &str) -> Result<Vec<String>> {
        Ok(crate::jobs::expected_minions(self, tgt, tgt_type)?.0)
    }
}

/// The applied state as an admin verb reads it (`mine.get`).
impl MineRead for &dyn StateRead {
    fn mine(&self, id: &str) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(StateRead::mine(*self, id)?)
    }
    fn target(&self, tgt: &J, tgt_type: &str) -> Result<Vec<String>> {
        Ok(crate::jobs::expected_minions(*self, tgt, tgt_type)?.0)
    }
}

/// The record of a `_mine` load (`data`: a map of function → data; `clear`), or why
/// it is refused.
pub fn send(id: &str, load: &Value, time_ns: u64) -> Result<Record> {
    let Some(Value::Map(data)) = get(load, "data") else {
        return Err(Error::refused("_mine without a data map"));
    };
    if data.len() > MAX_MINE_FUNS {
        return Err(Error::refused(format!("_mine with {} functions, more than {MAX_MINE_FUNS}", data.len())));
    }
    let mut entries = Vec::with_capacity(data.len());
    let mut bytes = 0usize;
    for (k, v) in data {
        let fun = fun_name(k)?;
        let data = payload::encode(v);
        bytes += data.len();
        if bytes > MAX_MINE_BYTES {
            return Err(Error::refused(format!("_mine data larger than {MAX_MINE_BYTES} bytes")));
        }
        entries.push(MineEntry { fun, data });
    }
    let clear = get(load, "clear").is_some_and(truthy);
    record(MineUpdate { id: id.to_string(), op: MineOp::Send, clear, entries, time_ns })
}

/// The record of a `_mine_delete` load (`fun`).
pub fn delete(id: &str, load: &Value, time_ns: u64) -> Result<Record> {
    let fun = get(load, "fun").ok_or_else(|| Error::refused("_mine_delete without fun"))?;
    let entries = vec![MineEntry { fun: fun_name(fun)?, data: vec![] }];
    record(MineUpdate { id: id.to_string(), op: MineOp::Delete, clear: false, entries, time_ns })
}

/// The record of a `_mine_flush`.
pub fn flush(id: &str, time_ns: u64) -> Result<Record> {
    record(MineUpdate { id: id.to_string(), op: MineOp::Flush, clear: false, entries: vec![], time_ns })
}

fn record(m: MineUpdate) -> Result<Record> {
    let r = Record::MineUpdate(m);
    r.validate().map_err(|e| Error::refused(format!("mine update refused: {e}")))?;
    Ok(r)
}

fn fun_name(v: &Value) -> Result<String> {
    match text(v) {
        Some(s) if !s.is_empty() && s.len() <= MAX_MINE_FUN_LEN && !s.contains('\0') => Ok(s.to_string()),
        _ => Err(Error::refused(format!("mine function name not a string of 1 to {MAX_MINE_FUN_LEN} bytes"))),
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Boolean(b) => *b,
        Value::Integer(i) => i.as_i64() != Some(0),
        Value::Nil => false,
        other => text(other).is_some_and(|s| !s.is_empty()),
    }
}

/// A mine read: who asks, for which functions of which minions.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub requester: String,
    pub tgt: J,
    pub tgt_type: String,
    /// The functions asked for, and whether the answer is keyed by function.
    pub funs: Vec<String>,
    pub by_fun: bool,
}

impl Query {
    /// From a `_mine_get` load (`tgt`, `fun`, `tgt_type` or the older `expr_form`);
    /// `None` when it lacks `tgt` or `fun` (Salt answers `{}`).
    pub fn from_load(requester: &str, load: &Value) -> Option<Query> {
        let tgt = payload::to_json(get(load, "tgt")?);
        let tgt_type = get(load, "tgt_type").or_else(|| get(load, "expr_form")).and_then(text).unwrap_or("glob");
        let funs = match get(load, "fun")? {
            Value::Array(list) => list.iter().filter_map(text).map(String::from).collect::<Vec<_>>(),
            v => text(v)?.split(',').map(String::from).collect(),
        };
        let listed = matches!(get(load, "fun"), Some(Value::Array(_)));
        Some(Query::new(requester, tgt, tgt_type, funs, listed))
    }

    /// A read of `funs` (duplicates count once, as in Salt); the answer is keyed by
    /// function when they were `listed` (a list, not a string) or are several.
    pub fn new(requester: &str, tgt: J, tgt_type: &str, mut funs: Vec<String>, listed: bool) -> Query {
        funs.sort();
        funs.dedup();
        funs.truncate(MAX_MINE_FUNS);
        let by_fun = listed || funs.len() > 1;
        // Salt's `pillar` and `compound` reads use the exact pillar matchers; ours match
        // pillar targets on nothing either way.
        Query { requester: requester.to_string(), tgt, tgt_type: tgt_type.to_lowercase(), funs, by_fun }
    }
}

/// The functions of `q` the master's `mine_get` option lets its requester read (all of
/// them when the option is not set).
fn allowed(cfg: &MasterConfig, q: &Query) -> Vec<String> {
    let Some(acl) = cfg.raw.get("mine_get") else { return q.funs.clone() };
    let Some(acl) = acl.as_mapping() else { return vec![] };
    let mut perms = Vec::new();
    for (who, funs) in acl {
        let (Some(who), Some(funs)) = (who.as_str(), funs.as_sequence()) else { continue };
        if crate::matcher::re_match(who, &q.requester) {
            perms.extend(funs.iter().filter_map(|f| f.as_str()));
        }
    }
    q.funs.iter().filter(|f| perms.iter().any(|p| crate::matcher::re_match(p, f))).cloned().collect()
}

/// Answers a mine read from the state (Salt's `_mine_get`).
pub fn get_mine(cfg: &MasterConfig, state: &dyn MineRead, q: &Query) -> Result<Value> {
    let funs = allowed(cfg, q);
    if funs.is_empty() {
        return Ok(Value::Map(vec![]));
    }
    let mut by_fun: Vec<(String, Vec<(Value, Value)>)> = funs.iter().map(|f| (f.clone(), vec![])).collect();
    for minion in state.target(&q.tgt, &q.tgt_type)? {
        let mine = state.mine(&minion)?;
        for (fun, out) in by_fun.iter_mut() {
            let Some((_, bytes)) = mine.iter().find(|(f, _)| f == fun) else { continue };
            let Ok(entry) = payload::decode(bytes) else { continue };
            let Some(data) = visible(state, &entry, &q.requester)? else { continue };
            out.push((Value::from(minion.as_str()), data));
        }
    }
    Ok(if q.by_fun {
        Value::Map(by_fun.into_iter().filter(|(_, m)| !m.is_empty()).map(|(f, m)| (Value::from(f), Value::Map(m))).collect())
    } else {
        Value::Map(by_fun.into_iter().flat_map(|(_, m)| m).collect())
    })
}

/// The data of a mine entry as `requester` may see it: entries wrapped with Salt's ACL
/// marker are unwrapped, and hidden unless their `allow_tgt` (if any) names the requester.
fn visible(state: &dyn MineRead, entry: &Value, requester: &str) -> Result<Option<Value>> {
    if get(entry, ACL_ID).is_none() {
        return Ok(Some(entry.clone()));
    }
    if let Some(allow) = get(entry, "allow_tgt") {
        let tgt_type = get(entry, "allow_tgt_type").and_then(text).unwrap_or("glob");
        let allowed = state.target(&payload::to_json(allow), tgt_type)?;
        if !allowed.iter().any(|m| m == requester) {
            return Ok(None);
        }
    }
    Ok(Some(get(entry, ACL_DATA).cloned().unwrap_or(Value::Nil)))
}

#[cfg(test)]
#[path = "mine_tests.rs"]
mod tests;
