//! The job-return record (kind 3): one minion's return for a job, applied by
//! `state/apply.rs`.

use serde::{Deserialize, Serialize};

use super::{check_jid, Payload};
use crate::error::Result;
use crate::id::validate_minion_id;

/// One minion's return for a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobReturn {
    pub jid: String,
    pub id: String,
    /// The return load, msgpack as received (after decryption).
    #[serde(with = "serde_bytes")]
    pub load: Vec<u8>,
    pub time_ns: u64,
    /// Applies only if no return for (`jid`, `id`) is stored yet: a return that must be
    /// the first and only one (an orchestration run's end), decided at apply. Absent from
    /// the payload when false (a minion's return, which replaces an earlier one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first_only: bool,
}

impl Payload for JobReturn {
    /// A valid jid and minion id.
    fn check(&self) -> Result<()> {
        check_jid(&self.jid)?;
        validate_minion_id(&self.id)?;
        Ok(())
    }

    fn len_hint(&self) -> usize {
        self.jid.len() + self.id.len() + self.load.len()
    }
}
