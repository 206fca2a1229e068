//! `salt-run git_pillar.update [branch=...] [repo=...]`: reads the git_pillar remotes
//! (on the daemon's side, [`AdminView::git_pillar_fetch`]) and commits what changed as
//! one `roots_sync` of the `git_pillar` tree naming the commits
//! (`crate::gitfs::plan::plan_tree`), so every member compiles pillar from the same
//! commits once it applied. Remotes `branch` / `repo` (its URL or `name`) leave out keep
//! their applied files.
//!
//! The answer is Salt's: `{remote id ("<branch> <url>" as configured): True}` when the remote's files changed, `None`
//! when they did not, `False` when it could not be read; no remote configured (or none
//! matching) is an error, as Salt's runner raises.

use std::collections::HashSet;

use serde_json::{json, Map, Value as J};

use halite_storage::format::RootsTree;

use super::runner_args::RunnerArgs;
use super::{AdminView, Plan};
use crate::error::{Error, Result};
use crate::gitfs::GitfsError;
use crate::pillar::ext::ExtPillarConfig;

const TREE: RootsTree = RootsTree::GitPillar;

/// A `git_pillar.update` request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GitPillarUpdate {
    pub branch: Option<String>,
    pub repo: Option<String>,
}

impl GitPillarUpdate {
    pub fn parse(fun: &str, req: &J) -> Result<GitPillarUpdate> {
        let b = RunnerArgs::from_req(req).bind(fun, &[("branch", Some(J::Null)), ("repo", Some(J::Null))], false)?;
        Ok(GitPillarUpdate { branch: b.text("branch"), repo: b.text("repo") })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let ext = ExtPillarConfig::from_raw(&view.config().raw);
        let cfg = ext.git.gitfs();
        let wanted: Vec<bool> = ext
            .git
            .remotes
            .iter()
            .map(|r| self.branch.as_ref().is_none_or(|b| *b == r.branch) && self.repo.as_ref().is_none_or(|p| *p == r.fetch.url || *p == r.fetch.id))
            .collect();
        if !wanted.contains(&true) {
            return Err(Error::refused(if self.branch.is_some() || self.repo.is_some() { "Specified git branch/repo not found in ext_pillar config" } else { "No git_pillar remotes are configured" }));
        }
        let mut fetched = view.git_pillar_fetch(&cfg)?;
        // A remote not asked for keeps its applied files (the plan keeps those of a
        // remote it could not read).
        for (got, w) in fetched.remotes.iter_mut().zip(&wanted) {
            if !w {
                *got = Err(GitfsError::Refused("not asked for".into()));
            }
        }
        let applied: Vec<_> = view.state().roots_files_of(TREE)?.into_iter().map(|(_, env, path, meta)| (env, path, meta)).collect();
        let plan = crate::gitfs::plan::plan_tree(TREE, &cfg, &fetched, &applied);
        // Which remotes' files change: a file written or removed below its key.
        let before: HashSet<(&str, &str, &[u8], u32)> = applied.iter().map(|(e, p, m)| (e.as_str(), p.as_str(), m.sha256.as_slice(), m.mode)).collect();
        let mut changed: HashSet<&str> = HashSet::new();
        for f in &plan.commit.files {
            if !before.contains(&(f.saltenv.as_str(), f.path.as_str(), f.sha256.as_slice(), f.mode)) {
                changed.insert(f.path.split('/').next().unwrap_or(""));
            }
        }
        for t in &plan.commit.remove {
            changed.insert(t.path.split('/').next().unwrap_or(""));
        }
        let mut ret = Map::new();
        for ((r, got), w) in ext.git.remotes.iter().map(|g| &g.fetch).zip(&fetched.remotes).zip(&wanted) {
            if *w {
                let id = ext.git.remotes.iter().find(|g| g.fetch.key == r.key).map(|g| g.id.clone()).unwrap_or_default();
                ret.insert(id, if got.is_err() { J::Bool(false) } else if changed.contains(r.key.as_str()) { J::Bool(true) } else { J::Null });
            }
        }
        tracing::info!(written = plan.written, removed = plan.removed, unchanged = plan.unchanged, commits = ?plan.commit.commits.iter().map(|c| format!("{} {} {}", c.remote, c.saltenv, c.commit)).collect::<Vec<_>>(), "git_pillar update read");
        let ret = J::Object(ret);
        if !plan.changes() {
            return Ok(Plan::answer(json!({ "return": ret })));
        }
        Ok(super::cluster::committing(plan.records, plan.commit, "git_pillar.update", json!({ "return": ret })))
    }
}
