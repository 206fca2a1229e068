//! Key views: the minion-key banks written in a layout Salt's own tools read.
//!
//! The state machine holds the truth; a key view is an export of it that Salt 3008.5's
//! `salt-key` (and Halite's, with the master stopped) can read. Two drivers implement
//! [`KeyView`], selected by the master option `keys.cache_driver`:
//!
//! * [`localfs::LocalfsKeys`]: the classic `pki_dir/minions*` tree (`docs/formats.md` §4);
//! * [`mmap::MmapKeys`]: the `.mmap_*.idx` files (`docs/formats.md` §4).

pub mod localfs;
pub mod mmap;
pub mod pair;

use std::path::Path;

use serde::Serialize;

use crate::error::Result;
use crate::format::KeyState;

pub use crate::mmap_cache::Geometry;

/// A key bank state: the three states a `keys` entry can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BankState {
    Accepted,
    Pending,
    Rejected,
}

impl BankState {
    pub fn from_key_state(s: KeyState) -> Option<Self> {
        match s {
            KeyState::Accepted => Some(BankState::Accepted),
            KeyState::Pending => Some(BankState::Pending),
            KeyState::Rejected => Some(BankState::Rejected),
            _ => None,
        }
    }

    /// The record state that sets this bank state.
    pub fn key_state(self) -> KeyState {
        match self {
            BankState::Accepted => KeyState::Accepted,
            BankState::Pending => KeyState::Pending,
            BankState::Rejected => KeyState::Rejected,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BankState::Accepted => "accepted",
            BankState::Pending => "pending",
            BankState::Rejected => "rejected",
        }
    }

    /// The state byte of the `mmap_key` value encoding.
    pub fn mmap_byte(self) -> u8 {
        match self {
            BankState::Accepted => 1,
            BankState::Pending => 2,
            BankState::Rejected => 3,
        }
    }

    pub fn from_mmap_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(BankState::Accepted),
            2 => Some(BankState::Pending),
            3 => Some(BankState::Rejected),
            _ => None,
        }
    }

    /// The localfs_key directory of the state.
    pub fn dir_name(self) -> &'static str {
        match self {
            BankState::Accepted => "minions",
            BankState::Pending => "minions_pre",
            BankState::Rejected => "minions_rejected",
        }
    }
}

/// One entry of the `keys` bank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEntry {
    pub id: String,
    pub state: BankState,
    pub pub_key: Vec<u8>,
}

/// What `salt-key -L` prints: the four buckets, each sorted case-insensitively (ties keep
/// their order), exactly as `salt.key.Key.list_keys` builds them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KeyListing {
    pub minions_pre: Vec<String>,
    pub minions_rejected: Vec<String>,
    pub minions: Vec<String>,
    pub minions_denied: Vec<String>,
}

impl KeyListing {
    /// Builds the listing from bank entries and denied ids. An id found more than once in
    /// the same bucket is listed once.
    pub fn build(entries: impl IntoIterator<Item = (String, BankState)>, denied: impl IntoIterator<Item = String>) -> Self {
        let mut l = KeyListing::default();
        for (id, st) in entries {
            match st {
                BankState::Accepted => l.minions.push(id),
                BankState::Pending => l.minions_pre.push(id),
                BankState::Rejected => l.minions_rejected.push(id),
            }
        }
        l.minions_denied.extend(denied);
        for v in [&mut l.minions_pre, &mut l.minions_rejected, &mut l.minions, &mut l.minions_denied] {
            salt_sort(v);
            v.dedup();
        }
        l
    }

    pub fn total(&self) -> usize {
        self.minions_pre.len() + self.minions_rejected.len() + self.minions.len() + self.minions_denied.len()
    }
}

/// Python's `sorted(ids, key=lambda s: s.lower())`: stable, by lowercase.
pub fn salt_sort(v: &mut [String]) {
    v.sort_by_cached_key(|s| s.to_lowercase());
}

/// A denied key: the minion id and the public key bytes.
pub type DeniedEntry = (String, Vec<u8>);

