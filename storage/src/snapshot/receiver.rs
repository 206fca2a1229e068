//! The receiving side of a transfer: a manifest, then chunks, written into a staging
//! directory and published as a snapshot once every file is complete and matches its
//! sha256.
//!
//! Everything it is given comes from a peer and is checked before it is used: the
//! manifest by [`Manifest::decode`] (sizes bounded by [`ReceiveLimits`], paths confined
//! to `state/<name>`), each chunk by [`ChunkRef::check`] (length bound, CRC), then its
//! place: chunks must arrive in order (file after file, offset after offset) and stay
//! inside the file's declared size; a file is checked against its sha256 as soon as its
//! last byte arrives. Any refusal is an [`Error::SnapshotRefused`]; the transfer is then
//! abandoned (dropping the receiver removes the staging directory) and starts over.

use std::fs::File;
use std::io::Write;

use sha2::{Digest, Sha256};

use super::chunk::ChunkRef;
use super::manifest::{check_path, Manifest};
use super::store::{Snapshot, SnapshotStore, Staging};
use crate::error::{Error, IoContext, Result};

/// Bounds a receiver enforces on what a peer declares.
#[derive(Debug, Clone, Copy)]
pub struct ReceiveLimits {
    /// Largest sum of file sizes accepted (default 256 GiB).
    pub max_total_bytes: u64,
}

impl Default for ReceiveLimits {
    fn default() -> Self {
        ReceiveLimits { max_total_bytes: 256 << 30 }
    }
}

/// How far a transfer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub bytes: u64,
    pub total: u64,
    /// Every file is complete: [`Receiver::finish`] can be called.
    pub complete: bool,
}

/// A snapshot being received.
pub struct Receiver {
    store: SnapshotStore,
    staging: Staging,
    manifest: Manifest,
    file: usize,
    offset: u64,
    out: Option<File>,
    hash: Sha256,
    received: u64,
}

fn refuse(why: String) -> Error {
    Error::SnapshotRefused(why)
}

impl Receiver {
    /// Checks `manifest` (bytes from the peer) and prepares a staging directory in
    /// `store`.
    pub fn begin(store: &SnapshotStore, manifest: &[u8], limits: ReceiveLimits) -> Result<Receiver> {
        let manifest = Manifest::decode(manifest, limits.max_total_bytes)?;
        let staging = store.staging("recv")?;
        let state = staging.dir.join("state");
        std::fs::create_dir_all(&state).ctx(|| format!("creating {}", state.display()))?;
        let mut r = Receiver { store: store.clone(), staging, manifest, file: 0, offset: 0, out: None, hash: Sha256::new(), received: 0 };
        r.settle()?;
        Ok(r)
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Where the transfer stands.
    pub fn progress(&self) -> Received {
        Received { bytes: self.received, total: self.manifest.total_bytes(), complete: self.file >= self.manifest.files.len() }
    }

    /// Creates the current file if needed, and completes (checks) files whose bytes have
    /// all arrived, moving on until one still wants bytes or none is left.
    fn settle(&mut self) -> Result<()> {
        while let Some(f) = self.manifest.files.get(self.file) {
            let name = check_path(&f.path)?;
            if self.out.is_none() {
                let p = self.staging.dir.join("state").join(name);
                let file = File::options().write(true).create_new(true).open(&p).ctx(|| format!("creating {}", p.display()))?;
                self.out = Some(file);
                self.hash = Sha256::new();
            }
            if self.offset < f.size {
                return Ok(());
            }
            let sha = hex::encode(std::mem::take(&mut self.hash).finalize());
            if sha != f.sha256 {
                return Err(refuse(format!("{}: sha256 {sha} does not match the manifest's {}", f.path, f.sha256)));
            }
            if let Some(file) = self.out.take() {
                file.sync_all().ctx(|| format!("syncing {}", f.path))?;
            }
            self.file += 1;
            self.offset = 0;
        }
        Ok(())
    }

    /// Takes one chunk's bytes: checked (see the module docs), written, and the file
    /// completed if it was its last piece.
    pub fn accept(&mut self, bytes: &[u8]) -> Result<Received> {
        let c = ChunkRef::check(bytes)?;
        let Some(f) = self.manifest.files.get(self.file) else {
            return Err(refuse(format!("chunk for file {} after the last file", c.file)));
        };
        if c.file as usize != self.file || c.offset != self.offset {
            return Err(refuse(format!("chunk for file {} at {}, expected file {} at {}", c.file, c.offset, self.file, self.offset)));
        }
        let end = c.offset.checked_add(c.data.len() as u64).filter(|e| *e <= f.size);
        let Some(end) = end else {
            return Err(refuse(format!("chunk runs past the end of {} ({} bytes)", f.path, f.size)));
        };
        let Some(out) = self.out.as_mut() else { return Err(Error::Invalid("receiver: no open file".into())) };
        out.write_all(c.data).ctx(|| format!("writing {}", f.path))?;
        self.hash.update(c.data);
        self.offset = end;
        self.received += c.data.len() as u64;
        self.settle()?;
        Ok(self.progress())
    }

    /// Publishes the snapshot once every file is complete.
    pub fn finish(self) -> Result<Snapshot> {
        if self.file < self.manifest.files.len() {
            let f = &self.manifest.files[self.file];
            return Err(refuse(format!("transfer ended early: {} has {} of {} bytes", f.path, self.offset, f.size)));
        }
        tracing::info!(index = self.manifest.index, bytes = self.received, files = self.manifest.files.len(), "snapshot received");
        self.store.publish(self.staging, self.manifest)
    }
}
