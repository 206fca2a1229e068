//! The roots-stage record (kind 12): one chunk of a file a `cluster.sync_roots` brings,
//! staged under the sync's id until its `roots_sync` (kind 13) applies
//! (`state/roots.rs`).

use serde::{Deserialize, Serialize};

use super::roots_blob::RootsBlob;
use super::Payload;
use crate::error::{Error, Result};

/// Length of a roots sync's id (random bytes the proposer draws).
pub const SYNC_ID_LEN: usize = 16;

/// One chunk of a file that a `cluster.sync_roots` brings, staged apart from the live
/// roots under the sync's id until the sync's [`RootsSync`](super::roots_sync::RootsSync)
/// applies (or is dropped when another sync applies first). Nothing reads staged content
/// but that record's apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsStage {
    #[serde(with = "serde_bytes")]
    pub sync: Vec<u8>,
    pub blob: RootsBlob,
}

/// A sync id of [`SYNC_ID_LEN`] bytes (a stage's and its sync's).
pub(super) fn check_sync_id(sync: &[u8]) -> Result<()> {
    if sync.len() != SYNC_ID_LEN {
        return Err(Error::Invalid(format!("roots sync id of {} bytes, not {SYNC_ID_LEN}", sync.len())));
    }
    Ok(())
}

impl Payload for RootsStage {
    /// A sync id of [`SYNC_ID_LEN`] bytes; the blob's checks as a live chunk's.
    fn check(&self) -> Result<()> {
        check_sync_id(&self.sync)?;
        self.blob.check()
    }
}
