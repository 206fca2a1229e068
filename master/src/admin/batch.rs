//! Master-driven batch runs (`crate::batch`): starting one, and Salt 3008's `batch.*`
//! runners.
//!
//! | `cmd` / runner | from | answer |
//! |---|---|---|
//! | `batch.start` | `salt --async --batch` (after its `test.ping`) | `{"jid", "minions"}`: the run's jid and the minions of its first start |
//! | `batch.status JID` | `salt-run` | Salt's summary of the run, `null` when there is none |
//! | `batch.list_active` | `salt-run` | the summaries of the runs still going, by jid |
//! | `batch.stop JID [kill=True]` | `salt-run` | `true` when the run was going (it starts nobody more; with `kill`, `saltutil.kill_job` goes to its running minions), else `false` |
//!
//! `batch.start` commits, in one entry, the run's first step and the `job_published`
//! of its first start, so the run exists exactly when its first minions are sent the
//! job. The leader's driver (`crate::daemon::batches`) takes it from there.

use serde_json::{json, Map, Value as J};

use halite_storage::batch_run::BatchRun;
use halite_storage::format::{JobPublished, Record};

use super::publish_options::PublishOptions;
use super::runner_args::RunnerArgs;
use super::{AdminView, Answer, Plan, Settled};
use crate::batch::{BatchSpec, RunState};
use crate::error::{Error, Result};
use crate::events::event;
use crate::wire::payload;

/// Most minions one run may hold.
pub const MAX_RUN_MINIONS: usize = 100_000;
/// Longest `timeout` of a run (a day).
pub const MAX_TIMEOUT_S: u64 = 86_400;

/// A batch request.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchCmd {
    Start(Box<Start>),
    Status { jid: String },
    ListActive,
    Stop { jid: String, kill: bool },
}

/// What `batch.start` carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    pub fun: String,
    pub arg: Vec<J>,
    pub kwarg: Map<String, J>,
    pub tgt: J,
    pub tgt_type: String,
    pub minions: Vec<String>,
    pub batch: String,
    pub batch_wait_ms: u64,
    pub failhard: bool,
    pub timeout_s: u64,
    pub user: String,
    pub opts: PublishOptions,
}

/// Salt's `get_batch_size` of a spec a run may have (`N` from 1, `N%`, `%N`): `None`
/// for one it may not.
pub fn batch_size(spec: &str, n: usize) -> Option<usize> {
    match spec.parse::<BatchSpec>() {
        Ok(BatchSpec::Count(0)) | Err(_) => None,
        Ok(s) => Some(s.size(n)),
    }
}

