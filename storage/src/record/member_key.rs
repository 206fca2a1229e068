//! The member-key record (kind 15): a cluster member's transport key, recorded by the
//! member itself; decided at apply (`state/member_keys.rs`).

use serde::{Deserialize, Serialize};

use super::Payload;
use crate::error::{Error, Result};

/// Length of a member public key (Ed25519).
pub const MEMBER_KEY_LEN: usize = 32;

/// A cluster member's transport key (`replication::transport::identity`), recorded by
/// the member itself: which Ed25519 public key speaks for raft id `id`. Decided at apply
/// (`state/member_keys.rs`): set once per id, by an entry that member proposed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberKey {
    pub id: u64,
    #[serde(with = "serde_bytes")]
    pub public: Vec<u8>,
    pub time_ns: u64,
}

impl Payload for MemberKey {
    /// A non-zero raft id and a key of [`MEMBER_KEY_LEN`] bytes.
    fn check(&self) -> Result<()> {
        if self.id == 0 || self.public.len() != MEMBER_KEY_LEN {
            return Err(Error::Invalid(format!("member key for raft id {}: {} bytes (a raft id is non-zero and a member key {MEMBER_KEY_LEN} bytes)", self.id, self.public.len())));
        }
        Ok(())
    }
}
