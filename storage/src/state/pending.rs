//! The number of pending keys, kept rather than counted: `halite_max_pending_keys` is
//! decided at apply (`KeySet::pending_below`), and a sign-in checks it before proposing,
//! so the count is read on every new id's sign-in and must not scan the keys bank.
//!
//! It is derived from the keys bank: counted once at open (and after a snapshot has
//! replaced the state), then moved by each applied batch by what it changed
//! (`Overlay::pending_delta` in `apply.rs`). Every member therefore holds the same
//! number at the same log position.

use std::sync::atomic::Ordering;

use super::StateMachine;
use crate::error::Result;
use crate::keys::BankState;

impl StateMachine {
    /// Counts the pending keys again (at open, after the state was replaced).
    pub(super) fn recount_pending(&self) -> Result<()> {
        let n = self.count_keys(BankState::Pending)?;
        self.pending.store(n, Ordering::SeqCst);
        Ok(())
    }

    /// How many keys are pending, as of the last applied entry (no scan).
    pub fn pending_keys(&self) -> u64 {
        self.pending.load(Ordering::SeqCst)
    }

    /// Adds what an applied batch changed to the pending count.
    pub(super) fn pending_changed(&self, delta: i64) {
        if delta >= 0 {
            self.pending.fetch_add(delta as u64, Ordering::SeqCst);
        } else {
            let down = delta.unsigned_abs();
            let _ = self.pending.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| Some(n.saturating_sub(down)));
        }
    }
}
