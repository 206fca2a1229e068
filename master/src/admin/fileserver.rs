//! `salt-run fileserver.file_list`, `fileserver.dir_list`, `fileserver.envs`: the
//! `file_roots` tree the admin verbs read ([`AdminView::roots`]: on a lone master and a
//! shared-filesystem member what minions are served, read from disk at the request; on
//! an isolated-filesystem member the log's roots records), in the shapes of Salt's
//! `roots` backend: sorted paths relative to the saltenv. `dir_list` is every directory
//! of the tree, as minions' `_dir_list` gets it (from the records: every directory
//! holding a file, since they hold files only).
//!
//! `backend` may name `roots` (alone or in a comma-separated list); any other backend
//! has nothing here, so the answer is empty, as Salt's is for a backend with no files.

use std::collections::BTreeSet;

use serde_json::{json, Value as J};

use halite_storage::format::RootsTree;

use super::runner_args::RunnerArgs;
use super::{AdminView, Plan};
use crate::error::{Error, Result};

/// A `fileserver.*` request.
#[derive(Debug, Clone, PartialEq)]
pub enum FileserverCmd {
    FileList { saltenv: String, roots: bool },
    DirList { saltenv: String, roots: bool },
    Envs { roots: bool, sources: bool },
}

/// Whether a `backend` argument includes the `roots` backend (none given: all do).
fn wants_roots(backend: &J) -> bool {
    match backend {
        J::Null => true,
        J::String(s) => s.split(',').any(|b| b.trim() == "roots"),
        J::Array(a) => a.iter().any(|b| b.as_str() == Some("roots")),
        _ => false,
    }
}

impl FileserverCmd {
    pub fn parse(fun: &str, req: &J) -> Result<FileserverCmd> {
        let args = RunnerArgs::from_req(req);
        let list = || args.bind(fun, &[("saltenv", Some(json!("base"))), ("backend", Some(J::Null))], false);
        Ok(match fun {
            "fileserver.file_list" => {
                let b = list()?;
                FileserverCmd::FileList { saltenv: b.text("saltenv").unwrap_or_else(|| "base".into()), roots: wants_roots(b.get("backend")) }
            }
            "fileserver.dir_list" => {
                let b = list()?;
                FileserverCmd::DirList { saltenv: b.text("saltenv").unwrap_or_else(|| "base".into()), roots: wants_roots(b.get("backend")) }
            }
            "fileserver.envs" => {
                let b = args.bind(fun, &[("backend", Some(J::Null)), ("sources", Some(J::Bool(false)))], false)?;
                FileserverCmd::Envs { roots: wants_roots(b.get("backend")), sources: b.truthy("sources") }
            }
            other => return Err(Error::refused(format!("'{other}' is not available."))),
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let list = |saltenv: &str| view.roots().list(RootsTree::File, saltenv);
        let v = match self {
            FileserverCmd::FileList { saltenv, roots } => json!(if roots { list(&saltenv).files } else { BTreeSet::new() }),
            FileserverCmd::DirList { saltenv, roots } => json!(if roots { list(&saltenv).dirs } else { BTreeSet::new() }),
            // Salt sorts what the backends give; with `sources` that is a mapping of
            // backend → envs, and sorting it leaves the backend names.
            FileserverCmd::Envs { roots: false, .. } => json!([]),
            FileserverCmd::Envs { sources: true, .. } => json!(["roots"]),
            FileserverCmd::Envs { .. } => json!(envs(view)),
        };
        Ok(Plan::answer(json!({ "return": v })))
    }
}

/// The saltenvs: those `file_roots` configures and those the roots read hold files for
/// (the same on a master reading its disk).
pub fn envs(view: &dyn AdminView) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = view.config().file_roots.keys().cloned().collect();
    out.extend(view.roots().envs(RootsTree::File));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends() {
        assert!(wants_roots(&J::Null));
        assert!(wants_roots(&json!("git,roots")));
        assert!(!wants_roots(&json!("git")));
    }
}
