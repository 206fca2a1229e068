//! One remote repository read with gitoxide (`gix`), in process: its branches and tags,
//! the commit each names, and the files of a commit's tree. Every object's size is read
//! from its header and checked against [`super::bounds`] before it is inflated.
//!
//! The repository is opened with gix's isolated options: no global or system git
//! configuration and no environment variables are read, and nothing of the repository
//! is executed. Symlinks and submodules in a tree are not served.

use std::collections::BTreeMap;
use std::path::Path;

use gix::objs::Kind;
use gix::ObjectId;

use super::bounds::{Budget, MAX_DEPTH, MAX_FILE_BYTES, MAX_META_BYTES, MAX_REFS, MAX_TAG_CHAIN};
use super::config::{Refspec, DEFAULT_REFSPECS};
use super::GitfsError;

/// An opened repository.
pub struct Repo {
    repo: gix::Repository,
}

/// The branches and tags of a repository, by short name, each with the object it names.
#[derive(Debug, Default)]
pub struct Refs {
    pub branches: BTreeMap<String, ObjectId>,
    pub tags: BTreeMap<String, ObjectId>,
}

/// A file of a tree: its path below the walked directory, mode (`0o644` or `0o755`) and
/// content id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub mode: u32,
    pub blob: ObjectId,
}

const MODE_TREE: u16 = 0o040000;
const MODE_LINK: u16 = 0o120000;
const MODE_COMMIT: u16 = 0o160000;

impl Repo {
    pub fn open(path: &Path) -> Result<Repo, GitfsError> {
        let opts = gix::open::Options::isolated();
        let repo = gix::open_opts(path, opts).map_err(|e| GitfsError::Open { path: path.display().to_string(), why: e.to_string() })?;
        Ok(Repo { repo })
    }

    /// The local branches and the tags (symbolic refs are left out), as Salt's default
    /// refspecs make them.
    pub fn refs(&self) -> Result<Refs, GitfsError> {
        let specs: Vec<Refspec> = DEFAULT_REFSPECS.iter().filter_map(|s| Refspec::parse(s)).collect();
        self.refs_by(&specs)
    }

    /// The branches and tags `specs` make of the repository's refs: a ref mapped under
    /// `refs/remotes/origin/` is a branch, under `refs/tags/` a tag (the first refspec
    /// that maps a ref wins); symbolic refs are left out.
    pub fn refs_by(&self, specs: &[Refspec]) -> Result<Refs, GitfsError> {
        let platform = self.repo.references().map_err(|e| GitfsError::read("the refs", e))?;
        let mut out = Refs::default();
        let mut seen = 0usize;
        for r in platform.all().map_err(|e| GitfsError::read("the refs", e))? {
            let r = r.map_err(|e| GitfsError::read("a ref", e))?;
            seen += 1;
            if seen > MAX_REFS {
                return Err(GitfsError::TooLarge { what: "the refs of the repository".into(), limit: format!("{MAX_REFS} refs") });
            }
            let Ok(name) = std::str::from_utf8(r.name().as_bstr()) else {
                tracing::warn!("gitfs: a ref whose name is not UTF-8 is not served");
                continue;
            };
            let Some(id) = r.try_id() else { continue };
            let Some(dst) = specs.iter().find_map(|s| s.map(name)) else { continue };
            if let Some(b) = dst.strip_prefix("refs/remotes/origin/") {
                out.branches.entry(b.to_string()).or_insert(id.detach());
            } else if let Some(t) = dst.strip_prefix("refs/tags/") {
                out.tags.entry(t.to_string()).or_insert(id.detach());
            }
        }
        Ok(out)
    }

    /// The kind of an object, after checking its size.
    fn kind(&self, id: ObjectId, max: u64, what: &str) -> Result<Kind, GitfsError> {
        let h = self.repo.find_header(id).map_err(|e| GitfsError::read(format!("{what} {id}"), e))?;
        if h.size() > max {
            return Err(GitfsError::TooLarge { what: format!("{what} {id} of {} bytes", h.size()), limit: format!("{max} bytes") });
        }
        Ok(h.kind())
    }

    /// The commit an object names: itself, or what a chain of annotated tags points to.
    pub fn commit_of(&self, mut id: ObjectId) -> Result<ObjectId, GitfsError> {
        for _ in 0..=MAX_TAG_CHAIN {
            match self.kind(id, MAX_META_BYTES, "object")? {
                Kind::Commit => return Ok(id),
                Kind::Tag => {
                    let tag = self.repo.find_tag(id).map_err(|e| GitfsError::read(format!("tag {id}"), e))?;
                    id = tag.target_id().map_err(|e| GitfsError::read(format!("tag {id}"), e))?.detach();
                }
                other => return Err(GitfsError::Refused(format!("{id} is a {other:?}, not a commit"))),
            }
        }
        Err(GitfsError::Refused(format!("a chain of more than {MAX_TAG_CHAIN} tags")))
    }

