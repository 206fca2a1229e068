//! The `mmap_key` view (`docs/formats.md` §4): three MmapCache banks in the pki dir.
//!
//! | bank          | index file           | value                                   |
//! |---------------|----------------------|-----------------------------------------|
//! | `keys`        | `.mmap_keys.idx`     | u8 state (1 accepted, 2 pending, 3 rejected) + pub text |
//! | `denied_keys` | `.mmap_denied.idx`   | pub text of the first denied key        |
//! | `master_keys` | `.mmap_master.idx`   | the key file's bytes                    |
//!
//! A bank's writer is opened at its first change, which takes Salt's writer lock (`flock`
//! on `<index>.lock`, waiting at most [`crate::flock::LOCK_WAIT`]), and is kept until
//! [`KeyView::sync`] (or `release`), which makes the changes durable and **releases the
//! lock**: the view holds it for one group of changes (on a shared `cluster_pki_dir` one
//! applied batch; on a member's own directory until the node next makes its views
//! durable, at most about a second under load), never for good, so other members and
//! Salt's own tools can write in between. Each writer maps the files afresh, so it sees
//! their changes. Readers, Halite's or Salt's own `salt-key`, never need the lock.

use std::path::{Path, PathBuf};

use super::{DeniedEntry, BankState, KeyEntry, KeyView};
use crate::error::{Error, Result};
use crate::id::{validate_minion_id, validate_relative_path};
use crate::mmap_cache::{remove_files, Geometry, MmapReader, MmapWriter, Slot};

pub const KEYS_INDEX: &str = ".mmap_keys.idx";
pub const DENIED_INDEX: &str = ".mmap_denied.idx";
pub const MASTER_INDEX: &str = ".mmap_master.idx";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bank {
    Keys = 0,
    Denied = 1,
    Master = 2,
}

pub struct MmapKeys {
    dir: PathBuf,
    geo: Geometry,
    writers: [Option<MmapWriter>; 3],
}

impl MmapKeys {
    pub fn open(pki_dir: &Path, geo: Geometry) -> Result<Self> {
        geo.validate()?;
        Ok(MmapKeys { dir: pki_dir.to_path_buf(), geo, writers: [None, None, None] })
    }

    fn path(&self, bank: Bank) -> PathBuf {
        self.dir.join(match bank {
            Bank::Keys => KEYS_INDEX,
            Bank::Denied => DENIED_INDEX,
            Bank::Master => MASTER_INDEX,
        })
    }

    fn writer(&mut self, bank: Bank) -> Result<&mut MmapWriter> {
        let i = bank as usize;
        if self.writers[i].is_none() {
            // Changes are made durable together, at `sync` (see the module docs).
            let w = MmapWriter::open(&self.path(bank), self.geo, false)?;
            self.writers[i] = Some(w);
        }
        self.writers[i].as_mut().ok_or_else(|| Error::Invalid("mmap writer vanished".into()))
    }

    fn get(&self, bank: Bank, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(w) = &self.writers[bank as usize] {
            return w.get(key);
        }
        match MmapReader::open(&self.path(bank), self.geo)? {
            None => Ok(None),
            Some(r) => r.get(key),
        }
    }

    /// Live entries of a bank with their values; entries whose record fails its checksum
    /// are skipped with an error in the log (the reference skips them silently).
    fn live(&self, bank: Bank) -> Result<Vec<(String, Vec<u8>)>> {
        let path = self.path(bank);
        let reader;
        type ReadSlot<'a> = Box<dyn Fn(&Slot) -> Result<Vec<u8>> + 'a>;
        let (slots, read): (Vec<Slot>, ReadSlot<'_>) = match &self.writers[bank as usize] {
            Some(w) => (w.live_slots()?, Box::new(move |s: &Slot| w.get(&s.key).map(|v| v.unwrap_or_default()))),
            None => match MmapReader::open(&path, self.geo)? {
                None => return Ok(Vec::new()),
                Some(r) => {
                    reader = r;
                    (reader.live_slots()?, Box::new(|s: &Slot| reader.read_value(s)))
                }
            },
        };
        let mut out = Vec::with_capacity(slots.len());
        for s in slots {
            let Ok(id) = String::from_utf8(s.key.clone()) else {
                tracing::error!(file = %path.display(), slot = s.slot, "key is not UTF-8; skipped");
                continue;
            };
            match read(&s) {
                Ok(v) => out.push((id, v)),
                Err(e) => tracing::error!(file = %path.display(), "{e}; entry skipped"),
            }
        }
        Ok(out)
    }
}

