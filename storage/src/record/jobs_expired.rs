//! The jobs-expired record (kind 9): the job cache's expiry (`keep_jobs_seconds`),
//! applied by `state/apply.rs` (which also drops the reaction claims, batch runs and
//! expired eauth tokens of before its cutoff).

use serde::{Deserialize, Serialize};

use super::Payload;
use crate::error::{Error, Result};

/// The job cache's expiry (`keep_jobs_seconds`): every job whose jid sorts before
/// `before_jid`, and all its returns, is removed. The cutoff is decided once, by the
/// master that proposes the record, so every replica removes exactly the same jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobsExpired {
    /// A 20-digit jid (`YYYYMMDDhhmmssffffff`, UTC): the first one kept.
    pub before_jid: String,
    pub time_ns: u64,
}

impl Payload for JobsExpired {
    /// A cutoff of exactly 20 ASCII digits.
    fn check(&self) -> Result<()> {
        let e = self;
        if e.before_jid.len() != 20 || !e.before_jid.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::Invalid(format!("jobs expiry cutoff {:?} is not a 20-digit jid", e.before_jid.escape_debug().to_string())));
        }
        Ok(())
    }
}
