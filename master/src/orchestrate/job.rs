//! The orchestration run as a job of its own, as Salt keeps a runner's run: a
//! `job_published` record when the run starts and a `job_return` when `salt-run` has
//! driven it to its end, both under the master's `<id>_master` name, so
//! `jobs.list_jobs`, `jobs.lookup_jid` and `jobs.list_job` show the run (function
//! `runner.state.orchestrate`) on every member of a cluster, beside its steps' jobs.
//!
//! The job names `<id>_master` in `started_by`: like a minion's own job, it is stored and
//! never published to minions. Events `salt/run/<jid>/new` and `salt/run/<jid>/ret` are
//! fired as Salt fires them for a runner.
//!
//! Request for the end: `{"cmd": "orchestrate.return", "jid", "return": {"data",
//! "outputter", "retcode"}}`; only for a run job with no return yet (else refused). The
//! return record is `first_only`: if two ends race (through two members), the log
//! decides, the first applied is stored, and the other caller is refused.

use serde_json::{json, Value as J};

use halite_storage::format::{JobPublished, JobReturn, Record};

use crate::admin::{AdminView, Answer, Plan, Settled};
use crate::error::{Error, Result};
use crate::events::event;
use crate::wire::payload;

/// The function a run job is recorded under.
pub const RUN_FUN: &str = "runner.state.orchestrate";

/// The record and the event that start a run's job: `fun_args` as Salt lists them.
pub fn start(view: &dyn AdminView, master_id: &str, fun_args: J) -> (String, Record, crate::events::Event) {
    let jid = view.new_jid();
    let load = json!({ "fun": RUN_FUN, "arg": fun_args, "tgt": master_id, "tgt_type": "glob", "jid": jid, "user": "root" });
    let rec = Record::JobPublished(JobPublished {
        jid: jid.clone(),
        load: payload::encode(&payload::from_json(&load)),
        minions: vec![master_id.to_string()],
        time_ns: view.now_ns(),
        started_by: Some(master_id.to_string()),
    });
    let ev = event(format!("salt/run/{jid}/new"), json!({ "fun": RUN_FUN, "fun_args": fun_args, "jid": jid, "user": "root" }));
    (jid, rec, ev)
}

/// `orchestrate.return`: the end of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct OrchReturn {
    pub jid: String,
    pub ret: J,
}

impl OrchReturn {
    pub fn parse(req: &J) -> Result<OrchReturn> {
        let jid = req.get("jid").and_then(J::as_str).ok_or_else(|| Error::refused("orchestrate.return needs a jid"))?;
        let ret = req.get("return").cloned().ok_or_else(|| Error::refused("orchestrate.return needs the run's return"))?;
        Ok(OrchReturn { jid: jid.to_string(), ret })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let sm = view.state();
        let job = sm.job(&self.jid)?.ok_or_else(|| Error::refused(format!("no job {}", self.jid)))?;
        let load = payload::decode(&job.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
        let Some(master_id) = job.started_by.clone().filter(|_| load["fun"] == RUN_FUN) else {
            return Err(Error::refused(format!("job {} is not an orchestration run", self.jid)));
        };
        if sm.job_return(&self.jid, &master_id)?.is_some() {
            // Known already here; a return that arrives between this read and the
            // commit is caught at apply (`first_only`) and below.
            return Err(Error::refused(format!("the run {} already has its return", self.jid)));
        }
        let retcode = self.ret.get("retcode").and_then(J::as_i64).unwrap_or(1);
        let ret_load = json!({
            "fun": RUN_FUN, "fun_args": load["arg"], "jid": self.jid, "id": master_id,
            "return": self.ret, "retcode": retcode, "success": retcode == 0, "user": "root",
        });
        let ours = JobReturn { jid: self.jid.clone(), id: master_id, load: payload::encode(&payload::from_json(&ret_load)), time_ns: view.now_ns(), first_only: true };
        let rec = Record::JobReturn(ours.clone());
        let jid = self.jid;
        let mut plan = Plan::answer(J::Null);
        plan.proposals = vec![vec![rec]];
        // Decided at apply: the run's return is ours only if our record is the one stored
        // (another `orchestrate.return` for the same run, through this member or another,
        // may have applied first; then ours changed nothing).
        plan.answer = Answer::After(Box::new(move |view: &dyn AdminView| {
            let stored = view.state().job_return(&ours.jid, &ours.id)?;
            if stored.as_ref() != Some(&ours) {
                return Err(Error::refused(format!("the run {jid} already has its return")));
            }
            Ok(Settled { value: json!({ "return": true }), events: vec![event(format!("salt/run/{jid}/ret"), ret_load)], effects: Vec::new() })
        }));
        Ok(plan)
    }
}
