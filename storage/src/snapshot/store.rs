//! The snapshots directory (`<halite_data_dir>/snapshots/`): complete snapshots, each in
//! `<index, 20 digits>/`, and staging directories (`.staging-*`) for the ones being built
//! or received.
//!
//! A snapshot is made in a staging directory and appears under its final name by one
//! rename, after its files and manifest are fsynced: a directory with a 20-digit name is
//! always complete. Staging directories are what a crash leaves behind; they are removed
//! at start ([`SnapshotStore::clean_staging`]).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use raft::eraftpb::{ConfState, Entry, SnapshotMetadata};
use sha2::{Digest, Sha256};

use super::hashes::KnownHashes;
use super::manifest::{FileEntry, Manifest};
use crate::error::{Error, IoContext, Result};
use crate::state::StateMachine;

const MANIFEST: &str = "manifest.json";
const STAGING_PREFIX: &str = ".staging-";

/// The snapshots directory of one member.
#[derive(Debug, Clone)]
pub struct SnapshotStore {
    dir: PathBuf,
}

/// A complete snapshot on disk.
#[derive(Debug, Clone)]
pub struct Snapshot {
    dir: PathBuf,
    manifest: Manifest,
}

/// A snapshot being built from the local state machine: a checkpoint in a staging
/// directory. [`Build::finish`] makes it a snapshot; dropping it removes the staging
/// directory.
pub struct Build {
    store: SnapshotStore,
    staging: Staging,
    index: u64,
}

/// A staging directory, removed when dropped unless published.
pub(super) struct Staging {
    pub(super) dir: PathBuf,
    published: bool,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.published {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub(super) fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|f| f.sync_all()).ctx(|| format!("syncing directory {}", dir.display()))
}

