//! Views that cannot be written never stop the node.
//!
//! A view write that fails (a full disk, a directory replaced by a file, a read-only
//! mount) marks that view **dirty**: the failure is counted ([`NodeStatus::view_errors`])
//! and logged (at most once per view per [`LOG_INTERVAL`]), the view's remaining effects
//! are skipped, and the state machine and the other view go on applying. The node keeps
//! the paths its records touch while the view is dirty, and tries to recover it at the
//! end of a driver turn, first after [`FIRST_RETRY`], then with a doubling backoff up to
//! [`MAX_RETRY`]: the key view is rebuilt from the state machine, the roots trees get the
//! touched paths (removals included) and every file the state holds
//! ([`Views::recover`]). Once no view is dirty the views index is recorded again.
//!
//! While a view is dirty its index is not recorded, so a restart resyncs it from the
//! log; a failure there marks it dirty too (`boot.rs`), instead of refusing to start.
//!
//! Views on a shared filesystem (`halite_storage::views::shared`) fail the same way,
//! including when another member keeps their lock past `LOCK_WAIT`; they are recovered
//! from their mark (never cleared), and not at all if another member has written them
//! past this one's applied index meanwhile.
//!
//! [`Views::recover`]: halite_storage::views::Views::recover

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use halite_storage::state::Effect;
use halite_storage::views::{Touched, ViewKind};
use halite_storage::entry::LogEntry;
use halite_storage::{Error as StorageError, Record};

use super::Driver;
use crate::node::status::NodeStatus;

/// First recovery attempt after a fault.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Longest wait between recovery attempts.
pub const MAX_RETRY: Duration = Duration::from_secs(60);
/// A view's failures are logged at most this often.
pub const LOG_INTERVAL: Duration = Duration::from_secs(60);

/// One dirty view.
#[derive(Debug)]
struct Dirty {
    next_try: Instant,
    backoff: Duration,
    /// What records changed since the view failed (the roots recovery removes files the
    /// state no longer holds from this).
    touched: Touched,
    logged_at: Instant,
    /// Failures not logged since `logged_at`.
    unlogged: u64,
}

/// The dirty views of a node.
#[derive(Debug, Default)]
pub(in crate::node) struct ViewFaults {
    dirty: BTreeMap<ViewKind, Dirty>,
}

impl ViewFaults {
    /// Start-up could not bring the views up to the state machine (`boot.rs`): both
    /// are dirty, with what the log says changed since they were last recorded.
    pub(in crate::node) fn at_start(log: &halite_storage::log::RaftLog, sm: &halite_storage::state::StateMachine, error: &dyn std::fmt::Display) -> Self {
        tracing::error!("the views cannot be brought up to the state machine at start: {error}; the node starts and rebuilds them once they can be written");
        let mut touched = Touched::default();
        if let (Ok(from), Ok(to)) = (sm.views_index(), sm.applied_index()) {
            let first = log.first_entry_index().unwrap_or(1);
            let _ = log.for_each_record((from + 1).max(first), Some(to + 1), |_, r| {
                if let Ok(r) = r {
                    touched.add(&r);
                }
                Ok(())
            });
        }
        let now = Instant::now();
        let dirty = ViewKind::ALL
            .into_iter()
            .map(|v| (v, Dirty { next_try: now + FIRST_RETRY, backoff: FIRST_RETRY, touched: touched.clone(), logged_at: now, unlogged: 0 }))
            .collect();
        ViewFaults { dirty }
    }

