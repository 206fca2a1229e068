//! One chunk of a snapshot transfer: a piece (at most [`CHUNK_MAX`] bytes) of one file of
//! the manifest, at a byte offset, with a CRC-32 over header and data.
//!
//! ```text
//! offset  size  field
//! 0       4     magic "HSC1"
//! 4       4     file: index into the manifest's `files`, u32 BE
//! 8       8     offset: where the data goes in that file, u64 BE
//! 16      4     len: data length, u32 BE, 1..=1 MiB
//! 20      4     crc: CRC-32 (IEEE) of bytes 0..20 followed by the data, u32 BE
//! 24      len   data
//! ```
//!
//! [`Chunk::decode`] checks the header length, the magic, the declared length against
//! the bound and against the bytes present (before copying anything), and the CRC.

use crate::error::{Error, Result};

/// Largest data part of a chunk: 1 MiB.
pub const CHUNK_MAX: usize = 1 << 20;
/// Bytes before the data.
pub const CHUNK_HEADER_LEN: usize = 24;
const MAGIC: &[u8; 4] = b"HSC1";

/// A decoded chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub file: u32,
    pub offset: u64,
    pub data: Vec<u8>,
}

fn crc(header: &[u8], data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(header);
    h.update(data);
    h.finalize()
}

impl Chunk {
    /// The chunk's bytes (see the module docs). `data` must not exceed [`CHUNK_MAX`].
    pub fn encode(&self) -> Vec<u8> {
        Self::encode_parts(self.file, self.offset, &self.data)
    }

    /// Encodes without building a [`Chunk`] first.
    pub fn encode_parts(file: u32, offset: u64, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(CHUNK_HEADER_LEN + data.len());
        out.extend_from_slice(&Self::header(file, offset, data));
        out.extend_from_slice(data);
        out
    }

    /// The header (CRC included) that goes before `data` (at most [`CHUNK_MAX`] bytes):
    /// the sending side's path, which writes header and data without joining them.
    pub fn header(file: u32, offset: u64, data: &[u8]) -> [u8; CHUNK_HEADER_LEN] {
        let mut h = [0u8; CHUNK_HEADER_LEN];
        h[0..4].copy_from_slice(MAGIC);
        h[4..8].copy_from_slice(&file.to_be_bytes());
        h[8..16].copy_from_slice(&offset.to_be_bytes());
        h[16..20].copy_from_slice(&(data.len() as u32).to_be_bytes());
        let c = crc(&h[..20], data);
        h[20..24].copy_from_slice(&c.to_be_bytes());
        h
    }

    /// Decodes and checks a chunk from a peer; never panics.
    pub fn decode(b: &[u8]) -> Result<Chunk> {
        let c = ChunkRef::check(b)?;
        Ok(Chunk { file: c.file, offset: c.offset, data: c.data.to_vec() })
    }
}

/// A checked chunk whose data stays where it arrived (the receiving side's path: the
/// data goes to its file without a copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRef<'a> {
    pub file: u32,
    pub offset: u64,
    pub data: &'a [u8],
}

impl<'a> ChunkRef<'a> {
    /// Checks a chunk from a peer (see the module docs); never panics.
    pub fn check(b: &'a [u8]) -> Result<ChunkRef<'a>> {
        let refuse = |why: String| Error::SnapshotRefused(format!("chunk: {why}"));
        if b.len() < CHUNK_HEADER_LEN {
            return Err(refuse(format!("{} bytes, shorter than the {CHUNK_HEADER_LEN}-byte header", b.len())));
        }
        if &b[0..4] != MAGIC {
            return Err(refuse("bad magic".into()));
        }
        let be32 = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let file = be32(4);
        let mut off = [0u8; 8];
        off.copy_from_slice(&b[8..16]);
        let offset = u64::from_be_bytes(off);
        let len = be32(16) as usize;
        if len == 0 || len > CHUNK_MAX {
            return Err(refuse(format!("declared length {len} outside 1..={CHUNK_MAX}")));
        }
        if b.len() - CHUNK_HEADER_LEN != len {
            return Err(refuse(format!("declared length {len} but {} data bytes", b.len() - CHUNK_HEADER_LEN)));
        }
        let data = &b[CHUNK_HEADER_LEN..];
        if crc(&b[..20], data) != be32(20) {
            return Err(refuse(format!("CRC mismatch (file {file}, offset {offset})")));
        }
        Ok(ChunkRef { file, offset, data })
    }
}