/// sha256 (hex) and size of a file, read in 1 MiB pieces; the file is fsynced too.
pub(super) fn hash_file(path: &Path) -> Result<(String, u64)> {
    let mut f = File::open(path).ctx(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).ctx(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
    f.sync_all().ctx(|| format!("syncing {}", path.display()))?;
    Ok((hex::encode(h.finalize()), size))
}

fn dir_name(index: u64) -> String {
    format!("{index:020}")
}

impl SnapshotStore {
    /// Opens (creating it if needed) the snapshots directory `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).ctx(|| format!("creating snapshots dir {}", dir.display()))?;
        Ok(SnapshotStore { dir: dir.to_path_buf() })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Indexes of the complete snapshots, oldest first.
    pub fn list(&self) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        for ent in std::fs::read_dir(&self.dir).ctx(|| format!("listing {}", self.dir.display()))? {
            let ent = ent.ctx(|| format!("listing {}", self.dir.display()))?;
            let name = ent.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.len() == 20 && name.bytes().all(|c| c.is_ascii_digit()) {
                if let Ok(i) = name.parse::<u64>() {
                    out.push(i);
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// The snapshot at `index`, if there is one.
    pub fn get(&self, index: u64) -> Result<Option<Snapshot>> {
        let dir = self.dir.join(dir_name(index));
        if !dir.exists() {
            return Ok(None);
        }
        Snapshot::open(&dir).map(Some)
    }

    /// The newest complete snapshot.
    pub fn latest(&self) -> Result<Option<Snapshot>> {
        match self.list()?.last() {
            Some(i) => self.get(*i),
            None => Ok(None),
        }
    }

    /// A new staging directory for `what` (`build`, `recv`).
    pub(super) fn staging(&self, what: &str) -> Result<Staging> {
        let dir = self.dir.join(format!("{STAGING_PREFIX}{what}-{}-{}", std::process::id(), crate::format::now_ns()));
        std::fs::create_dir_all(&dir).ctx(|| format!("creating {}", dir.display()))?;
        Ok(Staging { dir, published: false })
    }

    /// Removes staging directories (what a crash during a build or a transfer leaves).
    /// Returns how many.
    pub fn clean_staging(&self) -> Result<usize> {
        let mut n = 0;
        for ent in std::fs::read_dir(&self.dir).ctx(|| format!("listing {}", self.dir.display()))? {
            let ent = ent.ctx(|| format!("listing {}", self.dir.display()))?;
            if ent.file_name().to_str().is_some_and(|s| s.starts_with(STAGING_PREFIX)) {
                std::fs::remove_dir_all(ent.path()).ctx(|| format!("removing {}", ent.path().display()))?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Removes complete snapshots older than `keep` (the one the log was compacted
    /// through). Returns how many.
    pub fn prune(&self, keep: u64) -> Result<usize> {
        let mut n = 0;
        for i in self.list()? {
            if i < keep {
                let d = self.dir.join(dir_name(i));
                std::fs::remove_dir_all(&d).ctx(|| format!("removing {}", d.display()))?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Starts a snapshot of `sm`: a RocksDB checkpoint (flushed first) in a staging
    /// directory. The index is read from the checkpoint itself, so it is exactly the
    /// state the files hold.
    pub fn begin_build(&self, sm: &StateMachine) -> Result<Build> {
        let staging = self.staging("build")?;
        let state = staging.dir.join("state");
        sm.checkpoint(&state)?;
        let index = StateMachine::open_read_only(&state)?.applied_index()?;
        Ok(Build { store: self.clone(), staging, index })
    }

    /// Writes `manifest` into `staging`, fsyncs, and renames it to its final name. If a
    /// snapshot at that index exists already (it is complete, they only appear whole),
    /// that one is kept and the staging directory dropped.
    pub(super) fn publish(&self, mut staging: Staging, manifest: Manifest) -> Result<Snapshot> {
        let final_dir = self.dir.join(dir_name(manifest.index));
        if final_dir.exists() {
            return Snapshot::open(&final_dir);
        }
        let mpath = staging.dir.join(MANIFEST);
        std::fs::write(&mpath, manifest.encode()).ctx(|| format!("writing {}", mpath.display()))?;
        File::open(&mpath).and_then(|f| f.sync_all()).ctx(|| format!("syncing {}", mpath.display()))?;
        fsync_dir(&staging.dir.join("state"))?;
        fsync_dir(&staging.dir)?;
        std::fs::rename(&staging.dir, &final_dir).ctx(|| format!("renaming {} to {}", staging.dir.display(), final_dir.display()))?;
        staging.published = true;
        fsync_dir(&self.dir)?;
        Ok(Snapshot { dir: final_dir, manifest })
    }
}

impl Build {
    /// The applied index the checkpoint holds.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Hashes the checkpoint's files (taking over the hash of each SST it shares with the
    /// newest snapshot in the store, see `hashes.rs`), writes the manifest (with `term`, the term of the
    /// entry at [`Build::index`], the conf state and the membership entries at that
    /// index) and publishes the snapshot.
    pub fn finish(self, term: u64, conf_state: &ConfState, members: &[Entry]) -> Result<Snapshot> {
        self.finish_with(term, conf_state, members, |_, _| {})
    }

    /// The checkpoint's directory (tests tamper with it before [`Build::finish`]).
    #[cfg(test)]
    pub(super) fn state_dir(&self) -> PathBuf {
        self.staging.dir.join("state")
    }

    /// Bytes of the checkpoint's files (what [`Build::finish`] hashes).
    pub fn total_bytes(&self) -> Result<u64> {
        let state = self.staging.dir.join("state");
        let mut n = 0;
        for ent in std::fs::read_dir(&state).ctx(|| format!("listing {}", state.display()))? {
            let ent = ent.ctx(|| format!("listing {}", state.display()))?;
            n += ent.metadata().ctx(|| format!("reading {}", ent.path().display()))?.len();
        }
        Ok(n)
    }

    /// [`Build::finish`], calling `progress(bytes hashed, total)` after each file.
    pub fn finish_with(self, term: u64, conf_state: &ConfState, members: &[Entry], mut progress: impl FnMut(u64, u64)) -> Result<Snapshot> {
        let total = self.total_bytes()?;
        let mut done = 0;
        let state = self.staging.dir.join("state");
        let mut names = Vec::new();
        for ent in std::fs::read_dir(&state).ctx(|| format!("listing {}", state.display()))? {
            let ent = ent.ctx(|| format!("listing {}", state.display()))?;
            let name = ent.file_name().into_string().map_err(|_| Error::Invalid("non-UTF-8 file name in a checkpoint".into()))?;
            names.push(name);
        }
        names.sort();
        // SSTs shared with the previous snapshot keep its hashes (`hashes.rs`).
        let known = match self.store.latest().ok().flatten() {
            Some(prev) => KnownHashes::of(prev.manifest(), |i| prev.file_path(i)),
            None => KnownHashes::default(),
        };
        let (mut reused, mut hashed) = (0u64, 0u64);
        let mut files = Vec::with_capacity(names.len());
        for name in names {
            let path = format!("state/{name}");
            super::manifest::check_path(&path)?;
            let file = state.join(&name);
            let (sha256, size) = match known.reuse(&name, &file) {
                Some(h) => {
                    reused += h.1;
                    h
                }
                None => {
                    let h = hash_file(&file)?;
                    hashed += h.1;
                    h
                }
            };
            done += size;
            progress(done, total);
            files.push(FileEntry { path, size, sha256 });
        }
        tracing::debug!(index = self.index, hashed_bytes = hashed, reused_bytes = reused, "snapshot files hashed");
        let manifest = Manifest::new(self.index, term, conf_state, members, files);
        self.store.publish(self.staging, manifest)
    }
}

impl Snapshot {
    /// Reads a complete snapshot's manifest (checked like one from a peer).
    pub fn open(dir: &Path) -> Result<Snapshot> {
        let mpath = dir.join(MANIFEST);
        let len = std::fs::metadata(&mpath).ctx(|| format!("reading {}", mpath.display()))?.len();
        if len > super::MAX_MANIFEST_BYTES as u64 {
            return Err(Error::Invalid(format!("{}: {len} bytes, too large for a manifest", mpath.display())));
        }
        let b = std::fs::read(&mpath).ctx(|| format!("reading {}", mpath.display()))?;
        let manifest = Manifest::decode(&b, u64::MAX).map_err(|e| Error::Invalid(format!("{}: {e}", mpath.display())))?;
        Ok(Snapshot { dir: dir.to_path_buf(), manifest })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn index(&self) -> u64 {
        self.manifest.index
    }

    pub fn metadata(&self) -> SnapshotMetadata {
        self.manifest.metadata()
    }

    /// The path of file `i` of the manifest.
    pub fn file_path(&self, i: usize) -> Option<PathBuf> {
        self.manifest.files.get(i).map(|f| self.dir.join(&f.path))
    }

    /// Re-reads every file and checks its size and sha256 against the manifest; the
    /// first mismatch is an error naming the file. `progress` gets the bytes checked.
    pub fn verify(&self, mut progress: impl FnMut(u64)) -> Result<()> {
        let mut done = 0;
        for f in &self.manifest.files {
            let p = self.dir.join(&f.path);
            let (sha, size) = hash_file(&p)?;
            if size != f.size || sha != f.sha256 {
                return Err(Error::Invalid(format!("snapshot {}: {} does not match its manifest (size {size}, expected {})", self.index(), f.path, f.size)));
            }
            done += size;
            progress(done);
        }
        Ok(())
    }
}
