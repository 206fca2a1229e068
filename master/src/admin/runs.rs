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
//!
//! Any other runner or wheel function run in the background (salt-api's `runner_async`
//! and `wheel_async`) is kept the same way ([`RunStart`], [`RunReturn`]): `run.start`
//! records the job (function `runner.<fun>` or `wheel.<fun>`) and fires
//! `salt/run/<jid>/new` (`salt/wheel/<jid>/new`); `run.return` stores the run's event
//! data (`fun`, `fun_args`, `jid`, `user`, `return`, `success`) as its return, as Salt's
//! `store_job` keeps a runner's, so `jobs.lookup_jid` answers `{<id>_master: data}`, and
//! fires `salt/run/<jid>/ret` (`salt/wheel/<jid>/ret`) with it.

use serde_json::{json, Value as J};

use halite_storage::format::{JobPublished, JobReturn, Record};

use super::{AdminView, Answer, Plan, Settled};
use crate::error::{Error, Result};
use crate::events::event;
use crate::wire::payload;

/// The function a run job is recorded under.
pub const RUN_FUN: &str = "runner.state.orchestrate";

/// The name a master's own jobs are kept under: its `id`, ending in `_master` as Salt's
/// master ids do.
pub fn master_id(view: &dyn AdminView) -> String {
    let id = &view.config().id;
    if id.ends_with("_master") {
        id.clone()
    } else {
        format!("{id}_master")
    }
}

/// The record and the event that start a run's job: `fun_args` as Salt lists them, run
/// by `user`.
pub fn start(view: &dyn AdminView, master_id: &str, fun_args: J, user: &str) -> (String, Record, crate::events::Event) {
    start_as(view, master_id, "salt/run", RUN_FUN, fun_args, user)
}

/// A request's `user` (who runs it; `root` when unset), checked as a token's user name is.
pub fn user_of(req: &J, verb: &str) -> Result<String> {
    let user = match req.get("user") {
        None | Some(J::Null) => "root",
        Some(J::String(u)) => u.as_str(),
        Some(_) => return Err(Error::refused(format!("{verb}: not a user name"))),
    };
    if user.is_empty() || user.len() > halite_storage::eauth_token::MAX_USER_LEN || user.contains('\0') {
        return Err(Error::refused(format!("{verb}: not a user name")));
    }
    Ok(user.to_string())
}

/// The record and the `<prefix>/<jid>/new` event that start the job of `fun` (with its
/// client: `runner.jobs.list_jobs`), run by `user`.
fn start_as(view: &dyn AdminView, master_id: &str, prefix: &str, fun: &str, fun_args: J, user: &str) -> (String, Record, crate::events::Event) {
    let jid = view.new_jid();
    let load = json!({ "fun": fun, "arg": fun_args, "tgt": master_id, "tgt_type": "glob", "jid": jid, "user": user });
    let rec = Record::JobPublished(JobPublished {
        jid: jid.clone(),
        load: payload::encode(&payload::from_json(&load)),
        minions: vec![master_id.to_string()],
        time_ns: view.now_ns(),
        started_by: Some(master_id.to_string()),
        joins: false,
    });
    let ev = event(format!("{prefix}/{jid}/new"), json!({ "fun": fun, "fun_args": fun_args, "jid": jid, "user": user }));
    (jid, rec, ev)
}

/// Longest function name `run.start` takes.
pub const MAX_FUN_LEN: usize = 200;

/// The clients whose runs `run.start` keeps, with their event tag prefixes.
const RUN_CLIENTS: [(&str, &str); 2] = [("runner", "salt/run"), ("wheel", "salt/wheel")];

/// `run.start`: `{"client": "runner"|"wheel", "fun", "fun_args": [...], "user"}`, answered
/// `{"jid", "tag"}` (`salt/run/<jid>` or `salt/wheel/<jid>`) once the job is committed.
#[derive(Debug, Clone, PartialEq)]
pub struct RunStart {
    pub client: String,
    pub fun: String,
    pub fun_args: J,
    pub user: String,
}

impl RunStart {
    pub fn parse(req: &J) -> Result<RunStart> {
        let client = req.get("client").and_then(J::as_str).filter(|c| RUN_CLIENTS.iter().any(|(k, _)| k == c)).ok_or_else(|| Error::refused("run.start: client must be runner or wheel"))?;
        let fun = req.get("fun").and_then(J::as_str).unwrap_or("");
        let ok = fun.len() <= MAX_FUN_LEN && fun.split('.').count() == 2 && fun.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        if !ok {
            return Err(Error::refused(format!("run.start: {fun:?} is not a function name (module.function)")));
        }
        if client == "runner" && crate::orchestrate::NAMES.contains(&fun) {
            // An orchestration's job is the one its render records (`runner` `state.orchestrate`).
            return Err(Error::refused(format!("run.start: {fun} runs are started by rendering them (the runner verb)")));
        }
        let fun_args = match req.get("fun_args") {
            None | Some(J::Null) => J::Array(vec![]),
            Some(a @ J::Array(_)) => a.clone(),
            Some(_) => return Err(Error::refused("run.start: fun_args must be a list")),
        };
        let user = user_of(req, "run.start")?;
        Ok(RunStart { client: client.to_string(), fun: fun.to_string(), fun_args, user })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let prefix = RUN_CLIENTS.iter().find(|(k, _)| *k == self.client).map(|(_, p)| *p).unwrap_or("salt/run");
        let (jid, rec, ev) = start_as(view, &master_id(view), prefix, &format!("{}.{}", self.client, self.fun), self.fun_args, &self.user);
        let mut plan = Plan::answer(json!({ "jid": jid, "tag": format!("{prefix}/{jid}") }));
        plan.proposals = vec![vec![rec]];
        plan.events = vec![ev];
        Ok(plan)
    }
}

