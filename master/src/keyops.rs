//! Key operations shared by the daemon's admin socket and the offline tools: selecting
//! keys by glob as `salt-key` does, and turning accept/reject/delete into key records.

use serde_json::{Map, Value};

use halite_replication::Node;
use halite_storage::format::{now_ns, KeySet, KeyState, Record};
use halite_storage::keys::{salt_sort, KeyListing};

use crate::glob::fnmatch;

pub const ACC: &str = "minions";
pub const PEND: &str = "minions_pre";
pub const REJ: &str = "minions_rejected";
pub const DEN: &str = "minions_denied";

#[derive(Debug, thiserror::Error)]
pub enum KeyOpError {
    #[error(transparent)]
    Storage(#[from] halite_storage::Error),
    #[error(transparent)]
    Node(#[from] halite_replication::NodeError),
}

pub type Result<T, E = KeyOpError> = std::result::Result<T, E>;

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
pub fn state_listing(sm: &halite_storage::state::StateMachine) -> Result<KeyListing> {
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
pub fn records_for(sm: &halite_storage::state::StateMachine, cmd: Cmd, selected: &Map<String, Value>) -> Result<(Vec<Record>, Vec<String>)> {
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
    let (recs, done) = records_for(node.state(), cmd, selected)?;
    for chunk in recs.chunks(4096) {
        node.propose(chunk)?;
    }
    Ok(done)
}

