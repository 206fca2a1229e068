//! Torn-tail repair for the raft-engine log, run before raft-engine opens the files.
//!
//! raft-engine appends batches to the newest `*.raftlog` file, which it preallocates with
//! zeros. A crash (even `kill -9`) can leave that file as: whole batches, maybe one batch
//! whose write never finished, then zeros. raft-engine's strict mode refuses such a file,
//! and its tolerant mode truncates at the first bad batch *anywhere* in the newest file,
//! which would silently drop acknowledged records after a flipped byte. So Halite decides
//! itself, reading only the framing that raft-engine documents for its files
//! ([`crate::framing`]).
//!
//! Walking batch headers from the start gives the end of the well-framed region. If only
//! zeros follow it, the zeros are cut (nothing was lost), and if the last framed batch
//! still ends in zeros where its checksum footer belongs, its write never finished: it is
//! cut too. If a partial batch follows the framed region, whose header runs past the end
//! of the file, or a fragment shorter than a batch header, it is a torn write of a batch
//! that was never acknowledged (an acknowledged batch was fsynced whole): it is cut and
//! the cut is logged. Anything else,
//! non-zero bytes that no batch header accounts for, is corruption: opening is refused
//! and the error names `halite-ctl verify`. Checksums inside well-framed batches are
//! checked by raft-engine's strict recovery right after.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::framing::{self, BATCH_HEADER_LEN, FILE_HEADER_PREFIX};

pub use crate::framing::newest_log_file;
/// The largest batch Halite writes: a group of proposals is capped well below this.
pub const MAX_TORN_BATCH: u64 = 256 << 20;

/// What the tail check found in the newest log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailState {
    /// No log file, or the newest file ends exactly after its last batch.
    Clean,
    /// Zero padding after the last batch was cut (`at` 0: the whole file was zeros,
    /// its header too, and it was removed).
    ZerosCut { file: PathBuf, at: u64 },
    /// An unfinished last batch was cut.
    TornCut { file: PathBuf, at: u64, bytes: u64 },
}

/// Checks the newest log file of `dir` and cuts a torn tail; see the module docs.
pub fn repair_torn_tail(dir: &Path) -> Result<TailState> {
    check_tail(dir, true)
}

/// Like [`repair_torn_tail`], but with `repair` unset it only reports what it would cut.
pub fn check_tail(dir: &Path, repair: bool) -> Result<TailState> {
    let Some(path) = newest_log_file(dir)? else { return Ok(TailState::Clean) };
    let mut f = OpenOptions::new().read(true).write(repair).open(&path).ctx(|| format!("opening {}", path.display()))?;
    let size = f.metadata().ctx(|| format!("stat {}", path.display()))?.len();
    let header_len = match file_header_len(&mut f, size)? {
        Some(h) => h,
        None => {
            // A file whose header never made it to disk holds no batch at all (raft-engine
            // writes a new file's header before any batch). raft-engine refuses a file
            // without its header, even an empty one, so the file is removed: the log ends
            // with the file before it, and raft-engine starts a new one.
            if all_zero_from(&mut f, 0, size)? {
                tracing::warn!(file = %path.display(), "newest log file of only zeros (its header never reached the disk): removing it");
                if repair {
                    drop(f);
                    std::fs::remove_file(&path).ctx(|| format!("removing {}", path.display()))?;
                    if let Some(dir) = path.parent() {
                        File::open(dir).and_then(|d| d.sync_all()).ctx(|| format!("syncing {}", dir.display()))?;
                    }
                }
                return Ok(TailState::ZerosCut { file: path, at: 0 });
            }
            return Err(corrupt(&path, 0, "the file header is damaged"));
        }
    };
    let (end, last_start) = walk_batches(&mut f, header_len, size)?;
    if end == size {
        return Ok(TailState::Clean);
    }
    match last_non_zero(&mut f, end, size)? {
        None => {
            // Only zeros after the framed region. The last framed batch may still be a
            // torn write inside the preallocated space: its footer (the checksum, last
            // bytes of the batch) would then still be zeros.
            if let Some(ls) = last_start {
                let mut footer = [0u8; 8];
                read_at(&mut f, end - 8, &mut footer)?;
                if footer == [0u8; 8] {
                    cut(&mut f, &path, ls, repair)?;
                    tracing::warn!(file = %path.display(), at = ls, bytes = end - ls,
                        "torn tail: cutting an unfinished last log batch (it was never acknowledged)");
                    return Ok(TailState::TornCut { file: path, at: ls, bytes: end - ls });
                }
            }
            cut(&mut f, &path, end, repair)?;
            tracing::debug!(file = %path.display(), at = end, "cut zero padding after the last log batch");
            Ok(TailState::ZerosCut { file: path, at: end })
        }
        Some(nz_end) => {
            // Non-zero bytes after the framed region: a torn last batch, or corruption.
            let torn = match read_batch_len(&mut f, end, size)? {
                // A header whose batch runs past the end of the file.
                Some(len) => len <= MAX_TORN_BATCH && end + len > size,
                // Not even a whole header: only a torn write leaves a fragment this short.
                None => nz_end - end < BATCH_HEADER_LEN,
            };
            if !torn {
                return Err(corrupt(&path, end, "bytes after the last whole batch are not a torn write"));
            }
            cut(&mut f, &path, end, repair)?;
            tracing::warn!(file = %path.display(), at = end, bytes = nz_end - end,
                "torn tail: cutting an unfinished last log batch (it was never acknowledged)");
            Ok(TailState::TornCut { file: path, at: end, bytes: nz_end - end })
        }
    }
}

