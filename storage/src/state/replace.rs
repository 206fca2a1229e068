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

use rocksdb::DB;

use super::{options, StateMachine, ALL_CFS};
use crate::error::Result;

impl StateMachine {
    /// Flushes and closes this state machine's database once no operation uses it,
    /// runs `switch` (which puts another state machine directory at
    /// [`StateMachine::path`]), opens that one and makes it current; the pending-key
    /// count is taken again and the key prints and proposal highs are dropped. If `switch` or the open fails, the state machine is closed
    /// (every later operation is an error) and the error returned: the node stops, and
    /// start-up recovery repairs the directories.
    pub fn reopen_after(&self, switch: impl FnOnce() -> Result<()>) -> Result<()> {
        self.flush()?;
        self.db.swap(|| {
            switch()?;
            Ok(DB::open_cf_descriptors(&options::read_write(), &self.path, options::descriptors(ALL_CFS)?)?)
        })?;
        self.prints.forget_all();
        self.highs.forget_all();
        self.recount_pending()
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
