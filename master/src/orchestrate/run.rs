//! Driving an orchestration: each step, in order (requisites first), through the admin
//! verbs any client uses, and its result judged by Salt's rules (`salt.function`,
//! `salt.state`, `salt.runner`, `salt.wheel` of Salt's `saltmod`).
//!
//! `salt.function` and `salt.state` publish a job (`publish`, a `job_published` record,
//! so each step is an ordinary job in the job cache) and wait for its returns
//! (`job.returns`) until every targeted minion returned or the step's `timeout` passed.
//! A minion that did not return fails the step, unless it is in `fail_minions`; so does
//! one whose return failed: for a function a non-zero `retcode` or a return of `False`,
//! for a state any state whose `result` is `False` (or a return that is not states).
//!
//! A step whose `require`d step failed does not run ("One or more requisite failed");
//! a step with `onfail` runs only when one of those steps failed. A requisite naming no
//! step, or a loop of requisites, fails the step.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value as J};

use super::sls::{Kind, Step};

/// What the driver calls: the admin socket (`crate::admin::client::AdminClient`, which
/// implements it).
pub trait Caller {
    /// Sends one admin request; `Err` is the master's refusal (in its words:
    /// `Error::Refused`, or a kind a caller acts on such as `Error::NoMinionsMatched`)
    /// or why it could not be asked.
    fn call(&mut self, req: &J) -> crate::Result<J>;
    /// Waits a little before asking again for returns.
    fn pause(&mut self) {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One orchestration run.
pub struct Run<'a> {
    pub sls: String,
    pub steps: Vec<Step>,
    /// Used when a step gives no `timeout`.
    pub timeout: Duration,
    pub caller: &'a mut dyn Caller,
}

#[derive(PartialEq)]
enum Mark {
    Running,
    Done,
}

impl Run<'_> {
    /// Runs every step; returns the results by tag, in Salt's state-return shape, and
    /// whether every step succeeded.
    pub fn run(mut self) -> (Map<String, J>, bool) {
        let mut results: BTreeMap<usize, J> = BTreeMap::new();
        let mut marks: BTreeMap<usize, Mark> = BTreeMap::new();
        let mut run_num = 0usize;
        for i in 0..self.steps.len() {
            self.visit(i, &mut marks, &mut results, &mut run_num);
        }
        let ok = results.values().all(|r| r["result"] != J::Bool(false));
        // In run order, as Salt's highstate output lists them.
        let mut ordered: Vec<(usize, J)> = results.into_iter().collect();
        ordered.sort_by_key(|(_, r)| r["__run_num__"].as_u64().unwrap_or(0));
        let out = ordered
            .into_iter()
            .map(|(i, r)| (self.steps[i].tag(), r))
            .collect();
        (out, ok)
    }

    /// The step a requisite names: by ID, else by name.
    fn find(&self, r: &str) -> Option<usize> {
        self.steps
            .iter()
            .position(|s| s.id == r)
            .or_else(|| self.steps.iter().position(|s| s.name == r))
    }

