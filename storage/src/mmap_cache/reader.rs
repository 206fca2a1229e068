//! Reading one MmapCache without a lock: lookups by key, the live entries in roster
//! order, and checks of every record's checksum.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::*;

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
                // A corrupt slot may hold any offset and length: checked arithmetic, and
                // anything outside the map goes to `read_record`, which refuses it.
                let start = usize::try_from(s.offset).ok();
                let end = start.and_then(|o| o.checked_add(8 + s.length as usize));
                if let (Some(start), Some(end)) = (start, end) {
                    if end <= map.len() {
                        return check_record(&self.path, s, &map[start..end]);
                    }
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

    /// Every non-empty slot in slot order (what the tests compare).
    #[cfg(test)]
    pub(crate) fn all_slots(&self) -> Vec<Slot> {
        (1..self.geo.size).map(|n| self.slot(n)).filter(|s| s.status != STATUS_EMPTY).collect()
    }

    pub fn roster(&self) -> Result<Vec<u32>> {
        read_roster(&suffixed(&self.path, ".roster"))
    }

    #[cfg(test)]
    pub(crate) fn segment_sizes(&self) -> Result<Vec<(PathBuf, u64)>> {
        (0..self.segments.len())
            .map(|i| {
                let p = segment_path(&self.path, i as u16);
                let len = self.segments[i].metadata().ctx(|| format!("stat {}", p.display()))?.len();
                Ok((p, len))
            })
            .collect()
    }
}
