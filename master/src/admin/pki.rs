//! `pki.migrate_to_mmap` on a running master: the `localfs_key` tree of the keys
//! directory becomes key records (between import markers) committed through the log,
//! then the `mmap_key` view holds them. The same plan runs offline in `salt-run`
//! (`halite_tools::pki`); the counting and output are in [`crate::pki`].

use serde_json::json;

use super::{AdminView, Effect, Plan};
use crate::error::Result;
use crate::pki::{format_counts, migration_groups};

pub fn migrate_plan(view: &dyn AdminView) -> Result<Plan> {
    let cfg = view.config();
    cfg.mmap_geometry().validate()?;
    let (records, counts) = view.localfs_pki()?;
    let source = format!("localfs_key:{}", cfg.keys_dir().display());
    let proposals = migration_groups(view.state(), records, &source, &counts, view.now_ns())?;
    let build_view = !matches!(cfg.key_driver, halite_storage::keys::KeyDriver::Mmap(_));
    Ok(Plan {
        proposals,
        effects: vec![Effect::FinishMmapMigration { build_view }],
        progress: Some("pki.migrate_to_mmap"),
        ..Plan::answer(json!({ "return": format_counts("PKI keys migrated to mmap_key backend successfully.", &counts) }))
    })
}