    /// The names of the dirty views.
    pub(super) fn dirty(&self) -> Vec<&'static str> {
        self.dirty.keys().map(|v| v.as_str()).collect()
    }

    pub(super) fn any(&self) -> bool {
        !self.dirty.is_empty()
    }

    pub(super) fn is_dirty(&self, v: ViewKind) -> bool {
        self.dirty.contains_key(&v)
    }

    /// Records a failure of `view`: marks it dirty (or pushes its next attempt back),
    /// counts it and logs it unless it was logged less than [`LOG_INTERVAL`] ago.
    pub(super) fn fault(&mut self, view: ViewKind, error: &StorageError, status: &NodeStatus) {
        status.count_view_error();
        let now = Instant::now();
        match self.dirty.get_mut(&view) {
            None => {
                tracing::error!(view = view.as_str(), "view not written: {error}; marked dirty, the state machine goes on and the view is rebuilt once it can be written");
                self.dirty.insert(view, Dirty { next_try: now + FIRST_RETRY, backoff: FIRST_RETRY, touched: Touched::default(), logged_at: now, unlogged: 0 });
            }
            Some(d) => {
                d.backoff = (d.backoff * 2).min(MAX_RETRY);
                d.next_try = now + d.backoff;
                d.unlogged += 1;
                if now.duration_since(d.logged_at) >= LOG_INTERVAL {
                    tracing::error!(view = view.as_str(), failures = d.unlogged, retry_in_s = d.backoff.as_secs(), "view still cannot be written: {error}");
                    d.logged_at = now;
                    d.unlogged = 0;
                }
            }
        }
    }

    /// Remembers what `records` touch, for every dirty view.
    pub(super) fn touch<'a>(&mut self, records: impl IntoIterator<Item = &'a Record>) {
        if self.dirty.is_empty() {
            return;
        }
        let mut t = Touched::default();
        for r in records {
            t.add(r);
        }
        for d in self.dirty.values_mut() {
            d.touched.key_ids.extend(t.key_ids.iter().cloned());
            d.touched.denied_ids.extend(t.denied_ids.iter().cloned());
            d.touched.roots.extend(t.roots.iter().cloned());
            d.touched.pushed.extend(t.pushed.iter().cloned());
            d.touched.pairs |= t.pairs;
        }
    }

    /// The views whose next attempt is due.
    fn due(&self) -> Vec<ViewKind> {
        let now = Instant::now();
        self.dirty.iter().filter(|(_, d)| d.next_try <= now).map(|(v, _)| *v).collect()
    }
}

impl Driver {
    /// Mirrors an applied batch into the views that are not dirty; a view that fails
    /// becomes dirty (see the module docs). Never fails.
    pub(super) fn apply_views(&mut self, batch: &[LogEntry], fx: &[Effect]) {
        let faults = &self.health.faults;
        let found = self.derived.views.apply_entries(&self.core.sm, Some(&self.core.log), batch, fx, &mut |v| faults.is_dirty(v));
        // The records of the batch that failed count as touched by it.
        for f in &found {
            self.health.faults.fault(f.view, &f.error, &self.health.status);
        }
        self.health.faults.touch(batch.iter().flat_map(|e| e.records.iter()));
    }

    /// A failure to make a view durable (its sync) makes it dirty too.
    pub(super) fn view_sync_failed(&mut self, view: ViewKind, error: &StorageError) {
        self.health.faults.fault(view, error, &self.health.status);
    }

    /// Tries to recover every dirty view whose attempt is due; records the views index
    /// once none is dirty.
    pub(super) fn recover_views(&mut self) {
        let due = self.health.faults.due();
        if due.is_empty() {
            return;
        }
        for view in due {
            let touched = self.health.faults.dirty.get(&view).map(|d| d.touched.clone()).unwrap_or_default();
            let r = if self.derived.views.is_shared() {
                // A shared view is caught up from its mark, never cleared
                // (`halite_storage::views::shared`); if another member wrote past this
                // one meanwhile, there is nothing to do.
                let applied = self.core.raw.raft.raft_log.applied;
                self.derived.views.catch_up_shared(&self.core.sm, Some(&self.core.log), view, applied)
            } else {
                self.derived.views.recover(&self.core.sm, view, &touched).and_then(|()| self.derived.views.sync())
            };
            match r {
                Ok(()) => {
                    self.health.faults.dirty.remove(&view);
                    tracing::info!(view = view.as_str(), "view rebuilt from the state machine; no longer dirty");
                }
                Err(e) => self.health.faults.fault(view, &e, &self.health.status),
            }
        }
        if !self.health.faults.any() {
            let applied = self.core.raw.raft.raft_log.applied;
            if let Err(e) = self.core.sm.set_views_index(applied) {
                tracing::warn!("cannot record the views index after recovering the views: {e}");
            }
        }
    }
}
