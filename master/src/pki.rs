//! `pki.status` and `pki.migrate_to_mmap`, shared by `salt-run` (master stopped) and the
//! running master's admin socket.
//!
//! The migration runs through the log like every other change: the `localfs_key` tree is
//! read into key records (between two import markers), those the state machine does not
//! already hold are proposed and committed, and the `mmap_key` view is brought to exactly
//! the state machine's content. The master key pair (and signing keys, signature) also goes
//! into the mmap master bank, so a master reading `mmap_key` — Halite's or the reference's —
//! finds the same key instead of generating a new one that every minion would reject.
//!
//! Output is the reference's: a header and five aligned count lines.

use std::collections::BTreeMap;
use std::path::Path;

use halite_replication::Node;
use halite_storage::format::{now_ns, ImportMarker, ImportPhase, KeySet, KeyState, Record};
use halite_storage::import::{read_localfs_pki, read_master_keys, PkiCounts};
use halite_storage::keys::mmap::{MmapKeys, DENIED_INDEX, KEYS_INDEX};
use halite_storage::keys::{BankState, KeyView};
use halite_storage::state::StateMachine;
use halite_storage::views::Views;

use crate::config::MasterConfig;
use crate::store;

/// Groups a count with thousands separators, as the reference's `{:,}` does.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

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

/// Whether the mmap_key view files exist in `dir`.
pub fn mmap_view_exists(dir: &Path) -> bool {
    dir.join(KEYS_INDEX).exists() || dir.join(DENIED_INDEX).exists()
}

/// Imports the localfs tree through `node`'s log. `node_applies_mmap`: the node's own view
/// is the mmap view (offline, or a master already on `mmap_key`), so it was kept up to
/// date while applying; otherwise the mmap view is rebuilt beside it from the state
/// machine, master keys included. Returns the counts of the files read.
pub fn migrate(cfg: &MasterConfig, node: &Node, node_applies_mmap: bool, progress: &mut dyn FnMut(u64, u64)) -> Result<PkiCounts, String> {
    let pki_dir = cfg.keys_dir().to_path_buf();
    let geo = cfg.mmap_geometry();
    geo.validate().map_err(|e| e.to_string())?;
    let (records, counts) = read_localfs_pki(&pki_dir).map_err(|e| e.to_string())?;
    let records = collapse(records);
    let sm = node.state().clone();
    let mut todo = Vec::with_capacity(records.len());
    for r in records {
        if let Record::KeySet(k) = &r {
            if already_applied(&sm, k).map_err(|e| e.to_string())? {
                continue;
            }
        }
        todo.push(r);
    }
    let source = format!("localfs_key:{}", pki_dir.display());
    if !todo.is_empty() {
        let total = todo.len() as u64;
        node.propose(&[Record::ImportMarker(ImportMarker { source: source.clone(), phase: ImportPhase::Begin, counts: BTreeMap::new(), time_ns: now_ns() })])
            .map_err(|e| e.to_string())?;
        // Keep a few groups in flight so the node never waits for this thread.
        let mut in_flight = std::collections::VecDeque::new();
        let mut done = 0u64;
        for chunk in todo.chunks(4096) {
            in_flight.push_back((node.propose_async(chunk).map_err(|e| e.to_string())?, chunk.len() as u64));
            if in_flight.len() >= 4 {
                if let Some((p, n)) = in_flight.pop_front() {
                    p.wait().map_err(|e| e.to_string())?;
                    done += n;
                    progress(done, total);
                }
            }
        }
        for (p, n) in in_flight {
            p.wait().map_err(|e| e.to_string())?;
            done += n;
            progress(done, total);
        }
        node.propose(&[Record::ImportMarker(ImportMarker { source, phase: ImportPhase::End, counts: counts.as_map(), time_ns: now_ns() })])
            .map_err(|e| e.to_string())?;
    }
    if !node_applies_mmap {
        // The running master applies to another view: build the mmap view beside it.
        let mut views = Views::new(Box::new(MmapKeys::open(&pki_dir, geo).map_err(|e| e.to_string())?), halite_storage::roots::RootsMaterialiser::new(Default::default()));
        views.rebuild_keys(&sm, |_, _| {}).map_err(|e| e.to_string())?;
        copy_master_keys(cfg, &mut *views.keys)?;
        views.sync().map_err(|e| e.to_string())?;
    }
    Ok(counts)
}

/// After an offline migration (node stopped): makes the mmap view hold exactly the state
/// machine when it may not (it existed before, or the log already held keys), and copies
/// the master keys into its master bank.
pub fn finish_offline(cfg: &MasterConfig, sm: &StateMachine, must_check: bool) -> Result<u64, String> {
    let geo = cfg.mmap_geometry();
    let mut views = Views::new(Box::new(MmapKeys::open(cfg.keys_dir(), geo).map_err(|e| e.to_string())?), halite_storage::roots::RootsMaterialiser::new(Default::default()));
    let mut refused = 0;
    if must_check && !views.diff_keys(sm).map_err(|e| e.to_string())?.is_empty() {
        tracing::info!("mmap_key view differs from the state machine; rebuilding it");
        refused = views.rebuild_keys(sm, |_, _| {}).map_err(|e| e.to_string())?.refused;
    }
    copy_master_keys(cfg, &mut *views.keys)?;
    views.sync().map_err(|e| e.to_string())?;
    Ok(refused)
}

fn copy_master_keys(cfg: &MasterConfig, view: &mut dyn KeyView) -> Result<(), String> {
    let master = read_master_keys(&cfg.pki_dir).map_err(|e| e.to_string())?;
    for (name, data) in &master {
        view.set_master_key(name, data).map_err(|e| e.to_string())?;
    }
    tracing::info!(master_keys = master.len(), "master key files copied into the mmap master bank");
    Ok(())
}

/// The running master's `pki.migrate_to_mmap`.
pub fn migrate_online(cfg: &MasterConfig, node: &Node) -> Result<String, String> {
    let node_applies_mmap = matches!(cfg.key_driver, halite_storage::keys::KeyDriver::Mmap(_));
    let counts = migrate(cfg, node, node_applies_mmap, &mut |d, t| tracing::info!(done = d, total = t, "pki.migrate_to_mmap"))?;
    if node_applies_mmap {
        let mut view = store::key_view(cfg).map_err(|e| e.to_string())?;
        copy_master_keys(cfg, &mut *view)?;
    }
    Ok(format_counts("PKI keys migrated to mmap_key backend successfully.", &counts))
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands() {
        assert_eq!(super::thousands(0), "0");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1000), "1,000");
        assert_eq!(super::thousands(1234567), "1,234,567");
    }
}