/// A key view driver. Mutations follow the semantics of the state machine's key banks;
/// readers give the reference's answers for the same files.
pub trait KeyView: Send {
    /// Driver name as in `keys.cache_driver`.
    fn driver(&self) -> &'static str;
    /// Sets the `keys` entry of `id` (replacing any other state).
    fn set_key(&mut self, id: &str, state: BankState, pub_key: &[u8], mtime_ns: u64) -> Result<()>;
    /// Removes the `keys` entry of `id`. Returns whether one existed.
    fn remove_key(&mut self, id: &str) -> Result<bool>;
    /// Sets the denied key of `id`.
    fn set_denied(&mut self, id: &str, pub_key: &[u8], mtime_ns: u64) -> Result<()>;
    /// Removes the denied key of `id`.
    fn remove_denied(&mut self, id: &str) -> Result<bool>;
    /// Stores a master key file (`master.pem`, `master.pub`, ...).
    fn set_master_key(&mut self, name: &str, data: &[u8]) -> Result<()>;
    /// Stores a lone master's key pair as `<name>.pem` and `<name>.pub` (Salt 3008's
    /// naming; `localfs_key` also links `master.pem` / `master.pub` to them).
    fn set_master_pair(&mut self, name: &str, private_pem: &[u8], public_pem: &[u8]) -> Result<()> {
        self.set_master_key(&format!("{name}.pem"), private_pem)?;
        self.set_master_key(&format!("{name}.pub"), public_pem)
    }
    /// Reads the `keys` entry of `id` with the reference's precedence.
    fn get_key(&self, id: &str) -> Result<Option<KeyEntry>>;
    /// Reads the denied key of `id`.
    fn get_denied(&self, id: &str) -> Result<Option<Vec<u8>>>;
    /// Reads a master key file.
    fn get_master_key(&self, name: &str) -> Result<Option<Vec<u8>>>;
    /// All `keys` entries (with their pubs) and all denied entries.
    fn entries(&self) -> Result<(Vec<KeyEntry>, Vec<DeniedEntry>)>;
    /// The `salt-key -L` listing.
    fn list(&self) -> Result<KeyListing> {
        let (keys, denied) = self.entries()?;
        Ok(KeyListing::build(keys.into_iter().map(|e| (e.id, e.state)), denied.into_iter().map(|d| d.0)))
    }
    /// Removes the minion-key part of the view (not master keys), for a rebuild.
    fn clear(&mut self) -> Result<()>;
    /// Makes every change so far durable.
    fn sync(&mut self) -> Result<()>;
    /// Ends a group of changes: releases any writer lock the view holds, so that other
    /// writers of the same files (members on a shared `cluster_pki_dir`, Salt's tools)
    /// get their turn. `mmap_key` makes its changes durable and releases its `flock`s;
    /// `localfs_key` holds no lock (each file is written by a rename) and does nothing.
    fn release(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Which driver, and its settings, from the master config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyDriver {
    Localfs,
    Mmap(Geometry),
}

/// Opens the configured key view over `pki_dir`.
pub fn open_view(driver: &KeyDriver, pki_dir: &Path) -> Result<Box<dyn KeyView>> {
    Ok(match driver {
        KeyDriver::Localfs => Box::new(localfs::LocalfsKeys::open(pki_dir)?),
        KeyDriver::Mmap(geo) => Box::new(mmap::MmapKeys::open(pki_dir, *geo)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salt_sort_is_case_insensitive_and_stable() {
        let mut v: Vec<String> = ["acc-01", "Mixed_Case-01", "web01", "ACC-00", "b"].iter().map(|s| s.to_string()).collect();
        salt_sort(&mut v);
        assert_eq!(v, ["ACC-00", "acc-01", "b", "Mixed_Case-01", "web01"]);
    }

    /// The key directories are made when a key is first written into them, and again
    /// when an operator removed one meanwhile.
    #[test]
    fn localfs_makes_its_directories_when_they_are_missing() {
        let d = tempfile::tempdir().unwrap();
        let pki = d.path().join("pki");
        let mut v = localfs::LocalfsKeys::open(&pki).unwrap();
        v.set_key("m1", BankState::Accepted, b"k1", 1).unwrap();
        std::fs::remove_dir_all(pki.join("minions")).unwrap();
        v.set_key("m2", BankState::Accepted, b"k2", 1).unwrap();
        v.set_key("m3", BankState::Pending, b"k3", 1).unwrap();
        assert_eq!(std::fs::read(pki.join("minions/m2")).unwrap(), b"k2");
        assert_eq!(std::fs::read(pki.join("minions_pre/m3")).unwrap(), b"k3");
        assert!(!pki.join("minions/m1").exists());
    }

    /// A key moves between states by a rename, so it is in one directory at every
    /// moment: when its new file cannot be written (here a directory stands where it
    /// goes), it stays where it was, never in no directory, and a listing still shows it.
    #[test]
    fn localfs_keeps_a_key_in_its_old_state_when_the_new_one_cannot_be_written() {
        let d = tempfile::tempdir().unwrap();
        let pki = d.path().join("pki");
        let mut v = localfs::LocalfsKeys::open(&pki).unwrap();
        v.set_key("m1", BankState::Pending, b"k1", 1).unwrap();
        std::fs::create_dir_all(pki.join("minions/m1")).unwrap();
        assert!(v.set_key("m1", BankState::Accepted, b"k1", 2).is_err(), "a directory stands where the accepted key goes");
        assert_eq!(std::fs::read(pki.join("minions_pre/m1")).unwrap(), b"k1", "the pending key is still there");
        assert_eq!(v.list().unwrap().minions_pre, ["m1"]);
        // Moved once the way is clear: in the new state only, with its bytes.
        std::fs::remove_dir(pki.join("minions/m1")).unwrap();
        v.set_key("m1", BankState::Accepted, b"k1", 3).unwrap();
        assert_eq!(std::fs::read(pki.join("minions/m1")).unwrap(), b"k1");
        assert!(!pki.join("minions_pre/m1").exists());
        let l = v.list().unwrap();
        assert_eq!((l.minions, l.minions_pre), (vec!["m1".to_string()], vec![]));
    }

    /// A key new to its directory (linked in without a name first), one that replaces a
    /// file, and one moved from another state each land whole, with mode 0600 and the
    /// record's time as mtime, and no temporary file is left behind.
    #[test]
    fn localfs_writes_each_key_whole_with_its_mode_and_time() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let pki = d.path().join("pki");
        let mut v = localfs::LocalfsKeys::open(&pki).unwrap();
        let at = |s: u64| s * 1_000_000_000 + 5;
        v.set_key("new", BankState::Accepted, b"k-new", at(1_700_000_001)).unwrap();
        v.set_key("again", BankState::Accepted, b"k-old", at(1_700_000_002)).unwrap();
        v.set_key("again", BankState::Accepted, b"k-again", at(1_700_000_003)).unwrap();
        v.set_key("moved", BankState::Pending, b"k-moved", at(1_700_000_004)).unwrap();
        v.set_key("moved", BankState::Accepted, b"k-moved", at(1_700_000_005)).unwrap();
        for (id, pub_key, secs) in [("new", &b"k-new"[..], 1_700_000_001), ("again", b"k-again", 1_700_000_003), ("moved", b"k-moved", 1_700_000_005)] {
            let p = pki.join("minions").join(id);
            assert_eq!(std::fs::read(&p).unwrap(), pub_key, "{id}");
            let m = std::fs::metadata(&p).unwrap();
            assert_eq!(m.permissions().mode() & 0o7777, 0o600, "{id}");
            assert_eq!(m.modified().unwrap(), std::time::UNIX_EPOCH + std::time::Duration::from_nanos(at(secs)), "{id}");
        }
        assert!(!pki.join("minions_pre/moved").exists());
        let mut names: Vec<String> = std::fs::read_dir(pki.join("minions")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, ["again", "moved", "new"]);
        assert_eq!(v.get_key("moved").unwrap().map(|e| e.state), Some(BankState::Accepted));
    }
}
