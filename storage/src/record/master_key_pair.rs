//! The master-key-pair record (kind 11): a lone master's own key pair (Salt's
//! `<master_id>.pem`), applied by `state/apply.rs` (set once) and written to the key
//! view's master bank (`keys/pair.rs`).

use serde::{Deserialize, Serialize};

use super::{check_private_pem, Payload};
use crate::error::{Error, Result};
use crate::id::validate_minion_id;

/// A lone master's own key pair (Salt's `<master_id>.pem`): what it signs with and what
/// minions know it by. Set once; the key view's master bank is materialised from it
/// (`<name>.pem`, `<name>.pub`, and with `localfs_key` the `master.pem` / `master.pub`
/// links). A cluster member presents the cluster's pair instead, and never puts a
/// private key of its own into the replicated log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MasterKeyPair {
    /// `master_id`: the master's `id` without a trailing `_master`.
    pub name: String,
    #[serde(with = "serde_bytes")]
    pub private_pem: Vec<u8>,
    pub time_ns: u64,
}

impl Payload for MasterKeyPair {
    /// A name that is a valid minion id (it becomes a file name); PEM text of at most
    /// 16 KiB.
    fn check(&self) -> Result<()> {
        validate_minion_id(&self.name).map_err(|e| Error::Invalid(format!("master key pair name: {e}")))?;
        check_private_pem("master key pair", &self.private_pem)
    }
}
