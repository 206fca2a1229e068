//! The MmapCache file engine, byte-compatible with Salt 3008.5's `salt/utils/mmap_cache.py`
//! (spec: `key-storage.md` §3). It is the storage under the `mmap_key` view.
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
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut};
use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Error, IoContext, Result};

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

/// Read-only view of one MmapCache. Holds no lock; sees writes of other processes
/// through the shared page cache (torn reads show up as checksum mismatches = absent).
pub struct MmapReader {
    path: PathBuf,
    geo: Geometry,
    index: Mmap,
    segments: Vec<File>,
    /// Read-only maps of the heap segments as they were at open (records appended later
    /// are read with pread).
    maps: Vec<Option<Mmap>>,
}

impl MmapReader {
    /// Opens an existing cache. `Ok(None)` when the index file does not exist.
    pub fn open(path: &Path, geo: Geometry) -> Result<Option<Self>> {
        geo.validate()?;
        let f = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
        };
        let len = f.metadata().ctx(|| format!("stat {}", path.display()))?.len();
        if len != geo.index_len() {
            return Err(Error::CorruptView {
                path: path.to_path_buf(),
                why: format!(
                    "index is {len} bytes but the configured geometry ({} slots × {} bytes) needs {}; check mmap_key_size and mmap_key_slot_size",
                    geo.size,
                    geo.slot_size,
                    geo.index_len()
                ),
            });
        }
        // SAFETY: the file is mapped read-only and shared; other writers may change it
        // underneath, which can only produce torn values that the checksums catch. Every
        // access is bounds-checked against the length verified above.
        let index = unsafe { Mmap::map(&f) }.ctx(|| format!("mapping {}", path.display()))?;
        random_access(&index);
        let segments = open_segments(path, false)?;
        let maps = segments
            .iter()
            .map(|f| match f.metadata() {
                // SAFETY: read-only shared map; a concurrent in-place overwrite can only
                // produce a torn value, which the record checksum catches.
                Ok(m) if m.len() > 0 => unsafe { Mmap::map(f) }.ok(),
                _ => None,
            })
            .collect();
        Ok(Some(MmapReader { path: path.to_path_buf(), geo, index, segments, maps }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> HeaderInfo {
        read_header(&self.index)
    }

    pub fn slot(&self, n: u64) -> Slot {
        read_slot(&self.index, &self.geo, n)
    }

    /// Finds the slot holding `key`.
    pub fn find(&self, key: &[u8]) -> Option<Slot> {
        find_slot(&self.index, &self.geo, key).map(|n| self.slot(n))
    }

    /// Reads the value of `key`. `Ok(None)` if absent; a checksum mismatch is an error
    /// naming the file and slot (callers that want the reference's "absent" can map it).
    pub fn get(&self, key: &[u8]) -> Result<Option<Value>> {
        match find_slot(&self.index, &self.geo, key) {
            None => Ok(None),
            Some(n) => self.read_value(&read_slot_meta(&self.index, &self.geo, n)).map(Some),
        }
    }

    /// Reads and checks the heap record a slot points to.
    pub fn read_value(&self, s: &Slot) -> Result<Value> {
        if s.length > 0 {
            if let Some(Some(map)) = self.maps.get(s.segment as usize) {
                let (start, end) = (s.offset as usize, s.offset as usize + 8 + s.length as usize);
                if end <= map.len() {
                    return check_record(&self.path, s, &map[start..end]);
                }
            }
        }
        read_record(&self.path, &self.segments, s)
    }

    /// Live keys in roster order, falling back to a full slot scan when the roster does
    /// not agree with the header (duplicates, missing or phantom entries).
    pub fn live_slots(&self) -> Result<Vec<Slot>> {
        live_slots(&self.path, &self.index, &self.geo)
    }

    /// Every non-empty slot in slot order (for dumps and verification).
    pub fn all_slots(&self) -> Vec<Slot> {
        (1..self.geo.size).map(|n| self.slot(n)).filter(|s| s.status != STATUS_EMPTY).collect()
    }

    pub fn roster(&self) -> Result<Vec<u32>> {
        read_roster(&suffixed(&self.path, ".roster"))
    }

    pub fn segment_sizes(&self) -> Result<Vec<(PathBuf, u64)>> {
        (0..self.segments.len())
            .map(|i| {
                let p = segment_path(&self.path, i as u16);
                let len = self.segments[i].metadata().ctx(|| format!("stat {}", p.display()))?.len();
                Ok((p, len))
            })
            .collect()
    }
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

/// Takes BSD `flock(LOCK_EX)` on `P.lock` (the lock the reference's writers use).
struct FlockGuard {
    file: File,
}

impl FlockGuard {
    fn acquire(p: &Path) -> Result<Self> {
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(p).ctx(|| format!("opening {}", p.display()))?;
        // SAFETY: flock on a valid, owned file descriptor.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            return Err(Error::io(format!("flock {}", p.display()), std::io::Error::last_os_error()));
        }
        Ok(FlockGuard { file })
    }
}

impl Drop for FlockGuard {
    fn drop(&mut self) {
        // SAFETY: unlocking our own descriptor; closing it would release the lock anyway.
        unsafe {
            libc::flock(self.file.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

/// Write access to one MmapCache: holds the flock for its whole life, so a group of
/// changes is one critical section. With `durable` set every change is fsynced in the
/// reference's order (heap, slot, header, roster, index); otherwise [`MmapWriter::finish`]
/// syncs once at the end (used by bulk builds whose source of truth is elsewhere).
pub struct MmapWriter {
    path: PathBuf,
    geo: Geometry,
    index: MmapMut,
    _index_file: File,
    segments: Vec<File>,
    seg_sizes: Vec<u64>,
    roster: File,
    roster_entries: Vec<u32>,
    /// Slot → position of its live roster entry (built on first delete).
    roster_pos: Option<std::collections::HashMap<u32, usize>>,
    durable: bool,
    /// Byte range of the index written since the last flush (lo, hi), if any.
    dirty_index: Option<(usize, usize)>,
    /// Heap segments written since the last flush.
    dirty_segments: std::collections::BTreeSet<usize>,
    roster_dirty: bool,
    _lock: FlockGuard,
}

impl MmapWriter {
    /// Opens for writing, creating the files if needed. Runs roster recovery (as the
    /// reference does at every write-open) when the roster disagrees with the header.
    pub fn open(path: &Path, geo: Geometry, durable: bool) -> Result<Self> {
        geo.validate()?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
        }
        let lock = FlockGuard::acquire(&suffixed(path, ".lock"))?;
        let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).ctx(|| format!("opening {}", path.display()))?;
        let len = f.metadata().ctx(|| format!("stat {}", path.display()))?.len();
        if len == 0 {
            // Real zeros, as the reference writes: a sparse file would make every first
            // write to a page allocate filesystem blocks inside a page fault. Written one
            // page per call: the page cache keeps a write's size as its folio size, and a
            // fault on a shared mapping maps the whole folio, so megabyte writes would
            // make each touched slot cost a resident megabyte of the mapping.
            let page = vec![0u8; 4096];
            let total = geo.index_len();
            let mut at = 0u64;
            while at < total {
                let n = (total - at).min(page.len() as u64) as usize;
                f.write_all_at(&page[..n], at).ctx(|| format!("sizing {}", path.display()))?;
                at += n as u64;
            }
            f.sync_all().ctx(|| format!("syncing {}", path.display()))?;
        } else if len != geo.index_len() {
            return Err(Error::CorruptView {
                path: path.to_path_buf(),
                why: format!("index is {len} bytes but the configured geometry needs {}; refusing to write", geo.index_len()),
            });
        }
        // SAFETY: shared writable mapping of a file whose length was just checked; the
        // flock held for the writer's life keeps other (reference) writers out.
        let mut index = unsafe { MmapMut::map_mut(&f) }.ctx(|| format!("mapping {}", path.display()))?;
        random_access(&index);
        if index[0] != HEADER_MAGIC {
            index[0] = HEADER_MAGIC;
        }
        let mut segments = open_segments(path, true)?;
        if segments.is_empty() {
            let p = segment_path(path, 0);
            segments.push(OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&p).ctx(|| format!("creating {}", p.display()))?);
        }
        let seg_sizes = segments.iter().map(|s| s.metadata().map(|m| m.len())).collect::<std::io::Result<Vec<_>>>().ctx(|| format!("stat heap of {}", path.display()))?;
        let roster_path = suffixed(path, ".roster");
        let roster_entries = read_roster(&roster_path)?;
        let roster = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&roster_path).ctx(|| format!("opening {}", roster_path.display()))?;
        let mut w = MmapWriter {
            path: path.to_path_buf(),
            geo,
            index,
            _index_file: f,
            segments,
            seg_sizes,
            roster,
            roster_entries,
            roster_pos: None,
            durable,
            dirty_index: Some((0, 1)),
            dirty_segments: Default::default(),
            roster_dirty: false,
            _lock: lock,
        };
        w.recover_roster()?;
        Ok(w)
    }

    fn header(&self) -> HeaderInfo {
        read_header(&self.index)
    }

    fn mark(&mut self, lo: usize, hi: usize) {
        self.dirty_index = Some(match self.dirty_index {
            None => (lo, hi),
            Some((a, b)) => (a.min(lo), b.max(hi)),
        });
    }

    fn mark_slot(&mut self, n: u64) {
        let lo = n as usize * self.geo.slot_size;
        self.mark(lo, lo + self.geo.slot_size);
    }

    /// Makes every change so far durable (heap segments, roster, then the written part of
    /// the index), keeping the writer (and its lock) open.
    pub fn flush(&mut self) -> Result<()> {
        for i in std::mem::take(&mut self.dirty_segments) {
            self.segments[i].sync_data().ctx(|| format!("syncing heap of {}", self.path.display()))?;
        }
        if std::mem::take(&mut self.roster_dirty) {
            self.roster.sync_data().ctx(|| format!("syncing roster of {}", self.path.display()))?;
        }
        if let Some((lo, hi)) = self.dirty_index.take() {
            self.index.flush_range(lo, hi - lo).ctx(|| format!("syncing {}", self.path.display()))?;
        }
        Ok(())
    }

    fn set_header(&mut self, h: HeaderInfo) {
        self.mark(0, 25);
        self.index[0] = HEADER_MAGIC;
        self.index[1..9].copy_from_slice(&h.occupied.to_le_bytes());
        self.index[9..17].copy_from_slice(&h.deleted.to_le_bytes());
        self.index[17..25].copy_from_slice(&h.high_water_mark.to_le_bytes());
    }

    /// Rebuilds the roster from the slots when its live count differs from the header
    /// (or it lists duplicates or non-occupied slots).
    fn recover_roster(&mut self) -> Result<()> {
        let h = self.header();
        let mut seen = std::collections::HashSet::new();
        let mut ok = true;
        let mut live = 0u64;
        for &n in &self.roster_entries {
            if n == ROSTER_TOMBSTONE {
                continue;
            }
            let n64 = n as u64;
            if n64 == 0 || n64 >= self.geo.size || !seen.insert(n64) || self.index[n64 as usize * self.geo.slot_size] != STATUS_OCCUPIED {
                ok = false;
            }
            live += 1;
        }
        if ok && live == h.occupied {
            return Ok(());
        }
        tracing::warn!(path = %self.path.display(), roster = live, header = h.occupied, "roster/index divergence: rebuilding the roster from the slots");
        let slots: Vec<u32> = (1..self.geo.size).filter(|&n| self.index[n as usize * self.geo.slot_size] == STATUS_OCCUPIED).map(|n| n as u32).collect();
        let mut hh = h;
        hh.occupied = slots.len() as u64;
        self.set_header(hh);
        let mut bytes = Vec::with_capacity(slots.len() * 4);
        for s in &slots {
            bytes.extend_from_slice(&s.to_le_bytes());
        }
        let roster_path = suffixed(&self.path, ".roster");
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let mut tmp = tempfile_in(dir, ".roster_recover_")?;
        tmp.1.write_all(&bytes).ctx(|| format!("writing {}", tmp.0.display()))?;
        tmp.1.sync_all().ctx(|| format!("syncing {}", tmp.0.display()))?;
        std::fs::rename(&tmp.0, &roster_path).ctx(|| format!("renaming over {}", roster_path.display()))?;
        self.roster = OpenOptions::new().read(true).write(true).open(&roster_path).ctx(|| format!("opening {}", roster_path.display()))?;
        self.roster_entries = slots;
        self.roster_pos = None;
        self.index.flush().ctx(|| format!("syncing {}", self.path.display()))?;
        Ok(())
    }

    pub fn find(&self, key: &[u8]) -> Option<Slot> {
        find_slot(&self.index, &self.geo, key).map(|n| read_slot(&self.index, &self.geo, n))
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Value>> {
        match self.find(key) {
            None => Ok(None),
            Some(s) => read_record(&self.path, &self.segments, &s).map(Some),
        }
    }

    fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::Invalid("empty mmap key".into()));
        }
        if key.len() > self.geo.key_size {
            return Err(Error::Invalid(format!(
                "key {:?} is {} bytes, longer than the configured key size {}; the reference would truncate it and collide. Raise mmap_key_id_size",
                String::from_utf8_lossy(key),
                key.len(),
                self.geo.key_size
            )));
        }
        Ok(())
    }

