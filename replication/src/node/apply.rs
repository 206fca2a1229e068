//! Applying committed entries, in log order, to the state machine and the views; then
//! showing each applied record to the [`Tap`].
//!
//! Committed entries arrive from raft in batches. Consecutive records are applied
//! together (one state-machine batch, then the views); a membership change in between
//! first applies the records before it, then itself (`membership.rs`), so the order of
//! the log is the order of effects. Once the whole batch is applied the state machine
//! records the last index, and the proposals the batch completes are answered
//! (`proposals.rs`). Apply is deterministic: every member applying the same log gets the
//! same state. A view that cannot be written does not stop the apply (`faults.rs`). A committed record that does not decode is a corrupt log: the node stops
//! rather than skip it.

use raft::eraftpb::{Entry, EntryType};

use halite_storage::{Error as StorageError, Record};

use super::driver::Driver;
use super::{Result, Tap};

impl Driver {
    /// Applies committed `entries` and answers the proposals they complete.
    pub(super) fn apply(&mut self, entries: Vec<Entry>) -> Result<()> {
        let Some(last) = entries.last().map(|e| e.index) else { return Ok(()) };
        let mut batch = Vec::with_capacity(entries.len());
        let mut ours = Vec::new();
        for e in entries {
            if let Some(seq) = self.proposals.ours(&e) {
                ours.push((seq, e.index));
            }
            match e.get_entry_type() {
                EntryType::EntryNormal if e.data.is_empty() => {}
                EntryType::EntryNormal => {
                    let rec = Record::decode(&e.data).map_err(|err| {
                        StorageError::CorruptLog(format!("committed entry {} does not decode: {err}. Run `halite-ctl verify`", e.index))
                    })?;
                    batch.push((e.index, rec));
                }
                EntryType::EntryConfChange => {
                    // Records before the change are applied first, in log order.
                    self.apply_records(std::mem::take(&mut batch))?;
                    self.membership.apply(&mut self.raw, &self.log, self.outbox.as_ref(), &e)?;
                }
                EntryType::EntryConfChangeV2 => {
                    tracing::warn!(index = e.index, "joint-consensus conf change entries are not proposed by Halite; ignored");
                }
            }
        }
        self.apply_records(batch)?;
        self.sm.advance_applied(last)?;
        self.views_dirty_to = Some(last);
        self.proposals.answer(ours);
        Ok(())
    }

    /// Applies records to the state machine and the views, then shows them to the tap.
    fn apply_records(&mut self, batch: Vec<(u64, Record)>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let fx = self.sm.apply(&batch)?;
        // A view that cannot be written is marked dirty and rebuilt later (`faults.rs`).
        self.apply_views(&batch, &fx);
        if let Some(Tap(tap)) = &self.cfg.tap {
            for (index, rec) in &batch {
                tap(*index, rec);
            }
        }
        Ok(())
    }
}
