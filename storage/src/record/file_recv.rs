//! The pushed-file record (kind 20): a chunk of a file a minion pushed to the masters
//! with `cp.push` / `cp.push_dir` (Salt's `_file_recv`, allowed by `file_recv: True`).
//!
//! A minion sends a file in pieces (its `file_buffer_size`, 256 KiB by default), each with
//! the file's path (a list of components, joined and normalised by [`push_path`]), the
//! file's `size` and the piece's offset `loc`. Each piece becomes one or more
//! [`FileRecv`] records of at most [`PUSH_CHUNK_LEN`] bytes ([`split`]), so a member
//! never holds more than that of a file in one record, and every member of a cluster
//! holds the file.
//!
//! Applied (`state/pushed.rs`), the pieces of a file are kept in the `chunks` family
//! under `pushed NUL <id> NUL <path> NUL <u64 BE loc>` and the file's progress
//! ([`PushedMeta`]) in `meta` under `pushed NUL <id> NUL <path>`. Decided at apply, on
//! every member alike: a piece at offset 0 starts the file again (what it held before is
//! dropped), and a piece whose offset is not the bytes held so far, whose `size` is not
//! the file's, or (at offset 0) whose path is inside another pushed file of the minion
//! or holds one below it, or of a minion whose key is not accepted there, changes
//! nothing; the minion's key deleted drops all its files. Once the bytes held reach `size` the file is
//! complete and the roots view writes it to `cachedir/minions/<id>/files/<path>`
//! (`crate::roots`); a file restarted is removed from there until it is complete again.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::validate_minion_id;

/// Most bytes of a file one record carries.
pub const PUSH_CHUNK_LEN: usize = 1 << 20;
/// Largest pushed file a record may describe (the master's `file_recv_max_size` is the
/// bound in force; this one only keeps offsets sane).
pub const MAX_PUSHED_SIZE: u64 = 1 << 40;
/// Longest normalised path.
pub const MAX_PATH_LEN: usize = 4096;
/// Longest path component (a file name).
pub const MAX_NAME_LEN: usize = 255;
/// Most components a path may be pushed as.
pub const MAX_PARTS: usize = 1024;
/// Prefix of the pushed files' keys in the `meta` and `chunks` families.
pub const PUSHED_PREFIX: &[u8] = b"pushed\0";

/// One piece of a pushed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecv {
    /// The minion that pushed it.
    pub id: String,
    /// The normalised relative path under the minion's `files` folder ([`check_path`]).
    pub path: String,
    /// The whole file's size, as the minion declared it.
    pub size: u64,
    /// Where this piece starts.
    pub loc: u64,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    pub time_ns: u64,
}

/// A pushed file's progress, as the state holds it (msgpack in `meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushedMeta {
    /// The declared size.
    pub size: u64,
    /// Bytes held so far (from offset 0, without a gap).
    pub held: u64,
    /// When its last piece was pushed.
    pub time_ns: u64,
}

impl PushedMeta {
    pub fn complete(&self) -> bool {
        self.held == self.size
    }
}

/// What a `_file_recv` handler reads about a path before it decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushedRead {
    /// The file's progress, if the minion pushed it before.
    pub held: Option<PushedMeta>,
    /// Another pushed file of the minion is in the way: one at a parent path, or one
    /// below this path (a folder on disk).
    pub conflict: bool,
}

/// Why a pushed path is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathRefusal {
    #[error("the path names no file")]
    Empty,
    #[error("the path is absolute")]
    Absolute,
    #[error("the path leaves the minion's folder")]
    Escapes,
    #[error("the path holds a NUL byte")]
    Nul,
    #[error("the path is too long (more than {MAX_PARTS} components, {MAX_NAME_LEN} bytes a component or {MAX_PATH_LEN} in all)")]
    TooLong,
}

/// Salt's rules for the path of a pushed file: the components joined with `/` and
/// normalised (empty and `.` components dropped, `..` taking one back); refused when
/// absolute, when it leaves the minion's folder (a `..` with nothing to take back) or
/// names the folder itself, when it holds NUL, or when it is too long. Returns the
/// normalised relative path.
pub fn push_path<S: AsRef<str>>(parts: &[S]) -> std::result::Result<String, PathRefusal> {
    if parts.len() > MAX_PARTS {
        return Err(PathRefusal::TooLong);
    }
    let joined = parts.iter().map(AsRef::as_ref).collect::<Vec<_>>().join("/");
    if joined.contains('\0') {
        return Err(PathRefusal::Nul);
    }
    if joined.starts_with('/') {
        return Err(PathRefusal::Absolute);
    }
    let mut out: Vec<&str> = Vec::new();
    for comp in joined.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                out.pop().ok_or(PathRefusal::Escapes)?;
            }
            c if c.len() > MAX_NAME_LEN => return Err(PathRefusal::TooLong),
            c => out.push(c),
        }
    }
    if out.is_empty() {
        return Err(PathRefusal::Empty);
    }
    let path = out.join("/");
    if path.len() > MAX_PATH_LEN {
        return Err(PathRefusal::TooLong);
    }
    Ok(path)
}