    /// The commit a full hex id names, if the repository holds it.
    pub fn commit_by_hex(&self, hex: &str) -> Option<ObjectId> {
        let id = ObjectId::from_hex(hex.as_bytes()).ok()?;
        self.commit_of(id).ok()
    }

    /// The tree of a commit.
    pub fn tree_of(&self, commit: ObjectId) -> Result<ObjectId, GitfsError> {
        self.kind(commit, MAX_META_BYTES, "commit")?;
        let c = self.repo.find_commit(commit).map_err(|e| GitfsError::read(format!("commit {commit}"), e))?;
        Ok(c.tree_id().map_err(|e| GitfsError::read(format!("commit {commit}"), e))?.detach())
    }

    /// The entries of one tree, owned: (name, mode, id).
    fn entries(&self, id: ObjectId) -> Result<Vec<(Vec<u8>, u16, ObjectId)>, GitfsError> {
        if self.kind(id, MAX_META_BYTES, "tree")? != Kind::Tree {
            return Err(GitfsError::Refused(format!("{id} is not a tree")));
        }
        let t = self.repo.find_tree(id).map_err(|e| GitfsError::read(format!("tree {id}"), e))?;
        let decoded = t.decode().map_err(|e| GitfsError::read(format!("tree {id}"), e))?;
        Ok(decoded.entries.iter().map(|e| (e.filename.to_vec(), e.mode.value(), e.oid.to_owned())).collect())
    }

    /// Every file below directory `root` (`""`: the whole tree) of a tree, with paths
    /// relative to `root`. A `root` the tree does not hold has no files.
    pub fn files(&self, tree: ObjectId, root: &str, budget: &mut Budget) -> Result<Vec<Entry>, GitfsError> {
        let mut at = tree;
        for comp in root.split('/').filter(|c| !c.is_empty()) {
            match self.entries(at)?.into_iter().find(|(n, m, _)| n == comp.as_bytes() && *m == MODE_TREE) {
                Some((_, _, id)) => at = id,
                None => return Ok(Vec::new()),
            }
        }
        let mut out = Vec::new();
        let mut stack = vec![(String::new(), at, 0usize)];
        while let Some((dir, id, depth)) = stack.pop() {
            for (name, mode, oid) in self.entries(id)? {
                let Some(name) = std::str::from_utf8(&name).ok().filter(|n| !n.is_empty() && *n != "." && *n != ".." && !n.contains(['/', '\\', '\0'])) else {
                    tracing::warn!(dir = %dir, "gitfs: a tree entry whose name cannot be served is left out");
                    continue;
                };
                let path = if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") };
                match mode {
                    MODE_TREE => {
                        if depth + 1 > MAX_DEPTH {
                            return Err(GitfsError::TooLarge { what: format!("the depth of {path}"), limit: format!("{MAX_DEPTH} levels") });
                        }
                        stack.push((path, oid, depth + 1));
                    }
                    MODE_LINK | MODE_COMMIT => tracing::debug!(path = %path, "gitfs: symlinks and submodules are not served"),
                    m if m & 0o170000 == 0o100000 => {
                        budget.file()?;
                        out.push(Entry { path, mode: if m & 0o111 != 0 { 0o755 } else { 0o644 }, blob: oid });
                    }
                    m => tracing::warn!(path = %path, mode = format!("{m:o}"), "gitfs: a tree entry of unknown mode is left out"),
                }
            }
        }
        Ok(out)
    }

    /// A file's content.
    pub fn blob(&self, id: ObjectId) -> Result<Vec<u8>, GitfsError> {
        if self.kind(id, MAX_FILE_BYTES, "file")? != Kind::Blob {
            return Err(GitfsError::Refused(format!("{id} is not a file")));
        }
        let mut b = self.repo.find_blob(id).map_err(|e| GitfsError::read(format!("file {id}"), e))?;
        let data = b.take_data();
        if data.len() as u64 > MAX_FILE_BYTES {
            return Err(GitfsError::TooLarge { what: format!("file {id}"), limit: format!("{MAX_FILE_BYTES} bytes") });
        }
        Ok(data)
    }
}


