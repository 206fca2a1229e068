//! What Halite does with each option of a master config: every option read (from
//! `master`, `master.d/*.conf` and `include`) is **honoured**, accepted with **no effect**
//! by design (with the reason), at a value Halite behaves as (**default**: Salt's default
//! or a value [`table::CHECKS`] accepts), **not implemented** at its value, or **unknown**
//! (not an option of a Salt 3008.5 master: a typo?).
//!
//! The table is [`table`]; the options a Salt 3008.5 master knows, with their defaults,
//! are `testdata/salt-3008.5/master_opts.json` (written by
//! `scripts/salt-master-opts.py` from the reference). At start the master warns once per
//! option not implemented or unknown ([`warn_at_start`]); `salt-master --check-config`
//! prints the whole [`Report`] and exits 1 when an option is not implemented at its value.

mod doc;
mod table;

pub use doc::section as doc_section;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::{json, Value as J};

use crate::config::MasterConfig;

pub use table::{CHECKS, HONOURED, NOT_IMPLEMENTED, NO_EFFECT};

/// A value check: `Some(why)` when Halite does not implement this value.
pub type Check = fn(&J, &Ctx) -> Option<String>;

/// What a value check may compare with besides the value.
#[derive(Debug, Clone, Default)]
pub struct Ctx {
    /// The name of the user Halite runs as.
    pub user: Option<String>,
    /// The config's `log_level` (Salt's default `warning` when unset).
    pub log_level: Option<String>,
    /// The config's `minion_data_cache`.
    pub minion_data_cache: bool,
}

/// Salt 3008.5's master options and their defaults (`master_opts.json`).
pub struct SaltOptions {
    pub version: String,
    pub defaults: BTreeMap<String, J>,
    /// Options Salt's validator knows with no master default (a minion's, salt-ssh's).
    pub others: BTreeSet<String>,
}

const SALT_OPTS: &str = include_str!("../../../testdata/salt-3008.5/master_opts.json");

/// The reference's options, parsed once.
pub fn salt_options() -> &'static SaltOptions {
    static OPTS: OnceLock<SaltOptions> = OnceLock::new();
    OPTS.get_or_init(|| {
        // The file is part of the source tree and checked by the unit tests.
        let v: J = serde_json::from_str(SALT_OPTS).unwrap_or(J::Null);
        let defaults = v["options"].as_object().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default();
        let others = v["other_valid_options"].as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default();
        SaltOptions { version: v["salt_version"].as_str().unwrap_or("").to_string(), defaults, others }
    })
}

/// What Halite does with an option, from the table alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Honoured,
    /// Accepted with no effect by design: the reason.
    NoEffect(&'static str),
    /// Not implemented: the feature; Halite behaves as the accepted value(s).
    NotImplemented(&'static str),
}

/// The table's rule for `key` (`None`: not in the table).
pub fn rule(key: &str) -> Option<Rule> {
    if HONOURED.contains(&key) {
        return Some(Rule::Honoured);
    }
    if let Some((why, _)) = NO_EFFECT.iter().find(|(_, keys)| keys.contains(&key)) {
        return Some(Rule::NoEffect(why));
    }
    NOT_IMPLEMENTED.iter().find(|(_, keys)| keys.contains(&key)).map(|(what, _)| Rule::NotImplemented(what))
}

/// The status of one option as set in a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Honoured,
    NoEffect(&'static str),
    /// Not implemented, but set to a value Halite behaves as: the note.
    Default(String),
    /// Not implemented at this value: the feature, and why this value.
    NotImplemented { feature: &'static str, why: String },
    /// Not in the table: the note (a typo, with the nearest option's name, or an option
    /// a master does not read).
    Unknown(String),
}

impl Status {
    /// The short name printed and used in JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Status::Honoured => "honoured",
            Status::NoEffect(_) => "no effect",
            Status::Default(_) => "default",
            Status::NotImplemented { .. } => "not implemented",
            Status::Unknown(_) => "unknown",
        }
    }

    /// The explanation printed after the name ("" for honoured).
    pub fn note(&self) -> String {
        match self {
            Status::Honoured => String::new(),
            Status::NoEffect(why) => why.to_string(),
            Status::Default(n) => n.clone(),
            Status::NotImplemented { feature, why } => format!("{why}; Halite does not implement {feature}"),
            Status::Unknown(n) => n.clone(),
        }
    }
}