/// `run.return`: `{"jid", "return": RETURN, "success": BOOL}`, the end of a job
/// `run.start` began (once: a second end is refused, decided at apply as for
/// `orchestrate.return`). Answered `{"return": true}`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReturn {
    pub jid: String,
    pub ret: J,
    pub success: bool,
}

impl RunReturn {
    pub fn parse(req: &J) -> Result<RunReturn> {
        let (jid, ret) = jid_and_return(req, "run.return")?;
        let success = req.get("success").and_then(J::as_bool).ok_or_else(|| Error::refused("run.return needs success (true or false)"))?;
        Ok(RunReturn { jid, ret, success })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let sm = view.state();
        let job = sm.job(&self.jid)?.ok_or_else(|| Error::refused(format!("no job {}", self.jid)))?;
        let load = payload::decode(&job.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
        let fun = load["fun"].as_str().unwrap_or("").to_string();
        let prefix = RUN_CLIENTS.iter().find(|(k, _)| fun.strip_prefix(k).is_some_and(|f| f.starts_with('.'))).map(|(_, p)| *p);
        let (Some(master_id), Some(prefix)) = (job.started_by.clone(), prefix.filter(|_| fun != RUN_FUN)) else {
            return Err(Error::refused(format!("job {} is not a runner's or a wheel's run", self.jid)));
        };
        if sm.job_return(&self.jid, &master_id)?.is_some() {
            return Err(Error::refused(format!("the run {} already has its return", self.jid)));
        }
        let micros = view.now_ns() / 1000;
        // The event's data, as Salt's client fires it and its store_job keeps it.
        let data = json!({
            "fun": fun, "fun_args": load["arg"], "jid": self.jid, "user": load["user"],
            "_stamp": crate::events::stamp_at(micros), "return": self.ret, "success": self.success,
        });
        let retcode = if self.success { 0 } else { 1 };
        let ret_load = json!({
            "fun": fun, "fun_args": load["arg"], "jid": self.jid, "id": master_id,
            "return": data, "retcode": retcode, "success": self.success, "user": load["user"],
        });
        let tag = format!("{prefix}/{}/ret", self.jid);
        Ok(first_return(view, self.jid, master_id, &ret_load, event(tag, data)))
    }
}

/// The plan that stores `ret_load` as the run's one return (a `first_only` record) and,
/// once applied, answers `{"return": true}` and fires `ret` — or, when another end of
/// the run applied first (through this member or another), refuses: decided at apply.
fn first_return(view: &dyn AdminView, jid: String, master_id: String, ret_load: &J, ret: crate::events::Event) -> Plan {
    let ours = JobReturn { jid, id: master_id, load: payload::encode(&payload::from_json(ret_load)), time_ns: view.now_ns(), first_only: true };
    let mut plan = Plan::answer(J::Null);
    plan.proposals = vec![vec![Record::JobReturn(ours.clone())]];
    plan.answer = Answer::After(Box::new(move |view: &dyn AdminView| {
        let stored = view.state().job_return(&ours.jid, &ours.id)?;
        if stored.as_ref() != Some(&ours) {
            return Err(Error::refused(format!("the run {} already has its return", ours.jid)));
        }
        Ok(Settled { value: json!({ "return": true }), events: vec![ret], effects: Vec::new() })
    }));
    plan
}

/// The `jid` and `return` an end of a run names (`verb` says which, in the refusal).
fn jid_and_return(req: &J, verb: &str) -> Result<(String, J)> {
    let jid = req.get("jid").and_then(J::as_str).ok_or_else(|| Error::refused(format!("{verb} needs a jid")))?;
    let ret = req.get("return").cloned().ok_or_else(|| Error::refused(format!("{verb} needs the run's return")))?;
    Ok((jid.to_string(), ret))
}

/// `orchestrate.return`: the end of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct OrchReturn {
    pub jid: String,
    pub ret: J,
}

impl OrchReturn {
    pub fn parse(req: &J) -> Result<OrchReturn> {
        let (jid, ret) = jid_and_return(req, "orchestrate.return")?;
        Ok(OrchReturn { jid, ret })
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
            "return": self.ret, "retcode": retcode, "success": retcode == 0, "user": load.get("user").cloned().unwrap_or(json!("root")),
        });
        let ret = event(format!("salt/run/{}/ret", self.jid), ret_load.clone());
        Ok(first_return(view, self.jid, master_id, &ret_load, ret))
    }
}
