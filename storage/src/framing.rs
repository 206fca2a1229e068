//! The framing of raft-engine's log files: the one place outside raft-engine that knows
//! it. The torn-tail repair ([`crate::tail`]) and `halite-ctl verify` read it; nothing
//! else does. What raft-engine 0.4.2 writes (documented in its `file_pipe_log` and
//! `log_batch` modules; `docs/formats.md` §2 repeats it):
//!
//! ```text
//! file   = magic "RAFT-LOG-FILE-HEADER-9986AB3E47F320B394C8E84916EB0ED5", u64 BE version,
//!          [u64 BE alignment if version >= 2], batch*
//! batch  = u64 BE (len << 8 | compression type), u64 BE footer offset, ... (len bytes)
//! ```
//!
//! A batch's items and their checksums are raft-engine's business: [`check_file`] asks
//! raft-engine to read them, and [`first_bad_batch`] narrows a failure down to a batch.

use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// The first bytes of every log file.
pub const MAGIC: &[u8] = b"RAFT-LOG-FILE-HEADER-9986AB3E47F320B394C8E84916EB0ED5";
/// Bytes of a file header before its version-dependent tail.
pub const FILE_HEADER_PREFIX: usize = MAGIC.len() + 8;
/// Bytes of a batch header: length-and-compression, footer offset.
pub const BATCH_HEADER_LEN: u64 = 16;

/// The length of a file's header, from its first [`FILE_HEADER_PREFIX`] bytes; `None`
/// when the magic is missing.
pub fn file_header_len(prefix: &[u8]) -> Option<u64> {
    let magic = prefix.get(..MAGIC.len())?;
    if magic != MAGIC {
        return None;
    }
    let version = u64::from_be_bytes(prefix.get(MAGIC.len()..FILE_HEADER_PREFIX)?.try_into().ok()?);
    Some(FILE_HEADER_PREFIX as u64 + if version >= 2 { 8 } else { 0 })
}

/// The length of a batch from its 16-byte header; `None` when the header cannot be one
/// (a footer offset outside the batch, an unknown compression type).
pub fn batch_len(header: &[u8; 16]) -> Option<u64> {
    let len_and_type = u64::from_be_bytes(header[0..8].try_into().ok()?);
    let footer = u64::from_be_bytes(header[8..16].try_into().ok()?);
    let len = len_and_type >> 8;
    if footer < BATCH_HEADER_LEN || footer > len || (len_and_type & 0xff) > 2 {
        return None;
    }
    Some(len)
}

/// The offsets of the whole batches of a file's bytes, in order (empty when the header
/// is damaged). Stops at the first header that is not a batch or runs past the end.
pub fn batch_offsets(file: &[u8]) -> Vec<u64> {
    let Some(mut at) = file.get(..FILE_HEADER_PREFIX).and_then(file_header_len) else { return Vec::new() };
    let mut out = Vec::new();
    while let Some(h) = file.get(at as usize..(at + BATCH_HEADER_LEN) as usize) {
        let Some(len) = h.try_into().ok().and_then(batch_len) else { break };
        if at + len > file.len() as u64 {
            break;
        }
        out.push(at);
        at += len;
    }
    out
}

/// The batch offsets of a file's bytes whose **entries block** fails its checksum.
///
/// A batch holds, after its 16-byte header, the entries block (the entries' bytes,
/// compressed or not, then a u32 LE CRC-32 of them) up to its footer offset, then the
/// item footer. raft-engine checks the footer's checksum when it opens a file, but an
/// entries block only when those entries are read: a flipped byte there passes
/// [`check_file`]. This finds it without decoding anything: the block's bytes and its
/// checksum are where the batch header says.
pub fn bad_entry_blocks(file: &[u8]) -> Vec<u64> {
    let mut bad = Vec::new();
    for at in batch_offsets(file) {
        let start = at as usize;
        let Some(header) = file.get(start..start + BATCH_HEADER_LEN as usize) else { break };
        let footer = u64::from_be_bytes(header[8..16].try_into().unwrap_or([0; 8])) as usize;
        // An empty block (no entries in this batch) has no checksum either.
        if footer <= BATCH_HEADER_LEN as usize {
            continue;
        }
        let Some(block) = file.get(start + BATCH_HEADER_LEN as usize..start + footer) else {
            bad.push(at);
            continue;
        };
        let ok = block.len() > 4 && {
            let (data, sum) = block.split_at(block.len() - 4);
            crc32fast::hash(data) == u32::from_le_bytes(sum.try_into().unwrap_or([0; 4]))
        };
        if !ok {
            bad.push(at);
        }
    }
    bad
}

/// The log files of a raft-engine directory (`*.raftlog` and `*.rewrite`), oldest first.
pub fn log_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .ctx(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "raftlog" || x == "rewrite"))
        .collect();
    v.sort();
    Ok(v)
}

