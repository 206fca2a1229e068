//! The reactor (Salt's `reactor` master option): events whose tag matches a glob are
//! answered with the reactions of SLS files, rendered Jinja then YAML with the event's
//! `tag` and `data`.
//!
//! ```yaml
//! reactor:
//!   - 'salt/minion/*/start':
//!     - /srv/reactor/start.sls
//!   - 'salt/auth':
//!     - salt://reactor/auth.sls       # the base file roots (`SlsFile::Roots`)
//! ```
//!
//! The parts: [`Reactors`] (the option: which SLS files a tag names), [`render`] (an SLS
//! file to [`render::Reaction`]s, bounded), [`plan`] (reactions to the records of one
//! log entry and what follows once it applied), and the daemon's loop
//! (`crate::daemon::reactor`) that ties them to the bus and the log.
//!
//! Exactly once in a cluster: every member that sees an event (its own, or one a peer
//! forwarded) proposes one entry starting with a `reaction` record (kind 17) whose id is
//! [`event_id`], the same on every member; the state machine applies the first entry
//! for an id and skips the others whole (`halite_storage::reaction`). The member whose
//! entry applied carries out the rest (events, runners).

pub mod plan;
pub mod render;

use std::path::{Path, PathBuf};

use serde_json::Value as J;
use sha2::{Digest, Sha256};

use crate::events::Event;
use crate::glob::fnmatch;

/// Most `{glob: [sls]}` rules read from the option.
const MAX_RULES: usize = 1000;

/// The `reactor` option: tag globs and the SLS files each names, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reactors {
    rules: Vec<(String, Vec<String>)>,
}

impl Reactors {
    /// Reads the option (a list of one-key maps, each naming one SLS path or a list of
    /// them). Entries of another shape are skipped with a warning, as Salt skips them.
    pub fn from_option(v: Option<&serde_yaml::Value>) -> Reactors {
        use serde_yaml::Value as Y;
        let mut rules = Vec::new();
        let Some(v) = v else { return Reactors { rules } };
        let Y::Sequence(list) = v else {
            tracing::warn!("`reactor` is not a list of {{tag glob: [sls files]}} maps; no reactor runs (a file name there is not supported)");
            return Reactors { rules };
        };
        for item in list.iter().take(MAX_RULES) {
            let Some((Y::String(glob), val)) = item.as_mapping().filter(|m| m.len() == 1).and_then(|m| m.iter().next()) else {
                tracing::warn!("a `reactor` entry that is not a one-key map of a tag glob skipped");
                continue;
            };
            let files: Vec<String> = match val {
                Y::String(s) => vec![s.clone()],
                Y::Sequence(s) => s.iter().filter_map(|f| f.as_str().map(String::from)).collect(),
                _ => Vec::new(),
            };
            rules.push((glob.clone(), files));
        }
        Reactors { rules }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The SLS files for a tag: those of every matching glob, in the option's order.
    pub fn sls_for(&self, tag: &str) -> Vec<String> {
        self.rules.iter().filter(|(g, _)| fnmatch(g, tag)).flat_map(|(_, f)| f.iter().cloned()).collect()
    }
}

/// Where a reactor SLS is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlsFile {
    /// `salt://rel`: the `base` saltenv of the file roots the admin verbs read
    /// (`crate::admin::AdminView::roots`: what minions are served, or the log's roots
    /// records on an isolated-filesystem member).
    Roots(String),
    /// A path on this master's disk.
    Path(PathBuf),
}

impl std::fmt::Display for SlsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlsFile::Roots(rel) => write!(f, "salt://{rel}"),
            SlsFile::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// The files an SLS reference names: `salt://path` a file of the roots (none when the
/// path is not a safe relative one), a path whose last part is a glob every matching
/// file (sorted), a plain path itself.
pub fn resolve(sls: &str) -> Vec<SlsFile> {
    if let Some(rel) = sls.strip_prefix("salt://") {
        return crate::req::files::safe_rel(rel).map(SlsFile::Roots).into_iter().collect();
    }
    let path = Path::new(sls);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if !name.contains(['*', '?', '[']) {
        return vec![SlsFile::Path(path.to_path_buf())];
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).filter(|e| e.file_name().to_str().is_some_and(|n| fnmatch(name, n))).map(|e| e.path()).collect())
        .unwrap_or_default();
    out.sort();
    out.into_iter().map(SlsFile::Path).collect()
}