const TYPO: &str = "not an option of a Salt 3008.5 master (a typo?); ignored";
const NOT_MASTER: &str = "an option Salt knows for minions or salt-ssh, not read by a master; ignored";

/// The status of `key` set to `value` (YAML as read).
pub fn classify(key: &str, value: &serde_yaml::Value, ctx: &Ctx) -> Status {
    let salt = salt_options();
    let feature = match rule(key) {
        Some(Rule::Honoured) => return Status::Honoured,
        Some(Rule::NoEffect(why)) => return Status::NoEffect(why),
        Some(Rule::NotImplemented(f)) => f,
        None if salt.others.contains(key) => return Status::Unknown(NOT_MASTER.into()),
        None => {
            return Status::Unknown(match nearest(key) {
                Some(k) => format!("{TYPO} (did you mean {k}?)"),
                None => TYPO.into(),
            })
        }
    };
    // A value JSON cannot hold (a mapping with non-scalar keys) is no default.
    let v = serde_json::to_value(value).unwrap_or_else(|_| J::String("(a value JSON cannot hold)".into()));
    if let Some((_, accepted, check)) = CHECKS.iter().find(|(k, _, _)| *k == key) {
        return match check(&v, ctx) {
            None => Status::Default("Halite behaves as this value; other values are not implemented".into()),
            Some(why) if why.is_empty() => Status::NotImplemented { feature, why: format!("set to {}; Halite behaves as {}", short(&v), accepted.replace('`', "")) },
            Some(why) => Status::NotImplemented { feature, why },
        };
    }
    match salt.defaults.get(key) {
        Some(d) if same(&v, d) => Status::Default("Salt's default; other values are not implemented".into()),
        Some(d) => Status::NotImplemented { feature, why: format!("set to {}, Salt's default is {}", short(&v), short(d)) },
        None => Status::NotImplemented { feature, why: format!("set to {}", short(&v)) },
    }
}

/// The option of the table (which holds every Salt master option) nearest to `key` by edit distance, when
/// at most 2 edits away (a likely typo of it).
fn nearest(key: &str) -> Option<&'static str> {
    let table = HONOURED.iter().chain(NO_EFFECT.iter().chain(NOT_IMPLEMENTED).flat_map(|(_, k)| k.iter())).copied();
    let best = table.map(|k| (distance(key, k), k)).min()?;
    (best.0 <= 2).then_some(best.1)
}

