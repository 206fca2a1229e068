//! The file server as the master's own readers see it: the backends of
//! `fileserver_backend` in order (`roots`, `gitfs`), the first holding a path serving it,
//! as minions are served (`crate::req::files`). The reactor's and orchestration's
//! `salt://` files are read through it.

use std::collections::BTreeSet;

use halite_storage::format::RootsTree;

use super::{FileRef, Listing, RootsSource, Stat};

/// Several sources, first wins; a found file's path is prefixed with its source's
/// place in the list (`<n>:`), so reads go back to it.
pub struct Chained<'a>(pub Vec<&'a dyn RootsSource>);

impl Chained<'_> {
    /// The source a found file came from, and the file as that source named it.
    fn of(&self, file: &FileRef) -> Option<(&dyn RootsSource, FileRef)> {
        let (n, path) = file.path.split_once(':')?;
        let src = *self.0.get(n.parse::<usize>().ok()?)?;
        Some((src, FileRef { path: path.to_string(), rel: file.rel.clone() }))
    }
}

impl RootsSource for Chained<'_> {
    fn find(&self, tree: RootsTree, saltenv: &str, rel: &str) -> Option<FileRef> {
        self.0.iter().enumerate().find_map(|(n, src)| src.find(tree, saltenv, rel).map(|f| FileRef { path: format!("{n}:{}", f.path), rel: f.rel }))
    }

    fn read(&self, tree: RootsTree, file: &FileRef, offset: u64, max: u64) -> Option<Vec<u8>> {
        let (src, f) = self.of(file)?;
        src.read(tree, &f, offset, max)
    }

    fn stat(&self, tree: RootsTree, file: &FileRef) -> Option<Stat> {
        let (src, f) = self.of(file)?;
        src.stat(tree, &f)
    }

    fn list(&self, tree: RootsTree, saltenv: &str) -> Listing {
        let mut out = Listing::default();
        for src in &self.0 {
            let l = src.list(tree, saltenv);
            out.files.extend(l.files);
            out.empty_dirs.extend(l.empty_dirs);
            out.dirs.extend(l.dirs);
            for (k, v) in l.links {
                out.links.entry(k).or_insert(v);
            }
        }
        out
    }

    fn envs(&self, tree: RootsTree) -> BTreeSet<String> {
        self.0.iter().flat_map(|s| s.envs(tree)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::memory::MemoryRoots;

    #[test]
    fn the_first_source_holding_a_path_serves_it() {
        let (mut a, mut b) = (MemoryRoots::default(), MemoryRoots::default());
        a.put(RootsTree::File, "base", "both.sls", b"from a");
        b.put(RootsTree::File, "base", "both.sls", b"from b");
        b.put(RootsTree::File, "base", "only-b.sls", b"b only");
        b.put(RootsTree::File, "dev", "x.sls", b"x");
        let c = Chained(vec![&a, &b]);
        let read = |p: &str| String::from_utf8(c.read_all(RootsTree::File, &c.find(RootsTree::File, "base", p).unwrap()).unwrap()).unwrap();
        assert_eq!(read("both.sls"), "from a");
        assert_eq!(read("only-b.sls"), "b only");
        assert!(c.find(RootsTree::File, "base", "none.sls").is_none());
        assert_eq!(c.list(RootsTree::File, "base").files.into_iter().collect::<Vec<_>>(), ["both.sls", "only-b.sls"]);
        assert_eq!(c.envs(RootsTree::File).into_iter().collect::<Vec<_>>(), ["base", "dev"]);
        let f = c.find(RootsTree::File, "base", "only-b.sls").unwrap();
        assert_eq!(c.stat(RootsTree::File, &f), b.stat(RootsTree::File, &b.find(RootsTree::File, "base", "only-b.sls").unwrap()));
    }
}
