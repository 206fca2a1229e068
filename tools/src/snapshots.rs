//! `halite-ctl snapshot` and `halite-ctl compact`, and what `dump`, `verify` and
//! `replay` need to work on a compacted log: where the log's snapshot is and what it
//! holds.
//!
//! Both commands work on a stopped master's data directory, opened the way the master
//! opens it (a half-done install is repaired first, see
//! `halite_storage::snapshot::recover_at_start`).

use halite_master::{store, MasterConfig};
use halite_replication::DataDir;
use halite_storage::compaction::{self, Decision, LogFacts};
use halite_storage::log::RaftLog;
use halite_storage::snapshot::{recover_at_start, Snapshot, SnapshotStore};
use halite_storage::state::StateMachine;

use crate::common::{thousands, Failure, Progress, Result};

/// The log, the snapshot store and the state machine of a stopped master.
pub struct Opened {
    pub log: RaftLog,
    pub store: SnapshotStore,
    pub sm: StateMachine,
}

/// Opens the data directory as start-up does.
pub fn open(data: &DataDir) -> Result<Opened> {
    let log = RaftLog::open(&data.log())?;
    let store = SnapshotStore::open(&data.snapshots())?;
    recover_at_start(&store, &log, &data.state())?;
    let sm = StateMachine::open(&data.state()).map_err(|e| match e.to_string() {
        s if s.contains("lock") => Failure::new(format!("the state machine in {} is in use (is salt-master running?): {s}", data.state().display()), 1),
        s => Failure::new(s, 1),
    })?;
    Ok(Opened { log, store, sm })
}

/// The snapshot the log is compacted through, if it is.
pub fn log_snapshot(log: &RaftLog, data: &DataDir) -> Result<Option<Snapshot>> {
    let index = log.snapshot_meta()?.index;
    if index == 0 {
        return Ok(None);
    }
    let store = SnapshotStore::open(&data.snapshots())?;
    match store.get(index)? {
        Some(s) => Ok(Some(s)),
        None => Err(Failure::new(format!("the log is compacted through index {index} but snapshot {index} is missing from {}", store.dir().display()), 1)),
    }
}

/// One line about a snapshot.
pub fn describe(s: &Snapshot) -> String {
    let m = s.manifest();
    format!("snapshot at index {} (term {}): {} files, {} bytes, in {}", m.index, m.term, m.files.len(), thousands(m.total_bytes()), s.dir().display())
}

/// `snapshot`: a snapshot at the applied index, now (the log is not compacted).
pub fn snapshot(cfg: &MasterConfig) -> Result<String> {
    let data = store::data_dir(cfg);
    let o = open(&data)?;
    let mut p = Progress::new("snapshot: hashing files", dir_bytes(&data.state()));
    let s = compaction::snapshot_now(&o.log, &o.sm, &o.store, |d, _| p.set(d))?;
    p.finish();
    Ok(format!("Built {}", describe(&s)))
}

/// `compact`: a snapshot at the applied index and the log compacted through it; with
/// `if_needed`, only when the configured limits say so.
pub fn compact(cfg: &MasterConfig, if_needed: bool) -> Result<String> {
    let data = store::data_dir(cfg);
    let o = open(&data)?;
    let facts = LogFacts::of(&o.log, o.sm.applied_index()?)?;
    let before = format!("log entries {}..={} ({} entries, {} bytes of files)", facts.first_index, facts.last_index, thousands(facts.entries()), thousands(facts.log_bytes));
    if if_needed {
        if let Decision::Keep = compaction::decide(facts, cfg.compaction) {
            return Ok(format!("Nothing to do: {before} is within cluster_max_log_size / halite_log_max_bytes."));
        }
    }
    let mut p = Progress::new("snapshot: hashing files", dir_bytes(&data.state()));
    let done = compaction::compact(&o.log, &o.sm, &o.store, |d, _| p.set(d))?;
    p.finish();
    let Some(c) = done else {
        return Ok(format!("Nothing to do: the log is already compacted through the applied index {}.", facts.applied_index));
    };
    let after = LogFacts::of(&o.log, facts.applied_index)?;
    Ok(format!(
        "Compacted the log through index {}: {} entries dropped, {} older snapshot(s) removed.\nBefore: {before}\nAfter:  log entries {}..={} ({} entries, {} bytes of files)\n{}",
        c.snapshot.index(),
        thousands(c.dropped),
        c.pruned,
        after.first_index,
        after.last_index,
        thousands(after.entries()),
        thousands(after.log_bytes),
        describe(&c.snapshot)
    ))
}

/// Bytes under a directory (a hint for progress totals; 0 if unreadable).
fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum()).unwrap_or(0)
}