    fn visit(
        &mut self,
        i: usize,
        marks: &mut BTreeMap<usize, Mark>,
        results: &mut BTreeMap<usize, J>,
        run_num: &mut usize,
    ) {
        if marks.contains_key(&i) {
            return;
        }
        marks.insert(i, Mark::Running);
        let step = self.steps[i].clone();
        let mut missing = Vec::new();
        let mut cycle = false;
        for r in step.require.iter().chain(&step.onfail) {
            match self.find(r) {
                None => missing.push(r.clone()),
                Some(j) if marks.get(&j) == Some(&Mark::Running) => cycle = true,
                Some(j) => self.visit(j, marks, results, run_num),
            }
        }
        let failed = |names: &[String], results: &BTreeMap<usize, J>| -> Vec<String> {
            names
                .iter()
                .filter_map(|r| self.find(r))
                .filter(|j| {
                    results
                        .get(j)
                        .is_some_and(|x| x["result"] == J::Bool(false))
                })
                .map(|j| format!("{}.{}", self.sls, self.steps[j].id))
                .collect()
        };
        let started = now_time();
        let t0 = Instant::now();
        let mut ret = if cycle {
            not_run(&step, false, "Recursive requisite found".into())
        } else if !missing.is_empty() {
            not_run(
                &step,
                false,
                format!(
                    "The following requisites were not found: {}",
                    missing.join(", ")
                ),
            )
        } else if !failed(&step.require, results).is_empty() {
            let mut f = failed(&step.require, results);
            f.dedup();
            not_run(
                &step,
                false,
                format!("One or more requisite failed: {}", f.join(", ")),
            )
        } else if !step.onfail.is_empty() && failed(&step.onfail, results).is_empty() {
            not_run(
                &step,
                true,
                "State was not run because onfail req did not change".into(),
            )
        } else {
            self.execute(&step)
        };
        let m = ret.as_object_mut().expect("a result is a map");
        m.insert("__id__".into(), json!(step.id));
        m.insert("__sls__".into(), json!(self.sls));
        m.insert("__run_num__".into(), json!(*run_num));
        m.insert("start_time".into(), json!(started));
        m.insert(
            "duration".into(),
            json!((t0.elapsed().as_secs_f64() * 1e6).round() / 1e3),
        );
        *run_num += 1;
        results.insert(i, ret);
        marks.insert(i, Mark::Done);
    }

    fn execute(&mut self, step: &Step) -> J {
        match step.kind {
            Kind::Function => self.function(step),
            Kind::State => self.state(step),
            Kind::Runner => self.runner(step),
            Kind::Wheel => self.wheel(step),
        }
    }

