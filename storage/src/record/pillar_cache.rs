//! The pillar-cache record (kind 14): the pillar last compiled for a minion, applied by
//! `state/apply.rs`.

use serde::{Deserialize, Serialize};

use super::Payload;
use crate::error::{Error, Result};
use crate::id::validate_minion_id;

/// The largest pillar kept in the pillar cache (msgpack bytes); a larger one is not
/// cached (pillar targeting then does not see that minion, as Salt without a cache entry).
pub const MAX_PILLAR_CACHE_LEN: usize = 4 << 20;

/// The pillar last compiled for a minion, kept so the master can resolve pillar targets
/// (`-I`, `I@`, `-J`, `J@`) as Salt's minion data cache does. Replaces the previous one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PillarCache {
    pub id: String,
    /// The compiled pillar, msgpack (a map), at most [`MAX_PILLAR_CACHE_LEN`] bytes.
    #[serde(with = "serde_bytes")]
    pub pillar: Vec<u8>,
    pub time_ns: u64,
}

impl Payload for PillarCache {
    /// A valid minion id; a pillar of at most [`MAX_PILLAR_CACHE_LEN`] bytes.
    fn check(&self) -> Result<()> {
        validate_minion_id(&self.id)?;
        if self.pillar.len() > MAX_PILLAR_CACHE_LEN {
            return Err(Error::Invalid(format!("pillar cache of {:?}: {} bytes, more than {MAX_PILLAR_CACHE_LEN}", self.id, self.pillar.len())));
        }
        Ok(())
    }

    fn len_hint(&self) -> usize {
        self.id.len() + self.pillar.len()
    }
}
