//! The keys bank read by state, without copying keys.
//!
//! A publish targets the accepted keys: `salt '*'` at 8,000 minions read every stored
//! key (its state, time and PEM) into memory to keep the ids of the accepted ones, about
//! 10 ms of the master's CPU before the job could go out (docs/benchmarks.md, "Where a
//! return's work goes, counted"). These reads look at each entry's state byte in place (a raw
//! iterator: no copy of the entry, no PEM) and keep only what is asked for: the ids in a
//! state, or how many there are. The scan does not fill the block cache, which is smaller
//! than the bank (`options::BLOCK_CACHE_BYTES`).
//!
//! An entry whose state byte is not a known state is in no state (a damaged entry is
//! reported by the reads that decode whole keys, `StateMachine::keys` and `get_key`).

use rocksdb::ReadOptions;

use super::{StateMachine, CF_KEYS};
use crate::error::{Error, Result};
use crate::keys::BankState;

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
                if v.first().and_then(|b| BankState::from_mmap_byte(*b)) == Some(state) {
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
}
