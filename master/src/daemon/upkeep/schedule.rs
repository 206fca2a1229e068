//! The master's `schedule` on a timer (`crate::schedule` reads the option and says when
//! each job fires). At each firing time every member proposes a `reaction` record named
//! by the firing ([`crate::schedule::firing_id`]); the member whose record applied runs
//! the job's runner, kept as a job of its own (`run.start`, the runner, `run.return`, as
//! salt-api keeps a runner's run). A member whose clock is late for a firing the others
//! already claimed proposes in vain: the state machine skips its record.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use halite_storage::format::{now_ns, Reaction, Record};
use serde_json::{json, Value as J};

use crate::admin::Command;
use crate::daemon::admin::execute;
use crate::daemon::eventing::reactor::{claim_first, Claim};
use crate::daemon::live::Master;
use crate::schedule::{firing_id, Job, Schedule};

/// The user a scheduled run is recorded under: the master's own, as Salt records it.
fn run_user() -> String {
    crate::config_keys::current_user().unwrap_or_else(|| "root".into())
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// Fires the schedule's jobs forever (returns at once when there are none).
pub async fn run(m: Arc<Master>, schedule: Schedule) {
    let jobs: Vec<Arc<Job>> = schedule.jobs.into_iter().filter(|j| j.enabled).map(Arc::new).collect();
    if jobs.is_empty() {
        return;
    }
    let start = now_s();
    tracing::info!(jobs = jobs.len(), "schedule started");
    for j in jobs.iter().filter(|j| j.run_on_start) {
        spawn_fire(&m, j, j.start_slot(start));
    }
    let mut next: Vec<Option<u64>> = jobs.iter().map(|j| j.next_after(start)).collect();
    loop {
        let Some(due) = next.iter().flatten().min().copied() else { return };
        let now = now_s();
        if now < due {
            // A timer, re-checked against the wall clock when it ends (the clock may
            // have been set meanwhile).
            tokio::time::sleep(Duration::from_secs(due - now).min(Duration::from_secs(60))).await;
            continue;
        }
        for (j, at) in jobs.iter().zip(next.iter_mut()) {
            if let Some(t) = *at {
                if t <= now {
                    spawn_fire(&m, j, t);
                    *at = j.next_after(now.max(t));
                }
            }
        }
    }
}

fn spawn_fire(m: &Arc<Master>, job: &Arc<Job>, at: u64) {
    let (m, job) = (m.clone(), job.clone());
    tokio::task::spawn_blocking(move || fire(&m, &job, at));
}

/// One firing: claimed in the log, run by the member whose claim applied.
fn fire(m: &Master, job: &Job, at: u64) {
    let id = firing_id(&job.name, at);
    let member = m.cfg.node_id();
    let described = json!([{ "name": job.name, "fun": format!("runner.{}", job.function), "args": job.request() }]);
    let claim = Record::Reaction(Reaction { id: id.clone(), member: member.clone(), tag: format!("salt/scheduler/{}", job.name), reactions: described.to_string().into_bytes(), time_ns: now_ns() });
    match claim_first(m, &[claim], &id, &member) {
        Claim::Ours => {}
        Claim::Theirs => {
            tracing::debug!(job = %job.name, at, "schedule: another member runs this firing");
            return;
        }
        Claim::Failed(e) => {
            tracing::warn!(job = %job.name, at, "schedule: the firing was not claimed: {e}");
            return;
        }
    }
    let mut fun_args: Vec<J> = job.args.clone();
    if !job.kwargs.is_empty() {
        fun_args.push(J::Object(job.kwargs.clone()));
    }
    let started = ask(m, json!({ "cmd": "run.start", "client": "runner", "fun": job.function, "fun_args": fun_args, "user": run_user() }));
    let Some(jid) = started.get("jid").and_then(J::as_str).map(str::to_string) else {
        tracing::error!(job = %job.name, "schedule: the run's job was not recorded: {started}");
        return;
    };
    let out = ask(m, job.request());
    let (ret, success) = match out.get("error") {
        Some(e) => (e.clone(), false),
        None => (out.get("return").cloned().unwrap_or(J::Null), true),
    };
    tracing::info!(job = %job.name, jid = %jid, success, "schedule: ran {}", job.function);
    let end = ask(m, json!({ "cmd": "run.return", "jid": jid, "return": ret, "success": success }));
    if let Some(e) = end.get("error") {
        tracing::error!(job = %job.name, jid = %jid, "schedule: the run's end was not kept: {e}");
    }
}

/// One admin request, answered and carried out here.
fn ask(m: &Master, req: J) -> J {
    match Command::parse(&req) {
        Ok(c) => execute(m, c),
        Err(e) => crate::admin::refusal(&e),
    }
}
