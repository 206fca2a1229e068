//! Jobs: `publish` (what `salt` sends), `job.returns`, `job.list`, and the runners
//! `jobs.list_jobs` and `jobs.lookup_jid` in Salt's output shapes.
//!
//! A publish is a `job_published` record; once committed and applied, every master's
//! publisher (`daemon::publish`) sends it to the minions connected to it, whichever
//! master it was proposed on. The answer names the jid and the minions expected to
//! return, from the accepted keys and the grains they reported.

use serde_json::{json, Map, Value as J};

use halite_storage::format::{JobPublished, Record};
use halite_storage::state::StateMachine;

use super::{AdminView, Plan};
use crate::error::{Error, Result};
use crate::events::event;
use crate::wire::payload;

/// A jobs request.
#[derive(Debug, Clone, PartialEq)]
pub enum JobCmd {
    Publish { fun: String, tgt: J, tgt_type: String, arg: Vec<J>, kwarg: Map<String, J> },
    Returns { jid: String },
    List,
    ListJobs,
    LookupJid { jid: String },
}

impl JobCmd {
    pub fn parse(req: &J) -> Result<JobCmd> {
        let s = |k: &str| req.get(k).and_then(J::as_str);
        let jid = |what: &str| s("jid").map(String::from).ok_or_else(|| Error::refused(format!("{what} needs a jid")));
        Ok(match (s("cmd").unwrap_or(""), s("fun").unwrap_or("")) {
            ("publish", _) => JobCmd::Publish {
                fun: s("fun").ok_or_else(|| Error::refused("no fun"))?.to_string(),
                tgt: req.get("tgt").cloned().unwrap_or(J::String("*".into())),
                tgt_type: s("tgt_type").unwrap_or("glob").to_string(),
                arg: req.get("arg").and_then(J::as_array).cloned().unwrap_or_default(),
                kwarg: req.get("kwarg").and_then(J::as_object).cloned().unwrap_or_default(),
            },
            ("job.returns", _) => JobCmd::Returns { jid: jid("job.returns")? },
            ("job.list", _) => JobCmd::List,
            (_, "jobs.lookup_jid") => JobCmd::LookupJid { jid: jid("jobs.lookup_jid")? },
            _ => JobCmd::ListJobs,
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let sm = view.state();
        match self {
            JobCmd::Publish { fun, tgt, tgt_type, arg, kwarg } => publish(view, fun, tgt, tgt_type, arg, kwarg),
            JobCmd::Returns { jid } => {
                let mut out = Map::new();
                for r in sm.job_returns(&jid)? {
                    out.insert(r.id, payload::decode(&r.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null));
                }
                Ok(Plan::answer(json!({ "returns": out })))
            }
            JobCmd::List => {
                let mut out = Map::new();
                for j in sm.jobs()? {
                    let load = payload::decode(&j.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
                    out.insert(j.jid.clone(), json!({ "load": load, "minions": j.minions }));
                }
                Ok(Plan::answer(json!({ "jobs": out })))
            }
            JobCmd::ListJobs => Ok(Plan::answer(json!({ "return": list_jobs(sm)? }))),
            JobCmd::LookupJid { jid } => Ok(Plan::answer(json!({ "return": lookup_jid(sm, &jid)? }))),
        }
    }
}

fn publish(view: &dyn AdminView, fun: String, tgt: J, tgt_type: String, mut args: Vec<J>, kwarg: Map<String, J>) -> Result<Plan> {
    if !kwarg.is_empty() {
        let mut k = kwarg;
        k.insert("__kwarg__".into(), J::Bool(true));
        args.push(J::Object(k));
    }
    // Nodegroups are expanded here, so minions only ever see compound expressions.
    let (tgt, tgt_type) = match &tgt {
        J::String(t) => {
            let (t, ty) = crate::nodegroups::resolve(t, &tgt_type, &view.config().nodegroups).map_err(Error::refused)?;
            (J::String(t), ty)
        }
        _ => (tgt, tgt_type),
    };
    let (minions, missing) = crate::jobs::expected_minions(view.state(), &tgt, &tgt_type)?;
    if minions.is_empty() {
        return Err(Error::refused("No minions matched the target. No command was sent, no jid was assigned."));
    }
    let jid = view.new_jid();
    let load = json!({ "fun": fun, "arg": args, "tgt": tgt, "jid": jid, "ret": "", "tgt_type": tgt_type, "user": "root" });
    let rec = Record::JobPublished(JobPublished { jid: jid.clone(), load: payload::encode(&payload::from_json(&load)), minions: minions.clone(), time_ns: view.now_ns(), started_by: None });
    tracing::info!(jid = %jid, fun = %fun, minions = minions.len(), "publishing");
    let mut plan = Plan::answer(json!({ "jid": jid, "minions": minions, "missing": missing }));
    plan.proposals = vec![vec![rec]];
    plan.events = vec![event(
        format!("salt/job/{jid}/new"),
        json!({ "jid": jid, "tgt_type": tgt_type, "tgt": tgt, "user": "root", "fun": fun, "arg": load["arg"], "minions": minions, "missing": missing }),
    )];
    Ok(plan)
}

/// Salt's `jid_to_time`: `2026, Nov 22 03:51:19.123456`.
pub fn jid_to_time(jid: &str) -> String {
    const MONTHS: [&str; 13] = ["", "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    if jid.len() < 20 || !jid[..20].bytes().all(|b| b.is_ascii_digit()) {
        return String::new();
    }
    let month: usize = jid[4..6].parse().unwrap_or(0);
    format!("{}, {} {} {}:{}:{}.{}", &jid[..4], MONTHS.get(month).copied().unwrap_or(""), &jid[6..8], &jid[8..10], &jid[10..12], &jid[12..14], &jid[14..20])
}

/// Salt's `format_jid_instance` of a publish load.
fn job_instance(jid: &str, load: &J) -> J {
    let mut m = Map::new();
    m.insert("Function".into(), load.get("fun").cloned().unwrap_or(J::String("unknown-function".into())));
    m.insert("Arguments".into(), load.get("arg").cloned().unwrap_or(J::Array(vec![])));
    m.insert("Target".into(), load.get("tgt").cloned().unwrap_or(J::String("unknown-target".into())));
    m.insert("Target-type".into(), load.get("tgt_type").cloned().unwrap_or(J::String("list".into())));
    m.insert("User".into(), load.get("user").cloned().unwrap_or(J::String("root".into())));
    m.insert("StartTime".into(), J::String(jid_to_time(jid)));
    J::Object(m)
}

/// `jobs.list_jobs`: `{jid: {Function, Arguments, Target, Target-type, User, StartTime}}`.
pub fn list_jobs(sm: &StateMachine) -> Result<J> {
    let mut out = Map::new();
    for j in sm.jobs()? {
        let load = payload::decode(&j.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
        out.insert(j.jid.clone(), job_instance(&j.jid, &load));
    }
    Ok(J::Object(out))
}

/// `jobs.lookup_jid JID`: `{minion: return}`.
pub fn lookup_jid(sm: &StateMachine, jid: &str) -> Result<J> {
    let mut out = Map::new();
    for r in sm.job_returns(jid)? {
        let load = payload::decode(&r.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
        out.insert(r.id, load.get("return").cloned().unwrap_or(J::Null));
    }
    Ok(J::Object(out))
}
