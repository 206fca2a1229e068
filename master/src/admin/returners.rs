//! Where minions send a job's returns besides the master: Salt's returners. A publish
//! names them (`salt --return mysql,smtp`, salt-api's `ret`), optionally with a
//! returner profile (`--return_config`) and options (`--return_kwargs`); the master
//! puts them in the publish load (`ret`, `ret_config`, `ret_kwargs`) and each minion
//! runs them after the job. The master's `ext_job_cache` is added to every publish's
//! returners, as Salt's client adds it.
//!
//! Checked before anything is published: returner names are module names (letters,
//! digits, `_`), at most [`MAX_RETURNERS`] of them; the profile a short name; the
//! options a mapping of at most [`MAX_KWARGS_BYTES`] as JSON.

use serde_json::{Map, Value as J};

use crate::error::{Error, Result};

/// Returners one publish may name.
pub const MAX_RETURNERS: usize = 16;
/// Longest returner name or profile name.
pub const MAX_NAME: usize = 64;
/// Largest `ret_kwargs`, as JSON.
pub const MAX_KWARGS_BYTES: usize = 64 << 10;

/// A publish's returners (Salt's `ret`, `ret_config`, `ret_kwargs`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReturnTo {
    /// Returner module names, in the order given.
    pub names: Vec<String>,
    /// `ret_config`: the returner profile (`<profile>.<returner>.*` options).
    pub config: Option<String>,
    /// `ret_kwargs`: options handed to the returners.
    pub kwargs: Option<Map<String, J>>,
}

fn name_ok(n: &str) -> bool {
    !n.is_empty() && n.len() <= MAX_NAME && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl ReturnTo {
    /// Reads `ret` (comma-separated names, or a list), `ret_config` and `ret_kwargs` of
    /// an admin request; refuses what Salt's minion could not load as a returner.
    pub fn parse(req: &J) -> Result<ReturnTo> {
        let names: Vec<String> = match req.get("ret") {
            None | Some(J::Null) => vec![],
            Some(J::String(s)) => s.split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect(),
            Some(J::Array(a)) => a.iter().map(|v| v.as_str().map(String::from).ok_or_else(|| Error::refused("ret: returner names are text"))).collect::<Result<_>>()?,
            Some(_) => return Err(Error::refused("ret: a comma-separated list of returner names")),
        };
        if names.len() > MAX_RETURNERS {
            return Err(Error::refused(format!("ret: at most {MAX_RETURNERS} returners")));
        }
        if let Some(bad) = names.iter().find(|n| !name_ok(n)) {
            return Err(Error::refused(format!("ret: {bad:?} is not a returner name (letters, digits and _, at most {MAX_NAME})")));
        }
        let config = match req.get("ret_config") {
            None | Some(J::Null) => None,
            Some(J::String(s)) if s.is_empty() => None,
            Some(J::String(s)) if s.len() <= MAX_NAME && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)) => Some(s.clone()),
            Some(_) => return Err(Error::refused(format!("ret_config: a profile name (letters, digits, _ - ., at most {MAX_NAME})"))),
        };
        let kwargs = match req.get("ret_kwargs") {
            None | Some(J::Null) => None,
            Some(J::Object(m)) if m.is_empty() => None,
            Some(J::Object(m)) if serde_json::to_vec(m).map_or(usize::MAX, |b| b.len()) <= MAX_KWARGS_BYTES => Some(m.clone()),
            Some(J::Object(_)) => return Err(Error::refused(format!("ret_kwargs: larger than {MAX_KWARGS_BYTES} bytes"))),
            Some(_) => return Err(Error::refused("ret_kwargs: a mapping of returner options")),
        };
        Ok(ReturnTo { names, config, kwargs })
    }

    /// The load's `ret`: the names, then the master's `ext_job_cache` (`""`: none, which
    /// the minion reads as no returner).
    pub fn ret(&self, ext_job_cache: Option<&str>) -> String {
        let mut all = self.names.clone();
        if let Some(e) = ext_job_cache.filter(|e| !e.is_empty()) {
            all.push(e.to_string());
        }
        all.join(",")
    }

    /// Adds `ret`, and `ret_config`/`ret_kwargs` when given, to a publish load.
    pub fn fill(&self, load: &mut Map<String, J>, ext_job_cache: Option<&str>) {
        load.insert("ret".into(), J::String(self.ret(ext_job_cache)));
        if let Some(c) = &self.config {
            load.insert("ret_config".into(), J::String(c.clone()));
        }
        if let Some(k) = &self.kwargs {
            load.insert("ret_kwargs".into(), J::Object(k.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn returners_are_read_and_checked() {
        let r = ReturnTo::parse(&json!({"ret": "rawfile_json, smtp", "ret_config": "alt", "ret_kwargs": {"k": 1}})).unwrap();
        assert_eq!(r.names, ["rawfile_json", "smtp"]);
        assert_eq!(r.ret(Some("redis")), "rawfile_json,smtp,redis");
        let mut load = Map::new();
        r.fill(&mut load, None);
        assert_eq!(J::Object(load), json!({"ret": "rawfile_json,smtp", "ret_config": "alt", "ret_kwargs": {"k": 1}}));
        assert_eq!(ReturnTo::parse(&json!({})).unwrap().ret(None), "");
        assert_eq!(ReturnTo::parse(&json!({"ret": ["a", "b"]})).unwrap().ret(Some("")), "a,b");
        for bad in [json!({"ret": "../x"}), json!({"ret": "a b"}), json!({"ret": 3}), json!({"ret": "x".repeat(65)}), json!({"ret": vec!["a"; 17]}), json!({"ret_config": "a/b"}), json!({"ret_kwargs": [1]}), json!({"ret_kwargs": {"k": "v".repeat(70_000)}})] {
            assert!(ReturnTo::parse(&bad).is_err(), "{bad}");
        }
    }
}
