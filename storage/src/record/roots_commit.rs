//! The git commits a gitfs update names in its `roots_sync` record
//! ([`crate::format::RootsSync::commits`]): which commit of which remote each saltenv of
//! the `gitfs` roots tree holds after the sync applies, so the log says what every
//! member serves from that index on.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use super::roots_blob::RootsTree;
use super::roots_sync::RootsSync;
use crate::id::validate_saltenv;

/// Most commits one sync names (remotes × saltenvs).
pub const MAX_COMMITS: usize = 10_000;
/// Longest remote name (its `name` option or its URL).
pub const MAX_REMOTE_LEN: usize = 4096;

/// One saltenv of one remote, and the commit its files come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsCommit {
    /// The remote as configured: its `name`, else its URL.
    pub remote: String,
    pub saltenv: String,
    /// The commit id, lowercase hex (40 digits for SHA-1, 64 for SHA-256).
    pub commit: String,
}

/// The checks of a sync's commits: only a sync of the `gitfs` or the `git_pillar` tree
/// alone names any.
pub(crate) fn check_commits(s: &RootsSync) -> Result<()> {
    if s.commits.is_empty() {
        return Ok(());
    }
    if s.trees != [RootsTree::Gitfs] && s.trees != [RootsTree::GitPillar] {
        return Err(Error::Invalid("roots sync: only a sync of the gitfs or the git_pillar tree alone names commits".into()));
    }
    if s.commits.len() > MAX_COMMITS {
        return Err(Error::Invalid(format!("roots sync: {} commits, more than {MAX_COMMITS}", s.commits.len())));
    }
    for c in &s.commits {
        validate_saltenv(&c.saltenv)?;
        if c.remote.is_empty() || c.remote.len() > MAX_REMOTE_LEN || c.remote.contains('\0') {
            return Err(Error::Invalid("roots sync: a commit's remote is empty, too long or holds NUL".into()));
        }
        let hex = c.commit.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex || !(c.commit.len() == 40 || c.commit.len() == 64) {
            return Err(Error::Invalid(format!("roots sync: commit {:?} is not a lowercase hex object id", c.commit.escape_debug().to_string())));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Record;

    fn sync(trees: Vec<RootsTree>, commit: &str) -> Record {
        Record::RootsSync(RootsSync {
            sync: vec![7; crate::format::SYNC_ID_LEN],
            trees,
            files: Vec::new(),
            remove: Vec::new(),
            commits: vec![RootsCommit { remote: "file:///srv/s.git".into(), saltenv: "base".into(), commit: commit.into() }],
        })
    }

    #[test]
    fn only_a_gitfs_or_git_pillar_sync_names_commits_and_they_round_trip() {
        let id = "0123456789abcdef0123456789abcdef01234567";
        for tree in [RootsTree::Gitfs, RootsTree::GitPillar] {
            let r = sync(vec![tree], id);
            let bytes = r.encode().unwrap();
            assert_eq!(Record::decode(&bytes).unwrap(), r);
        }
        assert!(sync(vec![RootsTree::File], id).encode().is_err(), "a file_roots sync names no commit");
        assert!(sync(vec![RootsTree::Gitfs, RootsTree::GitPillar], id).encode().is_err(), "commits belong to one git tree");
        assert!(sync(vec![RootsTree::Gitfs], "0123ABCD").encode().is_err(), "not a full lowercase id");
        // A sync without commits writes no `commits` key (its bytes are unchanged).
        let plain = Record::RootsSync(RootsSync { sync: vec![7; 16], trees: vec![RootsTree::File], files: vec![], remove: vec![], commits: vec![] });
        assert!(!plain.encode().unwrap().windows(7).any(|w| w == b"commits"));
    }
}
