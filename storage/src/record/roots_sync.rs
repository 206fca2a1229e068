//! The roots-sync record (kind 13): the commit of a `cluster.sync_roots`, decided at
//! apply (`state/roots.rs`).

use serde::{Deserialize, Serialize};

use super::roots_blob::RootsTree;
use super::roots_stage::check_sync_id;
use super::roots_tombstone::RootsTombstone;
use super::Payload;
use crate::error::{Error, Result};
use crate::id::{validate_relative_path, validate_saltenv};

/// A file as a [`RootsSync`] names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsSyncFile {
    pub tree: RootsTree,
    pub saltenv: String,
    pub path: String,
    pub mode: u32,
    pub size: u64,
    #[serde(with = "serde_bytes")]
    pub sha256: Vec<u8>,
}

/// The commit of a `cluster.sync_roots`: after it applies, the roots `trees` hold exactly
/// `files`, or nothing changed. Decided at apply, the same way on every member: each file
/// must be live already with that content and mode, or staged complete under `sync`
/// with that content; every live file of those trees that is not in `files` must be in
/// `remove` (what the proposer expected to remove). Anything else (content staged by
/// nobody, a file another sync added since the proposer read its state) fails the whole
/// sync. The staging area is cleared either way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsSync {
    #[serde(with = "serde_bytes")]
    pub sync: Vec<u8>,
    pub trees: Vec<RootsTree>,
    pub files: Vec<RootsSyncFile>,
    pub remove: Vec<RootsTombstone>,
    /// The git commits the files come from (a gitfs update, `trees` = `[gitfs]`);
    /// absent (never empty when written) for `cluster.sync_roots`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commits: Vec<super::roots_commit::RootsCommit>,
}

impl Payload for RootsSync {
    /// A sync id; distinct trees (file, pillar, gitfs); the commits a gitfs update
    /// names (`super::roots_commit`); every file and removal in those trees with
    /// a valid saltenv and safe path, each file named once with a 32-byte sha256 and
    /// permission bits only, no file both kept and removed.
    fn check(&self) -> Result<()> {
        let s = self;
        check_sync_id(&s.sync)?;
        let distinct: std::collections::BTreeSet<RootsTree> = s.trees.iter().copied().collect();
        if s.trees.is_empty() || distinct.len() != s.trees.len() {
            return Err(Error::Invalid("roots sync: trees must be file, pillar, gitfs or git_pillar, once each".into()));
        }
        super::roots_commit::check_commits(s)?;
        let mut seen = std::collections::HashSet::new();
        for f in &s.files {
            validate_saltenv(&f.saltenv)?;
            validate_relative_path(&f.path)?;
            if !s.trees.contains(&f.tree) || f.sha256.len() != 32 || f.mode & !0o7777 != 0 {
                return Err(Error::Invalid(format!("roots sync: file {} outside its trees, with a bad sha256 or mode", f.path)));
            }
            if !seen.insert((f.tree, f.saltenv.as_str(), f.path.as_str())) {
                return Err(Error::Invalid(format!("roots sync: file {} named twice", f.path)));
            }
        }
        for t in &s.remove {
            validate_saltenv(&t.saltenv)?;
            validate_relative_path(&t.path)?;
            if !s.trees.contains(&t.tree) || seen.contains(&(t.tree, t.saltenv.as_str(), t.path.as_str())) {
                return Err(Error::Invalid(format!("roots sync: removal of {} outside its trees or of a file it keeps", t.path)));
            }
        }
        Ok(())
    }
}
