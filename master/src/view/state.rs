//! The applied state as a [`RootsSource`]: the roots records (`roots_blob` records made
//! live by a `cluster.sync_roots` commit), the tree every member of a cluster holds
//! alike. The admin verbs of an isolated-filesystem member read it
//! (`MasterConfig::roots_from_log`); minions are always served from disk
//! ([`super::fs::FsRoots`]).

use std::collections::BTreeSet;

use halite_storage::format::RootsTree;
use halite_storage::state::StateMachine;

use super::{FileRef, Listing, RootsSource, Stat};

/// A file is named `saltenv:rel` (there is no path on a disk to report).
impl RootsSource for StateMachine {
    fn find(&self, tree: RootsTree, saltenv: &str, rel: &str) -> Option<FileRef> {
        let exists = self.roots_file(tree, saltenv, rel).ok().flatten().is_some();
        exists.then(|| FileRef { path: format!("{saltenv}:{rel}"), rel: rel.to_string() })
    }

    fn read(&self, tree: RootsTree, file: &FileRef, offset: u64, max: u64) -> Option<Vec<u8>> {
        let saltenv = file.path.split_once(':').map(|p| p.0)?;
        let (_, data) = self.roots_file(tree, saltenv, &file.rel).ok().flatten()?;
        let start = (offset.min(data.len() as u64)) as usize;
        let end = start.saturating_add(max.min(usize::MAX as u64) as usize).min(data.len());
        Some(data[start..end].to_vec())
    }

    fn stat(&self, _tree: RootsTree, _file: &FileRef) -> Option<Stat> {
        None
    }

    /// The files of a saltenv; its directories are those holding a file (the records
    /// hold files only, so no directory is empty and there are no links).
    fn list(&self, tree: RootsTree, saltenv: &str) -> Listing {
        let mut l = Listing::default();
        for (t, e, p, _) in self.roots_files().unwrap_or_default() {
            if t == tree && e == saltenv {
                l.files.insert(p);
            }
        }
        l.dirs = parents(&l.files);
        l
    }

    /// The saltenvs holding a file.
    fn envs(&self, tree: RootsTree) -> BTreeSet<String> {
        self.roots_files().unwrap_or_default().into_iter().filter(|(t, _, _, _)| *t == tree).map(|(_, e, _, _)| e).collect()
    }
}

/// Every directory holding one of `files`.
pub fn parents(files: &BTreeSet<String>) -> BTreeSet<String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use halite_storage::state::roots_records;

    #[test]
    fn the_roots_records_read_as_a_tree() {
        let sm = StateMachine::open_in_memory("view-state-roots").unwrap();
        let mut i = 0;
        for (env, path, body) in [("base", "top.sls", "base: {}\n"), ("base", "web/files/a.conf", "abc"), ("dev", "d.sls", "{}\n")] {
            let entries: Vec<(u64, _)> = roots_records(RootsTree::File, env, path, 0o644, body.as_bytes()).into_iter().map(|r| { i += 1; (i, r) }).collect();
            sm.apply(&entries).unwrap();
        }
        let f = RootsTree::File;
        let a = sm.find(f, "base", "web/files/a.conf").unwrap();
        assert_eq!(sm.read(f, &a, 1, 10).unwrap(), b"bc");
        assert_eq!(sm.read_all(f, &a).unwrap(), b"abc");
        assert!(sm.find(f, "dev", "top.sls").is_none() && sm.find(RootsTree::Pillar, "base", "top.sls").is_none());
        let l = sm.list(f, "base");
        assert_eq!(l.files.iter().map(String::as_str).collect::<Vec<_>>(), ["top.sls", "web/files/a.conf"]);
        assert_eq!(l.dirs.iter().map(String::as_str).collect::<Vec<_>>(), ["web", "web/files"]);
        assert_eq!(sm.envs(f).into_iter().collect::<Vec<_>>(), ["base", "dev"]);
        assert!(sm.envs(RootsTree::Pillar).is_empty());
    }
}
