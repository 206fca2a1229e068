//! The keys and denied banks read: whole entries ([`StateMachine::get_key`],
//! [`StateMachine::keys`], the denied bank's), and by state without copying keys.
//!
//! A publish targets the accepted keys: reading every stored key (its state, time and
//! PEM) into memory to keep the ids of the accepted ones costs `salt '*'` at 8,000
//! minions about 10 ms of the master's CPU before the job can go out. These reads look at each entry's state byte in place (a raw
//! iterator: no copy of the entry, no PEM) and keep only what is asked for: the ids in a
//! state, or how many there are. The scan does not fill the block cache, which is smaller
//! than the bank (`options::BLOCK_CACHE_BYTES`).
//!
//! An entry whose state byte is not a known state is in no state (a damaged entry is
//! reported by the reads that decode whole keys, `StateMachine::keys` and `get_key`).

use rocksdb::{IteratorMode, ReadOptions};

use super::{KeyPrint, StateMachine, StoredKey, CF_DENIED, CF_KEYS};
use crate::error::{Error, Result};
use crate::keys::{BankState, KeyEntry};

impl StateMachine {
    /// Calls `f` with the id of every entry of the keys bank in `state`, in id order.
    fn each_id_in(&self, state: BankState, mut f: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let db = self.db()?;
        // A scan of the whole bank (3.6 MB at 8,000 minions) would otherwise pass through
        // the block cache it is bigger than, evicting the blocks requests read.
        let mut read = ReadOptions::default();
        read.fill_cache(false);
        let mut it = db.raw_iterator_cf_opt(db.cf(CF_KEYS)?, read);
        it.seek_to_first();
        while it.valid() {
            if let (Some(id), Some(v)) = (it.key(), it.value()) {
                // A damaged entry (shorter than its state and time) is in no state, as
                // for a request's read of it (`decode_key`).
                if v.len() >= 9 && v.first().and_then(|b| BankState::from_mmap_byte(*b)) == Some(state) {
                    f(id)?;
                }
            }
            it.next();
        }
        it.status()?;
        Ok(())
    }

    /// The ids of the keys in `state`, sorted by id bytes.
    pub fn ids_in(&self, state: BankState) -> Result<Vec<String>> {
        let mut out = Vec::new();
        self.each_id_in(state, |id| {
            let id = std::str::from_utf8(id).map_err(|_| Error::Invalid("non-UTF-8 id in the state machine".into()))?;
            out.push(id.to_string());
            Ok(())
        })?;
        Ok(out)
    }

    /// How many entries of the keys bank are in `state`.
    pub fn count_keys(&self, state: BankState) -> Result<u64> {
        let mut n = 0;
        self.each_id_in(state, |_| {
            n += 1;
            Ok(())
        })?;
        Ok(n)
    }

    fn decode_key(id: &[u8], v: &[u8]) -> Result<StoredKey> {
        if v.len() < 9 {
            return Err(Error::Invalid(format!("key entry of {:?} is damaged", String::from_utf8_lossy(id))));
        }
        let state = BankState::from_mmap_byte(v[0]).ok_or_else(|| Error::Invalid(format!("key entry of {:?} has state byte {}", String::from_utf8_lossy(id), v[0])))?;
        Ok(StoredKey { state, time_ns: u64::from_be_bytes(v[1..9].try_into().unwrap_or([0; 8])), pub_key: v[9..].to_vec() })
    }

    pub fn get_key(&self, id: &str) -> Result<Option<StoredKey>> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_KEYS)?, id.as_bytes())? {
            None => Ok(None),
            Some(v) => Self::decode_key(id.as_bytes(), &v).map(Some),
        }
    }

    /// `id`'s key state and the SHA-256 of its PEM: what [`StateMachine::get_key`] would
    /// answer, from memory when it can (`key_prints.rs`: as fresh as a read, bounded).
    pub fn key_print(&self, id: &str) -> Result<Option<KeyPrint>> {
        let epoch = match self.prints.get(id) {
            Ok(p) => return Ok(Some(p)),
            Err(epoch) => epoch,
        };
        let Some(key) = self.get_key(id)? else { return Ok(None) };
        let print = KeyPrint::of(&key);
        self.prints.fill(id, print, epoch);
        Ok(Some(print))
    }

    /// A denied-bank entry: its time and public key.
    fn decode_denied(id: &str, v: &[u8]) -> Result<(u64, Vec<u8>)> {
        if v.len() < 8 {
            return Err(Error::Invalid(format!("denied entry of {id:?} is damaged")));
        }
        Ok((u64::from_be_bytes(v[..8].try_into().unwrap_or([0; 8])), v[8..].to_vec()))
    }

    /// The first denied key of `id` and its time.
    pub fn get_denied(&self, id: &str) -> Result<Option<(u64, Vec<u8>)>> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_DENIED)?, id.as_bytes())? {
            None => Ok(None),
            Some(v) => Self::decode_denied(id, &v).map(Some),
        }
    }

    /// Every key, sorted by id bytes.
    pub fn keys(&self) -> Result<Vec<(String, StoredKey)>> {
        let db = self.db()?;
        let mut out = Vec::new();
        for item in db.iterator_cf(db.cf(CF_KEYS)?, IteratorMode::Start) {
            let (k, v) = item?;
            let id = String::from_utf8(k.to_vec()).map_err(|_| Error::Invalid("non-UTF-8 id in the state machine".into()))?;
            let sk = Self::decode_key(&k, &v)?;
            out.push((id, sk));
        }
        Ok(out)
    }

    /// Every denied key, sorted by id bytes: (id, time_ns, pub).
    pub fn denied(&self) -> Result<Vec<(String, u64, Vec<u8>)>> {
        let db = self.db()?;
        let mut out = Vec::new();
        for item in db.iterator_cf(db.cf(CF_DENIED)?, IteratorMode::Start) {
            let (k, v) = item?;
            let id = String::from_utf8(k.to_vec()).map_err(|_| Error::Invalid("non-UTF-8 id in the state machine".into()))?;
            let (time_ns, pub_key) = Self::decode_denied(&id, &v)?;
            out.push((id, time_ns, pub_key));
        }
        Ok(out)
    }

    /// Key entries as the views hold them.
    pub fn key_entries(&self) -> Result<Vec<KeyEntry>> {
        Ok(self.keys()?.into_iter().map(|(id, k)| KeyEntry { id, state: k.state, pub_key: k.pub_key }).collect())
    }
}
