//! The gitfs tree of the applied state as a [`RootsSource`]: what minions are served.
//! Every member serves what the log's last gitfs sync made live, so members that
//! applied the same index serve the same commits.
//!
//! Each remote's files are kept under its key; a lookup tries the remotes in
//! `gitfs_remotes` order and the first that has the path wins, as in Salt. A remote with
//! a `fallback` that does not serve the saltenv asked for (its ref is not in the
//! repository) serves its fallback tree instead, when the saltenv passes its whitelist
//! and blacklist and names a ref (Salt's `get_tree`).

use std::collections::BTreeSet;
use std::sync::Arc;

use halite_storage::format::RootsTree;
use halite_storage::state::StateMachine;

use super::config::{GitfsConfig, Remote};
use super::plan::{fallback_prefix, FALLBACK_ENV};
use super::saltenv;
use crate::view::{FileRef, Listing, RootsSource, Stat};

const TREE: RootsTree = RootsTree::Gitfs;

/// The served gitfs tree.
pub struct GitfsRoots {
    sm: Arc<StateMachine>,
    /// The remotes' keys, in `gitfs_remotes` order.
    keys: Vec<String>,
    /// Each remote's options when it has a `fallback` (same order).
    fallbacks: Vec<Option<Remote>>,
}

impl GitfsRoots {
    /// The tree of remotes known by their keys only (no fallback).
    pub fn new(sm: Arc<StateMachine>, keys: Vec<String>) -> Self {
        let fallbacks = vec![None; keys.len()];
        GitfsRoots { sm, keys, fallbacks }
    }

    /// The tree of a gitfs configuration's remotes.
    pub fn of(sm: Arc<StateMachine>, cfg: &GitfsConfig) -> Self {
        GitfsRoots { sm, keys: cfg.remotes.iter().map(|r| r.key.clone()).collect(), fallbacks: cfg.remotes.iter().map(|r| r.fallback.is_some().then(|| r.clone())).collect() }
    }

    /// Whether the remote `key` serves `saltenv` itself (holds any file of it).
    fn serves(&self, key: &str, saltenv: &str) -> bool {
        self.sm.roots_has_prefix(TREE, saltenv, &format!("{key}/")).unwrap_or(false)
    }

    /// The stored prefix `saltenv` is read from for the remote at `i`: its own files,
    /// its fallback tree (`base`, `<key>.fallback/`), or nothing.
    fn source(&self, i: usize, saltenv: &str) -> Option<(String, String)> {
        let key = &self.keys[i];
        let own = || Some((saltenv.to_string(), format!("{key}/")));
        let Some(r) = self.fallbacks[i].as_ref() else { return own() };
        if self.serves(key, saltenv) {
            return own();
        }
        (saltenv::exposed(r, saltenv) && saltenv::ref_of(r, saltenv).is_some()).then(|| (FALLBACK_ENV.to_string(), fallback_prefix(key)))
    }

    /// The served path of a stored one, when it belongs to a configured remote.
    fn strip<'a>(&self, stored: &'a str) -> Option<&'a str> {
        let (key, rest) = stored.split_once('/')?;
        self.keys.iter().any(|k| k == key).then_some(rest)
    }

    /// (saltenv, stored path) of a found file.
    fn located(file: &FileRef) -> Option<(&str, &str)> {
        file.path.split_once(':')
    }
}

impl RootsSource for GitfsRoots {
    /// A file is named `saltenv:<remote key>/<path>`.
    fn find(&self, _tree: RootsTree, saltenv: &str, rel: &str) -> Option<FileRef> {
        halite_storage::id::validate_saltenv(saltenv).ok()?;
        (0..self.keys.len()).find_map(|i| {
            let (env, prefix) = self.source(i, saltenv)?;
            let stored = format!("{prefix}{rel}");
            let found = self.sm.roots_file_meta(TREE, &env, &stored).ok().flatten().is_some();
            found.then(|| FileRef { path: format!("{env}:{stored}"), rel: rel.to_string() })
        })
    }

    fn read(&self, _tree: RootsTree, file: &FileRef, offset: u64, max: u64) -> Option<Vec<u8>> {
        let (saltenv, stored) = Self::located(file)?;
        self.sm.roots_file_range(TREE, saltenv, stored, offset, max).ok().flatten()
    }

    /// Salt's gitfs reports the file's git mode alone (`[mode]`): it is the first field
    /// here, the others zero.
    fn stat(&self, _tree: RootsTree, file: &FileRef) -> Option<Stat> {
        let (saltenv, stored) = Self::located(file)?;
        let meta = self.sm.roots_file_meta(TREE, saltenv, stored).ok().flatten()?;
        let mut s = [0i64; 10];
        s[0] = 0o100000 | meta.mode as i64;
        s[6] = meta.size as i64;
        Some(s)
    }

    fn list(&self, _tree: RootsTree, saltenv: &str) -> Listing {
        let mut l = Listing::default();
        let all = self.sm.roots_files_of(TREE).unwrap_or_default();
        let mut own = std::collections::HashSet::new();
        for (_, env, stored, _) in &all {
            if env == saltenv {
                if let Some(rel) = self.strip(stored) {
                    l.files.insert(rel.to_string());
                    own.insert(stored.split_once('/').map(|(k, _)| k.to_string()).unwrap_or_default());
                }
            }
        }
        // Remotes that do not serve the saltenv list their fallback tree, when it applies.
        if halite_storage::id::validate_saltenv(saltenv).is_ok() {
            for (i, key) in self.keys.iter().enumerate().filter(|(i, k)| self.fallbacks[*i].is_some() && !own.contains(*k)) {
                let Some((env, prefix)) = self.source(i, saltenv) else { continue };
                debug_assert!(prefix.starts_with(key.as_str()));
                for (_, e, stored, _) in &all {
                    if *e == env {
                        if let Some(rel) = stored.strip_prefix(&prefix) {
                            l.files.insert(rel.to_string());
                        }
                    }
                }
            }
        }
        l.dirs = crate::view::state::parents(&l.files);
        l
    }

    fn envs(&self, _tree: RootsTree) -> BTreeSet<String> {
        self.sm.roots_files_of(TREE).unwrap_or_default().into_iter().filter(|(_, _, stored, _)| self.strip(stored).is_some()).map(|(_, env, _, _)| env).collect()
    }
}
