//! Writing one MmapCache under the reference's lock, with the reference's bytes and
//! fsync order.
//!
//! A writer is meant to live for one group of changes: it takes the lock, maps the files
//! as they are then (so it sees what other writers, Salt's included, did before it:
//! heap sizes, new segments, a roster or an index swapped in by Salt's rebuild), makes its
//! changes, and [`MmapWriter::finish`] makes them durable and releases the lock. The wait
//! for the lock is bounded ([`crate::flock::LOCK_WAIT`]): another writer that keeps it
//! makes `open` fail, never hang.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memmap2::MmapMut;
use xxhash_rust::xxh3::xxh3_64;

use super::*;
use crate::flock::{Flock, LOCK_WAIT};

/// Write access to one MmapCache: holds the flock for its whole life, so a group of
/// changes is one critical section (keep that life short: one batch). With `durable` set every change is fsynced in the
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
    _lock: Flock,
}

impl MmapWriter {
    /// Opens for writing, creating the files if needed. Runs roster recovery (as the
    /// reference does at every write-open) when the roster disagrees with the header.
    pub fn open(path: &Path, geo: Geometry, durable: bool) -> Result<Self> {
        geo.validate()?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
        }
        let lock = Flock::acquire(&suffixed(path, ".lock"), LOCK_WAIT)?;
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
