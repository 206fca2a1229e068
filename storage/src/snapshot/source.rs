//! The sending side of a transfer: a snapshot read as its manifest, then chunks of at
//! most 1 MiB, file after file in manifest order (empty files send no chunk).

use std::fs::File;
use std::io::Read;

use super::chunk::{Chunk, CHUNK_HEADER_LEN, CHUNK_MAX};
use super::store::Snapshot;
use crate::error::{Error, IoContext, Result};

/// Reads a snapshot as transfer chunks.
pub struct SnapshotSource {
    snap: Snapshot,
    file: usize,
    offset: u64,
    open: Option<File>,
    sent: u64,
    buf: Vec<u8>,
}

impl SnapshotSource {
    pub fn new(snap: &Snapshot) -> Self {
        SnapshotSource { snap: snap.clone(), file: 0, offset: 0, open: None, sent: 0, buf: Vec::new() }
    }

    /// The manifest's bytes: what the receiver's [`super::Receiver::begin`] takes.
    pub fn manifest_bytes(&self) -> Vec<u8> {
        self.snap.manifest().encode()
    }

    /// Bytes of file data in the whole snapshot.
    pub fn total_bytes(&self) -> u64 {
        self.snap.manifest().total_bytes()
    }

    /// Bytes of file data handed out so far.
    pub fn sent_bytes(&self) -> u64 {
        self.sent
    }

    /// The next chunk's bytes ([`Chunk`] encoding), or `None` after the last one. A file
    /// shorter than its manifest says is an error (the snapshot was damaged on disk).
    pub fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        Ok(self.next_chunk_parts()?.map(|(h, data)| [&h[..], data].concat()))
    }

    /// The next chunk as its header and its data (borrowed until the next call), for a
    /// sender that writes them without joining them; the same bytes as
    /// [`SnapshotSource::next_chunk`].
    pub fn next_chunk_parts(&mut self) -> Result<Option<([u8; CHUNK_HEADER_LEN], &[u8])>> {
        let files = &self.snap.manifest().files;
        loop {
            let Some(f) = files.get(self.file) else { return Ok(None) };
            if self.offset >= f.size {
                self.file += 1;
                self.offset = 0;
                self.open = None;
                continue;
            }
            let path = self.snap.dir().join(&f.path);
            if self.open.is_none() {
                self.open = Some(File::open(&path).ctx(|| format!("opening {}", path.display()))?);
            }
            let want = (f.size - self.offset).min(CHUNK_MAX as u64) as usize;
            self.buf.resize(want, 0);
            let Some(file) = self.open.as_mut() else { return Ok(None) };
            file.read_exact(&mut self.buf).map_err(|e| Error::Invalid(format!("snapshot {}: reading {} at {}: {e} (shorter than its manifest says?)", self.snap.index(), path.display(), self.offset)))?;
            let header = Chunk::header(self.file as u32, self.offset, &self.buf);
            self.offset += want as u64;
            self.sent += want as u64;
            return Ok(Some((header, &self.buf)));
        }
    }
}