    /// Publishes a job and gathers its returns: `(jid, {minion: return load or null})`,
    /// or the refusal (no minion matched).
    fn job(
        &mut self,
        step: &Step,
        fun: &str,
        arg: Vec<J>,
        kwarg: Map<String, J>,
    ) -> Result<(String, BTreeMap<String, J>), String> {
        let tgt = step
            .args
            .get("tgt")
            .cloned()
            .unwrap_or(J::String("*".into()));
        let tgt_type = step
            .args
            .get("tgt_type")
            .or_else(|| step.args.get("expr_form"))
            .and_then(J::as_str)
            .unwrap_or("glob");
        let p = self.caller.call(&json!({ "cmd": "publish", "tgt": tgt, "tgt_type": tgt_type, "fun": fun, "arg": arg, "kwarg": kwarg })).map_err(|e| e.to_string())?;
        let jid = p["jid"].as_str().unwrap_or_default().to_string();
        let expected: Vec<String> = p["minions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(String::from))
            .collect();
        let timeout = step
            .args
            .get("timeout")
            .and_then(J::as_u64)
            .map(Duration::from_secs)
            .unwrap_or(self.timeout);
        let start = Instant::now();
        let mut returned = Map::new();
        loop {
            if let Ok(r) = self
                .caller
                .call(&json!({ "cmd": "job.returns", "jid": jid }))
            {
                returned = r["returns"].as_object().cloned().unwrap_or_default();
            }
            if expected.iter().all(|m| returned.contains_key(m)) || start.elapsed() >= timeout {
                break;
            }
            self.caller.pause();
        }
        let mut out: BTreeMap<String, J> = expected.into_iter().map(|m| (m, J::Null)).collect();
        out.extend(returned);
        Ok((jid, out))
    }

    fn function(&mut self, step: &Step) -> J {
        let arg = match step.args.get("arg") {
            None | Some(J::Null) => vec![],
            Some(J::Array(a)) => a.clone(),
            Some(other) => vec![other.clone()],
        };
        let kwarg = step
            .args
            .get("kwarg")
            .and_then(J::as_object)
            .cloned()
            .unwrap_or_default();
        let mut ret = json!({ "name": step.name, "changes": {}, "result": true, "comment": "" });
        let (jid, returns) = match self.job(step, &step.name, arg, kwarg) {
            Ok(x) => x,
            Err(e) => {
                ret["result"] = json!(false);
                ret["comment"] = json!(format!("No minions responded ({e})"));
                return ret;
            }
        };
        ret["__jid__"] = json!(jid);
        let spared = fail_minions(step);
        let (mut changes, mut fail) = (Map::new(), Vec::new());
        for (minion, load) in returns {
            let value = if load.is_null() {
                json!("Minion did not return. [No response]")
            } else {
                load["return"].clone()
            };
            let failed = load.is_null()
                || load["retcode"].as_i64().is_some_and(|c| c != 0)
                || load["return"] == J::Bool(false)
                || load["success"] == J::Bool(false);
            if failed && !spared.contains(&minion) {
                fail.push(minion.clone());
            }
            changes.insert(minion, value);
        }
        let names: Vec<&String> = changes.keys().collect();
        let ran = format!(
            " Function {} ran on {}.",
            step.name,
            names
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        if fail.is_empty() {
            ret["comment"] = json!(format!("Function ran successfully.{ran}"));
        } else {
            ret["result"] = json!(false);
            ret["comment"] = json!(format!(
                "Running function {} failed on minions: {}{ran}",
                step.name,
                fail.join(", ")
            ));
        }
        ret["changes"] = json!({ "ret": changes });
        ret
    }

    fn state(&mut self, step: &Step) -> J {
        let mut ret = json!({ "name": step.name, "changes": {}, "result": true, "comment": "" });
        let highstate = step
            .args
            .get("highstate")
            .and_then(J::as_bool)
            .unwrap_or(false);
        let sls = match step.args.get("sls") {
            Some(J::String(s)) => Some(s.clone()),
            Some(J::Array(a)) => Some(a.iter().filter_map(J::as_str).collect::<Vec<_>>().join(",")),
            _ => None,
        };
        let mut kwarg = Map::new();
        for k in ["saltenv", "pillar", "test", "pillarenv", "queue"] {
            if let Some(v) = step.args.get(k) {
                kwarg.insert(k.into(), v.clone());
            }
        }
        let job = match (&sls, highstate) {
            (Some(s), _) => self.job(step, "state.sls", vec![json!(s)], kwarg),
            (None, true) => self.job(step, "state.highstate", vec![], kwarg),
            (None, false) => {
                ret["result"] = json!(false);
                ret["comment"] = json!("No highstate or sls specified, no execution made");
                return ret;
            }
        };
        let (jid, returns) = match job {
            Ok(x) => x,
            Err(_) => {
                ret["result"] = json!(false);
                ret["comment"] = json!("No minions returned");
                return ret;
            }
        };
        ret["__jid__"] = json!(jid);
        let spared = fail_minions(step);
        let (mut changes, mut fail, mut no_change) = (Map::new(), Vec::new(), Vec::new());
        for (minion, load) in returns {
            let value = if load.is_null() {
                J::Bool(false)
            } else {
                load["return"].clone()
            };
            if load.is_null() || !check_result(&value) {
                if !spared.contains(&minion) {
                    fail.push(minion.clone());
                }
                changes.insert(minion, value);
                continue;
            }
            let changed = value.as_object().is_some_and(|m| {
                m.values()
                    .any(|s| s["changes"].as_object().is_some_and(|c| !c.is_empty()))
            });
            if changed {
                changes.insert(minion, value);
            } else {
                no_change.push(minion);
            }
        }
        let updated: Vec<String> = changes.keys().cloned().collect();
        if !changes.is_empty() {
            ret["changes"] = json!({ "out": "highstate", "ret": changes });
        }
        if !fail.is_empty() {
            ret["result"] = json!(false);
            ret["comment"] = json!(format!("Run failed on minions: {}", fail.join(", ")));
        } else {
            let mut c = "States ran successfully.".to_string();
            if !updated.is_empty() {
                c += &format!(" Updating {}.", updated.join(", "));
            }
            if !no_change.is_empty() {
                c += &format!(" No changes made to {}.", no_change.join(", "));
            }
            ret["comment"] = json!(c);
        }
        ret
    }

    fn runner(&mut self, step: &Step) -> J {
        // Salt passes a runner step's other keys as the runner's keyword arguments.
        let kwarg: Map<String, J> = step.args.iter().filter(|(k, _)| k.as_str() != "arg").map(|(k, v)| (k.clone(), v.clone())).collect();
        let arg = match step.args.get("arg") {
            Some(J::Array(a)) => a.clone(),
            Some(J::Null) | None => vec![],
            Some(other) => vec![other.clone()],
        };
        let mut req = json!({ "cmd": "runner", "fun": step.name, "arg": arg, "kwarg": kwarg });
        // Halite's runners read their keyword arguments from the request itself too.
        for (k, v) in &step.args {
            req.as_object_mut()
                .expect("a map")
                .entry(k.clone())
                .or_insert(v.clone());
        }
        let (value, ok) = match self.caller.call(&req) {
            Ok(r) => (r["return"].clone(), true),
            Err(e) => (json!({ "Error": e.to_string() }), false),
        };
        json!({ "name": step.name, "changes": { "return": value }, "result": ok, "comment": format!("Runner function '{}' {}.", step.name, if ok { "executed" } else { "failed" }) })
    }

    fn wheel(&mut self, step: &Step) -> J {
        let action = match step.name.as_str() {
            "key.accept" => "accept",
            "key.reject" => "reject",
            "key.delete" => "delete",
            other => {
                return json!({ "name": step.name, "changes": {}, "result": false, "comment": format!("Wheel function '{other}' is not available (key.accept, key.reject, key.delete).") })
            }
        };
        let pattern = match step.args.get("match") {
            Some(J::String(s)) => s.clone(),
            Some(J::Array(l)) => l.iter().filter_map(J::as_str).collect::<Vec<_>>().join(","),
            _ => {
                return json!({ "name": step.name, "changes": {}, "result": false, "comment": format!("Wheel function '{}' failed: it needs a `match`.", step.name) })
            }
        };
        let flag = |k: &str| step.args.get(k).and_then(J::as_bool).unwrap_or(false);
        let done = self
            .caller
            .call(&json!({ "cmd": "key.select", "action": action, "match": pattern, "include_accepted": flag("include_accepted"), "include_rejected": flag("include_rejected"), "include_denied": flag("include_denied") }))
            .and_then(|s| {
                let any = s["selected"].as_object().is_some_and(|m| m.values().any(|v| v.as_array().is_some_and(|a| !a.is_empty())));
                if any {
                    self.caller.call(&json!({ "cmd": "key.apply", "action": action, "selected": s["selected"] })).map(|r| r["done"].clone())
                } else {
                    Ok(json!([]))
                }
            });
        let (value, ok) = match done {
            Ok(d) => (json!({ "minions": d }), true),
            Err(e) => (json!({ "Error": e.to_string() }), false),
        };
        json!({ "name": step.name, "changes": { "return": value }, "result": ok, "comment": format!("Wheel function '{}' {}.", step.name, if ok { "executed" } else { "failed" }) })
    }
}

/// A step that did not run, with why.
fn not_run(step: &Step, result: bool, comment: String) -> J {
    json!({ "name": step.name, "changes": {}, "result": result, "comment": comment, "__state_ran__": false })
}

/// `fail_minions`: a list or a comma-separated string of minions allowed to fail.
fn fail_minions(step: &Step) -> Vec<String> {
    match step.args.get("fail_minions") {
        Some(J::String(s)) => s.split(',').map(|m| m.trim().to_string()).collect(),
        Some(J::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        _ => vec![],
    }
}

/// Salt's `check_result` of a minion's state return: a map of states, none of whose
/// `result` is `False`.
pub fn check_result(v: &J) -> bool {
    match v {
        J::Object(m) if !m.is_empty() => m.values().all(|s| match s {
            J::Object(st) if st.contains_key("result") => st["result"] != J::Bool(false),
            J::Object(st) => check_result(&J::Object(st.clone())),
            _ => false,
        }),
        _ => false,
    }
}

/// The wall-clock time of day, as Salt's `start_time` (`HH:MM:SS.ffffff`, UTC).
fn now_time() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let s = d.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        d.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_returns_are_judged_as_salt_judges_them() {
        assert!(check_result(
            &json!({"cmd_|-a_|-true_|-run": {"result": true, "changes": {}}})
        ));
        assert!(!check_result(
            &json!({"cmd_|-a_|-false_|-run": {"result": false}})
        ));
        assert!(!check_result(&json!(["Rendering SLS 'base:x' failed"])));
        assert!(!check_result(&json!({})));
    }
}
