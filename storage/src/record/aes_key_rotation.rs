//! The AES-key-rotation record (kind 7): a new publish key by generation, applied by
//! `state/apply.rs` (the first committed of a generation wins).

use serde::{Deserialize, Serialize};

use super::Payload;
use crate::error::{Error, Result};

/// A new cluster AES key (the key that encrypts publishes), by generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AesKeyRotation {
    pub generation: u64,
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    pub time_ns: u64,
}

impl Payload for AesKeyRotation {
    /// A key of 1 to 1024 bytes.
    fn check(&self) -> Result<()> {
        if self.key.is_empty() || self.key.len() > 1024 {
            return Err(Error::Invalid("AES key rotation with an empty or oversized key".into()));
        }
        Ok(())
    }
}
