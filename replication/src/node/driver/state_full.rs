//! The state machine met a full disk: a RocksDB write (or the flush behind it) failed
//! for want of space. RocksDB then refuses every later write until the database is
//! opened again, so the node neither stops nor retries the write:
//!
//! 1. it holds as under its reserve (`space.rs`): proposals refused with
//!    [`crate::NodeError::DiskFull`], raft frozen, not ready in a group, what the state
//!    machine holds still read (its memtables included). Committed entries raft hands out
//!    meanwhile are not applied (`apply.rs`); raft counts them applied;
//! 2. once the free space is back above the reserve plus [`super::space::RESUME_MARGIN`] plus
//!    [`STATE_ROOM`] (room for the memtables' flush that failed), the state machine's
//!    database is closed without a flush and opened again in place
//!    ([`halite_storage::state::StateMachine::reopen_unflushed`]). Its WAL is off, so it
//!    holds what its last successful flush held, with that flush's applied index;
//! 3. inside the reopen (readers wait), the log is applied again from that index up to
//!    raft's applied index. An entry whose effect was complete before the failure
//!    ([`super::Derived::effected`]: views written, records shown to the tap, membership
//!    changed, proposal answered) goes to the state machine only; every later one is
//!    applied as usual. The state machine skips nothing and applies nothing twice: each
//!    entry after its applied index is applied once, in log order, as on every member.
//!
//! A snapshot whose install met a full disk (`snapshots.rs`: the log records it, the
//! state machine still holds the old state) holds the node the same way; once space is
//! back its install runs again first, then step 3 applies what followed it.
//!
//! A failure for want of space during the reopen goes back to holding; any other error
//! stops the node.

use halite_storage::Error as StorageError;
use raft::eraftpb::EntryType;

use super::Driver;
use crate::node::{NodeError, Result};

/// Free space beyond the reserve's margin before the state machine is opened again: the
/// memtables it held (`halite_storage::state::options::MEMTABLES_TOTAL_BYTES`) are
/// applied again and flushed.
pub const STATE_ROOM: u64 = halite_storage::state::options::MEMTABLES_TOTAL_BYTES as u64;

/// Entries read from the log at a time when applying it again (at least one, at most
/// about [`CHUNK_BYTES`]).
const CHUNK: u64 = 256;
const CHUNK_BYTES: usize = 16 << 20;

impl Driver {
    /// A state-machine write failed for want of space: the node holds until space is
    /// freed, then opens it again ([`Driver::reopen_state`]).
    pub(super) fn state_failed(&mut self, e: &StorageError) {
        if !self.space.state_failed {
            tracing::error!(
                id = self.cfg.id,
                effected = self.derived.effected,
                "the state machine cannot be written, its filesystem is full ({e}): writes are refused until space is freed, then it is opened again and the log applied to it from its own applied index"
            );
        }
        self.hold_for_state();
    }

    /// Holds until space is freed for the state machine (`space.rs`).
    pub(super) fn hold_for_state(&mut self) {
        self.space.state_failed = true;
        let free = self.space.available().unwrap_or(0);
        self.space.hold(free, &self.health.status);
    }

    /// Space is back: opens the state machine again in place and applies the log to it
    /// from its own applied index up to raft's (see the module docs). Returns whether it
    /// must hold again (the disk was full again).
    pub(super) fn reopen_state(&mut self) -> Result<bool> {
        if let Some(index) = self.space.install {
            // A snapshot's install met the full disk: it runs first.
            let snap = self.stored_snapshot(index)?;
            self.install_state(snap, std::time::Instant::now())?;
            if self.space.install.is_some() {
                return Ok(true);
            }
        }
        let to = self.core.raw.raft.raft_log.applied;
        let sm = self.core.sm.clone();
        let mut answers = Vec::new();
        let reapplied = sm.reopen_unflushed(|| -> Result<u64> {
            let from = sm.applied_index()? + 1;
            let mut next = from;
            while next <= to {
                let entries = self.core.log.read_entries(next, (to + 1).min(next + CHUNK), Some(CHUNK_BYTES))?;
                let Some(last) = entries.last().map(|e| e.index) else {
                    return Err(StorageError::CorruptLog(format!("entries {next} to {to} are missing from the log")).into());
                };
                let (done, rest): (Vec<_>, Vec<_>) = entries.into_iter().partition(|e| e.index <= self.derived.effected);
                self.reapply_to_state(done)?;
                self.apply_in_order(rest, &mut answers)?;
                next = last + 1;
            }
            sm.advance_applied(to)?;
            Ok(from)
        });
        for (seq, index, outcome) in answers {
            self.proposals.answer(seq, index, outcome);
        }
        match reapplied {
            Ok(from) => {
                self.space.state_failed = false;
                self.derived.dirty_to = Some(to);
                tracing::warn!(id = self.cfg.id, from, to, "the state machine is opened again and the log applied to it from its own applied index: writing again");
                Ok(false)
            }
            Err(NodeError::Storage(e)) if e.is_no_space() => {
                self.state_failed(&e);
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// Applies entries whose other effects are complete to the state machine only.
    fn reapply_to_state(&mut self, entries: Vec<raft::eraftpb::Entry>) -> Result<()> {
        let mut batch = Vec::new();
        for e in entries {
            match e.get_entry_type() {
                EntryType::EntryNormal => {
                    batch.extend(super::apply::decode_committed(&e)?);
                }
                EntryType::EntryConfChange => {
                    self.core.sm.apply_entries(&std::mem::take(&mut batch))?;
                    self.apply_member_key_change(&e)?;
                }
                EntryType::EntryConfChangeV2 => {}
            }
        }
        self.core.sm.apply_entries(&batch)?;
        Ok(())
    }
}