/// A path as records carry it: already normalised (what [`push_path`] returns for it).
pub fn check_path(path: &str) -> Result<()> {
    match push_path(&[path]) {
        Ok(p) if p == path => Ok(()),
        Ok(_) => Err(Error::InvalidPath { path: path.escape_debug().to_string(), why: "not in its normal form".into() }),
        Err(why) => Err(Error::InvalidPath { path: path.escape_debug().to_string(), why: why.to_string() }),
    }
}

impl super::Payload for FileRecv {
    /// A valid minion id, a path in its normal form, a piece of at most
    /// [`PUSH_CHUNK_LEN`] bytes that fits the file's size.
    fn check(&self) -> Result<()> {
        check(self)
    }

    fn len_hint(&self) -> usize {
        self.id.len() + self.path.len() + self.data.len()
    }
}

fn check(r: &FileRecv) -> Result<()> {
    validate_minion_id(&r.id)?;
    check_path(&r.path)?;
    if r.data.len() > PUSH_CHUNK_LEN {
        return Err(Error::Invalid(format!("pushed file {}: a piece of {} bytes, more than {PUSH_CHUNK_LEN}", r.path, r.data.len())));
    }
    if r.size > MAX_PUSHED_SIZE || r.loc.checked_add(r.data.len() as u64).is_none_or(|end| end > r.size) {
        return Err(Error::Invalid(format!("pushed file {}: a piece at {} of {} bytes does not fit its size {}", r.path, r.loc, r.data.len(), r.size)));
    }
    Ok(())
}

/// The records of one piece of `data` at `loc`, cut into [`PUSH_CHUNK_LEN`] bytes (one
/// empty record for an empty piece: an empty file).
pub fn split(id: &str, path: &str, size: u64, loc: u64, data: &[u8], time_ns: u64) -> Vec<FileRecv> {
    let rec = |at: u64, d: &[u8]| FileRecv { id: id.to_string(), path: path.to_string(), size, loc: at, data: d.to_vec(), time_ns };
    if data.is_empty() {
        return vec![rec(loc, data)];
    }
    data.chunks(PUSH_CHUNK_LEN).enumerate().map(|(i, d)| rec(loc + (i * PUSH_CHUNK_LEN) as u64, d)).collect()
}

/// `pushed NUL <id> NUL <path>`: the file's progress in `meta`.
pub fn meta_key(id: &str, path: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(PUSHED_PREFIX.len() + id.len() + path.len() + 1);
    k.extend_from_slice(PUSHED_PREFIX);
    k.extend_from_slice(id.as_bytes());
    k.push(0);
    k.extend_from_slice(path.as_bytes());
    k
}

/// `pushed NUL <id> NUL`: every pushed file of a minion.
pub fn minion_prefix(id: &str) -> Vec<u8> {
    let mut k = PUSHED_PREFIX.to_vec();
    k.extend_from_slice(id.as_bytes());
    k.push(0);
    k
}

/// `pushed NUL <id> NUL <path> NUL`: the file's pieces in `chunks` (then the u64 BE offset).
pub fn chunk_prefix(id: &str, path: &str) -> Vec<u8> {
    let mut k = meta_key(id, path);
    k.push(0);
    k
}

pub fn chunk_key(id: &str, path: &str, loc: u64) -> Vec<u8> {
    let mut k = chunk_prefix(id, path);
    k.extend_from_slice(&loc.to_be_bytes());
    k
}

/// The (id, path) a `meta` key names, if it is a pushed file's.
pub fn parse_meta_key(k: &[u8]) -> Option<(String, String)> {
    let rest = k.strip_prefix(PUSHED_PREFIX)?;
    let nul = rest.iter().position(|b| *b == 0)?;
    let (id, path) = (std::str::from_utf8(&rest[..nul]).ok()?, std::str::from_utf8(&rest[nul + 1..]).ok()?);
    Some((id.to_string(), path.to_string()))
}

#[cfg(test)]
#[path = "file_recv_tests.rs"]
mod tests;
