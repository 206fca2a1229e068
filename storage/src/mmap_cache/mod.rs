//! The MmapCache file engine, byte-compatible with Salt 3008.5's `salt/utils/mmap_cache.py`
//! (layout: `docs/formats.md` §4). It is the storage under the `mmap_key` view.
//!
//! For an index path `P` the files are:
//!
//! ```text
//! P              size × slot_size bytes: slot 0 is the header, slots 1.. are a linear-probing
//!                hash table. Header: u8 magic 0xAB, u64 occupied, u64 deleted, u64 high-water
//!                mark (all little-endian). Slot: u8 status (0 empty, 1 occupied, 2 deleted),
//!                key_size bytes of key (NUL padded), u64 heap pointer (segment << 48 | offset),
//!                u32 value length, u64 mtime in ns.
//! P.heap[.N]     heap segments; a record is u64 LE XXH3-64(value) followed by the value.
//! P.roster       u32 LE slot numbers in insertion order; 0xFFFFFFFF marks a removed entry.
//! P.lock         empty file; writers hold BSD flock(LOCK_EX) on it.
//! ```
//!
//! The geometry is not stored in the files; it comes from configuration, and a file whose
//! length does not match is refused, as the reference does.
//!
//! Two defects of the reference are not copied (both are documented in docs/formats.md):
//! a delete tombstones its roster entry in place at its 4-byte-aligned position (the
//! reference appends the tombstone, so a delete followed by a re-insert lists a key
//! twice), and keys longer than `key_size` are refused instead of being truncated into
//! silent collisions.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Error, IoContext, Result};

mod reader;
mod writer;

pub use reader::MmapReader;
pub use writer::{remove_files, MmapWriter};

pub const STATUS_EMPTY: u8 = 0;
pub const STATUS_OCCUPIED: u8 = 1;
pub const STATUS_DELETED: u8 = 2;
pub const HEADER_MAGIC: u8 = 0xAB;
pub const ROSTER_TOMBSTONE: u32 = 0xFFFF_FFFF;
pub const DEFAULT_MAX_SEGMENT_BYTES: u64 = 1 << 30;
const SEG_SHIFT: u32 = 48;
const OFF_MASK: u64 = (1 << SEG_SHIFT) - 1;

/// Table geometry (configuration, not stored in the files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Slot count, including the header slot 0.
    pub size: u64,
    pub slot_size: usize,
    pub key_size: usize,
    pub max_segment_bytes: u64,
}

impl Default for Geometry {
    fn default() -> Self {
        Geometry { size: 1_000_000, slot_size: 96, key_size: 64, max_segment_bytes: DEFAULT_MAX_SEGMENT_BYTES }
    }
}

impl Geometry {
    pub fn validate(&self) -> Result<()> {
        if self.size < 2 {
            return Err(Error::Invalid(format!("mmap size {} must be at least 2 slots", self.size)));
        }
        if self.slot_size < (21 + self.key_size).max(25) {
            return Err(Error::Invalid(format!(
                "mmap slot_size {} is too small for key_size {} (needs at least {})",
                self.slot_size,
                self.key_size,
                (21 + self.key_size).max(25)
            )));
        }
        if self.max_segment_bytes == 0 {
            return Err(Error::Invalid("mmap max_segment_bytes must be positive".into()));
        }
        Ok(())
    }

    pub fn index_len(&self) -> u64 {
        self.size * self.slot_size as u64
    }

    fn home(&self, key: &[u8]) -> u64 {
        xxh3_64(key) % (self.size - 1) + 1
    }
}

/// A decoded slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub slot: u64,
    pub status: u8,
    pub key: Vec<u8>,
    pub segment: u16,
    pub offset: u64,
    pub length: u32,
    pub mtime_ns: u64,
}

/// The header counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderInfo {
    pub magic: u8,
    pub occupied: u64,
    pub deleted: u64,
    pub high_water_mark: u64,
}

/// A value read back: present with bytes (possibly empty: the reference's "True").
pub type Value = Vec<u8>;

