//! `salt-run fileserver.file_list`, `fileserver.dir_list`, `fileserver.envs`,
//! `fileserver.update`: the file server's backends as the admin verbs read them, in
//! the shapes of Salt's `fileserver` runner (sorted paths relative to the saltenv).
//!
//! `roots` is the `file_roots` tree [`AdminView::roots`] reads (on a lone master and a
//! shared-filesystem member what minions are served, read from disk at the request; on
//! an isolated-filesystem member the log's roots records); `dir_list` is every
//! directory of the tree, as minions' `_dir_list` gets it. `gitfs` is the applied gitfs
//! tree (`crate::gitfs`), the same on every member.
//!
//! `fileserver.update [backend=gitfs]` reads every gitfs remote (on the daemon's side,
//! [`AdminView::gitfs_fetch`]) and, when the files changed, commits them as one unit
//! through the log (`crate::gitfs::plan`); it answers `True`, as Salt's does, once the
//! unit applied. The `roots` backend has nothing to update (it is read at each request).
//!
//! `backend` may name backends (a comma-separated string or a list); a backend that is
//! not configured has nothing, so the answer is empty, as Salt's is for a backend with
//! no files.

use std::collections::BTreeSet;

use serde_json::{json, Value as J};

use halite_storage::format::RootsTree;

use super::runner_args::RunnerArgs;
use super::{AdminView, Plan};
use crate::error::{Error, Result};
use crate::gitfs::Backend;

/// Which backends a `backend` argument names (`None`: all configured).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted(Option<Vec<String>>);

impl Wanted {
    fn of(backend: &J) -> Wanted {
        Wanted(match backend {
            J::Null => None,
            J::String(s) => Some(s.split(',').map(|b| b.trim().to_string()).collect()),
            J::Array(a) => Some(a.iter().filter_map(|b| b.as_str().map(str::to_string)).collect()),
            _ => Some(Vec::new()),
        })
    }

    fn has(&self, b: Backend) -> bool {
        match &self.0 {
            None => true,
            Some(names) => names.iter().any(|n| n.trim_end_matches("fs") == b.name().trim_end_matches("fs")),
        }
    }
}

/// A `fileserver.*` request.
#[derive(Debug, Clone, PartialEq)]
pub enum FileserverCmd {
    FileList { saltenv: String, backends: Wanted },
    DirList { saltenv: String, backends: Wanted },
    Envs { backends: Wanted, sources: bool },
    /// `remotes`: the gitfs remotes to read (their ids: `name`, else URL; Salt's
    /// `fnmatch` of `repo.id`); the others keep what they serve. `None`: every remote.
    Update { backends: Wanted, remotes: Option<Vec<String>> },
}

impl FileserverCmd {
    /// `fileserver.update backend=gitfs` (the daemon's timer), for the remotes that are
    /// due (`None`: all of them).
    pub fn update_gitfs(remotes: Option<Vec<String>>) -> FileserverCmd {
        FileserverCmd::Update { backends: Wanted(Some(vec!["gitfs".into()])), remotes }
    }