fn decode_key_value(id: &str, v: &[u8]) -> Option<KeyEntry> {
    if v.len() < 2 {
        return None;
    }
    Some(KeyEntry { id: id.to_string(), state: BankState::from_mmap_byte(v[0])?, pub_key: v[1..].to_vec() })
}

fn strip_trailing_nul(mut v: Vec<u8>) -> Vec<u8> {
    while v.last() == Some(&0) {
        v.pop();
    }
    v
}

impl KeyView for MmapKeys {
    fn driver(&self) -> &'static str {
        "mmap_key"
    }

    fn set_key(&mut self, id: &str, state: BankState, pub_key: &[u8], mtime_ns: u64) -> Result<()> {
        validate_minion_id(id)?;
        let mut v = Vec::with_capacity(1 + pub_key.len());
        v.push(state.mmap_byte());
        v.extend_from_slice(pub_key);
        let dir = self.dir.clone();
        if !self.writer(Bank::Keys)?.put(id.as_bytes(), &v, mtime_ns)? {
            return Err(Error::Invalid(format!("mmap_key table in {} is full; raise mmap_key_size and rebuild the view", dir.display())));
        }
        Ok(())
    }

    fn remove_key(&mut self, id: &str) -> Result<bool> {
        validate_minion_id(id)?;
        if !self.path(Bank::Keys).exists() {
            return Ok(false);
        }
        self.writer(Bank::Keys)?.delete(id.as_bytes())
    }

    fn set_denied(&mut self, id: &str, pub_key: &[u8], mtime_ns: u64) -> Result<()> {
        validate_minion_id(id)?;
        let dir = self.dir.clone();
        if !self.writer(Bank::Denied)?.put(id.as_bytes(), pub_key, mtime_ns)? {
            return Err(Error::Invalid(format!("mmap_key denied table in {} is full", dir.display())));
        }
        Ok(())
    }

    fn remove_denied(&mut self, id: &str) -> Result<bool> {
        validate_minion_id(id)?;
        if !self.path(Bank::Denied).exists() {
            return Ok(false);
        }
        self.writer(Bank::Denied)?.delete(id.as_bytes())
    }

    fn set_master_key(&mut self, name: &str, data: &[u8]) -> Result<()> {
        validate_relative_path(name)?;
        let now = crate::format::now_ns();
        if !self.writer(Bank::Master)?.put(name.as_bytes(), data, now)? {
            return Err(Error::Invalid("mmap_key master table is full".into()));
        }
        Ok(())
    }

    fn get_key(&self, id: &str) -> Result<Option<KeyEntry>> {
        validate_minion_id(id)?;
        Ok(self.get(Bank::Keys, id.as_bytes())?.and_then(|v| decode_key_value(id, &v)))
    }

    fn get_denied(&self, id: &str) -> Result<Option<Vec<u8>>> {
        validate_minion_id(id)?;
        Ok(self.get(Bank::Denied, id.as_bytes())?.map(strip_trailing_nul))
    }

    fn get_master_key(&self, name: &str) -> Result<Option<Vec<u8>>> {
        validate_relative_path(name)?;
        Ok(self.get(Bank::Master, name.as_bytes())?.map(strip_trailing_nul))
    }

    fn entries(&self) -> Result<(Vec<KeyEntry>, Vec<DeniedEntry>)> {
        let mut keys = Vec::new();
        for (id, v) in self.live(Bank::Keys)? {
            match decode_key_value(&id, &v) {
                Some(e) => keys.push(e),
                None => tracing::error!(id = %id, "mmap_key entry with an unknown state byte; skipped"),
            }
        }
        let denied = self.live(Bank::Denied)?.into_iter().map(|(id, v)| (id, strip_trailing_nul(v))).collect();
        Ok((keys, denied))
    }

    fn clear(&mut self) -> Result<()> {
        self.writers[Bank::Keys as usize] = None;
        self.writers[Bank::Denied as usize] = None;
        remove_files(&self.path(Bank::Keys))?;
        remove_files(&self.path(Bank::Denied))?;
        Ok(())
    }

    /// Makes the changes durable and releases every bank's lock.
    fn sync(&mut self) -> Result<()> {
        let mut first_err = None;
        for slot in self.writers.iter_mut() {
            if let Some(w) = slot.take() {
                if let Err(e) = w.finish() {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn release(&mut self) -> Result<()> {
        self.sync()
    }
}

impl Drop for MmapKeys {
    fn drop(&mut self) {
        if let Err(e) = self.sync() {
            tracing::error!("syncing mmap_key view: {e}");
        }
    }
}
