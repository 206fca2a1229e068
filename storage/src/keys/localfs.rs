//! The `localfs_key` view: Salt's classic pki tree (`docs/formats.md` §4).
//!
//! ```text
//! <pki_dir>/minions/<id>            accepted   (file content = the pub text, mode 0600)
//! <pki_dir>/minions_pre/<id>        pending
//! <pki_dir>/minions_rejected/<id>   rejected
//! <pki_dir>/minions_denied/<id>     the first denied key of the id
//! <pki_dir>/<name>                  master keys (mode 0400)
//! ```
//!
//! A key is written whole before it gets its name, with the record's timestamp as
//! mtime (mode 0600), so a reader never sees a half-written key: a key new to its
//! directory is made without a name (`O_TMPFILE`) and linked in, one that replaces a
//! file is written to a temp file in the target directory and renamed into place. Durability is per batch: [`KeyView::sync`] flushes the filesystem (`syncfs`)
//! once, before the applier records that the view is up to date; a crash before that
//! makes the next start rebuild the view from the state machine. (The reference does no
//! fsync at all.) Before writing a state,
//! the id's file is removed from the other state directories, as the reference does, so
//! an id is never in two state directories after a Halite write.
//!
//! Reading follows the reference: regular files only (symlinks and other types are
//! ignored), fetch precedence rejected > pending > accepted, `.key_cache` and invalid
//! ids skipped, and in `salt-key` listings names beginning with `.` are skipped for the
//! state banks (not for the denied bank). A key moves between state directories by a
//! rename, while a listing reads the directories one after the other: a key renamed
//! from one read later into one read earlier would be in neither reading, so a listing
//! reads the directories again until two readings in a row agree ([`settled`]).

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use super::{DeniedEntry, BankState, KeyEntry, KeyView};
use crate::error::{Error, IoContext, Result};
use crate::id::{validate_minion_id, validate_relative_path};
use crate::mmap_cache::tempfile_in;

pub const DENIED_DIR: &str = "minions_denied";
pub const AUTOSIGN_DIR: &str = "minions_autosign";
const STATE_DIRS: [BankState; 3] = [BankState::Accepted, BankState::Pending, BankState::Rejected];

pub struct LocalfsKeys {
    root: PathBuf,
    /// Written since the last sync.
    dirty: bool,
}

