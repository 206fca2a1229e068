//! The job-published record (kind 2): a job as published to minions (or, started by a
//! minion itself, only stored), applied by `state/apply.rs`.

use serde::{Deserialize, Serialize};

use super::{check_jid, Payload};
use crate::error::Result;
use crate::id::validate_minion_id;

/// A job as published to minions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPublished {
    pub jid: String,
    /// The publish load, msgpack as sent to minions (before encryption).
    #[serde(with = "serde_bytes")]
    pub load: Vec<u8>,
    /// Minions expected to answer.
    pub minions: Vec<String>,
    pub time_ns: u64,
    /// The minion that started this job itself (a return with jid `req`: its
    /// scheduler, `salt-call` with `return_job`). Such a job is stored as Salt stores
    /// it (`jobs.lookup_jid` finds it) and is never published: a master publishes
    /// only what its operator asked for. Absent from the payload when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<String>,
    /// Another group of minions for a job already stored (a `--batch` run's next start,
    /// published under the run's one jid, as Salt 3008 does). Decided at apply: when the
    /// job exists its `minions` gain these (in order, each once) and its load and time
    /// stay; when it does not, this record is stored as it is. The load is still what
    /// this group is sent. Absent from the payload when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub joins: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Payload for JobPublished {
    /// A valid jid; valid minion ids.
    fn check(&self) -> Result<()> {
        check_jid(&self.jid)?;
        for m in &self.minions {
            validate_minion_id(m)?;
        }
        if let Some(id) = &self.started_by {
            validate_minion_id(id)?;
        }
        Ok(())
    }

    fn len_hint(&self) -> usize {
        self.jid.len() + self.load.len() + self.minions.iter().map(|m| m.len() + 1).sum::<usize>()
    }
}