/// The newest append-queue file of a raft-engine directory (`<16 digits>.raftlog`).
pub fn newest_log_file(dir: &Path) -> Result<Option<PathBuf>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("listing {}", dir.display()), e)),
    };
    let mut best: Option<(u64, PathBuf)> = None;
    for ent in rd {
        let ent = ent.ctx(|| format!("listing {}", dir.display()))?;
        let name = ent.file_name();
        let Some(seq) = name.to_str().and_then(|n| n.strip_suffix(".raftlog")) else { continue };
        if seq.len() != 16 {
            continue;
        }
        let Ok(seq) = seq.parse::<u64>() else { continue };
        if best.as_ref().is_none_or(|(s, _)| seq > *s) {
            best = Some((seq, ent.path()));
        }
    }
    Ok(best.map(|(_, p)| p))
}

/// Reads every item of a log file through raft-engine (checking each batch's checksum);
/// returns how many there are, or raft-engine's complaint.
pub fn check_file(path: &Path) -> Result<usize> {
    let mut n = 0;
    for item in raft_engine::Engine::dump(path)? {
        item?;
        n += 1;
    }
    Ok(n)
}

/// [`check_file`] on the first `end` bytes of `path` (a copy of them in a scratch
/// directory): a file whose zero padding after its last batch start-up would cut.
pub fn check_prefix(path: &Path, end: u64) -> Result<usize> {
    let data = std::fs::read(path).ctx(|| format!("reading {}", path.display()))?;
    let end = (end as usize).min(data.len());
    let scratch = std::env::temp_dir().join(format!("halite-verify-{}-{}", std::process::id(), crate::format::now_ns()));
    std::fs::create_dir_all(&scratch).ctx(|| format!("creating {}", scratch.display()))?;
    let copy = scratch.join(path.file_name().unwrap_or_default());
    let checked = std::fs::write(&copy, &data[..end]).ctx(|| format!("writing {}", copy.display())).and_then(|()| check_file(&copy));
    let _ = std::fs::remove_dir_all(&scratch);
    checked
}

/// The byte offset of the first batch of `path` that raft-engine refuses (`None` when it
/// reads the whole file), found by checking growing prefixes of a copy of the file
/// (a binary search over batch boundaries).
pub fn first_bad_batch(path: &Path) -> Result<Option<u64>> {
    let data = std::fs::read(path).ctx(|| format!("reading {}", path.display()))?;
    let offs = batch_offsets(&data);
    let scratch = std::env::temp_dir().join(format!("halite-verify-{}-{}", std::process::id(), crate::format::now_ns()));
    std::fs::create_dir_all(&scratch).ctx(|| format!("creating {}", scratch.display()))?;
    let copy = scratch.join(path.file_name().unwrap_or_default());
    let prefix_ok = |k: usize| -> Result<bool> {
        let end = offs.get(k).copied().unwrap_or(data.len() as u64) as usize;
        std::fs::write(&copy, &data[..end]).ctx(|| format!("writing {}", copy.display()))?;
        Ok(check_file(&copy).is_ok())
    };
    let found = (|| {
        // Invariant: the prefix ending before batch lo reads; the one before batch hi does not.
        let (mut lo, mut hi) = (0usize, offs.len());
        if prefix_ok(hi)? {
            return Ok(None);
        }
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if prefix_ok(mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(offs.get(hi.saturating_sub(1)).copied())
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(batches: &[u64]) -> Vec<u8> {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&2u64.to_be_bytes());
        f.extend_from_slice(&4096u64.to_be_bytes());
        for len in batches {
            let mut b = vec![0u8; *len as usize];
            b[0..8].copy_from_slice(&(len << 8).to_be_bytes());
            b[8..16].copy_from_slice(&16u64.to_be_bytes());
            f.extend_from_slice(&b);
        }
        f
    }

    #[test]
    fn batches_are_walked_and_garbage_stops_the_walk() {
        let f = file(&[32, 100, 16]);
        let h = (FILE_HEADER_PREFIX + 8) as u64;
        assert_eq!(batch_offsets(&f), vec![h, h + 32, h + 132]);
        assert_eq!(batch_offsets(&f[..f.len() - 1]), vec![h, h + 32], "a cut batch is not whole");
        let mut bad = f.clone();
        bad[h as usize + 47] = 0xff;
        assert_eq!(batch_offsets(&bad), vec![h], "a footer outside its batch ends the walk");
        assert!(batch_offsets(b"not a log").is_empty());
        assert!(batch_offsets(&[]).is_empty());
        let mut v1 = file(&[32]);
        v1.drain(FILE_HEADER_PREFIX..FILE_HEADER_PREFIX + 8);
        v1[MAGIC.len()..FILE_HEADER_PREFIX].copy_from_slice(&1u64.to_be_bytes());
        assert_eq!(batch_offsets(&v1), vec![FILE_HEADER_PREFIX as u64], "version 1 has no alignment field");
    }
}
