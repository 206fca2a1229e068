//! The gitfs tree of the applied state as a [`RootsSource`]: what minions are served.
//! Every member serves what the log's last gitfs sync made live, so members that
//! applied the same index serve the same commits.
//!
//! Each remote's files are kept under its key; a lookup tries the remotes in
//! `gitfs_remotes` order and the first that has the path wins, as in Salt.

use std::collections::BTreeSet;
use std::sync::Arc;

use halite_storage::format::RootsTree;
use halite_storage::state::StateMachine;

use crate::view::{FileRef, Listing, RootsSource, Stat};

const TREE: RootsTree = RootsTree::Gitfs;

/// The served gitfs tree.
pub struct GitfsRoots {
    sm: Arc<StateMachine>,
    /// The remotes' keys, in `gitfs_remotes` order.
    keys: Vec<String>,
}

impl GitfsRoots {
    pub fn new(sm: Arc<StateMachine>, keys: Vec<String>) -> Self {
        GitfsRoots { sm, keys }
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
        self.keys.iter().find_map(|key| {
            let stored = format!("{key}/{rel}");
            let found = self.sm.roots_file_meta(TREE, saltenv, &stored).ok().flatten().is_some();
            found.then(|| FileRef { path: format!("{saltenv}:{stored}"), rel: rel.to_string() })
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
        for (_, env, stored, _) in self.sm.roots_files_of(TREE).unwrap_or_default() {
            if env == saltenv {
                if let Some(rel) = self.strip(&stored) {
                    l.files.insert(rel.to_string());
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
