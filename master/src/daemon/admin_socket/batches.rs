//! The driver of master-driven batch runs (`crate::batch`): on the leader, every
//! [`TICK`], each run still going takes one step.
//!
//! A step reads the run as stored (its version and state), the returns of its running
//! minions from the job cache, and the clock; [`RunState::progress`] decides who
//! returned, who timed out and who starts; the step is proposed as one entry (the
//! `batch_run` record, then the `job_published` that joins the starting minions to the
//! run's job). The entry applies only if the run is still at the version read, so a
//! step computed on a stale read, by a deposed leader or racing a `batch.stop`,
//! changes nothing and starts nobody; the next tick reads again. A run stopped by
//! `batch.stop` takes one last step that marks it halted (`stop`).
//!
//! Events, fired by the member whose step applied: `salt/batch/<jid>/progress` after
//! each step that changed something, then `complete` or `halted` at the end.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use halite_storage::batch_run::{BatchRun, StoredRun};
use halite_storage::format::{now_ns, JobPublished, Record};
use halite_storage::state::StateMachine;

use crate::daemon::live::Master;
use crate::batch::{retcode, RunState};
use crate::events::event;
use crate::wire::payload;

/// How often the runs are looked at.
pub const TICK: Duration = Duration::from_millis(250);

/// Drives the runs while this member leads, forever.
pub async fn run(m: Arc<Master>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The runs seen over (or undecodable), by the version seen: not decoded again
    // until that version changes.
    let mut idle: Idle = HashMap::new();
    loop {
        tick.tick().await;
        if m.node.leader() != Some(m.node.id()) {
            continue;
        }
        let mm = m.clone();
        let steps = match tokio::task::spawn_blocking(move || {
            let steps = next_steps(mm.sm(), &mut idle, now_ns());
            (steps, idle)
        })
        .await
        {
            Ok((s, i)) => {
                idle = i;
                s
            }
            Err(e) => {
                tracing::error!("batch runs: the step computation failed: {e}");
                idle = HashMap::new();
                continue;
            }
        };
        for step in steps {
            carry_out(&m, step).await;
        }
    }
}

/// One step to propose: its records, and the state it leads to.
struct Step {
    records: Vec<Record>,
    jid: String,
    version: u64,
    state: RunState,
    /// Something happened (a return, a timeout, a start, the end): fire `progress`.
    moved: bool,
}

/// Runs known to be over (or whose state does not decode): jid → the version seen.
type Idle = HashMap<String, u64>;

/// The steps due at `now`, one per run that moves (read from this member's state).
fn next_steps(sm: &StateMachine, idle: &mut Idle, now: u64) -> Vec<Step> {
    let runs = match sm.batch_runs() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("batch runs: cannot read the runs: {e}");
            return vec![];
        }
    };
    let mut out = Vec::new();
    let present: std::collections::HashSet<&str> = runs.iter().map(|(j, _)| j.as_str()).collect();
    idle.retain(|jid, _| present.contains(jid.as_str()));
    for (jid, stored) in runs {
        let StoredRun { version, stopped, state } = stored;
        if idle.get(&jid) == Some(&version) {
            continue;
        }
        let Some(before) = RunState::decode(&state) else {
            tracing::error!(jid, "batch run state does not decode; the run is left as it is");
            idle.insert(jid, version);
            continue;
        };
        if before.finished() {
            idle.insert(jid, version);
            continue;
        }
        let mut after = before.clone();
        if stopped {
            after.slots.halted = Some("stop".into());
            after.last_progress_ns = now;
        }
        let returns: Vec<(String, i64)> = after
            .slots
            .active
            .iter()
            .filter_map(|(id, _)| match sm.job_return(&jid, id) {
                Ok(Some(r)) => Some((id.clone(), payload::decode(&r.load).map(|l| retcode(&payload::to_json(&l))).unwrap_or(0))),
                _ => None,
            })
            .collect();
        let start = after.progress(&returns, now);
        let moved = stopped || !returns.is_empty() || !start.is_empty() || after.slots.failed.len() != before.slots.failed.len() || after.slots.wait.len() != before.slots.wait.len() || after.slots.halted != before.slots.halted;
        if !moved {
            continue;
        }
        let mut records = vec![Record::BatchRun(BatchRun { jid: jid.clone(), stop: false, expect: version, state: after.encode(), time_ns: now })];
        if !start.is_empty() {
            let load = after.start_load(&start);
            records.push(Record::JobPublished(JobPublished { jid: jid.clone(), load: payload::encode(&payload::from_json(&load)), minions: start, time_ns: now, started_by: None, joins: true }));
        }
        out.push(Step { records, jid, version, state: after, moved });
    }
    out
}

