//! Jobs: `publish` (what `salt` sends), `job.returns`, `job.list`, and the runners
//! `jobs.list_jobs`, `jobs.lookup_jid`, `jobs.list_job`, `jobs.print_job`,
//! `jobs.exit_success` and `jobs.active` in Salt's output shapes, read from the job
//! cache of the applied state (so every member of a cluster answers the same).
//!
//! `jobs.active` is asked as Salt asks it: `salt-run` publishes `saltutil.running` to
//! every minion, gathers the returns for the timeout, and hands them here as `running`
//! (`{minion: [job, ...]}`); this file shapes them and adds, from the job cache, which
//! minions have already returned each running job.
//!
//! A publish is a `job_published` record; once committed and applied, every master's
//! publisher (`daemon::publish`) sends it to the minions connected to it, whichever
//! master it was proposed on. The answer names the jid and the minions expected to
//! return, from the accepted keys and the grains they reported.

use serde_json::{json, Map, Value as J};

use halite_storage::format::{JobPublished, Record};
use halite_storage::state::StateRead;

use super::publish_options::PublishOptions;
use super::job_search::JobFilter;
use super::runner_args::RunnerArgs;
use super::{AdminView, Plan};
use crate::error::{Error, Result};
use crate::wire::payload;

/// A jobs request.
#[derive(Debug, Clone, PartialEq)]
pub enum JobCmd {
    /// `user`: who publishes, recorded in the job (the `user` a trusted caller such as
    /// salt-api names, else `root`; the admin socket sets a system user's own name).
    /// `acl_checked`: the user is neither root nor the master's user, so
    /// `publisher_acl` must allow the call (`crate::publisher_acl`).
    /// `opts`: the returners the minions also send the returns to, the job's metadata,
    /// whether minions announce that they took it.
    Publish { fun: String, tgt: J, tgt_type: String, arg: Vec<J>, kwarg: Map<String, J>, user: String, acl_checked: bool, opts: Box<PublishOptions> },
    Returns { jid: String },
    List,
    /// `jobs.list_jobs`: the jobs the filter passes (`outputter`: the runner's
    /// `outputter` argument, which the answer then names).
    ListJobs { filter: JobFilter, outputter: Option<String> },
    /// `jobs.list_jobs_filter COUNT`: the newest `count` jobs, oldest first, each with
    /// its `JID`; `saltutil.find_job` left out unless `filter_find_job` is false.
    ListJobsFilter { count: usize, filter_find_job: bool, outputter: Option<String> },
    /// `jobs.last_run`: `jobs.print_job` of the newest job the filter passes, else `false`.
    LastRun { filter: JobFilter, outputter: Option<String> },
    LookupJid { jid: String },
    /// `jobs.list_job JID`: the job and its returns.
    ListJob { jid: String },
    /// `jobs.print_job JID`: the same under the jid.
    PrintJob { jid: String },
    /// `jobs.exit_success JID`: `{minion: returned something true}`.
    ExitSuccess { jid: String },
    /// `jobs.active`, with what the minions answered to `saltutil.running`.
    Active { running: Map<String, J> },
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
                user: s("user").filter(|u| !u.is_empty() && u.len() <= 256).unwrap_or("root").to_string(),
                acl_checked: false,
                opts: Box::new(PublishOptions::parse(req)?),
            },
            ("job.returns", _) => JobCmd::Returns { jid: jid("job.returns")? },
            ("job.list", _) => JobCmd::List,
            // `salt-run` sends the jid as a field; salt-api's runner client as an argument.
            (_, f @ "jobs.lookup_jid") => match s("jid") {
                Some(j) => JobCmd::LookupJid { jid: j.to_string() },
                None => {
                    let params = [("jid", None), ("ext_source", Some(J::Null)), ("returned", Some(J::Bool(true))), ("missing", Some(J::Bool(false))), ("display_progress", Some(J::Bool(false)))];
                    let b = RunnerArgs::from_req(req).bind(f, &params, false)?;
                    JobCmd::LookupJid { jid: b.text("jid").ok_or_else(|| Error::refused(format!("{f} needs a jid")))? }
                }
            },
            (_, f @ ("jobs.list_job" | "jobs.print_job" | "jobs.exit_success")) => {
                let b = RunnerArgs::from_req(req).bind(f, &[("jid", None), ("ext_source", Some(J::Null))], false)?;
                let jid = b.text("jid").ok_or_else(|| Error::refused(format!("{f} needs a jid")))?;
                match f {
                    "jobs.list_job" => JobCmd::ListJob { jid },
                    "jobs.print_job" => JobCmd::PrintJob { jid },
                    _ => JobCmd::ExitSuccess { jid },
                }
            }
            (_, "jobs.active") => JobCmd::Active { running: req.get("running").and_then(J::as_object).cloned().unwrap_or_default() },
            (_, f @ "jobs.list_jobs") => {
                let n = Some(J::Null);
                let params = [("ext_source", n.clone()), ("outputter", n.clone()), ("search_metadata", n.clone()), ("search_function", n.clone()), ("search_target", n.clone()), ("start_time", n.clone()), ("end_time", n), ("display_progress", Some(J::Bool(false)))];
                let b = RunnerArgs::from_req(req).bind(f, &params, false)?;
                JobCmd::ListJobs { filter: JobFilter::from_bound(&b, "search_metadata", "search_function", "search_target")?, outputter: outputter(&b) }
            }
            (_, f @ "jobs.list_jobs_filter") => {
                let params = [("count", None), ("filter_find_job", Some(J::Bool(true))), ("ext_source", Some(J::Null)), ("outputter", Some(J::Null)), ("display_progress", Some(J::Bool(false)))];
                let b = RunnerArgs::from_req(req).bind(f, &params, false)?;
                let count = b.get("count").as_u64().or_else(|| b.text("count").and_then(|c| c.parse().ok())).ok_or_else(|| Error::refused(format!("{f}: count is a number of jobs")))?;
                JobCmd::ListJobsFilter { count: usize::try_from(count).unwrap_or(usize::MAX), filter_find_job: b.truthy("filter_find_job"), outputter: outputter(&b) }
            }
            (_, f @ "jobs.last_run") => {
                let n = Some(J::Null);
                let params = [("ext_source", n.clone()), ("outputter", n.clone()), ("metadata", n.clone()), ("function", n.clone()), ("target", n), ("display_progress", Some(J::Bool(false)))];
                let b = RunnerArgs::from_req(req).bind(f, &params, false)?;
                JobCmd::LastRun { filter: JobFilter::from_bound(&b, "metadata", "function", "target")?, outputter: outputter(&b) }
            }
            (cmd, fun) => return Err(Error::refused(format!("unknown jobs request {cmd:?} {fun:?}"))),
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let sm = view.state();
        match self {
            JobCmd::Publish { fun, tgt, tgt_type, arg, kwarg, user, acl_checked, opts } => publish(view, Publish { fun, tgt, tgt_type, args: arg, kwarg, user, acl_checked, opts: *opts }),
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
            other => Ok(Plan::answer(json!({ "return": other.runner_answer(sm, view.config().job_cache_store_endtime)? }))),
        }
    }

    /// The answer of a job runner (`jobs.*`), read from the job cache alone: what the
    /// master answers, and what `salt-run` reads from a stopped master's state.
    /// `endtime`: Salt's `job_cache_store_endtime`.
    pub fn runner_answer(self, sm: &dyn StateRead, endtime: bool) -> Result<J> {
        Ok(match self {
            JobCmd::ListJobs { filter, outputter } => named(outputter, list_jobs(sm, &filter)?),
            JobCmd::ListJobsFilter { count, filter_find_job, outputter } => named(outputter, list_jobs_filter(sm, count, filter_find_job)?),
            JobCmd::LastRun { filter, outputter } => {
                let newest = match list_jobs(sm, &filter)? {
                    J::Object(all) => all.keys().max().cloned(),
                    _ => None,
                };
                let data = match newest {
                    Some(jid) => print_job(sm, &jid, endtime)?,
                    None => J::Bool(false),
                };
                named(outputter, data)
            }
            JobCmd::LookupJid { jid } => lookup_jid(sm, &jid)?,
            JobCmd::ListJob { jid } => list_job(sm, &jid, endtime)?,
            JobCmd::PrintJob { jid } => print_job(sm, &jid, endtime)?,
            JobCmd::ExitSuccess { jid } => exit_success(sm, &jid)?,
            JobCmd::Active { running } => active(sm, &running)?,
            JobCmd::Publish { .. } | JobCmd::Returns { .. } | JobCmd::List => return Err(Error::refused("not a job runner")),
        })
    }
}

