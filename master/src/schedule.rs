//! The master's own `schedule` (Salt's master option): runner functions run on an
//! interval or a cron expression, once per cluster.
//!
//! ```yaml
//! schedule:
//!   clean_jobs:
//!     function: jobs.list_jobs      # a runner function
//!     minutes: 30                   # seconds, minutes, hours, days add up
//!     kwargs: {}
//!   nightly:
//!     function: manage.status
//!     cron: '0 3 * * *'             # five fields (or six, with seconds)
//!     run_on_start: false
//! ```
//!
//! This module is the pure part: the option read into [`Job`]s (options Halite does not
//! implement are named in [`Schedule::warnings`]), the firing times ([`Job::next_after`])
//! and the id of one firing ([`firing_id`]). The daemon's timer
//! (`crate::daemon::upkeep::schedule`) fires them.
//!
//! **Once per cluster.** An interval job fires at the multiples of its interval since
//! the Unix epoch (Salt counts from the master's start, which differs between members),
//! a cron job at the times its expression names. Each member fires each due time by
//! proposing a `reaction` record whose id is [`firing_id`] (the same on every member);
//! the state machine applies the first and skips the others, and only the member whose
//! record applied runs the function. A job with `run_on_start` (Salt's default for
//! interval jobs) also fires when a member starts, for the interval it starts in: once
//! however many members start in it.
//!
//! **What a run leaves.** Like a runner run from salt-api, each run is a job of its own
//! (function `runner.<function>`, user `Scheduler`, kept under `<id>_master`, events
//! `salt/run/<jid>/new` and `/ret`), so `salt-run jobs.list_jobs` shows it.
//! `salt-run schedule.list` shows the jobs as read, with their next firing time.

use std::time::Duration;

use serde_json::{json, Map, Value as J};
use serde_yaml::Value as Y;
use sha2::{Digest, Sha256};

/// Most jobs read from the option.
pub const MAX_JOBS: usize = 1000;

/// Shortest interval: a job is not fired more often than this.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The keys of a job Halite reads.
const READ: [&str; 11] = ["function", "seconds", "minutes", "hours", "days", "cron", "args", "kwargs", "enabled", "run_on_start", "name"];

/// Salt's keys Halite does not implement (named in a warning, the job still runs
/// without them); any other key is unknown and named too.
const NOT_IMPLEMENTED: [&str; 17] = ["when", "once", "once_fmt", "splay", "range", "skip_during_range", "run_after_skip_range", "until", "after", "maxrunning", "jid_include", "return_job", "returner", "return_config", "return_kwargs", "metadata", "run_explicit"];

/// When a job fires.
#[derive(Debug, Clone)]
pub enum When {
    /// At every multiple of the interval since the epoch.
    Every(Duration),
    /// At the times a cron expression names (the master's local time).
    Cron { expr: String, cron: Box<croner::Cron> },
}

/// One scheduled job.
#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    /// The runner function (`module.function`).
    pub function: String,
    pub args: Vec<J>,
    pub kwargs: Map<String, J>,
    pub when: When,
    pub enabled: bool,
    pub run_on_start: bool,
}

/// The `schedule` option, read.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    pub jobs: Vec<Job>,
    /// What was not taken as written (logged once at start).
    pub warnings: Vec<String>,
}

impl Schedule {
    /// Reads the option: a map of job names to jobs. A job that cannot run (no function,
    /// no time, a bad cron expression) is left out with a warning; `enabled: False` at
    /// the top (Salt's switch for the whole schedule) leaves every job out.
    pub fn from_option(v: Option<&Y>) -> Schedule {
        let mut s = Schedule::default();
        let Some(v) = v else { return s };
        let Some(map) = v.as_mapping() else {
            s.warnings.push("`schedule` is not a map of job names to jobs; no job is scheduled".into());
            return s;
        };
        if map.get("enabled").and_then(Y::as_bool) == Some(false) {
            s.warnings.push("`schedule` has `enabled: False`; no job is scheduled".into());
            return s;
        }
        for (k, body) in map {
            let Some(name) = k.as_str() else { continue };
            if name == "enabled" {
                continue;
            }
            if s.jobs.len() == MAX_JOBS {
                s.warnings.push(format!("more than {MAX_JOBS} scheduled jobs; the rest are left out"));
                break;
            }
            match Job::read(name, body, &mut s.warnings) {
                Ok(job) => s.jobs.push(job),
                Err(why) => s.warnings.push(format!("schedule job {name:?} is left out: {why}")),
            }
        }
        s
    }

