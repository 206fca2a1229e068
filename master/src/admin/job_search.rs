//! Searching the job cache as Salt's `jobs.list_jobs` filters it (`search_metadata`,
//! `search_function`, `search_target`, `start_time`, `end_time`), for `jobs.list_jobs`
//! and `jobs.last_run`.
//!
//! The rules are Salt's: every filter given must match; `search_metadata` matches when
//! any of its keys has the same value in the job's `Metadata`; `search_function` and
//! `search_target` are shell globs (one, a list, or comma-separated), a list target
//! matching when any of its ids does; `start_time`/`end_time` bound the job's start
//! (its jid) inclusively.
//!
//! Times: Salt reads them with `dateutil`. Halite reads the forms operators write:
//! Salt's own `StartTime` (`2026, Nov 25 04:00` with optional seconds and fraction) and
//! ISO dates (`2026-11-25`, `2026-11-25 04:00[:00[.123]]`, `T` for the space). A time
//! it cannot read is refused with the forms it reads (Salt would fail the runner on
//! one `dateutil` cannot read). Jids are UTC here, so the times are UTC.

use serde_json::{Map, Value as J};

use super::runner_args::Bound;
use crate::error::{Error, Result};
use crate::glob::fnmatch;

/// The filters of one search; `None`/empty: not given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFilter {
    pub metadata: Option<Map<String, J>>,
    pub functions: Vec<String>,
    pub targets: Vec<String>,
    /// Jid-shaped (20 digits) bounds, inclusive.
    pub start: Option<String>,
    pub end: Option<String>,
}

/// Salt's `split_input`: a list as it is, anything else split on commas and trimmed.
fn split_input(v: &J) -> Vec<String> {
    match v {
        J::Null => vec![],
        J::Array(a) => a.iter().map(|x| x.as_str().map(String::from).unwrap_or_else(|| x.to_string())).collect(),
        J::String(s) => s.split(',').map(|x| x.trim().to_string()).collect(),
        other => other.to_string().split(',').map(|x| x.trim().to_string()).collect(),
    }
}

impl JobFilter {
    /// The filters of a bound runner call, named as the runner names them
    /// (`jobs.list_jobs`: `search_metadata`...; `jobs.last_run`: `metadata`...).
    pub fn from_bound(b: &Bound, metadata: &str, function: &str, target: &str) -> Result<JobFilter> {
        let md = match b.get(metadata) {
            J::Null => None,
            J::Object(m) if m.is_empty() => None,
            J::Object(m) => Some(m.clone()),
            J::String(s) if s.is_empty() => None,
            _ => return Err(Error::refused(format!("{metadata}: a mapping of metadata keys and values, e.g. {metadata}='{{\"ticket\": \"OPS-1\"}}'"))),
        };
        let time = |name: &str| -> Result<Option<String>> {
            match b.get(name) {
                J::Null => Ok(None),
                J::String(s) if s.is_empty() => Ok(None),
                J::String(s) => parse_time(s).map(Some).ok_or_else(|| Error::refused(format!("{name}: cannot read the time {s:?}; write it as '2026, Nov 25 04:00[:00]' or '2026-11-25[ 04:00[:00]]' (UTC)"))),
                other => Err(Error::refused(format!("{name}: a time as text, not {other}"))),
            }
        };
        let truthy_list = |name: &str| if b.truthy(name) { split_input(b.get(name)) } else { vec![] };
        Ok(JobFilter { metadata: md, functions: truthy_list(function), targets: truthy_list(target), start: time("start_time")?, end: time("end_time")? })
    }

    /// Whether the job `jid`, as `jobs.list_jobs` shows it (`Function`, `Target`,
    /// `Metadata`), passes every filter.
    pub fn matches(&self, jid: &str, job: &Map<String, J>) -> bool {
        if let Some(want) = &self.metadata {
            let Some(J::Object(have)) = job.get("Metadata") else { return false };
            if !want.iter().any(|(k, v)| have.get(k) == Some(v)) {
                return false;
            }
        }
        if !self.targets.is_empty() {
            let targets: Vec<&str> = match job.get("Target") {
                Some(J::String(t)) => vec![t.as_str()],
                Some(J::Array(a)) => a.iter().filter_map(J::as_str).collect(),
                _ => vec![],
            };
            if !targets.iter().any(|t| self.targets.iter().any(|p| fnmatch(p, t))) {
                return false;
            }
        }
        if !self.functions.is_empty() {
            let Some(f) = job.get("Function").and_then(J::as_str) else { return false };
            if !self.functions.iter().any(|p| fnmatch(p, f)) {
                return false;
            }
        }
        let started = jid.get(..20).unwrap_or(jid);
        self.start.as_deref().is_none_or(|s| started >= s) && self.end.as_deref().is_none_or(|e| started <= e)
    }
}

