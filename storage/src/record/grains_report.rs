//! The grains-report record (kind 4): the grains a minion reported, applied by
//! `state/apply.rs`.

use serde::{Deserialize, Serialize};

use super::Payload;
use crate::error::Result;
use crate::id::validate_minion_id;

/// The largest grains report recorded (msgpack bytes; a minion's grains are tens of
/// KiB): larger ones are used for that request's pillar and not recorded, so a minion
/// cannot write a request's size (up to 64 MiB) into the log with every pillar refresh.
/// The bound the handler keeps, not a check of stored records (a log written before it
/// still reads).
pub const MAX_GRAINS_LEN: usize = 4 << 20;

/// The grains a minion reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrainsReport {
    pub id: String,
    #[serde(with = "serde_bytes")]
    pub grains: Vec<u8>,
    pub time_ns: u64,
}

impl Payload for GrainsReport {
    /// A valid minion id.
    fn check(&self) -> Result<()> {
        validate_minion_id(&self.id)?;
        Ok(())
    }

    fn len_hint(&self) -> usize {
        self.id.len() + self.grains.len()
    }
}