    /// The jobs as `salt-run schedule.list` shows them: each job's options, with
    /// `_next_fire_time` (seconds since the epoch) after `now`.
    pub fn listing(&self, now_s: u64) -> J {
        let mut out = Map::new();
        for j in &self.jobs {
            let mut m = Map::new();
            m.insert("function".into(), json!(j.function));
            match &j.when {
                When::Every(d) => {
                    m.insert("seconds".into(), json!(d.as_secs()));
                }
                When::Cron { expr, .. } => {
                    m.insert("cron".into(), json!(expr));
                }
            }
            if !j.args.is_empty() {
                m.insert("args".into(), J::Array(j.args.clone()));
            }
            if !j.kwargs.is_empty() {
                m.insert("kwargs".into(), J::Object(j.kwargs.clone()));
            }
            m.insert("enabled".into(), json!(j.enabled));
            m.insert("run_on_start".into(), json!(j.run_on_start));
            m.insert("name".into(), json!(j.name));
            if j.enabled {
                m.insert("_next_fire_time".into(), json!(j.next_after(now_s)));
            }
            out.insert(j.name.clone(), J::Object(m));
        }
        J::Object(out)
    }
}

impl Job {
    fn read(name: &str, body: &Y, warnings: &mut Vec<String>) -> Result<Job, String> {
        let Some(m) = body.as_mapping() else { return Err("not a map".into()) };
        for k in m.keys().filter_map(Y::as_str) {
            if NOT_IMPLEMENTED.contains(&k) {
                warnings.push(format!("schedule job {name:?}: `{k}` is not implemented and is ignored"));
            } else if !READ.contains(&k) {
                warnings.push(format!("schedule job {name:?}: unknown option `{k}` ignored"));
            }
        }
        let function = m.get("function").and_then(Y::as_str).ok_or("no `function`")?.to_string();
        let ok = function.split('.').count() == 2 && function.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        if !ok {
            return Err(format!("`function` {function:?} is not a runner function (module.function)"));
        }
        let json = |k: &str| m.get(k).map(|v| crate::pillar::yaml_to_json(v.clone()));
        let args = match json("args") {
            None | Some(J::Null) => Vec::new(),
            Some(J::Array(a)) => a,
            Some(other) => vec![other],
        };
        let kwargs = match json("kwargs") {
            None | Some(J::Null) => Map::new(),
            Some(J::Object(o)) => o,
            Some(_) => return Err("`kwargs` is not a map".into()),
        };
        let mut secs = 0u64;
        let mut timed = false;
        for (k, unit) in [("seconds", 1u64), ("minutes", 60), ("hours", 3600), ("days", 86400)] {
            if let Some(v) = m.get(k) {
                let n = v.as_u64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok())).ok_or_else(|| format!("`{k}` is not a whole number"))?;
                secs = secs.saturating_add(n.saturating_mul(unit));
                timed = true;
            }
        }
        let cron = m.get("cron").map(|v| v.as_str().map(str::to_string).ok_or("`cron` is not text"));
        let when = match (timed, cron) {
            (true, Some(_)) => return Err("both an interval and `cron`".into()),
            (true, None) if secs < MIN_INTERVAL.as_secs() => return Err(format!("an interval shorter than {MIN_INTERVAL:?}")),
            (true, None) => When::Every(Duration::from_secs(secs)),
            (false, Some(expr)) => {
                let expr = expr?;
                let cron = croner::Cron::new(&expr).with_seconds_optional().parse().map_err(|e| format!("`cron` {expr:?}: {e}"))?;
                When::Cron { expr, cron: Box::new(cron) }
            }
            (false, None) => return Err("no time (seconds, minutes, hours, days or cron)".into()),
        };
        let flag = |k: &str, default: bool| m.get(k).and_then(Y::as_bool).unwrap_or(default);
        // Salt runs an interval job at start unless told not to.
        let run_on_start = flag("run_on_start", matches!(when, When::Every(_)));
        Ok(Job { name: name.to_string(), function, args, kwargs, enabled: flag("enabled", true), run_on_start, when })
    }

    /// The first firing time strictly after `now_s` (seconds since the epoch).
    pub fn next_after(&self, now_s: u64) -> Option<u64> {
        match &self.when {
            When::Every(d) => {
                let every = d.as_secs().max(1);
                Some((now_s / every + 1) * every)
            }
            When::Cron { cron, .. } => {
                use chrono::TimeZone;
                let now = chrono::Local.timestamp_opt(i64::try_from(now_s).ok()?, 0).single()?;
                let next = cron.find_next_occurrence(&now, false).ok()?;
                u64::try_from(next.timestamp()).ok()
            }
        }
    }

    /// The firing time a member starting at `now_s` fires for when the job runs on
    /// start: the start of the interval it is in (a cron job: `now_s` itself).
    pub fn start_slot(&self, now_s: u64) -> u64 {
        match &self.when {
            When::Every(d) => now_s / d.as_secs().max(1) * d.as_secs().max(1),
            When::Cron { .. } => now_s,
        }
    }

    /// The runner request this job makes (as `salt-run` sends it).
    pub fn request(&self) -> J {
        let mut req = json!({ "cmd": "runner", "fun": self.function, "arg": self.args, "kwarg": self.kwargs });
        // Halite's runners read their keyword arguments from the request itself.
        if let J::Object(m) = &mut req {
            for (k, v) in &self.kwargs {
                m.entry(k.clone()).or_insert(v.clone());
            }
        }
        req
    }
}

