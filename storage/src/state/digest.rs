//! A digest of the applied state, to compare members: two members that applied the same
//! log to the same index hold the same digest, whatever their history (restarts,
//! snapshots installed, replays).
//!
//! It is a SHA-256 over every column family in [`ALL_CFS`] order, each as its name and
//! then every key/value pair in key order, names, keys and values each prefixed by a u64
//! BE length. Two `meta` keys are left out because they are a member's own bookkeeping,
//! not applied state: `views_index` (how far this member's views are synced) and
//! `applied_index` (reported beside the digest instead, so that members at different
//! indexes show as such rather than as a mere hash mismatch).

use sha2::{Digest, Sha256};

use super::{StateMachine, ALL_CFS, APPLIED_INDEX, CF_META, VIEWS_INDEX};
use crate::error::Result;

/// What [`StateMachine::digest`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateDigest {
    pub applied_index: u64,
    /// Key/value pairs hashed.
    pub items: u64,
    pub sha256: [u8; 32],
}

impl std::fmt::Display for StateDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at index {} ({} items)", hex::encode(self.sha256), self.applied_index, self.items)
    }
}

fn put(h: &mut Sha256, b: &[u8]) {
    h.update((b.len() as u64).to_be_bytes());
    h.update(b);
}

impl StateMachine {
    /// The digest of the applied state (see the module docs). Reads everything: cost is
    /// proportional to the state's size.
    pub fn digest(&self) -> Result<StateDigest> {
        let db = self.db()?;
        let mut h = Sha256::new();
        let mut items = 0u64;
        for cf in ALL_CFS {
            put(&mut h, cf.as_bytes());
            for item in db.items_of(cf) {
                let (k, v) = item?;
                if cf == CF_META && (&*k == APPLIED_INDEX || &*k == VIEWS_INDEX) {
                    continue;
                }
                put(&mut h, &k);
                put(&mut h, &v);
                items += 1;
            }
        }
        Ok(StateDigest { applied_index: self.applied_index()?, items, sha256: h.finalize().into() })
    }
}