/// The id of an event, the same on every member that fires it: its time (`_stamp`, as
/// a 20-digit jid), then the SHA-256 of its tag and its data without `__peer_id` (the
/// only field forwarding adds), keys in sorted order. `None` for an event without a
/// `_stamp` (every event fired on a bus has one).
pub fn event_id(e: &Event) -> Option<String> {
    let stamp = e.data().get("_stamp")?.as_str()?;
    let digits: String = stamp.chars().filter(char::is_ascii_digit).collect();
    if digits.len() != 20 {
        return None;
    }
    let mut h = Sha256::new();
    h.update((e.tag.len() as u64).to_be_bytes());
    h.update(e.tag.as_bytes());
    let mut data = e.data().clone();
    if let J::Object(m) = &mut data {
        m.shift_remove("__peer_id");
    }
    canonical(&data, &mut h);
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("{digits}{hex}"))
}

/// Feeds a JSON value to the hash with map keys sorted (the order a map arrived in
/// differs between members).
fn canonical(v: &J, h: &mut Sha256) {
    match v {
        J::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            h.update(b"{");
            for k in keys {
                h.update(serde_json::to_string(k).unwrap_or_default().as_bytes());
                h.update(b":");
                canonical(&m[k], h);
                h.update(b",");
            }
            h.update(b"}");
        }
        J::Array(a) => {
            h.update(b"[");
            for x in a {
                canonical(x, h);
                h.update(b",");
            }
            h.update(b"]");
        }
        other => h.update(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_option_names_files_by_tag_glob() {
        let y: serde_yaml::Value = serde_yaml::from_str("- 'salt/minion/*/start': [/a.sls, /b.sls]\n- 'salt/auth': /c.sls\n- 'salt/*': [/d.sls]\n- bad\n").unwrap();
        let r = Reactors::from_option(Some(&y));
        assert_eq!(r.sls_for("salt/minion/m1/start"), ["/a.sls", "/b.sls", "/d.sls"]);
        assert_eq!(r.sls_for("salt/auth"), ["/c.sls", "/d.sls"]);
        assert!(r.sls_for("other").is_empty());
        assert!(Reactors::from_option(Some(&serde_yaml::Value::String("/etc/salt/reactor.conf".into()))).is_empty());
    }

    #[test]
    fn an_event_has_one_id_wherever_it_is_fired() {
        let here = crate::events::event("t/1", json!({"id": "m1", "b": [1, {"y": 2, "x": 1}], "_stamp": "2026-11-24T00:30:00.123456"}));
        // As a peer receives it: keys in another order, `__peer_id` added.
        let there = crate::events::event("t/1", json!({"_stamp": "2026-11-24T00:30:00.123456", "b": [1, {"x": 1, "y": 2}], "id": "m1", "__peer_id": "127.0.0.2"}));
        let id = event_id(&here).unwrap();
        assert_eq!(id.len(), halite_storage::reaction::REACTION_ID_LEN);
        assert!(id.starts_with("20261124003000123456"));
        assert_eq!(event_id(&there).unwrap(), id);
        let other = crate::events::event("t/2", here.data().clone());
        assert_ne!(event_id(&other).unwrap(), id);
        let later = crate::events::event("t/1", json!({"id": "m1", "b": [1, {"y": 2, "x": 1}], "_stamp": "2026-11-24T00:30:00.123457"}));
        assert_ne!(event_id(&later).unwrap(), id);
        assert_eq!(event_id(&crate::events::event("t", json!({}))), None);
    }

    #[test]
    fn references_resolve_to_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.sls"), "").unwrap();
        std::fs::write(d.path().join("b.sls"), "").unwrap();
        std::fs::write(d.path().join("c.txt"), "").unwrap();
        let glob = format!("{}/*.sls", d.path().display());
        assert_eq!(resolve(&glob), [SlsFile::Path(d.path().join("a.sls")), SlsFile::Path(d.path().join("b.sls"))]);
        assert_eq!(resolve("salt://reactor/b.sls"), [SlsFile::Roots("reactor/b.sls".into())]);
        assert!(resolve("salt://../b.sls").is_empty() && resolve("salt:///etc/passwd").is_empty());
        assert_eq!(resolve("salt://b.sls")[0].to_string(), "salt://b.sls");
    }
}
