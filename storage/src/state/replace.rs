//! Replacing the whole applied state of a running state machine with another database
//! directory (a snapshot's checkpoint, prepared beside it): how a member installs a
//! snapshot received from the leader without closing the [`StateMachine`] that other
//! threads of the process hold.
//!
//! The state machine's database is behind a handle (`handle.rs`); the replacement
//! closes the current database once no operation uses it, lets the caller move the
//! directories (`snapshot::install_running`: the same renames, in the same order, as a
//! swap at start, so a crash at any point is repaired the same way by
//! `snapshot::recover_at_start`), opens the database now at [`StateMachine::path`] and
//! makes it current. Nothing is copied: the installed directory *is* the snapshot's
//! checkpoint (its SSTs hard-linked). Readers during the replacement wait for it (a few
//! milliseconds: a close, two renames, an open); a member installing a snapshot is behind
//! the cluster's commit index, so it is not ready and serves no minion meanwhile.
//!
//! The same handle opens the database again in place after RocksDB met a full disk
//! ([`StateMachine::reopen_unflushed`]): a flush or write that fails for want of space
//! leaves RocksDB refusing every later write until the database is opened again (its C
//! API has no `Resume`). Nothing is flushed then (a flush is a write); the memtables are
//! dropped. As RocksDB's WAL is off, the database opened again is the one a crash would
//! leave: the records of every flush that succeeded, and its own `applied_index`, written
//! in the same atomic batches and flushed together (`atomic_flush`), says which. The
//! caller applies the log again from there, inside the reopen, before any other thread
//! reads: readers wait, and never see the state without the entries they saw before.

use rocksdb::DB;

use super::{options, StateMachine, ALL_CFS};
use crate::error::Result;

/// Opens tried by [`StateMachine::reopen_unflushed`] while they fail for want of space
/// (100 ms apart).
const REOPEN_TRIES: u32 = 100;

impl StateMachine {
    /// Closes this state machine's database once no operation uses it, without a flush
    /// (its state is being replaced; as the WAL is off, writes since the last flush are
    /// dropped), runs `switch` (which puts another state machine directory at
    /// [`StateMachine::path`]), opens that one and makes it current; the pending-key
    /// count is taken again and the key prints and proposal highs are dropped. A state
    /// machine closed by a failed open is opened the same way (nothing to close). If
    /// `switch` or the open fails, the state machine is closed (every later operation is
    /// an error until a later call opens it) and the error returned.
    pub fn reopen_after(&self, switch: impl FnOnce() -> Result<()>) -> Result<()> {
        self.db.swap(|| {
            switch()?;
            Ok(DB::open_cf_descriptors(&options::read_write(), &self.path, options::descriptors(ALL_CFS)?)?)
        })?;
        self.prints.forget_all();
        self.highs.forget_all();
        self.recount_pending()
    }

    /// Closes this state machine's database once no operation uses it, without a flush,
    /// opens it again in place and runs `then` (which applies the log again from
    /// [`StateMachine::applied_index`], see the module docs) before other threads see
    /// it. The pending-key count is taken again and the key prints and proposal highs are
    /// dropped. An open that fails for want of space is tried again for a while; if the
    /// open fails, the state machine is closed and the error returned. What `then`
    /// returns is returned; the reopened database is current either way.
    pub fn reopen_unflushed<T, E: From<crate::error::Error>>(&self, then: impl FnOnce() -> std::result::Result<T, E>) -> std::result::Result<T, E> {
        self.db.swap_then(
            || {
                let mut tries = 0;
                loop {
                    match DB::open_cf_descriptors(&options::read_write(), &self.path, options::descriptors(ALL_CFS)?) {
                        Ok(db) => return Ok(db),
                        Err(e) => {
                            let e = crate::error::Error::from(e);
                            tries += 1;
                            if !e.is_no_space() || tries >= REOPEN_TRIES {
                                return Err(e);
                            }
                            std::thread::sleep(std::time::Duration::from_millis(100));
                        }
                    }
                }
            },
            || {
                self.prints.forget_all();
                self.highs.forget_all();
                self.recount_pending()?;
                then()
            },
        )
    }

    /// About how many items the state holds (RocksDB's estimate from its table
    /// properties, no scan; exact for a freshly written checkpoint without overwrites).
    pub fn estimated_items(&self) -> Result<u64> {
        let db = self.db()?;
        let mut n = 0u64;
        for name in ALL_CFS {
            if let Some(cf) = db.cf_handle(name) {
                n += db.property_int_value_cf(cf, "rocksdb.estimate-num-keys")?.unwrap_or(0);
            }
        }
        Ok(n)
    }
}
