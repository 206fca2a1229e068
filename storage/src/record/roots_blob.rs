//! The roots-blob record (kind 5): one chunk of a file under `file_roots` or
//! `pillar_roots`, applied by `state/apply.rs` and materialised by `roots.rs`. Also the
//! roots tree names every roots kind uses, and the chunk checks a staged chunk
//! (`roots_stage`, kind 12) shares.

use serde::{Deserialize, Serialize};

use super::Payload;
use crate::error::{Error, Result};
use crate::id::{validate_relative_path, validate_saltenv};

/// Size of one roots blob chunk.
pub const ROOTS_CHUNK_LEN: usize = 1 << 20;

/// Which roots tree a blob belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RootsTree {
    File,
    Pillar,
    /// The gitfs backend's files, as fetched from its remotes (`master/src/gitfs`):
    /// served from the state machine, never materialised in a directory.
    Gitfs,
    /// git_pillar's files, as fetched from its remotes (`master/src/pillar/git.rs`):
    /// read from the state machine when pillar is compiled, never materialised, never
    /// served to minions as files.
    GitPillar,
}

impl RootsTree {
    pub fn as_str(self) -> &'static str {
        match self {
            RootsTree::File => "file",
            RootsTree::Pillar => "pillar",
            RootsTree::Gitfs => "gitfs",
            RootsTree::GitPillar => "git_pillar",
        }
    }
}

/// One chunk of a file under `file_roots` or `pillar_roots`. A file of `size` bytes is
/// `chunks` records, chunk `i` holding bytes `i*ROOTS_CHUNK_LEN ..`; an empty file is one
/// chunk of zero bytes. `sha256` is of the whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsBlob {
    pub tree: RootsTree,
    pub saltenv: String,
    pub path: String,
    pub mode: u32,
    #[serde(with = "serde_bytes")]
    pub sha256: Vec<u8>,
    pub size: u64,
    pub chunk: u32,
    pub chunks: u32,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

impl Payload for RootsBlob {
    /// A valid saltenv and safe relative path, a 32-byte sha256, a chunk that fits the
    /// file's size (numbering and length), permission bits only in `mode`. The same
    /// checks for a live chunk and a staged one.
    fn check(&self) -> Result<()> {
        let b = self;
        validate_saltenv(&b.saltenv)?;
        validate_relative_path(&b.path)?;
        if b.sha256.len() != 32 {
            return Err(Error::Invalid("roots blob sha256 is not 32 bytes".into()));
        }
        let expect_chunks = (b.size.div_ceil(ROOTS_CHUNK_LEN as u64)).max(1);
        if b.chunks as u64 != expect_chunks || b.chunk >= b.chunks {
            return Err(Error::Invalid(format!("roots blob {}: chunk {}/{} does not fit size {}", b.path, b.chunk, b.chunks, b.size)));
        }
        let start = b.chunk as u64 * ROOTS_CHUNK_LEN as u64;
        let expect_len = (b.size - start).min(ROOTS_CHUNK_LEN as u64);
        if b.data.len() as u64 != expect_len {
            return Err(Error::Invalid(format!("roots blob {}: chunk {} holds {} bytes, expected {}", b.path, b.chunk, b.data.len(), expect_len)));
        }
        if b.mode & !0o7777 != 0 {
            return Err(Error::Invalid(format!("roots blob {}: mode {:o} refused", b.path, b.mode)));
        }
        Ok(())
    }
}