/// Proposes a step and, if it applied, fires its events.
async fn carry_out(m: &Master, step: Step) {
    let pending = match m.node.propose_async(&step.records) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(jid = %step.jid, "batch run step not proposed: {e}");
            return;
        }
    };
    if let Err(e) = pending.committed().await {
        tracing::warn!(jid = %step.jid, "batch run step not committed: {e}");
        return;
    }
    // Applied only if the run was still at the version read (else another step won).
    let applied = matches!(m.sm().batch_run(&step.jid), Ok(Some(r)) if r.version == step.version + 1 && RunState::decode(&r.state).as_ref() == Some(&step.state));
    if !applied {
        tracing::info!(jid = %step.jid, "batch run step skipped: the run moved on");
        return;
    }
    let now = now_ns();
    if let Some(Record::JobPublished(j)) = step.records.get(1) {
        tracing::info!(jid = %step.jid, minions = j.minions.len(), "batch run: starting the next minions");
        m.bus.fire(crate::events::new_job_event(&step.state.start_load(&j.minions), &j.minions, &[]));
    }
    if step.moved {
        let (tag, data) = step.state.event("progress", now);
        m.bus.fire(event(tag, data));
    }
    if step.state.finished() {
        let what = if step.state.slots.halted.is_some() { "halted" } else { "complete" };
        tracing::info!(jid = %step.jid, done = step.state.slots.done.len(), failed = step.state.slots.failed.len(), halted = ?step.state.slots.halted, "batch run over");
        let (tag, data) = step.state.event(what, now);
        m.bus.fire(event(tag, data));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_storage::entry::LogEntry;
    use halite_storage::format::JobReturn;
    use halite_storage::state::Outcome;
    use serde_json::json;

    const S: u64 = 1_000_000_000;
    const JID: &str = "20261125000000000001";

    fn entry(index: u64, records: Vec<Record>) -> LogEntry {
        LogEntry { index, id: None, settled_below: 0, records }
    }

    fn ret(id: &str, rc: i64) -> Record {
        Record::JobReturn(JobReturn { jid: JID.into(), id: id.into(), load: payload::encode(&payload::from_json(&json!({"return": true, "retcode": rc}))), time_ns: 1, first_only: false })
    }

    /// A run of three, one at a time, started (as `batch.start` commits it) at index 1.
    fn started() -> StateMachine {
        let sm = StateMachine::open_in_memory("batches-driver").unwrap();
        let mut run = RunState::new(JID, "test.ping", json!("*"), "glob", "root", json!({"arg": []}), "1", 1, false, 0, 5, vec!["a".into(), "b".into(), "c".into()], 0);
        let first = run.progress(&[], 0);
        let publish = Record::JobPublished(JobPublished { jid: JID.into(), load: payload::encode(&payload::from_json(&run.start_load(&first))), minions: first, time_ns: 0, started_by: None, joins: false });
        sm.apply_entries(&[entry(1, vec![Record::BatchRun(BatchRun { jid: JID.into(), stop: false, expect: 0, state: run.encode(), time_ns: 0 }), publish])]).unwrap();
        sm
    }

    #[test]
    fn each_return_moves_the_run_one_step_and_a_stale_step_starts_nobody() {
        let sm = started();
        let mut idle = Idle::new();
        assert!(next_steps(&sm, &mut idle, S).is_empty(), "nothing returned, nothing due");
        sm.apply_entries(&[entry(2, vec![ret("a", 0)])]).unwrap();
        // Two drivers (a deposed leader and the new one) compute the same step.
        let mine = next_steps(&sm, &mut idle, 2 * S);
        let theirs = next_steps(&sm, &mut Idle::new(), 2 * S + 1);
        assert_eq!(mine.len(), 1);
        let step = &mine[0];
        assert_eq!((step.version, step.state.slots.done.clone(), step.state.slots.active.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>()), (1, vec![("a".to_string(), 0)], vec!["b".to_string()]));
        let Some(Record::JobPublished(j)) = step.records.get(1) else { panic!("{:?}", step.records) };
        assert_eq!((j.minions.as_slice(), j.joins), (&["b".to_string()][..], true));
        let out = sm.apply_entries(&[entry(3, theirs[0].records.clone()), entry(4, step.records.clone())]).unwrap();
        assert_eq!(out.outcomes, [Outcome::Applied, Outcome::Duplicate], "only the first of the two applies");
        assert_eq!(sm.job(JID).unwrap().unwrap().minions, ["a", "b"], "b is started once");
        // The rest, then the end: the run over is not decoded again.
        sm.apply_entries(&[entry(5, vec![ret("b", 0)])]).unwrap();
        sm.apply_entries(&[entry(6, next_steps(&sm, &mut idle, 3 * S).remove(0).records)]).unwrap();
        sm.apply_entries(&[entry(7, vec![ret("c", 2)])]).unwrap();
        let last = next_steps(&sm, &mut idle, 4 * S).remove(0);
        assert!(last.state.finished() && last.records.len() == 1, "nobody left to start");
        sm.apply_entries(&[entry(8, last.records)]).unwrap();
        assert!(next_steps(&sm, &mut idle, 5 * S).is_empty());
        assert_eq!(idle.get(JID), Some(&4), "remembered as over at its version");
        assert_eq!(sm.job(JID).unwrap().unwrap().minions, ["a", "b", "c"]);
    }

    #[test]
    fn a_stopped_run_takes_one_last_step_halted() {
        let sm = started();
        sm.apply_entries(&[entry(2, vec![Record::BatchRun(BatchRun { jid: JID.into(), stop: true, expect: 0, state: vec![], time_ns: 1 }), ret("a", 0)])]).unwrap();
        let step = next_steps(&sm, &mut Idle::new(), S).remove(0);
        assert_eq!((step.version, step.state.slots.halted.as_deref(), step.records.len()), (2, Some("stop"), 1), "halted, nobody started");
        assert_eq!(step.state.slots.pending, ["b", "c"]);
        sm.apply_entries(&[entry(3, step.records)]).unwrap();
        assert!(next_steps(&sm, &mut Idle::new(), 2 * S).is_empty());
    }
}
