//! Reusing the sha256 of files a new snapshot shares with the previous one.
//!
//! A RocksDB checkpoint hard-links the live SST files (they are immutable once written,
//! and RocksDB never reuses a file number within a database), so consecutive snapshots
//! of one state machine share most of their bytes as the very same inodes; only the
//! files written since (new flushes and compactions) and the small copied ones
//! (MANIFEST, CURRENT, OPTIONS) are new. Hashing a gigabyte of unchanged SSTs again for
//! every snapshot cost most of a snapshot build (0.8 s per GiB here).
//!
//! The rule: a sha256 from the previous snapshot's manifest is reused for a file of the
//! new checkpoint only if the two are **the same file**: an `.sst` with the same name,
//! the same device and inode (so one is a hard link of the other, not a file that
//! happens to carry the name), and the same size as both the manifest records and the
//! file has now. A file replaced under the same name (a new inode) or changed in size is
//! hashed again. A file damaged in place since it was hashed is damaged in both
//! snapshots: its manifest hash is still the one of the bytes RocksDB wrote, so the
//! receiver, which hashes every byte it gets, refuses it (as it refuses any corruption on
//! the way).
//!
//! Why not overlap hashing with the transfer instead: the manifest, with every hash,
//! is the transfer's first message and what the receiver checks each file against
//! (docs/formats.md §5); streaming hashes after the data would change the protocol and
//! still hash every byte once per snapshot. Reuse removes the work.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::manifest::Manifest;

/// The identity of a file on disk: device, inode, size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
}

fn file_id(path: &Path) -> Option<FileId> {
    // `symlink_metadata`: a link planted under the name is not followed to a file
    // that merely shares the inode.
    let m = std::fs::symlink_metadata(path).ok()?;
    m.is_file().then(|| FileId { dev: m.dev(), ino: m.ino(), size: m.len() })
}

/// The hashes a new checkpoint may take over from a previous snapshot.
#[derive(Debug, Default)]
pub(super) struct KnownHashes {
    /// By file name in `state/`: the previous snapshot's file identity and sha256.
    by_name: HashMap<String, (FileId, String)>,
}

impl KnownHashes {
    /// The `.sst` files of a previous snapshot (its `manifest`, and where its `i`th file
    /// is on disk) whose size on disk is still the one the manifest records, with their
    /// sha256. With no previous snapshot, [`KnownHashes::default`] knows none.
    pub(super) fn of(manifest: &Manifest, file_path: impl Fn(usize) -> Option<PathBuf>) -> KnownHashes {
        let mut by_name = HashMap::new();
        for (i, f) in manifest.files.iter().enumerate() {
            let Some(name) = f.path.strip_prefix("state/") else { continue };
            if !name.ends_with(".sst") {
                continue;
            }
            let Some(id) = file_path(i).and_then(|p| file_id(&p)) else { continue };
            if id.size == f.size {
                by_name.insert(name.to_string(), (id, f.sha256.clone()));
            }
        }
        KnownHashes { by_name }
    }

    /// The sha256 and size of `path` (a file of the new checkpoint named `name`) if it
    /// is the very same file as the previous snapshot's of that name.
    pub(super) fn reuse(&self, name: &str, path: &Path) -> Option<(String, u64)> {
        let (known, sha) = self.by_name.get(name)?;
        let now = file_id(path)?;
        (now == *known).then(|| (sha.clone(), now.size))
    }

    /// How many files could be reused.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_name.len()
    }
}