    fn append_heap(&mut self, value: &[u8]) -> Result<(u16, u64)> {
        if value.is_empty() {
            let active = self.segments.len() - 1;
            return Ok((active as u16, self.seg_sizes[active]));
        }
        let mut rec = Vec::with_capacity(8 + value.len());
        rec.extend_from_slice(&xxh3_64(value).to_le_bytes());
        rec.extend_from_slice(value);
        let mut active = self.segments.len() - 1;
        if self.seg_sizes[active] + rec.len() as u64 > self.geo.max_segment_bytes {
            if self.segments.len() > u16::MAX as usize {
                return Err(Error::Invalid(format!("{}: no heap segment number left", self.path.display())));
            }
            let p = segment_path(&self.path, self.segments.len() as u16);
            let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&p).ctx(|| format!("creating {}", p.display()))?;
            let len = f.metadata().ctx(|| format!("stat {}", p.display()))?.len();
            self.segments.push(f);
            self.seg_sizes.push(len);
            active += 1;
        }
        let off = self.seg_sizes[active];
        self.segments[active].write_all_at(&rec, off).ctx(|| format!("writing heap of {}", self.path.display()))?;
        if self.durable {
            self.segments[active].sync_data().ctx(|| format!("syncing heap of {}", self.path.display()))?;
        } else {
            self.dirty_segments.insert(active);
        }
        self.seg_sizes[active] += rec.len() as u64;
        Ok((active as u16, off))
    }

    fn write_slot_fields(&mut self, n: u64, key: &[u8], seg: u16, off: u64, len: u32, mtime_ns: u64) {
        self.mark_slot(n);
        let k = self.geo.key_size;
        let base = n as usize * self.geo.slot_size;
        let b = &mut self.index[base..base + self.geo.slot_size];
        b[1..1 + k].fill(0);
        b[1..1 + key.len()].copy_from_slice(key);
        let ptr = ((seg as u64) << SEG_SHIFT) | (off & OFF_MASK);
        b[1 + k..9 + k].copy_from_slice(&ptr.to_le_bytes());
        b[9 + k..13 + k].copy_from_slice(&len.to_le_bytes());
        b[13 + k..21 + k].copy_from_slice(&mtime_ns.to_le_bytes());
    }

    /// Inserts or updates `key`. Returns false if the table is full.
    pub fn put(&mut self, key: &[u8], value: &[u8], mtime_ns: u64) -> Result<bool> {
        self.check_key(key)?;
        if value.len() > u32::MAX as usize {
            return Err(Error::Invalid("mmap value larger than 4 GiB".into()));
        }
        let geo = self.geo;
        let home = geo.home(key);
        let span = geo.size - 1;
        let mut first_deleted = None;
        let mut target = None;
        for i in 0..span {
            let n = (home - 1 + i) % span + 1;
            match self.index[n as usize * geo.slot_size] {
                STATUS_EMPTY => {
                    target = Some(first_deleted.unwrap_or(n));
                    break;
                }
                STATUS_OCCUPIED if slot_key_eq(&self.index, &geo, n, key) => {
                    return self.update(n, key, value, mtime_ns).map(|_| true);
                }
                STATUS_DELETED if first_deleted.is_none() => first_deleted = Some(n),
                _ => {}
            }
        }
        let Some(n) = target.or(first_deleted) else { return Ok(false) };
        let was_deleted = self.index[n as usize * geo.slot_size] == STATUS_DELETED;
        let (seg, off) = self.append_heap(value)?;
        self.write_slot_fields(n, key, seg, off, value.len() as u32, mtime_ns);
        self.index[n as usize * geo.slot_size] = STATUS_OCCUPIED;
        let mut h = self.header();
        h.occupied += 1;
        if was_deleted {
            h.deleted = h.deleted.saturating_sub(1);
        }
        h.high_water_mark = h.high_water_mark.max(n);
        self.set_header(h);
        let end = self.roster_entries.len() as u64 * 4;
        self.roster.write_all_at(&(n as u32).to_le_bytes(), end).ctx(|| format!("writing roster of {}", self.path.display()))?;
        if let Some(pos) = &mut self.roster_pos {
            pos.insert(n as u32, self.roster_entries.len());
        }
        self.roster_entries.push(n as u32);
        self.roster_dirty = true;
        if self.durable {
            self.roster.sync_data().ctx(|| format!("syncing roster of {}", self.path.display()))?;
            self.index.flush().ctx(|| format!("syncing {}", self.path.display()))?;
        }
        Ok(true)
    }

    fn update(&mut self, n: u64, key: &[u8], value: &[u8], mtime_ns: u64) -> Result<()> {
        let s = read_slot(&self.index, &self.geo, n);
        let (seg, off) = if value.len() as u64 <= s.length as u64 && (s.segment as usize) < self.segments.len() {
            if !value.is_empty() {
                let mut rec = Vec::with_capacity(8 + value.len());
                rec.extend_from_slice(&xxh3_64(value).to_le_bytes());
                rec.extend_from_slice(value);
                let f = &self.segments[s.segment as usize];
                f.write_all_at(&rec, s.offset).ctx(|| format!("overwriting heap of {}", self.path.display()))?;
                if self.durable {
                    f.sync_data().ctx(|| format!("syncing heap of {}", self.path.display()))?;
                } else {
                    self.dirty_segments.insert(s.segment as usize);
                }
            }
            (s.segment, s.offset)
        } else {
            self.append_heap(value)?
        };
        self.write_slot_fields(n, key, seg, off, value.len() as u32, mtime_ns);
        self.index[n as usize * self.geo.slot_size] = STATUS_OCCUPIED;
        if self.durable {
            self.index.flush().ctx(|| format!("syncing {}", self.path.display()))?;
        }
        Ok(())
    }

    /// Deletes `key`: the slot becomes DELETED and its roster entry is tombstoned in place.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let Some(n) = find_slot(&self.index, &self.geo, key) else { return Ok(false) };
        self.mark_slot(n);
        self.index[n as usize * self.geo.slot_size] = STATUS_DELETED;
        let mut h = self.header();
        h.occupied = h.occupied.saturating_sub(1);
        h.deleted += 1;
        self.set_header(h);
        let positions = self.roster_pos.get_or_insert_with(|| {
            let mut m = std::collections::HashMap::with_capacity(self.roster_entries.len());
            for (i, &e) in self.roster_entries.iter().enumerate() {
                if e != ROSTER_TOMBSTONE {
                    m.entry(e).or_insert(i);
                }
            }
            m
        });
        if let Some(pos) = positions.remove(&(n as u32)) {
            self.roster_entries[pos] = ROSTER_TOMBSTONE;
            self.roster.write_all_at(&ROSTER_TOMBSTONE.to_le_bytes(), pos as u64 * 4).ctx(|| format!("writing roster of {}", self.path.display()))?;
            self.roster_dirty = true;
        }
        if self.durable {
            self.roster.sync_data().ctx(|| format!("syncing roster of {}", self.path.display()))?;
            self.index.flush().ctx(|| format!("syncing {}", self.path.display()))?;
        }
        Ok(true)
    }

    pub fn live_slots(&self) -> Result<Vec<Slot>> {
        live_slots(&self.path, &self.index, &self.geo)
    }

    /// Syncs every change (heap segments, roster, index) and releases the lock.
    pub fn finish(mut self) -> Result<()> {
        self.flush()
    }
}