    pub fn parse(fun: &str, req: &J) -> Result<FileserverCmd> {
        let args = RunnerArgs::from_req(req);
        let list = || args.bind(fun, &[("saltenv", Some(json!("base"))), ("backend", Some(J::Null))], false);
        Ok(match fun {
            "fileserver.file_list" => {
                let b = list()?;
                FileserverCmd::FileList { saltenv: b.text("saltenv").unwrap_or_else(|| "base".into()), backends: Wanted::of(b.get("backend")) }
            }
            "fileserver.dir_list" => {
                let b = list()?;
                FileserverCmd::DirList { saltenv: b.text("saltenv").unwrap_or_else(|| "base".into()), backends: Wanted::of(b.get("backend")) }
            }
            "fileserver.envs" => {
                let b = args.bind(fun, &[("backend", Some(J::Null)), ("sources", Some(J::Bool(false)))], false)?;
                FileserverCmd::Envs { backends: Wanted::of(b.get("backend")), sources: b.truthy("sources") }
            }
            "fileserver.update" => {
                let b = args.bind(fun, &[("backend", Some(J::Null))], true)?;
                // Salt's gitfs `update(remotes=...)`: a list, or a comma-separated string.
                let remotes = match b.extra.get("remotes") {
                    None | Some(J::Null) => None,
                    Some(J::String(s)) => Some(s.split(',').map(|r| r.trim().to_string()).filter(|r| !r.is_empty()).collect()),
                    Some(J::Array(a)) => Some(a.iter().map(|r| r.as_str().map(str::to_string).ok_or_else(|| Error::refused("fileserver.update: remotes must be a list of remote names"))).collect::<Result<Vec<_>>>()?),
                    Some(_) => return Err(Error::refused("fileserver.update: remotes must be a list of remote names")),
                };
                FileserverCmd::Update { backends: Wanted::of(b.get("backend")), remotes }
            }
            other => return Err(Error::refused(format!("'{other}' is not available."))),
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let v = match self {
            FileserverCmd::FileList { saltenv, backends } => json!(listing(view, &backends, &saltenv, |l| l.files)),
            FileserverCmd::DirList { saltenv, backends } => json!(listing(view, &backends, &saltenv, |l| l.dirs)),
            // Salt sorts what the backends give; with `sources` that is a mapping of
            // backend → envs, and sorting it leaves the backend names.
            FileserverCmd::Envs { backends, sources: true } => json!(configured(view).into_iter().filter(|b| backends.has(*b)).map(Backend::name).collect::<BTreeSet<_>>()),
            FileserverCmd::Envs { backends, .. } => json!(envs_of(view, &backends)),
            FileserverCmd::Update { backends, remotes } => return update(view, &backends, remotes.as_deref()),
        };
        Ok(Plan::answer(json!({ "return": v })))
    }
}

/// The backends this master serves from: `roots` always (the admin verbs read it), and
/// `gitfs` when `fileserver_backend` lists it.
fn configured(view: &dyn AdminView) -> Vec<Backend> {
    let mut out = vec![Backend::Roots];
    if view.gitfs().is_some() {
        out.push(Backend::Gitfs);
    }
    out
}

fn listing(view: &dyn AdminView, wanted: &Wanted, saltenv: &str, pick: fn(crate::view::Listing) -> BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if wanted.has(Backend::Roots) {
        out.extend(pick(view.roots().list(RootsTree::File, saltenv)));
    }
    if let Some((_, g)) = view.gitfs().filter(|_| wanted.has(Backend::Gitfs)) {
        out.extend(pick(g.list(RootsTree::File, saltenv)));
    }
    out
}

fn envs_of(view: &dyn AdminView, wanted: &Wanted) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if wanted.has(Backend::Roots) {
        out.extend(envs(view));
    }
    if let Some((_, g)) = view.gitfs().filter(|_| wanted.has(Backend::Gitfs)) {
        out.extend(g.envs(RootsTree::File));
    }
    out
}

/// The saltenvs of `roots`: those `file_roots` configures and those the roots read hold
/// files for (the same on a master reading its disk).
pub fn envs(view: &dyn AdminView) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = view.config().file_roots.keys().cloned().collect();
    out.extend(view.roots().envs(RootsTree::File));
    out
}

/// `fileserver.update`: reads the gitfs remotes and commits what changed.
fn update(view: &dyn AdminView, wanted: &Wanted, remotes: Option<&[String]>) -> Result<Plan> {
    let Some((cfg, _)) = view.gitfs().filter(|(c, _)| wanted.has(Backend::Gitfs) && c.enabled()) else {
        return Ok(Plan::answer(json!({ "return": true })));
    };
    let fetched = view.gitfs_fetch(remotes)?;
    let applied: Vec<_> = view.state().roots_files_of(RootsTree::Gitfs)?.into_iter().map(|(_, env, path, meta)| (env, path, meta)).collect();
    let plan = crate::gitfs::plan::plan(cfg, &fetched, &applied);
    tracing::info!(written = plan.written, removed = plan.removed, unchanged = plan.unchanged, failed = ?plan.failed, commits = ?plan.commit.commits.iter().map(|c| format!("{} {} {}", c.remote, c.saltenv, c.commit)).collect::<Vec<_>>(), "gitfs update read");
    if !plan.changes() {
        return Ok(Plan::answer(json!({ "return": true })));
    }
    Ok(super::cluster::committing(plan.records, plan.commit, "fileserver.update", json!({ "return": true })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends() {
        assert!(Wanted::of(&J::Null).has(Backend::Roots));
        assert!(Wanted::of(&json!("git,roots")).has(Backend::Roots));
        assert!(Wanted::of(&json!("git")).has(Backend::Gitfs));
        assert!(!Wanted::of(&json!("gitfs")).has(Backend::Roots));
        assert!(Wanted::of(&json!(["gitfs"])).has(Backend::Gitfs));
    }
}