fn cut(f: &mut File, path: &Path, at: u64, repair: bool) -> Result<()> {
    if !repair {
        return Ok(());
    }
    f.set_len(at).ctx(|| format!("truncating {}", path.display()))?;
    f.sync_all().ctx(|| format!("syncing {}", path.display()))
}

fn corrupt(path: &Path, at: u64, why: &str) -> Error {
    Error::CorruptLog(format!(
        "{} at byte {at}: {why}. Refusing to open; run `halite-ctl verify --log {}` to see the damaged records",
        path.display(),
        path.parent().map(|p| p.display().to_string()).unwrap_or_default()
    ))
}

fn read_at(f: &mut File, at: u64, buf: &mut [u8]) -> Result<usize> {
    f.seek(SeekFrom::Start(at)).map_err(|e| Error::io("seeking in log file", e))?;
    let mut got = 0;
    while got < buf.len() {
        let n = f.read(&mut buf[got..]).map_err(|e| Error::io("reading log file", e))?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

/// Returns the header length, or None if the magic is missing.
fn file_header_len(f: &mut File, size: u64) -> Result<Option<u64>> {
    let mut buf = [0u8; FILE_HEADER_PREFIX];
    if size < buf.len() as u64 {
        return Ok(None);
    }
    read_at(f, 0, &mut buf)?;
    Ok(framing::file_header_len(&buf))
}

fn read_batch_len(f: &mut File, at: u64, size: u64) -> Result<Option<u64>> {
    if at + BATCH_HEADER_LEN > size {
        return Ok(None);
    }
    let mut h = [0u8; 16];
    read_at(f, at, &mut h)?;
    Ok(framing::batch_len(&h))
}

/// Follows batch lengths from `start`; returns the end of the last batch that fits and
/// the start of that batch.
fn walk_batches(f: &mut File, start: u64, size: u64) -> Result<(u64, Option<u64>)> {
    let mut at = start;
    let mut last = None;
    loop {
        match read_batch_len(f, at, size)? {
            Some(len) if at + len <= size => {
                last = Some(at);
                at += len;
            }
            _ => return Ok((at, last)),
        }
    }
}

fn last_non_zero(f: &mut File, from: u64, size: u64) -> Result<Option<u64>> {
    let mut buf = vec![0u8; 1 << 16];
    let mut at = from;
    let mut last = None;
    while at < size {
        let want = ((size - at) as usize).min(buf.len());
        let n = read_at(f, at, &mut buf[..want])?;
        if n == 0 {
            break;
        }
        if let Some(p) = buf[..n].iter().rposition(|b| *b != 0) {
            last = Some(at + p as u64 + 1);
        }
        at += n as u64;
    }
    Ok(last)
}

fn all_zero_from(f: &mut File, from: u64, size: u64) -> Result<bool> {
    Ok(last_non_zero(f, from, size)?.is_none())
}

#[cfg(test)]
#[path = "tail_tests.rs"]
mod tests;