impl LocalfsKeys {
    /// Opens the tree at `pki_dir`. Nothing is created until the first write.
    pub fn open(pki_dir: &Path) -> Result<Self> {
        Ok(LocalfsKeys { root: pki_dir.to_path_buf(), dirty: false })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates the pki dir and its sub-directories as a master does at start (0755
    /// sub-directories, the pki dir itself 0700 unless it is already 0700 or 0750).
    pub fn ensure_layout(&self) -> Result<()> {
        for d in ["minions", "minions_pre", "minions_rejected", DENIED_DIR, AUTOSIGN_DIR] {
            let p = self.root.join(d);
            fs::create_dir_all(&p).ctx(|| format!("creating {}", p.display()))?;
        }
        let meta = fs::metadata(&self.root).ctx(|| format!("stat {}", self.root.display()))?;
        let mode = meta.permissions().mode() & 0o7777;
        if mode != 0o700 && mode != 0o750 {
            fs::set_permissions(&self.root, fs::Permissions::from_mode(0o700)).ctx(|| format!("chmod {}", self.root.display()))?;
        }
        Ok(())
    }

    fn remove_regular(&mut self, p: &Path) -> Result<bool> {
        match fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_file() || m.file_type().is_symlink() => {
                fs::remove_file(p).ctx(|| format!("removing {}", p.display()))?;
                self.dirty = true;
                Ok(true)
            }
            Ok(_) => Err(Error::Invalid(format!("{} is not a regular file; refusing to touch it", p.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(format!("stat {}", p.display()), e)),
        }
    }

    /// Renames the regular file (or link) `from` to `to` if it is there; removes it
    /// instead if `to`'s directory is missing (the write that follows makes it). Whether
    /// it was moved to `to`.
    fn move_regular(&mut self, from: &Path, to: &Path) -> Result<bool> {
        match fs::symlink_metadata(from) {
            Ok(m) if m.file_type().is_file() || m.file_type().is_symlink() => match fs::rename(from, to) {
                Ok(()) => {
                    self.dirty = true;
                    Ok(true)
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.remove_regular(from).map(|_| false),
                Err(e) => Err(Error::io(format!("renaming {} to {}", from.display(), to.display()), e)),
            },
            Ok(_) => Err(Error::Invalid(format!("{} is not a regular file; refusing to touch it", from.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(format!("stat {}", from.display()), e)),
        }
    }

    /// Writes `data` as `dir/name` and gives it `mode` and `mtime_ns`; a reader sees the
    /// old file or the whole new one, never a part. `fresh` says `name` is most likely
    /// absent (a key written for the first time): the file is then made without a name
    /// (`O_TMPFILE`), filled, and linked in as `name` — one directory entry made, where a
    /// temporary name renamed into place makes one, removes one and looks `name` up, in
    /// a directory of thousands of keys. If `name` exists after all, or the file system
    /// has no `O_TMPFILE`, the file is written under a temporary name and renamed.
    fn write_file(&mut self, dir: &Path, name: &str, data: &[u8], mode: u32, mtime_ns: Option<u64>, fresh: bool) -> Result<()> {
        let target = dir.join(name);
        if target.parent() != Some(dir) {
            return Err(Error::InvalidPath { path: name.to_string(), why: "it would land outside its directory".into() });
        }
        if fresh && link_new(dir, &target, data, mode, mtime_ns)? {
            self.dirty = true;
            return Ok(());
        }
        // The directory is made when the temporary file cannot be created for want of
        // it (once, or after an operator removed it), not checked before every write: a
        // sign-in storm writes thousands of keys into a directory that exists.
        let (tmp, mut f) = match tempfile_in(dir, ".halite-tmp-") {
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
                tempfile_in(dir, ".halite-tmp-")?
            }
            other => other?,
        };
        let res = (|| -> Result<()> {
            f.write_all(data).ctx(|| format!("writing {}", tmp.display()))?;
            if let Some(ns) = mtime_ns {
                f.set_modified(UNIX_EPOCH + Duration::from_nanos(ns)).ctx(|| format!("setting mtime of {}", tmp.display()))?;
            }
            f.set_permissions(fs::Permissions::from_mode(mode)).ctx(|| format!("chmod {}", tmp.display()))?;
            fs::rename(&tmp, &target).ctx(|| format!("renaming to {}", target.display()))?;
            Ok(())
        })();
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        self.dirty = true;
        res
    }

    fn read_regular(p: &Path) -> Result<Option<Vec<u8>>> {
        match fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_file() => Ok(Some(fs::read(p).ctx(|| format!("reading {}", p.display()))?)),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(format!("stat {}", p.display()), e)),
        }
    }

    /// Regular files of a directory whose names are valid ids, in directory order.
    fn scan(dir: &Path, skip_dot: bool) -> Result<Vec<(String, PathBuf)>> {
        let rd = match fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(format!("listing {}", dir.display()), e)),
        };
        let mut out = Vec::new();
        for ent in rd {
            let ent = ent.ctx(|| format!("listing {}", dir.display()))?;
            let Ok(name) = ent.file_name().into_string() else { continue };
            if name == ".key_cache" || (skip_dot && name.starts_with('.')) || validate_minion_id(&name).is_err() {
                continue;
            }
            let ft = ent.file_type().ctx(|| format!("stat {}", ent.path().display()))?;
            if !ft.is_file() {
                continue;
            }
            out.push((name, ent.path()));
        }
        Ok(out)
    }
}

/// Most readings of the state directories for one listing.
const SCANS: usize = 5;

/// `read` again until two readings in a row agree, at most `max` times; the last one.
fn settled<T: PartialEq>(max: usize, mut read: impl FnMut() -> Result<T>) -> Result<T> {
    let mut last = read()?;
    for _ in 1..max {
        let next = read()?;
        if next == last {
            break;
        }
        last = next;
    }
    Ok(last)
}

/// Writes `data` to a file without a name in `dir` (`O_TMPFILE`), gives it `mode` and
/// `mtime_ns` and links it in as `target`: `Ok(false)` (nothing made) when the file
/// system cannot make such a file or `target` exists (the caller renames instead).
#[cfg(target_os = "linux")]
fn link_new(dir: &Path, target: &Path, data: &[u8], mode: u32, mtime_ns: Option<u64>) -> Result<bool> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let mut f = match fs::OpenOptions::new().write(true).custom_flags(libc::O_TMPFILE).mode(0o600).open(dir) {
        Ok(f) => f,
        // No O_TMPFILE here (EOPNOTSUPP, EISDIR before Linux 3.11), or no directory yet.
        Err(_) => return Ok(false),
    };
    f.write_all(data).ctx(|| format!("writing a new file in {}", dir.display()))?;
    if let Some(ns) = mtime_ns {
        f.set_modified(UNIX_EPOCH + Duration::from_nanos(ns)).ctx(|| format!("setting mtime of a new file in {}", dir.display()))?;
    }
    f.set_permissions(fs::Permissions::from_mode(mode)).ctx(|| format!("chmod of a new file in {}", dir.display()))?;
    let (Ok(from), Ok(to)) = (CString::new(format!("/proc/self/fd/{}", f.as_raw_fd())), CString::new(target.as_os_str().as_bytes())) else {
        return Ok(false);
    };
    // SAFETY: two NUL-terminated paths we own; the descriptor named stays open meanwhile.
    let rc = unsafe { libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::AT_SYMLINK_FOLLOW) };
    // On failure (`target` exists, no /proc) the nameless file goes with its descriptor.
    Ok(rc == 0)
}

