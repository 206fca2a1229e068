//! Log compaction in the running node: the driver thread asks the policy
//! ([`halite_storage::compaction::decide`], limits from [`NodeConfig::compaction`],
//! i.e. the master's `cluster_max_log_size` and `halite_log_max_bytes`) once per tick,
//! and when a limit is exceeded snapshots the state machine at its applied index and
//! compacts the log through it ([`halite_storage::compaction::compact`]).
//!
//! It runs on the driver thread, between two turns of the loop, because the applied
//! index must not move while the snapshot is taken. What that costs the loop is a
//! RocksDB checkpoint (hard links, no copy) and hashing the checkpoint's files for the
//! manifest; the log line says how long it took. The check itself (the log's first and
//! last index and the bytes of its files) is cheap.
//!
//! **Who compacts.** A node started without peers (no transport) compacts by the policy
//! alone. A node with peers does not compact yet: raft-rs would answer a member whose
//! next entry is below the log's first index with a snapshot, and this build does not
//! send snapshots over the transport yet, so that member (a learner joining, a member
//! restarted on an empty disk) could never catch up. Not compacting is the simplest rule
//! that is safe for every member; the log of a cluster member grows as before.
//! (`halite-ctl compact` on a stopped member is the operator's tool meanwhile.)
//!
//! A compaction that fails (a full disk) is logged and tried again after
//! [`RETRY_AFTER`]: the node goes on; the log just stays longer.
//!
//! [`NodeConfig::compaction`]: super::NodeConfig::compaction

use std::time::{Duration, Instant};

use halite_storage::compaction::{self, Decision};
use halite_storage::snapshot::SnapshotStore;

use super::driver::Driver;
use super::Result;

/// How long after a failed compaction the next one is tried.
pub const RETRY_AFTER: Duration = Duration::from_secs(60);

/// The driver's compaction state.
pub(super) struct Compactor {
    store: SnapshotStore,
    /// No compaction before this (after a failure).
    not_before: Option<Instant>,
    /// Compactions done by this process (for the log line).
    done: u64,
}

impl Compactor {
    pub(super) fn new(store: SnapshotStore) -> Self {
        Compactor { store, not_before: None, done: 0 }
    }
}

impl Driver {
    /// Compacts the log if the policy says so (see the module docs). Never fails the
    /// loop: an error is logged and retried later.
    pub(super) fn maybe_compact(&mut self) -> Result<()> {
        if self.outbox.is_some() {
            return Ok(());
        }
        let Some(c) = self.compactor.as_mut() else { return Ok(()) };
        if c.not_before.is_some_and(|t| Instant::now() < t) {
            return Ok(());
        }
        let applied = self.sm.applied_index()?;
        let before = self.log.facts(applied)?;
        let Decision::Compact { through, reason } = compaction::decide(before, self.cfg.compaction) else { return Ok(()) };
        let started = Instant::now();
        match compaction::compact(&self.log, &self.sm, &c.store, |_, _| {}) {
            Ok(Some(done)) => {
                c.done += 1;
                c.not_before = None;
                let after = self.log.facts(applied)?;
                tracing::info!(
                    id = self.cfg.id,
                    through,
                    reason = %reason,
                    entries_before = before.entries(),
                    entries_after = after.entries(),
                    dropped = done.dropped,
                    log_bytes_before = before.log_bytes,
                    log_bytes_after = after.log_bytes,
                    snapshot_bytes = done.snapshot.manifest().total_bytes(),
                    snapshots_pruned = done.pruned,
                    ms = started.elapsed().as_millis() as u64,
                    compactions = c.done,
                    "log compacted by the policy"
                );
            }
            Ok(None) => {}
            Err(e) => {
                c.not_before = Some(Instant::now() + RETRY_AFTER);
                tracing::warn!(id = self.cfg.id, through, "log compaction failed, retried in {RETRY_AFTER:?}; the node goes on with a longer log: {e}");
            }
        }
        Ok(())
    }
}