/// The id of one firing of job `name` at `at_s`: the same on every member, in the
/// `reaction` record's form (the firing time as a 20-digit jid, then a SHA-256 of the
/// job and the time), so the job cache's expiry drops old firings' claims.
pub fn firing_id(name: &str, at_s: u64) -> String {
    let mut h = Sha256::new();
    h.update(b"schedule\0");
    h.update((name.len() as u64).to_be_bytes());
    h.update(name.as_bytes());
    h.update(at_s.to_be_bytes());
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("{}{hex}", crate::jobs::jid_at(at_s.saturating_mul(1_000_000)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Schedule {
        Schedule::from_option(Some(&serde_yaml::from_str(yaml).unwrap()))
    }

    #[test]
    fn jobs_are_read_as_salt_writes_them() {
        let s = read("a:\n  function: jobs.list_jobs\n  minutes: 1\n  seconds: 30\n  kwargs: {search_function: test.ping}\nb:\n  function: manage.status\n  cron: '*/5 * * * *'\n  args: [x]\n  run_on_start: false\n");
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        assert_eq!(s.jobs.len(), 2);
        let a = &s.jobs[0];
        assert!(matches!(a.when, When::Every(d) if d == Duration::from_secs(90)));
        assert!(a.run_on_start && a.enabled, "an interval job runs on start unless told not to");
        assert_eq!(a.request(), json!({"cmd": "runner", "fun": "jobs.list_jobs", "arg": [], "kwarg": {"search_function": "test.ping"}, "search_function": "test.ping"}));
        let b = &s.jobs[1];
        assert!(!b.run_on_start);
        assert_eq!(b.args, [json!("x")]);
        // Every five minutes of the clock, wherever the hour starts.
        assert_eq!(b.next_after(1_800_000_001), Some(1_800_000_300));
        assert_eq!(a.next_after(1_800_000_001), Some(1_800_000_090));
        assert_eq!(a.next_after(1_800_000_090), Some(1_800_000_180), "strictly after");
        assert_eq!(a.start_slot(1_800_000_001), 1_800_000_000);
        let l = s.listing(1_800_000_001);
        assert_eq!(l["a"]["seconds"], 90);
        assert_eq!(l["b"]["_next_fire_time"], 1_800_000_300);
    }

    #[test]
    fn what_cannot_run_is_left_out_and_what_is_not_implemented_is_named() {
        let s = read("nofun:\n  minutes: 1\nbadfun:\n  function: 'rm -rf'\n  minutes: 1\nnotime:\n  function: a.b\nboth:\n  function: a.b\n  minutes: 1\n  cron: '* * * * *'\nbadcron:\n  function: a.b\n  cron: 'every tuesday'\nzero:\n  function: a.b\n  seconds: 0\nsplayed:\n  function: a.b\n  seconds: 5\n  splay: 10\n  colour: blue\n");
        assert_eq!(s.jobs.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(), ["splayed"]);
        let w = s.warnings.join("\n");
        for needle in ["\"nofun\" is left out: no `function`", "\"badfun\" is left out", "\"notime\" is left out: no time", "\"both\" is left out", "\"badcron\" is left out", "\"zero\" is left out", "`splay` is not implemented", "unknown option `colour`"] {
            assert!(w.contains(needle), "{needle} in {w}");
        }
        assert!(read("enabled: false\na:\n  function: a.b\n  seconds: 5\n").jobs.is_empty());
        assert!(read("- a\n").jobs.is_empty());
        assert!(!read("a:\n  function: a.b\n  seconds: 5\n  enabled: false\n").jobs[0].enabled);
    }

    #[test]
    fn a_firing_has_one_id_in_the_reaction_records_form() {
        let id = firing_id("a", 1_800_000_000);
        assert_eq!(id.len(), halite_storage::reaction::REACTION_ID_LEN);
        assert!(id.starts_with("2027011508000000000"), "{id}");
        assert_eq!(id, firing_id("a", 1_800_000_000));
        assert_ne!(id, firing_id("a", 1_800_000_090));
        assert_ne!(id, firing_id("b", 1_800_000_000));
    }
}
