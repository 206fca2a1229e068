//! The batch-run record (kind 19): one step of a master-driven `--batch` run (Salt
//! 3008's `salt --async --batch`), the run's whole progress as one versioned value.
//!
//! The master defines the state (`halite_master::batch`); storage keeps it opaque and
//! decides only whether a step applies:
//! - a step (`stop` false) applies when the stored run is at the version it `expect`s
//!   (0: no run stored under the jid); the run is then at `expect + 1`, its state this
//!   record's;
//! - a stop (`stop` true) always applies: the run is marked stopped and its version
//!   moves on (so a step computed before the stop no longer applies), its state kept.
//!
//! An entry that starts with a step that does not apply is skipped whole (outcome
//! `Duplicate`, as a duplicate reaction is): the job publish that follows the step in
//! its entry (the run's next start) is neither stored nor sent. So a run advances one
//! step at a time whoever proposes, the same on every member.
//!
//! Kept in the `meta` family under `batch NUL <jid>`: the version (u64 big-endian),
//! a stopped byte (0 or 1), then the state. A jid starts with its time, so the job
//! cache's expiry (`jobs_expired`) drops the runs older than its cutoff with a range.

use serde::{Deserialize, Serialize};

use super::{check_jid, Payload};
use crate::error::{Error, Result};

/// Largest state one step carries.
pub const MAX_STATE_LEN: usize = 16 << 20;

/// Prefix of the runs in the `meta` family.
pub const RUN_PREFIX: &[u8] = b"batch\0";

/// One step of a batch run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRun {
    /// The run's jid (the job its starts join).
    pub jid: String,
    /// A stop: applies whatever the version, marks the run stopped.
    #[serde(default)]
    pub stop: bool,
    /// The version this step follows (0: the run's first).
    pub expect: u64,
    /// The run's state after this step (the master's msgpack); empty for a stop.
    #[serde(with = "serde_bytes")]
    pub state: Vec<u8>,
    pub time_ns: u64,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRun {
    pub version: u64,
    pub stopped: bool,
    pub state: Vec<u8>,
}

impl StoredRun {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(9 + self.state.len());
        v.extend_from_slice(&self.version.to_be_bytes());
        v.push(self.stopped as u8);
        v.extend_from_slice(&self.state);
        v
    }

    /// `None` for a value shorter than its header (a damaged value).
    pub(crate) fn decode(v: &[u8]) -> Option<StoredRun> {
        let version = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
        Some(StoredRun { version, stopped: *v.get(8)? != 0, state: v[9..].to_vec() })
    }
}

/// The `meta` key of a run.
pub fn run_key(jid: &str) -> Vec<u8> {
    let mut k = RUN_PREFIX.to_vec();
    k.extend_from_slice(jid.as_bytes());
    k
}

impl Payload for BatchRun {
    /// A valid jid; a state of at most [`MAX_STATE_LEN`] bytes, not empty for a step.
    fn check(&self) -> Result<()> {
        let r = self;
        check_jid(&r.jid)?;
        if r.state.len() > MAX_STATE_LEN {
            return Err(Error::Invalid(format!("batch run {}: a state of {} bytes, more than {MAX_STATE_LEN}", r.jid, r.state.len())));
        }
        if !r.stop && r.state.is_empty() {
            return Err(Error::Invalid(format!("batch run {}: a step without a state", r.jid)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{JobPublished, Record};
    use crate::state::{Outcome, StateMachine};

    fn step(expect: u64, state: &[u8]) -> Record {
        Record::BatchRun(BatchRun { jid: "20261125000000000001".into(), stop: false, expect, state: state.to_vec(), time_ns: 1 })
    }

    fn publish(minion: &str) -> Record {
        Record::JobPublished(JobPublished { jid: "20261125000000000001".into(), load: vec![0x80], minions: vec![minion.into()], time_ns: 1, started_by: None, joins: true })
    }

    #[test]
    fn a_step_applies_only_on_the_version_it_follows_and_takes_its_entry_with_it() {
        let d = tempfile::tempdir().unwrap();
        let sm = StateMachine::open(&d.path().join("s")).unwrap();
        let jid = "20261125000000000001";
        let entry = |index: u64, records: Vec<Record>| crate::entry::LogEntry { index, id: None, settled_below: 0, records };
        let out = sm.apply_entries(&[entry(1, vec![step(0, b"one"), publish("m1")]), entry(2, vec![step(0, b"again"), publish("m9")])]).unwrap();
        assert_eq!(out.outcomes, [Outcome::Applied, Outcome::Duplicate], "a second first step is skipped whole");
        assert_eq!(sm.batch_run(jid).unwrap(), Some(StoredRun { version: 1, stopped: false, state: b"one".to_vec() }));
        assert_eq!(sm.job(jid).unwrap().unwrap().minions, ["m1"], "the skipped entry's publish did not apply");
        let out = sm.apply_entries(&[entry(3, vec![step(1, b"two"), publish("m2")]), entry(4, vec![step(1, b"stale"), publish("m8")])]).unwrap();
        assert_eq!(out.outcomes, [Outcome::Applied, Outcome::Duplicate]);
        assert_eq!(sm.job(jid).unwrap().unwrap().minions, ["m1", "m2"]);
        // A stop applies whatever the version and makes the next step computed before it stale.
        let stop = Record::BatchRun(BatchRun { jid: jid.into(), stop: true, expect: 0, state: vec![], time_ns: 2 });
        let out = sm.apply_entries(&[entry(5, vec![stop]), entry(6, vec![step(2, b"late")])]).unwrap();
        assert_eq!(out.outcomes, [Outcome::Applied, Outcome::Duplicate]);
        assert_eq!(sm.batch_run(jid).unwrap(), Some(StoredRun { version: 3, stopped: true, state: b"two".to_vec() }));
        sm.apply_entries(&[entry(7, vec![step(3, b"halted")])]).unwrap();
        let runs = sm.batch_runs().unwrap();
        assert_eq!(runs, vec![(jid.to_string(), StoredRun { version: 4, stopped: true, state: b"halted".to_vec() })], "stopped stays");
        // The job cache's expiry takes the run with its job.
        sm.apply(&[(8, Record::JobsExpired(crate::format::JobsExpired { before_jid: "20261126000000000000".into(), time_ns: 3 }))]).unwrap();
        assert!(sm.batch_runs().unwrap().is_empty() && sm.job(jid).unwrap().is_none());
        // Bounds.
        assert!(Record::BatchRun(BatchRun { jid: jid.into(), stop: false, expect: 0, state: vec![], time_ns: 1 }).encode().is_err());
        assert!(Record::BatchRun(BatchRun { jid: "a/b".into(), stop: true, expect: 0, state: vec![], time_ns: 1 }).encode().is_err());
    }
}
