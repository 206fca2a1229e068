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

use halite_storage::format::{ImportMarker, ImportPhase, KeySet, KeyState, Record};
use halite_storage::import::{read_master_keys, PkiCounts};
use halite_storage::keys::mmap::{MmapKeys, DENIED_INDEX, KEYS_INDEX};
use halite_storage::keys::{BankState, KeyView};
use halite_storage::state::{StateMachine, StateRead};
use halite_storage::views::Views;

use crate::config::MasterConfig;
use crate::error::Result;

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
fn already_applied(sm: &dyn StateRead, k: &KeySet) -> Result<bool> {
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

/// Most key records in one proposal of a migration.
pub const GROUP: usize = 4096;

/// The proposals of a migration: the localfs records the state machine does not already
/// reflect, in groups of [`GROUP`], between `begin`/`end` import markers (none at all
/// when there is nothing to import, so a second run proposes nothing).
pub fn migration_groups(sm: &dyn StateRead, records: Vec<Record>, source: &str, counts: &PkiCounts, now_ns: u64) -> Result<Vec<Vec<Record>>> {
    let mut todo = Vec::new();
    for r in collapse(records) {
        if let Record::KeySet(k) = &r {
            if already_applied(sm, k)? {
                continue;
            }
        }
        todo.push(r);
    }
    if todo.is_empty() {
        return Ok(Vec::new());
    }
    let marker = |phase, counts| Record::ImportMarker(ImportMarker { source: source.to_string(), phase, counts, time_ns: now_ns });
    let mut groups = vec![vec![marker(ImportPhase::Begin, BTreeMap::new())]];
    groups.extend(Record::fit_groups(todo, GROUP, halite_storage::entry::MAX_ENTRY_LEN)?);
    groups.push(vec![marker(ImportPhase::End, counts.as_map())]);
    Ok(groups)
}

/// Builds the `mmap_key` view beside the configured one from the state machine (an
/// online migration on a `localfs_key` master).
pub fn build_mmap_view(cfg: &MasterConfig, sm: &StateMachine) -> Result<()> {
    let mut views = Views::new(Box::new(MmapKeys::open(cfg.keys_dir(), cfg.mmap_geometry())?), halite_storage::roots::RootsMaterialiser::new(Default::default()));
    views.rebuild_keys(sm, |_, _| {})?;
    views.sync()?;
    Ok(())
}

/// After an offline migration (node stopped): makes the mmap view hold exactly the state
/// machine when it may not (it existed before, or the log already held keys), and copies
/// the master keys into its master bank.
pub fn finish_offline(cfg: &MasterConfig, sm: &StateMachine, must_check: bool) -> Result<u64> {
    let geo = cfg.mmap_geometry();
    let mut views = Views::new(Box::new(MmapKeys::open(cfg.keys_dir(), geo)?), halite_storage::roots::RootsMaterialiser::new(Default::default()));
    let mut refused = 0;
    if must_check && !views.diff_keys(sm)?.is_empty() {
        tracing::info!("mmap_key view differs from the state machine; rebuilding it");
        refused = views.rebuild_keys(sm, |_, _| {})?.refused;
    }
    copy_master_keys(cfg, &mut *views.keys)?;
    views.sync()?;
    Ok(refused)
}

/// Copies the master key files of `pki_dir` into `view`'s master bank, so a master
/// reading `mmap_key` (Halite's or the reference's) finds the same key.
pub fn copy_master_keys(cfg: &MasterConfig, view: &mut dyn KeyView) -> Result<()> {
    let master = read_master_keys(&cfg.pki_dir)?;
    for (name, data) in &master {
        view.set_master_key(name, data)?;
    }
    tracing::info!(master_keys = master.len(), "master key files copied into the mmap master bank");
    Ok(())
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
