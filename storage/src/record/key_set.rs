//! The key-set record (kind 1): a change to the `keys` or `denied_keys` bank of one
//! minion id, applied by `state/apply.rs` and mirrored into the key view (`keys/`).

use serde::{Deserialize, Serialize};

use super::Payload;
use crate::error::{Error, Result};
use crate::id::validate_minion_id;

/// What a key-set record does to the two key banks.
///
/// `Accepted`, `Pending` and `Rejected` set the `keys` bank entry of the id (one state at
/// a time, as in Salt). `Denied` records a conflicting key in the `denied_keys` bank,
/// which is orthogonal to the state; only the first denied key of an id is kept.
/// `Deleted` removes the `keys` entry, `DeniedCleared` the `denied_keys` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyState {
    Accepted,
    Pending,
    Rejected,
    Denied,
    Deleted,
    DeniedCleared,
}

impl KeyState {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Accepted => "accepted",
            KeyState::Pending => "pending",
            KeyState::Rejected => "rejected",
            KeyState::Denied => "denied",
            KeyState::Deleted => "deleted",
            KeyState::DeniedCleared => "denied_cleared",
        }
    }
}

/// A key state change. `pub_key` is the public key text exactly as presented (for
/// `Deleted`/`DeniedCleared` it is empty).
///
/// A change decided from what the proposer read names that read in `expect`, and the
/// state machine applies it only if the bank still holds exactly that when the record
/// applies (the same test on every member, at the same log position); otherwise the
/// record changes nothing. So a member that is behind (restarted, joining, cut off)
/// can never put an accepted key back to pending, nor bring a deleted one back: its
/// record names the stale state it saw, and that is no longer what the log says.
/// `expect: None` (records written before this field existed, imports, the operator's
/// own tools working on a stopped master) applies unconditionally.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySet {
    pub id: String,
    pub state: KeyState,
    #[serde(with = "serde_bytes")]
    pub pub_key: Vec<u8>,
    /// Wall clock of the proposer, nanoseconds since the epoch; views use it as mtime.
    pub time_ns: u64,
    /// What the bank this record changes must hold for `id` when it applies: the
    /// `keys` bank for `accepted`/`pending`/`rejected`/`deleted`, the `denied_keys`
    /// bank for `denied`/`denied_cleared`. Absent from the payload when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<KeyExpect>,
    /// For a new pending key: applies only if fewer than this many keys are pending
    /// when it applies (`halite_max_pending_keys`, as the proposer is configured). The
    /// count is the state machine's, at this record's log position, so the cap holds
    /// across every member of a cluster, whichever member each sign-in reached. A key
    /// already pending for the id is not counted twice. Absent when `None` (no cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_below: Option<u64>,
}

impl KeySet {
    /// An unconditional key change (no `expect`).
    pub fn new(id: impl Into<String>, state: KeyState, pub_key: Vec<u8>, time_ns: u64) -> Self {
        KeySet { id: id.into(), state, pub_key, time_ns, expect: None, pending_below: None }
    }

    /// The same change, applied only while fewer than `cap` keys are pending.
    pub fn pending_below(mut self, cap: u64) -> Self {
        self.pending_below = Some(cap);
        self
    }

    /// The same change, applied only if the bank holds `expect` for the id then.
    pub fn expecting(mut self, expect: KeyExpect) -> Self {
        self.expect = Some(expect);
        self
    }
}

/// What a conditional [`KeySet`] expects its bank to hold for the id when it applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyExpect {
    /// No entry for the id.
    Absent,
    /// An entry in `state` (`accepted`, `pending` or `rejected` in the keys bank,
    /// `denied` in the denied bank) with exactly these public key bytes.
    Holds {
        state: KeyState,
        #[serde(with = "serde_bytes")]
        pub_key: Vec<u8>,
    },
}

impl Payload for KeySet {
    /// A valid minion id; a public key (at most 64 KiB) unless the change removes one;
    /// an expectation that names a state of the bank this change writes.
    fn check(&self) -> Result<()> {
        let k = self;
        validate_minion_id(&k.id)?;
        let needs_key = !matches!(k.state, KeyState::Deleted | KeyState::DeniedCleared);
        if needs_key && k.pub_key.is_empty() {
            return Err(Error::Invalid(format!("key set for {:?} to {} has no public key", k.id, k.state.as_str())));
        }
        if k.pub_key.len() > 64 << 10 {
            return Err(Error::Invalid(format!("public key of {:?} is larger than 64 KiB", k.id)));
        }
        match &k.expect {
            Some(KeyExpect::Holds { state, pub_key }) => {
                let denied_bank = matches!(k.state, KeyState::Denied | KeyState::DeniedCleared);
                let fits = if denied_bank { *state == KeyState::Denied } else { matches!(state, KeyState::Accepted | KeyState::Pending | KeyState::Rejected) };
                if !fits {
                    return Err(Error::Invalid(format!("key set for {:?} to {} cannot expect a {} key", k.id, k.state.as_str(), state.as_str())));
                }
                if pub_key.len() > 64 << 10 {
                    return Err(Error::Invalid(format!("expected public key of {:?} is larger than 64 KiB", k.id)));
                }
            }
            Some(KeyExpect::Absent) | None => {}
        }
        Ok(())
    }
}