/// A time as a jid's 20 digits (`YYYYMMDDhhmmssffffff`), from Salt's `StartTime` form
/// or an ISO date; `None` when it is neither.
pub fn parse_time(s: &str) -> Option<String> {
    const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    let s = s.trim();
    let num = |t: &str, max: u32| -> Option<u32> { (!t.is_empty() && t.len() <= 4 && t.bytes().all(|b| b.is_ascii_digit())).then(|| t.parse().ok()).flatten().filter(|n| *n <= max) };
    let (date, clock) = if let Some((y, rest)) = s.split_once(',') {
        // `2026, Nov 25 04:00:00.123456`
        let mut it = rest.split_whitespace();
        let (mon, day) = (it.next()?, it.next()?);
        let month = MONTHS.iter().position(|m| mon.len() >= 3 && m.eq_ignore_ascii_case(&mon[..3]))? as u32 + 1;
        let clock = it.next();
        if it.next().is_some() {
            return None;
        }
        ((num(y.trim(), 9999)?, month, num(day, 31)?), clock)
    } else {
        // `2026-11-25`, `2026-11-25 04:00`, `2026-11-25T04:00:00.5`
        let (d, clock) = match s.split_once([' ', 'T']) {
            Some((d, c)) => (d, Some(c.trim())),
            None => (s, None),
        };
        let mut p = d.split('-');
        let ymd = (num(p.next()?, 9999)?, num(p.next()?, 12)?, num(p.next()?, 31)?);
        if p.next().is_some() {
            return None;
        }
        (ymd, clock)
    };
    if date.1 == 0 || date.2 == 0 {
        return None;
    }
    let (mut h, mut mi, mut sec, mut micros) = (0, 0, 0, 0u32);
    if let Some(c) = clock {
        let (hms, frac) = match c.split_once('.') {
            Some((a, f)) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => (a, Some(f)),
            Some(_) => return None,
            None => (c, None),
        };
        let mut p = hms.split(':');
        h = num(p.next()?, 23)?;
        mi = num(p.next()?, 59)?;
        if let Some(x) = p.next() {
            sec = num(x, 59)?;
        }
        if p.next().is_some() {
            return None;
        }
        if let Some(f) = frac {
            let f6: String = f.chars().chain(std::iter::repeat('0')).take(6).collect();
            micros = f6.parse().ok()?;
        }
    }
    Some(format!("{:04}{:02}{:02}{h:02}{mi:02}{sec:02}{micros:06}", date.0, date.1, date.2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_are_read_in_salts_form_and_iso() {
        assert_eq!(parse_time("2015, Mar 16 19:00").as_deref(), Some("20150316190000000000"));
        assert_eq!(parse_time("2026, Nov 25 04:40:01.123456").as_deref(), Some("20261125044001123456"));
        assert_eq!(parse_time("2026-11-25").as_deref(), Some("20261125000000000000"));
        assert_eq!(parse_time("2026-11-25T04:40:01.5").as_deref(), Some("20261125044001500000"));
        assert_eq!(parse_time(" 2026-11-25 04:40 ").as_deref(), Some("20261125044000000000"));
        for bad in ["", "yesterday", "2026-13-01", "2026-11-25 25:00", "2026, Foo 1 00:00", "2026-11-25 04:40:01.x", "2026-11-25-1", "1, Jan 1 1:1:1 extra"] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    fn job(fun: &str, tgt: J, md: Option<J>) -> Map<String, J> {
        let mut m = Map::new();
        m.insert("Function".into(), json!(fun));
        m.insert("Target".into(), tgt);
        if let Some(md) = md {
            m.insert("Metadata".into(), md);
        }
        m
    }

    #[test]
    fn every_filter_given_must_match() {
        let f = |v: J| {
            let b = crate::admin::runner_args::RunnerArgs { arg: vec![], kwarg: v.as_object().cloned().unwrap_or_default() };
            let params = [("search_metadata", Some(J::Null)), ("search_function", Some(J::Null)), ("search_target", Some(J::Null)), ("start_time", Some(J::Null)), ("end_time", Some(J::Null))];
            JobFilter::from_bound(&b.bind("jobs.list_jobs", &params, false).unwrap(), "search_metadata", "search_function", "search_target")
        };
        let ping = job("test.ping", json!("web*"), Some(json!({"ticket": "OPS-1", "n": 2})));
        let listed = job("state.apply", json!(["db1", "web2"]), None);
        let jid = "20261125044000000000";
        assert!(f(json!({})).unwrap().matches(jid, &ping));
        assert!(f(json!({"search_metadata": {"ticket": "OPS-1", "other": 1}})).unwrap().matches(jid, &ping), "any key matching");
        assert!(!f(json!({"search_metadata": {"ticket": "OPS-2"}})).unwrap().matches(jid, &ping));
        assert!(!f(json!({"search_metadata": {"ticket": "OPS-1"}})).unwrap().matches(jid, &listed), "no metadata");
        assert!(f(json!({"search_function": "test.*,pkg.install"})).unwrap().matches(jid, &ping));
        assert!(f(json!({"search_function": ["state.*"]})).unwrap().matches(jid, &listed));
        assert!(!f(json!({"search_function": "state.*"})).unwrap().matches(jid, &ping));
        assert!(f(json!({"search_target": "db*"})).unwrap().matches(jid, &listed), "a list target matches by any id");
        assert!(!f(json!({"search_target": "db*", "search_function": "test.*"})).unwrap().matches(jid, &listed));
        assert!(f(json!({"start_time": "2026-11-25 04:40", "end_time": "2026, Nov 25 04:40"})).unwrap().matches(jid, &ping), "inclusive");
        assert!(!f(json!({"start_time": "2026-11-25 04:40:01"})).unwrap().matches(jid, &ping));
        assert!(!f(json!({"end_time": "2026-11-24"})).unwrap().matches(jid, &ping));
        assert!(f(json!({"search_metadata": "ticket"})).is_err());
        assert!(f(json!({"start_time": "last tuesday"})).is_err());
        assert!(f(json!({"end_time": 5})).is_err());
    }
}
