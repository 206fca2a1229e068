//! The files minions pushed (`crate::file_recv`), written by the roots view where Salt
//! keeps them: `cachedir/minions/<id>/files/<path>` (`RootsDirs::pushed` is
//! `cachedir/minions`). Only complete files are written, each at once: its pieces are
//! copied from the state machine into a temporary file beside the target, which is
//! fsynced, given mode 0644 (Salt's files are world-readable) and renamed into place.
//! As for roots files, the path was checked at the record layer and no symlink below
//! `cachedir/minions` is written through; something else in the way (a file where a
//! folder must be) is an `InvalidPath`, logged and skipped by the view.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use crate::error::{Error, IoContext, Result};
use crate::file_recv::check_path;
use crate::id::validate_minion_id;
use crate::keys::localfs::sync_dir;
use crate::mmap_cache::tempfile_in;
use crate::roots::RootsMaterialiser;
use crate::state::StateMachine;

/// The mode of a pushed file on disk.
pub const PUSHED_MODE: u32 = 0o644;

impl RootsMaterialiser {
    /// Where `id`'s `path` goes, if pushed files are written at all; refuses a symlink or
    /// a non-folder on the way.
    fn pushed_target(&self, id: &str, path: &str) -> Result<Option<PathBuf>> {
        let Some(minions) = &self.dirs.pushed else { return Ok(None) };
        validate_minion_id(id)?;
        check_path(path)?;
        let rel = format!("{id}/files/{path}");
        let mut at = minions.clone();
        let parts: Vec<&str> = rel.split('/').collect();
        for (i, comp) in parts.iter().enumerate() {
            at.push(comp);
            let last = i + 1 == parts.len();
            match fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(Error::InvalidPath { path: at.display().to_string(), why: "a symlink where a pushed file goes; refusing to write through it".into() })
                }
                Ok(m) if !last && !m.is_dir() => return Err(Error::InvalidPath { path: at.display().to_string(), why: "not a folder, where a pushed file's folder goes".into() }),
                Ok(m) if last && m.is_dir() => return Err(Error::InvalidPath { path: at.display().to_string(), why: "a folder, where a pushed file goes".into() }),
                _ => {}
            }
        }
        Ok(Some(at))
    }

    /// Makes `id`'s `path` on disk what the state holds: the complete file, or nothing.
    pub fn write_pushed(&self, sm: &StateMachine, id: &str, path: &str) -> Result<()> {
        let Some(target) = self.pushed_target(id, path)? else { return Ok(()) };
        if self.pushed_matches(sm, id, path, &target)? {
            return Ok(());
        }
        let dir = target.parent().ok_or_else(|| Error::InvalidPath { path: path.into(), why: "no parent".into() })?;
        fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
        let (tmp, mut f) = tempfile_in(dir, ".halite-tmp-")?;
        let r = (|| -> Result<bool> {
            let held = sm.pushed_file(id, path, |piece| f.write_all(piece).ctx(|| format!("writing {}", tmp.display())))?;
            if held {
                f.set_permissions(fs::Permissions::from_mode(PUSHED_MODE)).ctx(|| format!("chmod {}", tmp.display()))?;
                f.sync_all().ctx(|| format!("syncing {}", tmp.display()))?;
                fs::rename(&tmp, &target).ctx(|| format!("renaming to {}", target.display()))?;
            }
            Ok(held)
        })();
        match r {
            Ok(true) => sync_dir(dir),
            Ok(false) => {
                let _ = fs::remove_file(&tmp);
                self.remove_pushed(id, path)
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// Whether the file on disk already holds exactly the state's complete file.
    fn pushed_matches(&self, sm: &StateMachine, id: &str, path: &str, target: &std::path::Path) -> Result<bool> {
        let Ok(mut disk) = fs::File::open(target) else { return Ok(false) };
        let mut same = true;
        let mut buf = Vec::new();
        let held = sm.pushed_file(id, path, |piece| {
            if same {
                buf.resize(piece.len(), 0);
                same = disk.read_exact(&mut buf).is_ok() && buf == piece;
            }
            Ok(())
        })?;
        Ok(held && same && disk.read(&mut [0u8; 1]).is_ok_and(|n| n == 0))
    }

    /// Removes `id`'s `path` from disk (a file started again). A missing file is not an error.
    pub fn remove_pushed(&self, id: &str, path: &str) -> Result<()> {
        let Some(target) = self.pushed_target(id, path)? else { return Ok(()) };
        match fs::remove_file(&target) {
            Ok(()) => sync_dir(target.parent().unwrap_or(std::path::Path::new("."))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("removing {}", target.display()), e)),
        }
    }

    /// Clears `id`'s folder (`cachedir/minions/<id>`: its pushed files, then the folder
    /// if nothing else is in it), as its key is deleted. Nothing is followed through a
    /// symlink; a missing folder is not an error.
    pub fn clear_pushed(&self, id: &str) -> Result<()> {
        let Some(minions) = &self.dirs.pushed else { return Ok(()) };
        validate_minion_id(id)?;
        let folder = minions.join(id);
        match fs::symlink_metadata(&folder) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(format!("reading {}", folder.display()), e)),
            Ok(m) if !m.is_dir() => return Err(Error::InvalidPath { path: folder.display().to_string(), why: "not a folder, where a minion's pushed files are".into() }),
            Ok(_) => {}
        }
        let files = folder.join("files");
        match fs::symlink_metadata(&files) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // A symlink is removed itself, never what it names.
            Ok(m) if !m.is_dir() => fs::remove_file(&files).ctx(|| format!("removing {}", files.display()))?,
            _ => fs::remove_dir_all(&files).ctx(|| format!("removing {}", files.display()))?,
        }
        // The folder goes too when nothing else is in it.
        let _ = fs::remove_dir(&folder);
        sync_dir(minions)
    }

    /// After a run of records that deleted the keys `cleared`: clears each minion's
    /// folder and writes back what the state holds of it (files pushed after the
    /// deletion, by a minion accepted again).
    pub fn resync_cleared(&self, sm: &StateMachine, cleared: &std::collections::BTreeSet<String>) -> Result<()> {
        for id in cleared {
            self.clear_pushed(id)?;
            for (id, path) in sm.pushed_files_of(id)? {
                self.write_pushed(sm, &id, &path)?;
            }
        }
        Ok(())
    }

    /// Writes every complete pushed file the state holds (those already right are
    /// read, not written); returns the count. A file that cannot go where it belongs is
    /// logged and skipped. The folder of a minion the state holds no key and no pushed
    /// file of (its key deleted while this view was not written: a snapshot installed,
    /// a view rebuilt) is cleared, as the delete would have cleared it.
    pub(crate) fn rebuild_pushed(&self, sm: &StateMachine) -> Result<u64> {
        let Some(minions) = &self.dirs.pushed else { return Ok(0) };
        if let Ok(dir) = fs::read_dir(minions) {
            for e in dir.flatten() {
                let Some(id) = e.file_name().to_str().map(str::to_owned) else { continue };
                if validate_minion_id(&id).is_ok() && sm.get_key(&id)?.is_none() && sm.pushed_files_of(&id)?.is_empty() {
                    match self.clear_pushed(&id) {
                        Ok(()) => {}
                        Err(e @ Error::InvalidPath { .. }) => tracing::error!(id = %id, "pushed files not cleared: {e}"),
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        let mut n = 0;
        for (id, path) in sm.pushed_files()? {
            match self.write_pushed(sm, &id, &path) {
                Ok(()) => n += 1,
                Err(e @ Error::InvalidPath { .. }) => tracing::error!(id = %id, "pushed file not written: {e}"),
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// Whether a complete pushed file is missing from disk (a wiped cachedir).
    pub(crate) fn missing_pushed(&self, sm: &StateMachine) -> Result<bool> {
        let Some(minions) = &self.dirs.pushed else { return Ok(false) };
        for (id, path) in sm.pushed_files()? {
            if !minions.join(&id).join("files").join(&path).exists() {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
#[path = "roots_pushed_tests.rs"]
mod tests;
