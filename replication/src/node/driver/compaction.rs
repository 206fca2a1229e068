//! Log compaction in the running node: the driver thread asks the policy
//! ([`halite_storage::compaction::decide`], limits from [`NodeConfig::compaction`],
//! i.e. the master's `cluster_max_log_size` and `halite_log_max_bytes`) once per tick,
//! and when a limit is exceeded snapshots the state machine at its applied index and
//! compacts the log through it ([`halite_storage::compaction::compact`]).
//!
//! The checkpoint is taken on the driver thread, between two turns of the loop, because
//! the applied index must not move while it is taken: a RocksDB checkpoint is hard links
//! and a flush, no copy. Hashing the checkpoint's files for the manifest (seconds for a
//! gigabyte of roots) runs on a thread of its own while the driver goes on (heartbeats
//! included: a leader busy hashing would otherwise be voted out); when it is done the
//! driver compacts the log through the published snapshot ([`Msg::Compacted`]). One
//! compaction at a time. The check itself (the log's first and last index and the bytes
//! of its files) is cheap.
//!
//! **Who compacts.** Every node, by the policy alone, leader or not: a member whose next
//! entry is below the log's first index gets the snapshot instead (`snapshots.rs`). One
//! more reason, as leader: a peer that needs a snapshot but was added after the log's
//! snapshot was taken is not in that snapshot's membership, and raft-rs would refuse it
//! (the log answers raft "temporarily unavailable" for it meanwhile); a new snapshot is
//! taken at once, whatever the limits.
//!
//! A compaction that fails (a full disk) is logged and tried again after
//! [`RETRY_AFTER`]: the node goes on; the log just stays longer.
//!
//! [`NodeConfig::compaction`]: crate::node::NodeConfig::compaction

use std::time::{Duration, Instant};

use halite_storage::compaction::{self, Decision, LogFacts};
use halite_storage::snapshot::Snapshot;

use super::Driver;
use crate::node::{Msg, Result};

/// How long after a failed compaction the next one is tried.
pub const RETRY_AFTER: Duration = Duration::from_secs(60);

/// The compaction policy's state on the driver: when the next compaction may be tried,
/// and the one in progress. The snapshots it builds go to the node's snapshot store
/// (`Driver::snapshots`); a node without one never compacts.
#[derive(Default)]
pub(in crate::node) struct Compactor {
    /// No compaction before this (after a failure).
    not_before: Option<Instant>,
    /// Compactions done by this process (for the log line).
    done: u64,
    /// The index of the snapshot being hashed on its own thread, if one is.
    building: Option<u64>,
}

/// A snapshot hashed and published off the driver thread (or why not), and what the
/// log line about its compaction needs.
pub(in crate::node) struct Built {
    result: std::result::Result<Snapshot, halite_storage::Error>,
    through: u64,
    reason: String,
    before: LogFacts,
    started: Instant,
}

impl Driver {
    /// Compacts the log if the policy says so (see the module docs). Never fails the
    /// loop: an error is logged and retried later.
    pub(super) fn maybe_compact(&mut self) -> Result<()> {
        let Some(store) = &self.snapshots.store else { return Ok(()) };
        let c = &self.compaction;
        if c.building.is_some() || c.not_before.is_some_and(|t| Instant::now() < t) {
            return Ok(());
        }
        let waiting = self.peer_waits_for_snapshot()?;
        let c = &mut self.compaction;
        let applied = self.core.sm.applied_index()?;
        let before = LogFacts::of(&self.core.log, applied)?;
        let decision = match waiting {
            Some(peer) => Decision::Compact { through: applied, reason: format!("member {peer} needs a snapshot that includes it") },
            None => compaction::decide(before, self.cfg.compaction),
        };
        let Decision::Compact { through, reason } = decision else { return Ok(()) };
        let started = Instant::now();
        let prepared = match compaction::prepare(&self.core.log, &self.core.sm, store) {
            Ok(p) => p,
            Err(e) => {
                c.not_before = Some(Instant::now() + RETRY_AFTER);
                tracing::warn!(id = self.cfg.id, through, "log compaction failed, retried in {RETRY_AFTER:?}; the node goes on with a longer log: {e}");
                return Ok(());
            }
        };
        c.building = Some(prepared.index());
        let tx = self.self_tx.clone();
        let spawned = std::thread::Builder::new().name("halite-snapshot-build".into()).spawn(move || {
            let result = prepared.finish(|_, _| {});
            let _ = tx.send(Msg::Compacted(Box::new(Built { result, through, reason, before, started })));
        });
        if let Err(e) = spawned {
            c.building = None;
            c.not_before = Some(Instant::now() + RETRY_AFTER);
            tracing::warn!(id = self.cfg.id, through, "cannot start the snapshot thread, compaction retried in {RETRY_AFTER:?}: {e}");
        }
        Ok(())
    }

    /// A snapshot built off the driver thread is published: compact the log through it.
    pub(super) fn compacted(&mut self, b: Built) -> Result<()> {
        let Some(store) = &self.snapshots.store else { return Ok(()) };
        let c = &mut self.compaction;
        c.building = None;
        let done = b.result.and_then(|snap| compaction::complete(&self.core.log, store, snap));
        match done {
            Ok(Some(done)) => {
                c.done += 1;
                c.not_before = None;
                let after = LogFacts::of(&self.core.log, self.core.sm.applied_index()?)?;
                tracing::info!(
                    id = self.cfg.id,
                    through = b.through,
                    reason = %b.reason,
                    entries_before = b.before.entries(),
                    entries_after = after.entries(),
                    dropped = done.dropped,
                    log_bytes_before = b.before.log_bytes,
                    log_bytes_after = after.log_bytes,
                    snapshot_bytes = done.snapshot.manifest().total_bytes(),
                    snapshots_pruned = done.pruned,
                    ms = b.started.elapsed().as_millis() as u64,
                    compactions = c.done,
                    "log compacted by the policy"
                );
            }
            Ok(None) => {}
            Err(e) => {
                c.not_before = Some(Instant::now() + RETRY_AFTER);
                tracing::warn!(id = self.cfg.id, through = b.through, "log compaction failed, retried in {RETRY_AFTER:?}; the node goes on with a longer log: {e}");
            }
        }
        Ok(())
    }

    /// As leader: a peer whose next entry is below the log's first index (it needs a
    /// snapshot) but that the log's snapshot does not include (it was added after):
    /// raft-rs cannot send it that snapshot, so a new one is taken.
    fn peer_waits_for_snapshot(&self) -> Result<Option<u64>> {
        if self.core.raw.raft.state != raft::StateRole::Leader {
            return Ok(None);
        }
        let meta = self.core.log.snapshot_meta()?;
        if meta.index == 0 {
            return Ok(None);
        }
        let first = self.core.log.first_entry_index().unwrap_or(meta.index + 1);
        let cs = meta.get_conf_state();
        Ok(self
            .core
            .raw
            .raft
            .prs()
            .iter()
            .find(|(id, p)| **id != self.cfg.id && p.next_idx < first && !cs.voters.contains(id) && !cs.learners.contains(id))
            .map(|(id, _)| *id))
    }
}
