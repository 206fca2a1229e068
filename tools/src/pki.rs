//! The `pki` runner: `pki.status` and `pki.migrate_to_mmap`.
//!
//! Offline (master stopped) the migration runs through the log like every other change:
//! the `localfs_key` tree is read into key records (between two import markers), those
//! that the state machine does not already hold are proposed and committed, and the
//! `mmap_key` view is brought to exactly the state machine's content. The master key
//! pair (and signing keys, signature) also goes into the mmap master bank, so a master
//! reading `mmap_key` — Halite's or the reference's — finds the same key instead of
//! generating a new one that every minion would reject.
//!
//! Output is the reference's: a header and five aligned count lines.

use std::collections::BTreeMap;
use std::path::Path;

use halite_master::store;
use halite_master::MasterConfig;
use halite_storage::format::{now_ns, ImportMarker, ImportPhase, KeySet, KeyState, Record};
use halite_storage::import::{read_localfs_pki, read_master_keys, PkiCounts};
use halite_storage::keys::{BankState, KeyDriver};
use halite_storage::state::StateMachine;

use crate::common::{thousands, Failure, Progress, Result};

/// Counts the way the reference's dry run does (regular non-symlink files; dot-files
/// skipped except in `minions_denied`; ids not validated).
pub fn dry_run_counts(pki_dir: &Path) -> PkiCounts {
    let count = |dir: &str, skip_dot: bool| -> u64 {
        let Ok(rd) = std::fs::read_dir(pki_dir.join(dir)) else { return 0 };
        rd.filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
            .filter(|e| !(skip_dot && e.file_name().to_string_lossy().starts_with('.')))
            .count() as u64
    };
    PkiCounts {
        accepted: count("minions", true),
        pending: count("minions_pre", true),
        rejected: count("minions_rejected", true),
        denied: count("minions_denied", false),
        skipped: 0,
    }
}

/// The reference's five count lines under `header`.
pub fn format_counts(header: &str, c: &PkiCounts) -> String {
    format!(
        "{header}\n  Accepted: {}\n  Pending:  {}\n  Rejected: {}\n  Denied:   {}\n  Total:    {}",
        thousands(c.accepted),
        thousands(c.pending),
        thousands(c.rejected),
        thousands(c.denied),
        thousands(c.total())
    )
}

/// `pki.status` (= `pki.migrate_to_mmap test=True`).
pub fn status(cfg: &MasterConfig) -> String {
    format_counts("PKI migration dry-run (no changes written):", &dry_run_counts(cfg.keys_dir()))
}

/// Keeps the last record per (id, bank), as applying them in order would.
fn collapse(records: Vec<Record>) -> Vec<Record> {
    let mut last: BTreeMap<(bool, String), usize> = BTreeMap::new();
    for (i, r) in records.iter().enumerate() {
        if let Record::KeySet(k) = r {
            last.insert((k.state == KeyState::Denied, k.id.clone()), i);
        }
    }
    let keep: std::collections::HashSet<usize> = last.values().copied().collect();
    records.into_iter().enumerate().filter(|(i, _)| keep.contains(i)).map(|(_, r)| r).collect()
}

/// Whether the state machine already reflects `k` (so proposing it would change nothing).
fn already_applied(sm: &StateMachine, k: &KeySet) -> halite_storage::Result<bool> {
    Ok(match k.state {
        KeyState::Denied => sm.get_denied(&k.id)?.is_some(),
        s => match (BankState::from_key_state(s), sm.get_key(&k.id)?) {
            (Some(want), Some(have)) => have.state == want && have.pub_key == k.pub_key,
            _ => false,
        },
    })
}