/// Levenshtein distance over bytes (option names are ASCII).
fn distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, y) in b.iter().enumerate() {
            cur.push((prev[j] + usize::from(x != y)).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Whether a value read from YAML means the same as Salt's default: equal up to Salt's
/// spellings of booleans, numbers written as text, and empty values (`null`, `""`, `[]`,
/// `{}` all mean "none").
pub fn same(v: &J, d: &J) -> bool {
    let empty = |x: &J| match x {
        J::Null => true,
        J::String(s) => s.is_empty() || s == "None",
        J::Array(a) => a.is_empty(),
        J::Object(o) => o.is_empty(),
        _ => false,
    };
    match (v, d) {
        _ if empty(v) && empty(d) => true,
        (J::String(s), J::Bool(b)) => crate::config::parse_bool(s) == Some(*b),
        (J::Number(n), J::Bool(b)) => n.as_u64() == Some(*b as u64),
        (J::String(s), J::Number(n)) => s.trim().parse::<f64>().ok() == n.as_f64(),
        (J::Number(a), J::Number(b)) => a.as_f64() == b.as_f64(),
        (J::Array(a), J::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y)),
        (J::Object(a), J::Object(b)) => a.len() == b.len() && a.iter().all(|(k, x)| b.get(k).is_some_and(|y| same(x, y))),
        _ => v == d,
    }
}

/// A value as JSON, cut to 80 characters.
fn short(v: &J) -> String {
    let s = v.to_string();
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

/// One option of the config and what Halite does with it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub key: String,
    pub file: Option<PathBuf>,
    pub status: Status,
}

/// Every option of a config, in the order of the files that set them, then by name.
#[derive(Debug, Clone)]
pub struct Report {
    pub entries: Vec<Entry>,
}

impl Report {
    /// The report of a loaded config; `user`: the user Halite runs as.
    pub fn of(cfg: &MasterConfig, user: Option<String>) -> Report {
        let log_level = Some(cfg.raw.get("log_level").and_then(|v| v.as_str()).unwrap_or("warning").to_string());
        let ctx = Ctx { user, log_level, minion_data_cache: cfg.minion_data_cache };
        let mut entries: Vec<Entry> = cfg
            .raw
            .iter()
            .map(|(k, v)| {
                let key = k.as_str().map(str::to_string).unwrap_or_else(|| serde_json::to_value(k).map(|j| j.to_string()).unwrap_or_default());
                let status = classify(&key, v, &ctx);
                Entry { file: cfg.origin.get(&key).cloned(), key, status }
            })
            .collect();
        entries.sort_by(|a, b| (&a.file, &a.key).cmp(&(&b.file, &b.key)));
        Report { entries }
    }

    /// Options set to a value Halite does not implement.
    pub fn not_implemented(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| matches!(e.status, Status::NotImplemented { .. }))
    }

    pub fn unknown(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| matches!(e.status, Status::Unknown(_)))
    }

    /// How many options have each status.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for e in &self.entries {
            *m.entry(e.status.name()).or_insert(0) += 1;
        }
        m
    }

    /// The report as Salt's nested outputter prints a mapping: each file, then its
    /// options with their status, then a summary line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let mut file: Option<&Option<PathBuf>> = None;
        for e in &self.entries {
            if file != Some(&e.file) {
                file = Some(&e.file);
                out.push_str(&format!("{}:\n", e.file.as_ref().map(|f| f.display().to_string()).unwrap_or_else(|| "(no file)".into())));
            }
            let note = e.status.note();
            let sep = if note.is_empty() { "" } else { ": " };
            out.push_str(&format!("    {}:\n        {}{sep}{note}\n", e.key, e.status.name()));
        }
        let counts = self.counts();
        let parts: Vec<String> = ["honoured", "no effect", "default", "not implemented", "unknown"].iter().map(|n| format!("{} {n}", counts.get(n).unwrap_or(&0))).collect();
        out.push_str(&format!("Summary (against Salt {}): {}\n", salt_options().version, parts.join(", ")));
        out
    }

    /// The report as JSON: `{"options": {key: {"status", "file", "note"}}, "summary": {...}}`.
    pub fn json(&self) -> J {
        let options: serde_json::Map<String, J> = self
            .entries
            .iter()
            .map(|e| (e.key.clone(), json!({"status": e.status.name(), "file": e.file.as_ref().map(|f| f.display().to_string()), "note": e.status.note()})))
            .collect();
        json!({"options": options, "summary": self.counts(), "salt_version": salt_options().version})
    }
}

/// The name of the user this process runs as (effective uid).
pub fn current_user() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    crate::auth::publisher_acl::user_name(unsafe { libc::geteuid() })
}

/// Logs one warning per option of `cfg` not implemented at its value or unknown, and a
/// debug line for the others; returns the report.
pub fn warn_at_start(cfg: &MasterConfig) -> Report {
    let report = Report::of(cfg, current_user());
    for e in &report.entries {
        let file = e.file.as_ref().map(|f| f.display().to_string()).unwrap_or_default();
        match &e.status {
            Status::NotImplemented { feature, why } => tracing::warn!(option = %e.key, file = %file, "config option not implemented by Halite: {} ({why}; {feature})", e.key),
            Status::Unknown(note) => tracing::warn!(option = %e.key, file = %file, "unknown config option: {} ({note})", e.key),
            s => tracing::debug!(option = %e.key, file = %file, status = s.name(), "{}", s.note()),
        }
    }
    report
}

#[cfg(test)]
mod tests;
