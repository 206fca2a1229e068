//! The roots materialiser: complete roots files in the state machine become files under
//! the configured `file_roots` / `pillar_roots` directories.
//!
//! A file is written to a temp name in its target directory, fsynced, given the mode from
//! its record and renamed into place; the directory is fsynced. A tombstone deletes the
//! file. The relative path was validated at the record layer (no `..`, not absolute); on
//! top of that the materialiser refuses to write through a symlink anywhere below the
//! root, so a link planted in a roots tree cannot redirect a write outside it.
//!
//! The files minions pushed (`file_recv`) are written by the same view, under
//! `cachedir/minions/<id>/files/` (`roots_pushed.rs`).

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::format::RootsTree;
use crate::id::validate_relative_path;
use crate::keys::localfs::sync_dir;
use crate::mmap_cache::tempfile_in;
use crate::state::StateMachine;

/// Where each saltenv of each tree is materialised: the first directory configured for
/// that env (Salt searches the list in order; Halite writes to the first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RootsDirs {
    pub file: BTreeMap<String, PathBuf>,
    pub pillar: BTreeMap<String, PathBuf>,
    /// `cachedir/minions`, where files minions pushed are written (`roots_pushed.rs`);
    /// `None`: not written anywhere.
    pub pushed: Option<PathBuf>,
}

impl RootsDirs {
    pub fn dir(&self, tree: RootsTree, env: &str) -> Option<&Path> {
        match tree {
            RootsTree::File => self.file.get(env),
            RootsTree::Pillar => self.pillar.get(env),
            // Served from the state machine: no directory.
            RootsTree::Gitfs | RootsTree::GitPillar => None,
        }
        .map(PathBuf::as_path)
    }
}

pub struct RootsMaterialiser {
    pub(crate) dirs: RootsDirs,
}

impl RootsMaterialiser {
    pub fn new(dirs: RootsDirs) -> Self {
        RootsMaterialiser { dirs }
    }

    fn target(&self, tree: RootsTree, env: &str, path: &str) -> Result<Option<PathBuf>> {
        validate_relative_path(path)?;
        if matches!(tree, RootsTree::Gitfs | RootsTree::GitPillar) {
            return Ok(None);
        }
        let Some(root) = self.dirs.dir(tree, env) else {
            tracing::warn!(tree = tree.as_str(), saltenv = env, path, "no {}_roots directory configured for this saltenv; file not materialised", tree.as_str());
            return Ok(None);
        };
        // Refuse symlinks on the way down.
        let mut at = root.to_path_buf();
        for comp in path.split('/') {
            at.push(comp);
            match fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(Error::InvalidPath { path: at.display().to_string(), why: "a symlink in a roots tree; refusing to write through it".into() })
                }
                _ => {}
            }
        }
        Ok(Some(root.join(path)))
    }

    /// Writes one file.
    pub fn write(&self, tree: RootsTree, env: &str, path: &str, mode: u32, content: &[u8]) -> Result<()> {
        let Some(target) = self.target(tree, env, path)? else { return Ok(()) };
        let dir = target.parent().ok_or_else(|| Error::InvalidPath { path: path.into(), why: "no parent".into() })?;
        fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
        if let Ok(existing) = fs::read(&target) {
            let m = fs::metadata(&target).map(|m| m.permissions().mode() & 0o7777).unwrap_or(0);
            if existing == content && m == mode {
                return Ok(());
            }
        }
        let (tmp, mut f) = tempfile_in(dir, ".halite-tmp-")?;
        let r = (|| -> Result<()> {
            f.write_all(content).ctx(|| format!("writing {}", tmp.display()))?;
            f.set_permissions(fs::Permissions::from_mode(mode)).ctx(|| format!("chmod {}", tmp.display()))?;
            f.sync_all().ctx(|| format!("syncing {}", tmp.display()))?;
            fs::rename(&tmp, &target).ctx(|| format!("renaming to {}", target.display()))
        })();
        if r.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        r?;
        sync_dir(dir)
    }

    /// Removes one file (a tombstone). A missing file is not an error.
    pub fn remove(&self, tree: RootsTree, env: &str, path: &str) -> Result<()> {
        let Some(target) = self.target(tree, env, path)? else { return Ok(()) };
        match fs::remove_file(&target) {
            Ok(()) => sync_dir(target.parent().unwrap_or(Path::new("."))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("removing {}", target.display()), e)),
        }
    }

    /// Writes the file as the state machine holds it.
    pub fn materialise(&self, sm: &StateMachine, tree: RootsTree, env: &str, path: &str) -> Result<()> {
        match sm.roots_file(tree, env, path)? {
            Some((meta, data)) => self.write(tree, env, path, meta.mode, &data),
            None => Ok(()),
        }
    }

    /// Writes every complete file of the state machine. Returns the count.
    /// Whether a file the state machine holds is missing from its configured directory
    /// (the roots were moved to new directories, or deleted).
    pub fn missing_any(&self, sm: &StateMachine) -> Result<bool> {
        for (tree, env, path, _) in sm.roots_files()? {
            if let Some(root) = self.dirs.dir(tree, &env) {
                if !root.join(&path).exists() {
                    return Ok(true);
                }
            }
        }
        self.missing_pushed(sm)
    }

    pub fn rebuild(&self, sm: &StateMachine) -> Result<u64> {
        let mut n = 0;
        for (tree, env, path, _) in sm.roots_files()? {
            self.materialise(sm, tree, &env, &path)?;
            n += 1;
        }
        Ok(n + self.rebuild_pushed(sm)?)
    }
}