/// A publish request's parts.
struct Publish {
    fun: String,
    tgt: J,
    tgt_type: String,
    args: Vec<J>,
    kwarg: Map<String, J>,
    user: String,
    acl_checked: bool,
    opts: PublishOptions,
}

fn publish(view: &dyn AdminView, p: Publish) -> Result<Plan> {
    let Publish { fun, tgt, tgt_type, args, kwarg, user, acl_checked, opts } = p;
    let user = user.as_str();
    let raw = |k: &str| view.config().raw.get(k).and_then(|v| serde_json::to_value(v).ok()).unwrap_or(J::Null);
    let refused = || Error::Unauthorized;
    if crate::publisher_acl::blacklisted(&raw("publisher_acl_blacklist"), user, &fun) {
        tracing::warn!(user, fun = %fun, "publish refused by publisher_acl_blacklist");
        return Err(refused());
    }
    // Nodegroups are expanded here, so minions only ever see compound expressions.
    let (tgt, tgt_type) = match &tgt {
        J::String(t) => {
            let (t, ty) = crate::nodegroups::resolve(t, &tgt_type, &view.config().nodegroups)?;
            (J::String(t), ty)
        }
        _ => (tgt, tgt_type),
    };
    if acl_checked {
        let acl = raw("publisher_acl");
        let (minions, _) = crate::jobs::expected_minions(view.state(), &tgt, &tgt_type)?;
        let minions = minions.into_iter().collect();
        let mut targets = std::collections::BTreeMap::new();
        for t in crate::publisher_acl::targets_needed(&acl, user) {
            let (m, _) = crate::jobs::expected_minions(view.state(), &J::String(t.clone()), "compound")?;
            targets.insert(t, m.into_iter().collect());
        }
        if !crate::publisher_acl::allowed(&acl, user, &fun, &args, &kwarg, &minions, &targets) {
            tracing::warn!(user, fun = %fun, "publish refused by publisher_acl");
            return Err(refused());
        }
    }
    let args = crate::jobs::args_with_kwarg(args, kwarg);
    let unresolved = !view.config().minion_data_cache && crate::jobs::reads_minion_data(&tgt, &tgt_type);
    let (minions, missing) = if unresolved {
        // No grains or pillar kept: published to every accepted minion, which match it.
        crate::jobs::expected_minions(view.state(), &J::String("*".into()), "glob")?
    } else {
        crate::jobs::expected_minions(view.state(), &tgt, &tgt_type)?
    };
    if minions.is_empty() {
        return Err(Error::NoMinionsMatched);
    }
    // A batch run's next group joins the run's job: checked here for a clear refusal
    // (the apply adds the minions to whatever job it finds then).
    if let Some(j) = &opts.join {
        let job = view.state().job(j)?.ok_or_else(|| Error::refused(format!("no job {j} to join")))?;
        let stored = payload::decode(&job.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
        if job.started_by.is_some() || stored.get("fun").and_then(J::as_str) != Some(fun.as_str()) || stored.get("user").and_then(J::as_str).unwrap_or("root") != user {
            return Err(Error::refused(format!("job {j} is not a run of {fun} by {user} to join")));
        }
    }
    let jid = opts.join.clone().unwrap_or_else(|| view.new_jid());
    let mut load = json!({ "fun": fun, "arg": args, "tgt": tgt, "jid": jid, "ret": "", "tgt_type": tgt_type, "user": user });
    if let J::Object(m) = &mut load {
        opts.fill(m, view.config().raw.get("ext_job_cache").and_then(serde_yaml::Value::as_str));
    }
    let rec = Record::JobPublished(JobPublished { jid: jid.clone(), load: payload::encode(&payload::from_json(&load)), minions: minions.clone(), time_ns: view.now_ns(), started_by: None, joins: opts.join.is_some() });
    tracing::info!(jid = %jid, fun = %fun, minions = minions.len(), "publishing");
    // `unresolved`: the minions are every accepted one; those the target does not match
    // will not return, and are not missing (the CLI does not list them).
    let mut plan = Plan::answer(json!({ "jid": jid, "minions": minions, "missing": missing, "unresolved": unresolved }));
    plan.proposals = vec![vec![rec]];
    plan.events = vec![crate::events::new_job_event(&load, &minions, &missing)];
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
    // `metadata` of the load, of its `kwargs`, or a `metadata=` keyword argument.
    let kwarg_metadata = load.get("arg").and_then(J::as_array).and_then(|a| a.iter().find_map(|x| (x.get("__kwarg__") == Some(&J::Bool(true))).then(|| x.get("metadata")).flatten()));
    if let Some(md) = load.get("metadata").or_else(|| load.get("kwargs").and_then(|k| k.get("metadata"))).or(kwarg_metadata) {
        m.insert("Metadata".into(), md.clone());
    }
    m.insert("StartTime".into(), J::String(jid_to_time(jid)));
    J::Object(m)
}

/// Salt's `_format_job_instance` of a job cache load (with `Minions`, as the cache's
/// `get_load` adds them): an unknown job is `{"Error": ...}`.
fn job_cache_instance(jid: &str, load: Option<&J>, minions: Option<&[String]>) -> Map<String, J> {
    let mut m = Map::new();
    let Some(load) = load.filter(|l| l.as_object().is_some_and(|o| !o.is_empty())) else {
        m.insert("Error".into(), J::String("Cannot contact returner or no job with this jid".into()));
        m.insert("StartTime".into(), J::String(jid_to_time(jid)));
        return m;
    };
    if let J::Object(base) = job_instance(jid, load) {
        m = base;
    }
    let start = m.remove("StartTime").unwrap_or(J::Null);
    if let Some(ids) = minions {
        let mut ids = ids.to_vec();
        ids.sort();
        m.insert("Minions".into(), json!(ids));
    }
    m.insert("StartTime".into(), start);
    m
}

/// The job cache's `get_jid`: `{minion: {"return", "retcode"?, "success"?, "out"?}}`.
pub fn get_jid(sm: &dyn StateRead, jid: &str) -> Result<Map<String, J>> {
    let mut out = Map::new();
    for r in sm.job_returns(jid)? {
        let load = payload::decode(&r.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
        let mut one = Map::new();
        one.insert("return".into(), load.get("return").cloned().unwrap_or(J::Null));
        for k in ["retcode", "success", "out"] {
            if let Some(v) = load.get(k) {
                one.insert(k.into(), v.clone());
            }
        }
        out.insert(r.id, J::Object(one));
    }
    Ok(out)
}

/// `jobs.list_job JID`: `{"jid", Function, Arguments, Target, Target-type, User,
/// Minions, StartTime, Result: get_jid}`, and with `endtime` (Salt's
/// `job_cache_store_endtime`) `EndTime`: the time of the last stored return, in
/// `StartTime`'s format (absent while nothing has returned, as in Salt).
pub fn list_job(sm: &dyn StateRead, jid: &str, endtime: bool) -> Result<J> {
    let job = sm.job(jid)?;
    let load = job.as_ref().map(|j| payload::decode(&j.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null));
    let mut out = Map::new();
    out.insert("jid".into(), J::String(jid.to_string()));
    out.extend(job_cache_instance(jid, load.as_ref(), job.as_ref().map(|j| j.minions.as_slice())));
    out.insert("Result".into(), J::Object(get_jid(sm, jid)?));
    if endtime {
        if let Some(last) = sm.job_returns(jid)?.iter().map(|r| r.time_ns).max() {
            out.insert("EndTime".into(), J::String(jid_to_time(&crate::jobs::jid_at(last / 1000))));
        }
    }
    Ok(J::Object(out))
}

/// `jobs.exit_success JID`: each expected minion is true when its return is truthy
/// (Python's truth: not null/false/0/empty), false when absent or falsy; a minion that
/// returned without being expected is listed when its return is truthy.
pub fn exit_success(sm: &dyn StateRead, jid: &str) -> Result<J> {
    let minions = sm.job(jid)?.map(|j| j.minions).unwrap_or_default();
    let result = get_jid(sm, jid)?;
    let truthy = |m: &str| result.get(m).and_then(|r| r.get("return")).is_some_and(py_truthy);
    let mut sorted = minions;
    sorted.sort();
    let mut out = Map::new();
    for m in &sorted {
        out.insert(m.clone(), J::Bool(truthy(m)));
    }
    for m in result.keys() {
        if truthy(m) {
            out.insert(m.clone(), J::Bool(true));
        }
    }
    Ok(J::Object(out))
}

/// Python's truth value of a decoded value.
pub fn py_truthy(v: &J) -> bool {
    match v {
        J::Null => false,
        J::Bool(b) => *b,
        J::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        J::String(s) => !s.is_empty(),
        J::Array(a) => !a.is_empty(),
        J::Object(o) => !o.is_empty(),
    }
}

/// `jobs.active`: from each minion's `saltutil.running` list, `{jid: {Function,
/// Arguments, Target, Target-type, User, StartTime, Running: [{minion: pid}], Returned:
/// [minions whose return is in the job cache]}}`. Minions are taken in id order; an
/// answer that is not a list (an error) is skipped, as Salt skips it.
pub fn active(sm: &dyn StateRead, running: &Map<String, J>) -> Result<J> {
    let mut ids: Vec<&String> = running.keys().collect();
    ids.sort();
    let mut out = Map::new();
    for id in ids {
        let Some(jobs) = running[id].as_array() else { continue };
        for job in jobs {
            let Some(jid) = job.get("jid").map(|j| j.as_str().map(String::from).unwrap_or_else(|| j.to_string())) else { continue };
            let pid = job.get("pid").cloned().unwrap_or(J::Null);
            let entry = out.entry(jid.clone()).or_insert_with(|| {
                let mut e = match job_instance(&jid, job) {
                    J::Object(m) => m,
                    _ => Map::new(),
                };
                e.insert("Running".into(), J::Array(vec![]));
                e.insert("Returned".into(), J::Array(vec![]));
                J::Object(e)
            });
            if let Some(J::Array(r)) = entry.get_mut("Running") {
                r.push(json!({ id.as_str(): pid }));
            }
        }
    }
    for (jid, e) in out.iter_mut() {
        let returned: Vec<J> = sm.job_returns(jid)?.into_iter().map(|r| J::String(r.id)).collect();
        e["Returned"] = J::Array(returned);
    }
    Ok(J::Object(out))
}

/// `jobs.list_jobs`: `{jid: {Function, Arguments, Target, Target-type, User,
/// Metadata (when the job has some), StartTime}}` of the jobs `filter` passes.
pub fn list_jobs(sm: &dyn StateRead, filter: &JobFilter) -> Result<J> {
    let mut out = Map::new();
    for j in sm.jobs()? {
        let load = payload::decode(&j.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
        if let J::Object(job) = job_instance(&j.jid, &load) {
            if filter.matches(&j.jid, &job) {
                out.insert(j.jid.clone(), J::Object(job));
            }
        }
    }
    Ok(J::Object(out))
}

/// `jobs.list_jobs_filter`: the newest `count` jobs, oldest first, each as
/// `jobs.list_jobs` shows it with its `JID` (Salt's `format_jid_instance_ext`).
pub fn list_jobs_filter(sm: &dyn StateRead, count: usize, filter_find_job: bool) -> Result<J> {
    let mut jobs: Vec<(String, Map<String, J>)> = Vec::new();
    for j in sm.jobs()? {
        let load = payload::decode(&j.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
        let J::Object(mut job) = job_instance(&j.jid, &load) else { continue };
        if filter_find_job && job.get("Function").and_then(J::as_str) == Some("saltutil.find_job") {
            continue;
        }
        job.insert("JID".into(), J::String(j.jid.clone()));
        jobs.push((j.jid, job));
    }
    jobs.sort_by(|a, b| a.0.cmp(&b.0));
    let skip = jobs.len().saturating_sub(count);
    Ok(J::Array(jobs.into_iter().skip(skip).map(|(_, j)| J::Object(j)).collect()))
}

/// `jobs.print_job JID`: `{jid: list_job without its "jid"}`.
pub fn print_job(sm: &dyn StateRead, jid: &str, endtime: bool) -> Result<J> {
    let mut job = list_job(sm, jid, endtime)?;
    if let J::Object(m) = &mut job {
        m.remove("jid");
    }
    let mut out = Map::new();
    out.insert(jid.to_string(), job);
    Ok(J::Object(out))
}

/// A runner's `outputter` argument, when given.
fn outputter(b: &super::runner_args::Bound) -> Option<String> {
    b.text("outputter").filter(|o| !o.is_empty())
}

/// A runner's answer, named with the `outputter` its caller asked for (as Salt's job
/// runners answer `{"outputter", "data"}`).
fn named(outputter: Option<String>, data: J) -> J {
    match outputter {
        Some(o) => json!({ "outputter": o, "data": data }),
        None => data,
    }
}

/// `jobs.lookup_jid JID`: `{minion: return}`, or `{"outputter", "data"}` when the
/// returns name their outputter.
pub fn lookup_jid(sm: &dyn StateRead, jid: &str) -> Result<J> {
    let mut out = Map::new();
    let mut outputter = None;
    for r in sm.job_returns(jid)? {
        let load = payload::decode(&r.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
        if out.is_empty() {
            outputter = load.get("out").and_then(J::as_str).filter(|o| !o.is_empty()).map(String::from);
        }
        out.insert(r.id, load.get("return").cloned().unwrap_or(J::Null));
    }
    // As Salt's runner: the outputter the (first) return names travels with the data,
    // so a state run's lookup prints as a highstate.
    Ok(match outputter {
        Some(o) => json!({ "outputter": o, "data": out }),
        None => J::Object(out),
    })
}