fn segment_path(p: &Path, n: u16) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    if n == 0 {
        s.push(".heap");
    } else {
        s.push(format!(".heap.{n}"));
    }
    PathBuf::from(s)
}

fn suffixed(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn open_segments(path: &Path, write: bool) -> Result<Vec<File>> {
    let mut segs = Vec::new();
    for n in 0..=u16::MAX {
        let p = segment_path(path, n);
        let f = OpenOptions::new().read(true).write(write).open(&p);
        match f {
            Ok(f) => segs.push(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => return Err(Error::io(format!("opening {}", p.display()), e)),
        }
    }
    Ok(segs)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn read_header(index: &[u8]) -> HeaderInfo {
    HeaderInfo { magic: index[0], occupied: u64_at(index, 1), deleted: u64_at(index, 9), high_water_mark: u64_at(index, 17) }
}

fn read_slot(index: &[u8], geo: &Geometry, n: u64) -> Slot {
    let base = n as usize * geo.slot_size;
    let b = &index[base..base + geo.slot_size];
    let k = geo.key_size;
    let key_raw = &b[1..1 + k];
    let key_end = key_raw.iter().position(|c| *c == 0).unwrap_or(k);
    let ptr = u64_at(b, 1 + k);
    Slot {
        slot: n,
        status: b[0],
        key: key_raw[..key_end].to_vec(),
        segment: (ptr >> SEG_SHIFT) as u16,
        offset: ptr & OFF_MASK,
        length: u32_at(b, 9 + k),
        mtime_ns: u64_at(b, 13 + k),
    }
}

/// A slot's pointer fields without copying its key (the hot lookup path).
fn read_slot_meta(index: &[u8], geo: &Geometry, n: u64) -> Slot {
    let base = n as usize * geo.slot_size;
    let k = geo.key_size;
    let b = &index[base..base + geo.slot_size];
    let ptr = u64_at(b, 1 + k);
    Slot { slot: n, status: b[0], key: Vec::new(), segment: (ptr >> SEG_SHIFT) as u16, offset: ptr & OFF_MASK, length: u32_at(b, 9 + k), mtime_ns: u64_at(b, 13 + k) }
}

fn slot_key_eq(index: &[u8], geo: &Geometry, n: u64, key: &[u8]) -> bool {
    let base = n as usize * geo.slot_size + 1;
    let stored = &index[base..base + geo.key_size];
    stored[..key.len()] == *key && (key.len() == geo.key_size || stored[key.len()] == 0)
}

fn find_slot(index: &[u8], geo: &Geometry, key: &[u8]) -> Option<u64> {
    if key.is_empty() || key.len() > geo.key_size {
        return None;
    }
    let home = geo.home(key);
    let span = geo.size - 1;
    for i in 0..span {
        let n = (home - 1 + i) % span + 1;
        match index[n as usize * geo.slot_size] {
            STATUS_EMPTY => return None,
            STATUS_OCCUPIED if slot_key_eq(index, geo, n, key) => return Some(n),
            _ => {}
        }
    }
    None
}

fn read_record(path: &Path, segments: &[File], s: &Slot) -> Result<Value> {
    let corrupt = |why: String| Error::CorruptView { path: path.to_path_buf(), why: format!("slot {} ({:?}): {why}", s.slot, String::from_utf8_lossy(&s.key)) };
    if s.length == 0 {
        return Ok(Vec::new());
    }
    let seg = segments.get(s.segment as usize).ok_or_else(|| corrupt(format!("heap segment {} does not exist", s.segment)))?;
    // The slot's length is checked against the segment before anything is allocated for
    // it: a corrupt slot could otherwise claim up to 4 GiB.
    let seg_len = seg.metadata().map_err(|e| Error::io(format!("stat heap of {}", path.display()), e))?.len();
    let end = s.offset.checked_add(8 + u64::from(s.length));
    if end.is_none_or(|end| end > seg_len) {
        return Err(corrupt(format!("record at segment {} offset {} of {} bytes extends past the segment's end ({seg_len} bytes)", s.segment, s.offset, 8 + u64::from(s.length))));
    }
    let mut buf = vec![0u8; 8 + s.length as usize];
    let mut got = 0;
    while got < buf.len() {
        match seg.read_at(&mut buf[got..], s.offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(Error::io(format!("reading heap of {}", path.display()), e)),
        }
    }
    if got < buf.len() {
        return Err(corrupt(format!("record at segment {} offset {} is cut short ({got} of {} bytes)", s.segment, s.offset, buf.len())));
    }
    check_record(path, s, &buf)
}

/// Checks a record's digest and returns its value.
fn check_record(path: &Path, s: &Slot, rec: &[u8]) -> Result<Value> {
    let digest = u64_at(rec, 0);
    let value = &rec[8..];
    let actual = xxh3_64(value);
    if digest != actual {
        return Err(Error::CorruptView {
            path: path.to_path_buf(),
            why: format!(
                "slot {} ({:?}): checksum mismatch at segment {} offset {}: stored {digest:016x}, computed {actual:016x}",
                s.slot,
                String::from_utf8_lossy(&s.key),
                s.segment,
                s.offset
            ),
        });
    }
    Ok(value.to_vec())
}

fn read_roster(p: &Path) -> Result<Vec<u32>> {
    match std::fs::read(p) {
        Ok(b) => Ok(b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::io(format!("reading {}", p.display()), e)),
    }
}

fn live_slots(path: &Path, index: &[u8], geo: &Geometry) -> Result<Vec<Slot>> {
    let header = read_header(index);
    let roster = read_roster(&suffixed(path, ".roster"))?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut trustworthy = true;
    for n in roster {
        if n == ROSTER_TOMBSTONE {
            continue;
        }
        let n = n as u64;
        if n == 0 || n >= geo.size || !seen.insert(n) {
            trustworthy = false;
            continue;
        }
        let s = read_slot(index, geo, n);
        if s.status != STATUS_OCCUPIED {
            trustworthy = false;
            continue;
        }
        out.push(s);
    }
    if trustworthy && out.len() as u64 == header.occupied {
        return Ok(out);
    }
    // Fall back to the truth: every OCCUPIED slot. Keep roster order for the ones the
    // roster knew, then the rest in slot order.
    let mut known: std::collections::HashSet<u64> = out.iter().map(|s| s.slot).collect();
    for n in 1..geo.size {
        if index[n as usize * geo.slot_size] == STATUS_OCCUPIED && known.insert(n) {
            out.push(read_slot(index, geo, n));
        }
    }
    Ok(out)
}

/// Slots are hashed, so index access is random: no readahead into the mapping (which
/// would make every probe fault in, and count as resident, a window of neighbours).
fn random_access(map: &[u8]) {
    // SAFETY: advice on a live mapping we own; it changes no memory contents.
    unsafe {
        libc::madvise(map.as_ptr() as *mut libc::c_void, map.len(), libc::MADV_RANDOM);
    }
}

/// Creates a uniquely named temp file in `dir` (mode 0600).
pub(crate) fn tempfile_in(dir: &Path, prefix: &str) -> Result<(PathBuf, File)> {
    use std::os::unix::fs::OpenOptionsExt;
    for attempt in 0..100u32 {
        let name = format!("{prefix}{:08x}{attempt:02x}", rand_u32());
        let p = dir.join(name);
        match OpenOptions::new().write(true).create_new(true).mode(0o600).open(&p) {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io(format!("creating a temp file in {}", dir.display()), e)),
        }
    }
    Err(Error::Invalid(format!("could not create a temp file in {}", dir.display())))
}

fn rand_u32() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CTR: AtomicU32 = AtomicU32::new(0);
    let t = crate::format::now_ns();
    (t as u32) ^ ((t >> 32) as u32) ^ std::process::id().rotate_left(16) ^ CTR.fetch_add(0x9E37_79B9, Ordering::Relaxed)
}

#[cfg(test)]
mod tests;
