//! Log compaction: when the log has grown past a limit, the state machine is snapshotted
//! at its applied index and the log is compacted through that index. The log then holds
//! only the tail after the snapshot, and start-up reads the snapshot and the tail, never
//! the whole history.
//!
//! Two limits, either one triggers ([`CompactionLimits`], from the master config):
//!
//! * `cluster_max_log_size`: entries in the log (Salt's key, an entry count there too;
//!   Salt's default `None` never compacts, Halite's default is 100000; `0` turns the
//!   count limit off);
//! * `halite_log_max_bytes`: bytes of the log's files (default 256 MiB; `0`: off).
//!
//! [`decide`] is the policy, a pure function of [`LogFacts`]; [`compact`] does it. A
//! limit triggers a compaction only when compacting gives back at least half of it, and
//! at least [`CompactionLimits::min_entries`] entries (the entry limit) or
//! [`MIN_FREED_BYTES`] (the byte limit): entries applied since the last snapshot, or
//! bytes appended to the log's files since the last compaction
//! ([`LogFacts::appended_bytes`]; a compaction cannot give back more than that). So a
//! limit the log cannot get under (entries not applied yet, files raft-engine cannot
//! delete yet) or a tiny one makes it snapshot at most once per half a limit of new log,
//! never again and again, and the size of an entry (one return or a hundred) does not
//! matter.
//!
//! The log's files follow the byte limit ([`CompactionLimits::file_bytes`]): a quarter of
//! it each, so that after a compaction the files left (the one being written) hold at
//! most a quarter of the limit, and the log's files stay within the limit plus one file
//! plus what is appended while a snapshot is built (`storage/src/compaction_tests.rs`).

use crate::error::{Error, Result};
use crate::log::RaftLog;
use crate::snapshot::{Build, Snapshot, SnapshotStore};
use raft::eraftpb::{ConfState, Entry};
use crate::state::StateMachine;

/// Default of `cluster_max_log_size` (entries).
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;
/// Default of `halite_log_max_bytes`.
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;
/// Default of [`CompactionLimits::min_entries`].
pub const DEFAULT_MIN_ENTRIES: u64 = 1000;
/// The fewest bytes a compaction by the byte limit gives back.
pub const MIN_FREED_BYTES: u64 = 1 << 20;

/// What the policy looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogFacts {
    /// First entry the log holds (snapshot index + 1 when it holds none).
    pub first_index: u64,
    pub last_index: u64,
    pub applied_index: u64,
    /// Index of the snapshot the log was last compacted through (0: never).
    pub snapshot_index: u64,
    /// Bytes of the log's files on disk.
    pub log_bytes: u64,
    /// Bytes of the log's files right after its last compaction (0: never compacted).
    pub compacted_bytes: u64,
}

impl LogFacts {
    /// Reads the facts off `log`, with the state machine's `applied_index`.
    pub fn of(log: &RaftLog, applied_index: u64) -> Result<LogFacts> {
        let snap = log.snapshot_meta()?.index;
        Ok(LogFacts {
            first_index: log.first_entry_index().unwrap_or(snap + 1),
            last_index: log.last_entry_index().unwrap_or(snap),
            applied_index,
            snapshot_index: snap,
            log_bytes: log.disk_bytes(),
            compacted_bytes: log.compacted_bytes()?,
        })
    }

    /// Entries the log holds.
    pub fn entries(&self) -> u64 {
        (self.last_index + 1).saturating_sub(self.first_index)
    }

    /// Bytes appended to the log's files since the last compaction: the most that
    /// compacting again can give back.
    pub fn appended_bytes(&self) -> u64 {
        self.log_bytes.saturating_sub(self.compacted_bytes)
    }
}

/// The limits (see the module docs). `None`: that limit is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionLimits {
    pub max_entries: Option<u64>,
    pub max_bytes: Option<u64>,
    /// Fewest entries a compaction by the entry limit drops (applied since the last
    /// snapshot): a tiny `cluster_max_log_size` does not snapshot at every check.
    pub min_entries: u64,
}

impl Default for CompactionLimits {
    fn default() -> Self {
        CompactionLimits { max_entries: Some(DEFAULT_MAX_ENTRIES), max_bytes: Some(DEFAULT_MAX_BYTES), min_entries: DEFAULT_MIN_ENTRIES }
    }
}

impl CompactionLimits {
    /// The size of the log's files under these limits: a quarter of the byte limit,
    /// within [`MIN_FILE_BYTES`] and [`crate::log::DEFAULT_FILE_BYTES`] (that one when
    /// the byte limit is off).
    pub fn file_bytes(&self) -> u64 {
        match self.max_bytes {
            Some(max) => (max / 4).clamp(MIN_FILE_BYTES, crate::log::DEFAULT_FILE_BYTES),
            None => crate::log::DEFAULT_FILE_BYTES,
        }
    }
}

/// The smallest log file [`CompactionLimits::file_bytes`] gives.
pub const MIN_FILE_BYTES: u64 = 1 << 20;

/// What the policy says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Keep,
    /// Snapshot at `through` (the applied index) and compact the log through it.
    Compact { through: u64, reason: String },
}