/// Removes every file of the cache at `path` (index, heap segments up to the first gap,
/// roster, lock). Returns whether anything was removed.
pub fn remove_files(path: &Path) -> Result<bool> {
    let mut any = false;
    let mut rm = |p: PathBuf| -> Result<()> {
        match std::fs::remove_file(&p) {
            Ok(()) => {
                any = true;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("removing {}", p.display()), e)),
        }
    };
    rm(path.to_path_buf())?;
    rm(suffixed(path, ".roster"))?;
    rm(suffixed(path, ".lock"))?;
    for n in 0..=u16::MAX {
        let p = segment_path(path, n);
        if !p.exists() {
            break;
        }
        rm(p)?;
    }
    Ok(any)
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
mod tests {
    use super::*;

    fn geo() -> Geometry {
        Geometry { size: 32, slot_size: 96, key_size: 64, max_segment_bytes: 2048 }
    }

    #[test]
    fn put_get_update_delete_reinsert() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(".mmap_keys.idx");
        let mut w = MmapWriter::open(&p, geo(), true).unwrap();
        assert!(w.put(b"a", b"\x02pubA", 1).unwrap());
        assert!(w.put(b"b", b"\x02pubB", 2).unwrap());
        assert_eq!(w.get(b"a").unwrap().unwrap(), b"\x02pubA");
        // In place (same length).
        assert!(w.put(b"a", b"\x01pubA", 3).unwrap());
        // Growth appends.
        assert!(w.put(b"b", b"\x01pubB-longer", 4).unwrap());
        assert!(w.delete(b"a").unwrap());
        assert!(!w.delete(b"a").unwrap());
        assert!(w.put(b"a", b"\x02again", 5).unwrap());
        w.finish().unwrap();
        let r = MmapReader::open(&p, geo()).unwrap().unwrap();
        let h = r.header();
        assert_eq!((h.magic, h.occupied, h.deleted), (HEADER_MAGIC, 2, 0));
        let live: Vec<_> = r.live_slots().unwrap().into_iter().map(|s| s.key).collect();
        // The reference lists "a" twice here (tombstone appended); we do not.
        assert_eq!(live.len(), 2);
        assert_eq!(r.get(b"b").unwrap().unwrap(), b"\x01pubB-longer");
        assert_eq!(r.get(b"a").unwrap().unwrap(), b"\x02again");
        assert!(r.get(b"zz").unwrap().is_none());
        assert!(r.roster().unwrap().contains(&ROSTER_TOMBSTONE));
    }

    #[test]
    fn long_keys_are_refused_not_truncated() {
        let d = tempfile::tempdir().unwrap();
        let mut w = MmapWriter::open(&d.path().join("x.idx"), geo(), false).unwrap();
        let long = vec![b'a'; 65];
        assert!(w.put(&long, b"v", 0).is_err());
        assert!(w.put(&long[..64], b"v", 0).unwrap());
    }

    #[test]
    fn full_table_and_roll_over() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.idx");
        let g = Geometry { size: 4, slot_size: 96, key_size: 64, max_segment_bytes: 40 };
        let mut w = MmapWriter::open(&p, g, false).unwrap();
        for k in [b"k1", b"k2", b"k3"] {
            assert!(w.put(k, &[7u8; 30], 0).unwrap());
        }
        assert!(!w.put(b"k4", b"x", 0).unwrap());
        w.finish().unwrap();
        let r = MmapReader::open(&p, g).unwrap().unwrap();
        assert_eq!(r.segment_sizes().unwrap().len(), 3);
        for k in [b"k1", b"k2", b"k3"] {
            assert_eq!(r.get(k).unwrap().unwrap(), vec![7u8; 30]);
        }
    }

    #[test]
    fn checksum_flip_is_reported_and_size_mismatch_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.idx");
        let mut w = MmapWriter::open(&p, geo(), true).unwrap();
        w.put(b"k", b"value", 0).unwrap();
        w.finish().unwrap();
        let heap = segment_path(&p, 0);
        let mut b = std::fs::read(&heap).unwrap();
        b[10] ^= 1;
        std::fs::write(&heap, &b).unwrap();
        let r = MmapReader::open(&p, geo()).unwrap().unwrap();
        let e = r.get(b"k").unwrap_err().to_string();
        assert!(e.contains("checksum mismatch"), "{e}");
        let other = Geometry { size: 33, ..geo() };
        assert!(MmapReader::open(&p, other).is_err());
        assert!(MmapWriter::open(&p, other, false).is_err());
    }

    #[test]
    fn roster_recovery() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.idx");
        let mut w = MmapWriter::open(&p, geo(), false).unwrap();
        for i in 0..6 {
            w.put(format!("k{i}").as_bytes(), b"v", 0).unwrap();
        }
        w.finish().unwrap();
        std::fs::write(suffixed(&p, ".roster"), [1u8, 0, 0, 0]).unwrap();
        let r = MmapReader::open(&p, geo()).unwrap().unwrap();
        assert_eq!(r.live_slots().unwrap().len(), 6, "readers fall back to a scan");
        drop(r);
        let w = MmapWriter::open(&p, geo(), false).unwrap();
        w.finish().unwrap();
        assert_eq!(read_roster(&suffixed(&p, ".roster")).unwrap().len(), 6);
    }
}