#[cfg(not(target_os = "linux"))]
fn link_new(_dir: &Path, _target: &Path, _data: &[u8], _mode: u32, _mtime_ns: Option<u64>) -> Result<bool> {
    Ok(false)
}

/// Flushes every dirty page of the filesystem holding `path` (one call for a whole batch
/// of renames, instead of an fsync per file and directory).
pub fn syncfs(path: &Path) -> Result<()> {
    let f = File::open(path).ctx(|| format!("opening {}", path.display()))?;
    // SAFETY: syncfs on a valid descriptor we own.
    let rc = unsafe { libc::syncfs(std::os::unix::io::AsRawFd::as_raw_fd(&f)) };
    if rc != 0 {
        return Err(Error::io(format!("syncfs {}", path.display()), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// fsyncs a directory so a rename in it is durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).ctx(|| format!("syncing directory {}", dir.display()))
}

impl KeyView for LocalfsKeys {
    fn driver(&self) -> &'static str {
        "localfs_key"
    }

    fn set_key(&mut self, id: &str, state: BankState, pub_key: &[u8], mtime_ns: u64) -> Result<()> {
        validate_minion_id(id)?;
        let dir = self.root.join(state.dir_name());
        let mut moved = false;
        for s in STATE_DIRS {
            if s != state {
                // Moved (a rename, as Salt's own accept), then written: the key is in one
                // directory at every moment, never in none.
                moved |= self.move_regular(&self.root.join(s.dir_name()).join(id), &dir.join(id))?;
            }
        }
        self.write_file(&dir, id, pub_key, 0o600, Some(mtime_ns), !moved)
    }

    fn remove_key(&mut self, id: &str) -> Result<bool> {
        validate_minion_id(id)?;
        let mut any = false;
        for s in STATE_DIRS {
            any |= self.remove_regular(&self.root.join(s.dir_name()).join(id))?;
        }
        Ok(any)
    }

    fn set_denied(&mut self, id: &str, pub_key: &[u8], mtime_ns: u64) -> Result<()> {
        validate_minion_id(id)?;
        self.write_file(&self.root.join(DENIED_DIR), id, pub_key, 0o600, Some(mtime_ns), false)
    }

    fn remove_denied(&mut self, id: &str) -> Result<bool> {
        validate_minion_id(id)?;
        self.remove_regular(&self.root.join(DENIED_DIR).join(id))
    }

    fn set_master_key(&mut self, name: &str, data: &[u8]) -> Result<()> {
        validate_relative_path(name)?;
        let target = self.root.join(name);
        let dir = target.parent().map(Path::to_path_buf).unwrap_or_else(|| self.root.clone());
        let file = target.file_name().and_then(|f| f.to_str()).ok_or_else(|| Error::InvalidPath { path: name.into(), why: "no file name".into() })?;
        self.write_file(&dir, file, data, 0o400, None, false)
    }

    /// `<name>.pem` / `<name>.pub` (written only if they differ), then Salt 3008's
    /// absolute links `master.pem` / `master.pub` to them. A `master.*` regular file with
    /// the same content (a pre-3008 tree) is replaced by the link, as Salt 3008 does; one
    /// with other content is left alone and logged.
    fn set_master_pair(&mut self, name: &str, private_pem: &[u8], public_pem: &[u8]) -> Result<()> {
        for (ext, data) in [("pem", private_pem), ("pub", public_pem)] {
            let file = format!("{name}.{ext}");
            if self.get_master_key(&file)?.as_deref() != Some(data) {
                self.set_master_key(&file, data)?;
            }
            if name == "master" {
                continue;
            }
            let link = self.root.join(format!("master.{ext}"));
            let target = self.root.join(&file);
            match fs::symlink_metadata(&link) {
                Ok(m) if m.file_type().is_symlink() => continue,
                Ok(m) if m.file_type().is_file() => {
                    if fs::read(&link).ctx(|| format!("reading {}", link.display()))? != data {
                        tracing::warn!(file = %link.display(), "leaving a master key file that differs from the master key pair in the log");
                        continue;
                    }
                    fs::remove_file(&link).ctx(|| format!("removing {}", link.display()))?;
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("stat {}", link.display()), e)),
            }
            std::os::unix::fs::symlink(&target, &link).ctx(|| format!("linking {}", link.display()))?;
            self.dirty = true;
        }
        Ok(())
    }

    fn get_key(&self, id: &str) -> Result<Option<KeyEntry>> {
        validate_minion_id(id)?;
        if id == ".key_cache" {
            return Err(Error::Invalid("`.key_cache` is not a minion id".into()));
        }
        for s in [BankState::Rejected, BankState::Pending, BankState::Accepted] {
            if let Some(data) = Self::read_regular(&self.root.join(s.dir_name()).join(id))? {
                return Ok(Some(KeyEntry { id: id.to_string(), state: s, pub_key: data }));
            }
        }
        Ok(None)
    }

    fn get_denied(&self, id: &str) -> Result<Option<Vec<u8>>> {
        validate_minion_id(id)?;
        Self::read_regular(&self.root.join(DENIED_DIR).join(id))
    }

    fn get_master_key(&self, name: &str) -> Result<Option<Vec<u8>>> {
        validate_relative_path(name)?;
        Self::read_regular(&self.root.join(name))
    }

    fn entries(&self) -> Result<(Vec<KeyEntry>, Vec<DeniedEntry>)> {
        // Scan in the reference's list_all order; later states overwrite earlier ones,
        // giving rejected > pending > accepted.
        const ORDER: [BankState; 3] = [BankState::Accepted, BankState::Pending, BankState::Rejected];
        let scans = settled(SCANS, || ORDER.iter().map(|s| Self::scan(&self.root.join(s.dir_name()), true)).collect::<Result<Vec<_>>>())?;
        let mut by_id: std::collections::BTreeMap<String, KeyEntry> = Default::default();
        let mut order = Vec::new();
        for (s, scan) in ORDER.into_iter().zip(scans) {
            for (id, path) in scan {
                // Moved since it was listed: where it is now.
                let entry = match Self::read_regular(&path)? {
                    Some(data) => KeyEntry { id: id.clone(), state: s, pub_key: data },
                    None => match self.get_key(&id)? {
                        Some(e) => e,
                        None => continue,
                    },
                };
                if !by_id.contains_key(&id) {
                    order.push(id.clone());
                }
                by_id.insert(id, entry);
            }
        }
        let keys = order.into_iter().filter_map(|id| by_id.remove(&id)).collect();
        let mut denied = Vec::new();
        for (id, path) in Self::scan(&self.root.join(DENIED_DIR), false)? {
            if let Some(data) = Self::read_regular(&path)? {
                denied.push((id, data));
            }
        }
        Ok((keys, denied))
    }

    fn clear(&mut self) -> Result<()> {
        for d in ["minions", "minions_pre", "minions_rejected", DENIED_DIR] {
            let p = self.root.join(d);
            match fs::remove_dir_all(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("removing {}", p.display()), e)),
            }
            fs::create_dir_all(&p).ctx(|| format!("creating {}", p.display()))?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        if self.dirty {
            syncfs(&self.root)?;
            self.dirty = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key renamed from `minions_pre` into `minions` between the reading of those two
    /// directories is in neither: the first reading misses it, the next ones have it.
    #[test]
    fn a_listing_reads_again_until_two_readings_agree() {
        let readings = [vec!["a"], vec!["a", "k"], vec!["a", "k"], vec!["z"]];
        let mut n = 0;
        let got = settled(SCANS, || {
            n += 1;
            Ok(readings[n - 1].clone())
        })
        .unwrap();
        assert_eq!((got, n), (vec!["a", "k"], 3));
        // Bounded: a directory that never settles gives its last reading.
        let mut m = 0;
        assert_eq!(settled(SCANS, || { m += 1; Ok(m) }).unwrap(), SCANS);
    }
}
