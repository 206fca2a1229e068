//! `salt-run fileserver.file_list`, `fileserver.dir_list`, `fileserver.envs`: the
//! `file_roots` tree as the applied state holds it (the roots records every member
//! applies, not one member's directory), in the shapes of Salt's `roots` backend:
//! sorted paths relative to the saltenv, directories being every directory that holds
//! a file (the state holds files, so an empty directory is not listed).
//!
//! `backend` may name `roots` (alone or in a comma-separated list); any other backend
//! has nothing here, so the answer is empty, as Salt's is for a backend with no files.

use std::collections::BTreeSet;

use serde_json::{json, Value as J};

use halite_storage::format::RootsTree;
use halite_storage::state::StateMachine;

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
        let sm = view.state();
        let v = match self {
            FileserverCmd::FileList { saltenv, roots } => json!(if roots { files(sm, &saltenv)? } else { BTreeSet::new() }),
            FileserverCmd::DirList { saltenv, roots } => json!(if roots { dirs(&files(sm, &saltenv)?) } else { BTreeSet::new() }),
            // Salt sorts what the backends give; with `sources` that is a mapping of
            // backend → envs, and sorting it leaves the backend names.
            FileserverCmd::Envs { roots: false, .. } => json!([]),
            FileserverCmd::Envs { sources: true, .. } => json!(["roots"]),
            FileserverCmd::Envs { .. } => json!(envs(view)?),
        };
        Ok(Plan::answer(json!({ "return": v })))
    }
}

/// The files of a saltenv of `file_roots`, sorted.
pub fn files(sm: &StateMachine, saltenv: &str) -> Result<BTreeSet<String>> {
    Ok(sm.roots_files()?.into_iter().filter(|(t, e, _, _)| *t == RootsTree::File && e == saltenv).map(|(_, _, p, _)| p).collect())
}

/// Every directory holding one of `files`, sorted.
pub fn dirs(files: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for f in files {
        let mut d = f.as_str();
        while let Some((parent, _)) = d.rsplit_once('/') {
            out.insert(parent.to_string());
            d = parent;
        }
    }
    out
}

/// The saltenvs: those `file_roots` configures and those the state holds files for.
pub fn envs(view: &dyn AdminView) -> Result<BTreeSet<String>> {
    let mut out: BTreeSet<String> = view.config().file_roots.keys().cloned().collect();
    out.extend(view.state().roots_files()?.into_iter().filter(|(t, _, _, _)| *t == RootsTree::File).map(|(_, e, _, _)| e));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_the_parents_of_files() {
        let f: BTreeSet<String> = ["top.sls", "web/init.sls", "web/files/a/b.conf"].iter().map(|s| s.to_string()).collect();
        assert_eq!(dirs(&f).into_iter().collect::<Vec<_>>(), ["web", "web/files", "web/files/a"]);
    }

    #[test]
    fn backends() {
        assert!(wants_roots(&J::Null));
        assert!(wants_roots(&json!("git,roots")));
        assert!(!wants_roots(&json!("git")));
    }
}
