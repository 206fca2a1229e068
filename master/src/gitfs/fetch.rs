//! Reading every remote for one update: for each remote, each saltenv it serves, the
//! commit that saltenv's ref names and the files of that commit (below `root`, under
//! `mountpoint`), with the contents they need. A remote that cannot be read is an
//! error of its own; the others are read all the same.

use std::collections::{BTreeMap, HashMap};

use gix::ObjectId;

use super::bounds::Budget;
use super::config::{GitfsConfig, RefType, Remote};
use super::repo::{Refs, Repo};
use super::saltenv;
use super::GitfsError;

/// One saltenv of one remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvTree {
    /// The ref it is served from, and the commit that ref named.
    pub git_ref: String,
    pub commit: ObjectId,
    /// Served path (below the mountpoint) → (mode, content id).
    pub files: BTreeMap<String, (u32, ObjectId)>,
}

/// What one remote serves, by saltenv, and its `fallback` ref's tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteTree {
    pub envs: BTreeMap<String, EnvTree>,
    /// Served for a saltenv whose own ref the repository does not hold (`serve.rs`).
    pub fallback: Option<EnvTree>,
}

/// What one update read: each configured remote's tree (in `gitfs_remotes` order) or
/// why it could not be read, and the contents by id.
#[derive(Debug, Default)]
pub struct Fetched {
    pub remotes: Vec<Result<RemoteTree, GitfsError>>,
    pub contents: HashMap<ObjectId, Vec<u8>>,
}

/// Reads every remote (I/O: the daemon calls it, never a handler).
pub fn fetch_all(cfg: &GitfsConfig) -> Fetched {
    fetch_some(cfg, None)
}

/// Reads the remotes `only` names (Salt matches `remotes` against each remote's id with
/// `fnmatch`: its `name`, else its URL), every one with `None`; the others are
/// [`GitfsError::NotRead`] and keep what they serve.
pub fn fetch_some(cfg: &GitfsConfig, only: Option<&[String]>) -> Fetched {
    let mut budget = Budget::default();
    let mut out = Fetched::default();
    for r in &cfg.remotes {
        if only.is_some_and(|names| !names.iter().any(|n| *n == r.id || super::saltenv::glob_match(&r.id, n))) {
            out.remotes.push(Err(GitfsError::NotRead));
            continue;
        }
        let got = read_remote(r, &mut budget, &mut out.contents);
        if let Err(e) = &got {
            tracing::error!(remote = %r.id, "gitfs: cannot read the remote; its last fetched files stay served: {e}");
        }
        out.remotes.push(got);
    }
    out
}

/// The commit `git_ref` names, trying the ref types in the remote's order.
pub fn resolve(repo: &Repo, refs: &Refs, types: &[RefType], git_ref: &str) -> Result<Option<ObjectId>, GitfsError> {
    for t in types {
        let id = match t {
            RefType::Branch => refs.branches.get(git_ref).copied(),
            RefType::Tag => refs.tags.get(git_ref).copied(),
            RefType::Sha if saltenv::is_hex(git_ref) && (git_ref.len() == 40 || git_ref.len() == 64) => repo.commit_by_hex(&git_ref.to_ascii_lowercase()),
            RefType::Sha => None,
        };
        if let Some(id) = id {
            return repo.commit_of(id).map(Some);
        }
    }
    Ok(None)
}

/// `mountpoint` + `path`.
fn served(mountpoint: &str, path: &str) -> String {
    if mountpoint.is_empty() {
        path.to_string()
    } else {
        format!("{mountpoint}/{path}")
    }
}

fn read_remote(r: &Remote, budget: &mut Budget, contents: &mut HashMap<ObjectId, Vec<u8>>) -> Result<RemoteTree, GitfsError> {
    let repo = Repo::open(&r.path)?;
    let refs = repo.refs_by(&r.refspecs)?;
    let branches = r.ref_types.contains(&RefType::Branch).then(|| refs.branches.keys().map(String::as_str)).into_iter().flatten();
    let tags = r.ref_types.contains(&RefType::Tag).then(|| refs.tags.keys().map(String::as_str)).into_iter().flatten();
    let mut out = RemoteTree::default();
    for env in saltenv::envs(r, branches, tags) {
        if halite_storage::id::validate_saltenv(&env).is_err() {
            tracing::warn!(remote = %r.id, saltenv = %env.escape_debug(), "gitfs: a ref whose name cannot be a saltenv (it holds a / or is too long) is not served");
            continue;
        }
        let Some(git_ref) = saltenv::ref_of(r, &env) else { continue };
        let Some(commit) = resolve(&repo, &refs, &r.ref_types, &git_ref)? else {
            tracing::debug!(remote = %r.id, saltenv = %env, git_ref = %git_ref, "gitfs: the saltenv's ref is not in the repository");
            continue;
        };
        let files = tree_files(r, &repo, commit, &saltenv::root_of(r, &env), &saltenv::mountpoint_of(r, &env), &env, budget, contents)?;
        out.envs.insert(env, EnvTree { git_ref, commit, files });
    }
    if let Some(fb) = &r.fallback {
        match resolve(&repo, &refs, &r.ref_types, fb)? {
            Some(commit) => {
                let files = tree_files(r, &repo, commit, &r.root, &r.mountpoint, "(fallback)", budget, contents)?;
                tracing::info!(remote = %r.id, fallback = %fb, %commit, "gitfs: the fallback ref read");
                out.fallback = Some(EnvTree { git_ref: fb.clone(), commit, files });
            }
            None => tracing::warn!(remote = %r.id, fallback = %fb, "gitfs: the fallback ref is not in the repository"),
        }
    }
    Ok(out)
}

/// The files of `commit` below `root`, served under `mountpoint`, their contents read.
#[allow(clippy::too_many_arguments)]
fn tree_files(r: &Remote, repo: &Repo, commit: ObjectId, root: &str, mountpoint: &str, env: &str, budget: &mut Budget, contents: &mut HashMap<ObjectId, Vec<u8>>) -> Result<BTreeMap<String, (u32, ObjectId)>, GitfsError> {
    let tree = repo.tree_of(commit)?;
    let mut files = BTreeMap::new();
    for e in repo.files(tree, root, budget)? {
        let path = served(mountpoint, &e.path);
        if halite_storage::id::validate_relative_path(&path).is_err() {
            tracing::warn!(remote = %r.id, saltenv = %env, "gitfs: a path that cannot be served is left out");
            continue;
        }
        if !contents.contains_key(&e.blob) {
            let data = repo.blob(e.blob)?;
            budget.content(data.len() as u64)?;
            contents.insert(e.blob, data);
        }
        files.insert(path, (e.mode, e.blob));
    }
    Ok(files)
}