impl BatchCmd {
    pub fn parse(req: &J) -> Result<BatchCmd> {
        let s = |k: &str| req.get(k).and_then(J::as_str);
        if s("cmd") == Some("batch.start") {
            let minions: Vec<String> = match req.get("minions") {
                Some(J::Array(a)) if !a.is_empty() && a.len() <= MAX_RUN_MINIONS => a.iter().map(|m| m.as_str().and_then(|m| halite_storage::id::validate_minion_id(m).ok()).map(String::from).ok_or_else(|| Error::refused("batch.start: minions are minion ids"))).collect::<Result<_>>()?,
                _ => return Err(Error::refused(format!("batch.start: minions is a list of 1 to {MAX_RUN_MINIONS} ids"))),
            };
            let batch = s("batch").filter(|b| b.len() <= 24 && batch_size(b, 1).is_some()).ok_or_else(|| Error::refused("Invalid batch data sent: must be in the form of %10, 10% or 3"))?.to_string();
            let secs = |k: &str, max: f64| req.get(k).and_then(J::as_f64).filter(|v| v.is_finite() && *v >= 0.0).map(|v| v.min(max));
            return Ok(BatchCmd::Start(Box::new(Start {
                fun: s("fun").filter(|f| !f.is_empty() && f.len() <= 200).ok_or_else(|| Error::refused("batch.start: no fun"))?.to_string(),
                arg: req.get("arg").and_then(J::as_array).cloned().unwrap_or_default(),
                kwarg: req.get("kwarg").and_then(J::as_object).cloned().unwrap_or_default(),
                tgt: req.get("tgt").cloned().unwrap_or(J::String("*".into())),
                tgt_type: s("tgt_type").unwrap_or("glob").to_string(),
                minions,
                batch,
                batch_wait_ms: (secs("batch_wait", 3600.0).unwrap_or(0.0) * 1000.0) as u64,
                failhard: req.get("failhard").and_then(J::as_bool).unwrap_or(false),
                timeout_s: secs("timeout", MAX_TIMEOUT_S as f64).map_or(5, |t| t.ceil() as u64),
                user: s("user").filter(|u| !u.is_empty() && u.len() <= 256).unwrap_or("root").to_string(),
                opts: PublishOptions::parse(req)?,
            })));
        }
        let fun = s("fun").unwrap_or("");
        let jid = |b: &super::runner_args::Bound| b.text("jid").ok_or_else(|| Error::refused(format!("{fun} needs a jid")));
        Ok(match fun {
            "batch.status" => BatchCmd::Status { jid: jid(&RunnerArgs::from_req(req).bind(fun, &[("jid", None)], false)?)? },
            "batch.list_active" => {
                RunnerArgs::from_req(req).bind(fun, &[], false)?;
                BatchCmd::ListActive
            }
            "batch.stop" => {
                let b = RunnerArgs::from_req(req).bind(fun, &[("jid", None), ("kill", Some(J::Bool(false)))], false)?;
                BatchCmd::Stop { jid: jid(&b)?, kill: b.truthy("kill") }
            }
            other => return Err(Error::refused(format!("'{other}' is not available."))),
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        match self {
            BatchCmd::Start(s) => start(view, *s),
            BatchCmd::Status { jid } => {
                let found = view.state().batch_run(&jid)?.and_then(|r| RunState::decode(&r.state).map(|s| s.summary(r.stopped, view.now_ns())));
                Ok(Plan::answer(json!({ "return": found })))
            }
            BatchCmd::ListActive => {
                let now = view.now_ns();
                let mut out = Vec::new();
                for (_, r) in view.state().batch_runs()? {
                    match RunState::decode(&r.state) {
                        Some(s) if !r.stopped && !s.finished() => out.push(s.summary(false, now)),
                        _ => {}
                    }
                }
                Ok(Plan::answer(json!({ "return": out })))
            }
            BatchCmd::Stop { jid, kill } => stop(view, &jid, kill),
        }
    }
}

fn start(view: &dyn AdminView, s: Start) -> Result<Plan> {
    let Start { fun, arg, kwarg, tgt, tgt_type, minions, batch, batch_wait_ms, failhard, timeout_s, user, opts } = s;
    if opts.join.is_some() {
        return Err(Error::refused("batch.start makes its own jid"));
    }
    let size = batch_size(&batch, minions.len()).unwrap_or(1);
    let mut load = Map::new();
    load.insert("arg".into(), J::Array(crate::jobs::args_with_kwarg(arg, kwarg)));
    opts.fill(&mut load, view.config().raw.get("ext_job_cache").and_then(serde_yaml::Value::as_str));
    let jid = view.new_jid();
    let now = view.now_ns();
    let mut run = RunState::new(&jid, &fun, tgt, &tgt_type, &user, J::Object(load), &batch, size, failhard, batch_wait_ms, timeout_s, minions, now);
    let first = run.progress(&[], now);
    let start_load = run.start_load(&first);
    let step = Record::BatchRun(BatchRun { jid: jid.clone(), stop: false, expect: 0, state: run.encode(), time_ns: now });
    let publish = Record::JobPublished(JobPublished { jid: jid.clone(), load: payload::encode(&payload::from_json(&start_load)), minions: first.clone(), time_ns: now, started_by: None, joins: false });
    // The records' own checks refuse what is too large before anything is proposed.
    step.encode().map_err(|e| Error::refused(e.to_string()))?;
    tracing::info!(jid = %jid, fun = %fun, minions = run.total(), size, "starting a batch run");
    let (tag, data) = run.event("new", now);
    let job_new = crate::events::new_job_event(&start_load, &first, &[]);
    let answer = Answer::After(Box::new(move |v: &dyn AdminView| match v.state().batch_run(&jid)? {
        Some(r) if r.version >= 1 && RunState::decode(&r.state).is_some_and(|s| s.created_ns == now) => Ok(Settled { value: json!({ "jid": jid, "minions": first }), events: vec![event(tag, data), job_new], effects: vec![] }),
        _ => Err(Error::refused("the batch run was not stored (its jid is taken)")),
    }));
    Ok(Plan { answer, proposals: vec![vec![step, publish]], ..Default::default() })
}

fn stop(view: &dyn AdminView, jid: &str, kill: bool) -> Result<Plan> {
    let Some(stored) = view.state().batch_run(jid)? else {
        tracing::warn!(jid, "batch.stop: no batch run");
        return Ok(Plan::answer(json!({ "return": false })));
    };
    let run = RunState::decode(&stored.state).ok_or_else(|| Error::refused(format!("batch run {jid} does not decode")))?;
    if stored.stopped || run.finished() {
        tracing::info!(jid, "batch.stop: the run is over already");
        return Ok(Plan::answer(json!({ "return": false })));
    }
    let now = view.now_ns();
    let mut records = vec![Record::BatchRun(BatchRun { jid: jid.to_string(), stop: true, expect: 0, state: vec![], time_ns: now })];
    let mut events = Vec::new();
    let active: Vec<String> = run.slots.active.iter().map(|(id, _)| id.clone()).collect();
    if kill && !active.is_empty() {
        // Salt's `kill=True`: `saltutil.kill_job JID` to the running minions, a job of its own.
        let kill_jid = view.new_jid();
        let load = json!({ "fun": "saltutil.kill_job", "arg": [jid], "tgt": active, "tgt_type": "list", "jid": kill_jid, "ret": "", "user": run.user });
        records.push(Record::JobPublished(JobPublished { jid: kill_jid.clone(), load: payload::encode(&payload::from_json(&load)), minions: active.clone(), time_ns: now, started_by: None, joins: false }));
        events.push(crate::events::new_job_event(&load, &active, &[]));
    }
    events.push(event(format!("salt/batch/{jid}/stop"), json!({ "jid": jid, "reason": "stop" })));
    let mut plan = Plan::answer(json!({ "return": true }));
    plan.proposals = vec![records];
    plan.events = events;
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_are_salts() {
        assert_eq!(batch_size("10%", 3), Some(1));
        assert_eq!(batch_size("67%", 3), Some(2));
        assert_eq!(batch_size("%50", 4), Some(2));
        assert_eq!(batch_size("3", 2), Some(3));
        for bad in ["0", "x", "-1%", "", "nan%"] {
            assert_eq!(batch_size(bad, 3), None, "{bad}");
        }
    }

    #[test]
    fn a_start_is_checked_before_anything_is_proposed() {
        let ok = json!({"cmd": "batch.start", "fun": "test.ping", "minions": ["m1", "m2"], "batch": "50%", "batch_wait": 1.5, "timeout": 1e12, "failhard": true});
        let BatchCmd::Start(s) = BatchCmd::parse(&ok).unwrap() else { panic!() };
        assert_eq!((s.batch_wait_ms, s.timeout_s, s.failhard, s.user.as_str()), (1500, MAX_TIMEOUT_S, true, "root"));
        let with = |k: &str, v: J| {
            let mut r = ok.clone();
            r[k] = v;
            BatchCmd::parse(&r)
        };
        for (k, v) in [
            ("minions", json!([])),
            ("minions", json!(["../etc"])),
            ("minions", json!([1])),
            ("minions", json!(vec!["m"; MAX_RUN_MINIONS + 1])),
            ("batch", json!("0")),
            ("batch", json!("x".repeat(30))),
            ("fun", json!("")),
            ("jid", json!("../x")),
            ("metadata", json!("x".repeat(70_000))),
        ] {
            assert!(with(k, v.clone()).is_err(), "{k}: {v}");
        }
        assert!(BatchCmd::parse(&json!({"cmd": "runner", "fun": "batch.status"})).unwrap_err().to_string().contains("missing 1 required positional argument: 'jid'"));
        assert_eq!(BatchCmd::parse(&json!({"cmd": "runner", "fun": "batch.stop", "arg": ["1"], "kwarg": {"kill": true}})).unwrap(), BatchCmd::Stop { jid: "1".into(), kill: true });
    }
}
