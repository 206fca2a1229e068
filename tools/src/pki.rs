//! `salt-run --offline pki.migrate_to_mmap` (the master stopped; the caller holds the data
//! directory's lock, [`crate::offline`]): starts a node over the data dir whose key view
//! is the mmap view, and runs the shared migration (`halite_master::pki`).

use halite_master::pki::{format_counts, migration_groups, mmap_view_exists};
use halite_master::{start, store};
use halite_master::MasterConfig;
use halite_storage::keys::KeyDriver;

use crate::common::{Failure, Progress, Result};

pub use halite_master::pki::status;

/// `pki.migrate_to_mmap` with the master stopped.
pub fn migrate_offline(cfg: &MasterConfig, dry_run: bool) -> Result<String> {
    if dry_run {
        return Ok(status(cfg));
    }
    let geo = cfg.mmap_geometry();
    geo.validate()?;
    let view_existed = mmap_view_exists(cfg.keys_dir());
    let views = store::views(cfg, store::key_view_of(cfg, &KeyDriver::Mmap(geo))?);
    let node = start::start_node(cfg, views).map_err(in_use(cfg))?;
    let state_had_keys = node.state().count("keys")? + node.state().count("denied")? > 0;
    let (records, counts) = halite_storage::import::read_localfs_pki(cfg.keys_dir())?;
    let source = format!("localfs_key:{}", cfg.keys_dir().display());
    let groups = migration_groups(&**node.state(), records, &source, &counts, halite_storage::format::now_ns())?;
    if !groups.is_empty() {
        let mut progress = Progress::new("migrating keys into the log", groups.iter().map(|g| g.len() as u64).sum());
        node.propose_all(&groups, 4, &mut |done, _| progress.set(done))?;
        progress.finish();
    }
    let sm = node.state().clone();
    drop(node);
    let refused = halite_master::pki::finish_offline(cfg, &sm, view_existed || state_had_keys).map_err(Failure::from)?;
    if refused > 0 {
        eprintln!("warning: {refused} keys could not be written to the mmap_key view (ids longer than mmap_key_id_size={}); raise it and run `halite-ctl rebuild-views`", geo.key_size);
    }
    if counts.skipped > 0 {
        eprintln!("warning: {} key files were skipped (invalid ids or unreadable files); see the log", counts.skipped);
    }
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