/// The policy: compact through the applied index when a limit is exceeded and
/// compacting gives back at least half of that limit and at least the minimum (see the
/// module docs).
pub fn decide(f: LogFacts, l: CompactionLimits) -> Decision {
    let through = f.applied_index.min(f.last_index);
    if through <= f.snapshot_index {
        return Decision::Keep;
    }
    let freed_entries = through - f.snapshot_index;
    let reason = match (l.max_entries, l.max_bytes) {
        (Some(max), _) if f.entries() > max && freed_entries >= (max / 2).max(l.min_entries).max(1) => {
            format!("{} entries in the log, over cluster_max_log_size {max}", f.entries())
        }
        (_, Some(max)) if f.log_bytes > max && f.appended_bytes() >= (max / 2).max(MIN_FREED_BYTES) => {
            format!("{} bytes of log files ({} appended since the last compaction), over halite_log_max_bytes {max}", f.log_bytes, f.appended_bytes())
        }
        _ => return Decision::Keep,
    };
    Decision::Compact { through, reason }
}

/// What [`compact`] did.
#[derive(Debug, Clone)]
pub struct Compacted {
    pub snapshot: Snapshot,
    /// Entries dropped from the log.
    pub dropped: u64,
    /// Older snapshots removed.
    pub pruned: usize,
}

/// A compaction under way: the checkpoint is taken, and with it everything the log
/// says about its index (term, conf state, membership entries); what is left is hashing
/// the checkpoint's files and publishing the snapshot ([`Prepared::finish`], which may
/// run on any thread while the node goes on applying), then compacting the log through
/// it ([`complete`]).
pub enum Prepared {
    /// The store already holds a snapshot at the applied index.
    Existing(Snapshot),
    /// A checkpoint to hash and publish.
    Build { build: Build, term: u64, conf_state: ConfState, members: Vec<Entry> },
}

impl Prepared {
    /// The applied index the snapshot holds.
    pub fn index(&self) -> u64 {
        match self {
            Prepared::Existing(s) => s.index(),
            Prepared::Build { build, .. } => build.index(),
        }
    }

    /// Hashes and publishes the snapshot (`progress(bytes, total)` after each file).
    pub fn finish(self, progress: impl FnMut(u64, u64)) -> Result<Snapshot> {
        match self {
            Prepared::Existing(s) => Ok(s),
            Prepared::Build { build, term, conf_state, members } => build.finish_with(term, &conf_state, &members, progress),
        }
    }
}

/// Starts a snapshot of `sm` at its applied index in `store`: the checkpoint, and the
/// term, conf state and membership entries the log gives for that index. Call it from
/// the thread that applies (the applied index must not move during the call).
pub fn prepare(log: &RaftLog, sm: &StateMachine, store: &SnapshotStore) -> Result<Prepared> {
    let build = store.begin_build(sm)?;
    let index = build.index();
    if let Some(s) = store.get(index)? {
        return Ok(Prepared::Existing(s));
    }
    let first = log.first_entry_index().unwrap_or(log.snapshot_meta()?.index + 1);
    let last = log.last_entry_index().unwrap_or(first - 1);
    if index == 0 || index > last || index + 1 < first {
        return Err(Error::Invalid(format!("the state machine has applied {index}, outside the log's entries {first}..={last}: nothing to snapshot")));
    }
    let term = raft::Storage::term(log, index)?;
    Ok(Prepared::Build { build, term, conf_state: log.conf_state()?, members: log.members_through(index)? })
}

/// A snapshot of `sm` at its applied index in `store` (the one already there if the
/// store has one at that index), with the term, conf state and membership entries the
/// log gives for that index. `progress(bytes, total)` follows the hashing of its files.
pub fn snapshot_now(log: &RaftLog, sm: &StateMachine, store: &SnapshotStore, progress: impl FnMut(u64, u64)) -> Result<Snapshot> {
    prepare(log, sm, store)?.finish(progress)
}

/// Compacts `log` through a published `snapshot` (complete and fsynced, so the log may
/// refer to it) and removes older snapshots from `store`. `None` when the log is
/// already compacted through its index (a newer compaction came first).
pub fn complete(log: &RaftLog, store: &SnapshotStore, snapshot: Snapshot) -> Result<Option<Compacted>> {
    let index = snapshot.index();
    if index <= log.snapshot_meta()?.index {
        return Ok(None);
    }
    let members = snapshot.manifest().members()?;
    let dropped = log.compact_through(&snapshot.metadata(), &members)?;
    let pruned = store.prune(index)?;
    tracing::info!(index, term = snapshot.manifest().term, dropped, bytes = snapshot.manifest().total_bytes(), "log compacted through a snapshot");
    Ok(Some(Compacted { snapshot, dropped, pruned }))
}

/// Snapshots `sm` at its applied index into `store` ([`snapshot_now`]) and compacts
/// `log` through it (the snapshot is complete and fsynced before the log refers to it),
/// then removes older snapshots. `None` when the log is already compacted through the
/// applied index. Safe to call while the node runs, from the thread that applies (the
/// applied index must not move during the call).
pub fn compact(log: &RaftLog, sm: &StateMachine, store: &SnapshotStore, progress: impl FnMut(u64, u64)) -> Result<Option<Compacted>> {
    let current = log.snapshot_meta()?.index;
    if sm.applied_index()? <= current {
        return Ok(None);
    }
    let snapshot = snapshot_now(log, sm, store, progress)?;
    complete(log, store, snapshot)
}

#[cfg(test)]
#[path = "compaction_tests.rs"]
mod tests;
