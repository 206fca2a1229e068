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

use super::live::Master;
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
            let steps = next_steps(&mm, &mut idle);
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

/// The steps due now, one per run that moves (read from this member's state).
fn next_steps(m: &Master, idle: &mut Idle) -> Vec<Step> {
    let sm = m.sm();
    let runs = match sm.batch_runs() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("batch runs: cannot read the runs: {e}");
            return vec![];
        }
    };
    let now = now_ns();
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
            after.halted = Some("stop".into());
            after.last_progress_ns = now;
        }
        let returns: Vec<(String, i64)> = after
            .active
            .iter()
            .filter_map(|(id, _)| match sm.job_return(&jid, id) {
                Ok(Some(r)) => Some((id.clone(), payload::decode(&r.load).map(|l| retcode(&payload::to_json(&l))).unwrap_or(0))),
                _ => None,
            })
            .collect();
        let start = after.progress(&returns, now);
        let moved = stopped || !returns.is_empty() || !start.is_empty() || after.failed.len() != before.failed.len() || after.wait.len() != before.wait.len() || after.halted != before.halted;
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
        let load = payload::decode(&j.load).map(|l| payload::to_json(&l)).unwrap_or_default();
        m.bus.fire(event(format!("salt/job/{}/new", step.jid), serde_json::json!({ "jid": step.jid, "tgt_type": "list", "tgt": j.minions, "user": step.state.user, "fun": step.state.fun, "arg": load["arg"], "minions": j.minions, "missing": [] })));
    }
    if step.moved {
        let (tag, data) = step.state.event("progress", now);
        m.bus.fire(event(tag, data));
    }
    if step.state.finished() {
        let what = if step.state.halted.is_some() { "halted" } else { "complete" };
        tracing::info!(jid = %step.jid, done = step.state.done.len(), failed = step.state.failed.len(), halted = ?step.state.halted, "batch run over");
        let (tag, data) = step.state.event(what, now);
        m.bus.fire(event(tag, data));
    }
}
