//! Applying committed entries, in log order, to the state machine and the views; then
//! showing each applied record to the [`Tap`] and answering the proposals they carry.
//!
//! Committed entries arrive from raft in batches. Consecutive record entries are
//! applied together (one state-machine write, then the views); a membership change in
//! between first applies the entries before it, then itself (`membership.rs`), so the
//! order of the log is the order of effects. Each proposal (a record entry, or an item
//! of a group entry: all of a group's are applied in the same batch) is applied
//! all-or-nothing; the state machine skips a copy of a proposal it applied before, or
//! one of a proposer's earlier incarnation, the same way on every member, and says so
//! per proposal. A caller is answered when **its** entry (its proposal identity, not an
//! index) has applied, with that outcome; the tap sees only what applied. A committed
//! entry that does not decode is a corrupt log: the node stops rather than skip it. A
//! view that cannot be written does not stop the apply (`faults.rs`). After a crash the
//! entries the views already show are applied to the state machine only, and the views
//! are recovered from it once it has them all (`boot.rs`).
//!
//! A state-machine write that fails for want of space does not stop the node: the
//! entries from the one that failed on are left to be applied again from the log once
//! space is freed, the node holds meanwhile (`state_full.rs`). What had its effect before
//! (views, tap, membership, answers) keeps it: [`Derived::effected`] says up to where.
//!
//! [`Derived::effected`]: super::Derived::effected

use raft::eraftpb::{Entry, EntryType};

use halite_storage::state::Outcome;
use halite_storage::{Error as StorageError, LogEntry};

use super::Driver;
use crate::node::{Result, Tap};

/// The proposals a committed normal entry carries; one that does not decode is a damaged
/// log, which stops the node.
pub(super) fn decode_committed(e: &Entry) -> Result<Vec<LogEntry>> {
    Ok(LogEntry::from_raft(e).map_err(|err| StorageError::CorruptLog(format!("committed entry {} does not decode: {err}. Run `halite-ctl verify`", e.index)))?)
}

impl Driver {
    /// Applies committed `entries` and answers the proposals they carry. While the
    /// state machine waits to be opened again after it met a full disk, nothing is
    /// applied: raft counts these entries applied, and they are applied from the log
    /// when it is opened again (`state_full.rs`).
    pub(super) fn apply(&mut self, entries: Vec<Entry>) -> Result<()> {
        if self.space.state_failed {
            return Ok(());
        }
        let mut answers = Vec::new();
        let applied = self.apply_in_order(entries, &mut answers);
        // Those that applied are answered, also when a later one failed.
        for (seq, index, outcome) in answers {
            self.proposals.answer(seq, index, outcome);
        }
        match applied {
            Err(crate::node::NodeError::Storage(e)) if e.is_no_space() => {
                self.state_failed(&e);
                Ok(())
            }
            r => r,
        }
    }

    /// Applies `entries` in log order, noting in [`Derived::effected`] each whose effect
    /// is complete but for the state machine's applied index.
    ///
    /// [`Derived::effected`]: super::Derived::effected
    pub(super) fn apply_in_order(&mut self, entries: Vec<Entry>, answers: &mut Vec<(u64, u64, Outcome)>) -> Result<()> {
        let Some(last) = entries.last().map(|e| e.index) else { return Ok(()) };
        let mut batch = Vec::with_capacity(entries.len());
        for e in entries {
            match e.get_entry_type() {
                EntryType::EntryNormal => {
                    batch.extend(decode_committed(&e)?);
                }
                EntryType::EntryConfChange => {
                    // Entries before the change are applied first, in log order.
                    self.apply_records(std::mem::take(&mut batch), answers)?;
                    self.peers.membership.apply(&mut self.core.raw, &self.core.log, self.peers.outbox.as_ref(), &e)?;
                    // Raft's part is done; applied again, the change goes to the state only.
                    self.derived.effected = self.derived.effected.max(e.index);
                    self.apply_member_key_change(&e)?;
                    if let Some(seq) = self.proposals.ours_by_context(e.index, &e.context) {
                        answers.push((seq, e.index, Outcome::Applied));
                    }
                }
                EntryType::EntryConfChangeV2 => {
                    tracing::warn!(index = e.index, "joint-consensus conf change entries are not proposed by Halite; ignored");
                }
            }
        }
        self.apply_records(batch, answers)?;
        self.derived.effected = self.derived.effected.max(last);
        self.core.sm.advance_applied(last)?;
        self.core.log.applied_through(last);
        self.derived.dirty_to = Some(last);
        if self.derived.recover_after.is_some_and(|to| last >= to) {
            // The state machine has caught up with the views again (`boot.rs`).
            self.derived.recover_after = None;
            if let Err(e) = crate::node::boot::recover_views(&self.core.log, &self.core.sm, &mut self.derived.views, last) {
                self.health.faults = super::faults::ViewFaults::at_start(&self.core.log, &self.core.sm, &e);
            }
        }
        Ok(())
    }

    /// Applies record entries to the state machine and the views, shows the records of
    /// those that applied to the tap, and notes which of ours they were.
    fn apply_records(&mut self, batch: Vec<LogEntry>, answers: &mut Vec<(u64, u64, Outcome)>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let applied = self.core.sm.apply_entries(&batch)?;
        if let Some(e) = batch.last() {
            self.derived.effected = self.derived.effected.max(e.index);
        }
        if batch.iter().any(|e| e.records.iter().any(|r| matches!(r, halite_storage::Record::MemberKey(_) | halite_storage::Record::MemberRelease(_)))) {
            self.peers.keys_dirty = true;
        }
        // A view that cannot be written is marked dirty and rebuilt later (`faults.rs`).
        // After a crash, entries the views already show are not written again one by
        // one (`boot.rs`): the views are recovered once the state machine has them.
        if self.derived.recover_after.is_none() {
            self.apply_views(&batch, &applied.effects);
        }
        for (e, outcome) in batch.iter().zip(&applied.outcomes) {
            if *outcome == Outcome::Applied {
                if let Some(Tap(tap)) = &self.cfg.tap {
                    for rec in &e.records {
                        tap(e.index, rec);
                    }
                }
            }
            if let Some(seq) = self.proposals.ours(e.id.as_ref()) {
                answers.push((seq, e.index, *outcome));
            }
        }
        Ok(())
    }
}
