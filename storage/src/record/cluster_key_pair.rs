//! The cluster-key-pair record (kind 10): the cluster's key pair (Salt's `cluster.pem`),
//! applied by `state/apply.rs` (set once) and written to the key view (`keys/pair.rs`).

use serde::{Deserialize, Serialize};

use super::{check_private_pem, Payload};
use crate::error::Result;

/// The cluster's key pair (Salt's `cluster.pem`): what every member signs and presents to
/// minions with, so that a minion may talk to any of them. PKCS#1 PEM of the private key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterKeyPair {
    #[serde(with = "serde_bytes")]
    pub private_pem: Vec<u8>,
    pub time_ns: u64,
}

impl Payload for ClusterKeyPair {
    /// PEM text of at most 16 KiB.
    fn check(&self) -> Result<()> {
        check_private_pem("cluster key pair", &self.private_pem)
    }
}