/// `pki.migrate_to_mmap` with the master stopped.
pub fn migrate_offline(cfg: &MasterConfig, dry_run: bool) -> Result<String> {
    if dry_run {
        return Ok(status(cfg));
    }
    let pki_dir = cfg.keys_dir().to_path_buf();
    let geo = cfg.mmap_geometry();
    geo.validate()?;
    let mmap = KeyDriver::Mmap(geo);
    let (records, counts) = read_localfs_pki(&pki_dir)?;
    let records = collapse(records);
    // Whether the mmap view or the state machine held keys before this run: only then can
    // they differ after it (otherwise the view holds exactly what this run applied).
    let view_existed = pki_dir.join(halite_storage::keys::mmap::KEYS_INDEX).exists() || pki_dir.join(halite_storage::keys::mmap::DENIED_INDEX).exists();
    let views = store::views(cfg, store::key_view_of(cfg, &mmap)?);
    let node = store::start_node(cfg, views).map_err(in_use(cfg))?;
    let state_had_keys = node.state().count("keys")? + node.state().count("denied")? > 0;
    let mut todo = Vec::with_capacity(records.len());
    for r in records {
        if let Record::KeySet(k) = &r {
            if already_applied(node.state(), k)? {
                continue;
            }
        }
        todo.push(r);
    }
    let source = format!("localfs_key:{}", pki_dir.display());
    if !todo.is_empty() {
        let mut progress = Progress::new("migrating keys into the log", todo.len() as u64);
        node.propose(&[Record::ImportMarker(ImportMarker { source: source.clone(), phase: ImportPhase::Begin, counts: BTreeMap::new(), time_ns: now_ns() })])?;
        // Keep a few groups in flight so the node never waits for this thread.
        let mut in_flight = std::collections::VecDeque::new();
        let mut done = 0u64;
        for chunk in todo.chunks(4096) {
            in_flight.push_back((node.propose_async(chunk)?, chunk.len() as u64));
            if in_flight.len() >= 4 {
                if let Some((p, n)) = in_flight.pop_front() {
                    p.wait()?;
                    done += n;
                    progress.set(done);
                }
            }
        }
        for (p, n) in in_flight {
            p.wait()?;
            done += n;
            progress.set(done);
        }
        node.propose(&[Record::ImportMarker(ImportMarker { source, phase: ImportPhase::End, counts: counts.as_map(), time_ns: now_ns() })])?;
        progress.finish();
    }
    let sm = node.state().clone();
    drop(node);
    // The mmap view must hold exactly the state machine (it may have been written by
    // the reference before, or miss keys the log had already).
    let mut views = store::views(cfg, store::key_view_of(cfg, &mmap)?);
    let diff = if view_existed || state_had_keys { views.diff_keys(&sm)? } else { Vec::new() };
    if !diff.is_empty() {
        tracing::info!(differences = diff.len(), "mmap_key view differs from the state machine; rebuilding it");
        let total = (sm.count("keys")? + sm.count("denied")?).max(1);
        let mut p = Progress::new("rebuilding the mmap_key view", total);
        let c = views.rebuild_keys(&sm, |d, _| p.set(d))?;
        p.finish();
        if c.refused > 0 {
            eprintln!("warning: {} keys could not be written to the mmap_key view (ids longer than mmap_key_id_size={}); raise it and run `halite-ctl rebuild-views`", c.refused, geo.key_size);
        }
    }
    let master = read_master_keys(&cfg.pki_dir)?;
    for (name, data) in &master {
        views.keys.set_master_key(name, data)?;
    }
    views.sync()?;
    if counts.skipped > 0 {
        eprintln!("warning: {} key files were skipped (invalid ids or unreadable files); see the log", counts.skipped);
    }
    tracing::info!(master_keys = master.len(), "master key files copied into the mmap master bank");
    Ok(format_counts("PKI keys migrated to mmap_key backend successfully.", &counts))
}

/// Maps "log is locked" into a message an operator understands.
pub fn in_use(cfg: &MasterConfig) -> impl Fn(halite_replication::NodeError) -> Failure + '_ {
    move |e| {
        let s = e.to_string();
        if s.contains("lock") || s.contains("Resource temporarily unavailable") || s.contains("LOCK") {
            Failure::new(format!("The Halite data directory {} is in use (is salt-master running?): {s}", cfg.halite_data_dir.display()), 1)
        } else {
            Failure::from(s)
        }
    }
}
