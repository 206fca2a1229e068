//! Opening the storage a master config describes: the data directory (log and state
//! machine), the configured key view and the roots materialiser. (Starting the node over
//! them is [`crate::start`].)

use halite_replication::DataDir;
use halite_storage::dirlock::{Attempt, DirLock, Holder, MASTER_ROLE};
use halite_storage::keys::{open_view, KeyDriver, KeyView};
use halite_storage::roots::RootsMaterialiser;
use halite_storage::views::shared::SharedViews;
use halite_storage::views::Views;

use crate::config::MasterConfig;

/// The data directory of this master.
pub fn data_dir(cfg: &MasterConfig) -> DataDir {
    DataDir::new(&cfg.halite_data_dir)
}

/// How long a master that finds its data directory's lock held by someone who has not
/// yet written who it is reads the file again before taking it for a tool.
const UNNAMED_HOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The master's hold on its data directory (`halite_storage::dirlock`), taken before
/// anything in it is opened and kept for the master's life. Held by another master:
/// refused. Held by an offline tool (`halite-ctl`, `salt-key --offline`, ...): the master
/// says once in its log who holds it and waits for it to finish.
pub fn hold_data_dir(cfg: &MasterConfig) -> crate::error::Result<DirLock> {
    let dir = &cfg.halite_data_dir;
    let named_by = std::time::Instant::now() + UNNAMED_HOLDER_WAIT;
    let holder: Option<Holder> = loop {
        match DirLock::try_acquire(dir, MASTER_ROLE)? {
            Attempt::Held(l) => return checked(l, dir),
            Attempt::Busy(Some(h)) => break Some(h),
            // Between its flock and its line: the holder names itself at once.
            Attempt::Busy(None) if std::time::Instant::now() < named_by => std::thread::sleep(std::time::Duration::from_millis(10)),
            Attempt::Busy(None) => break None,
        }
    };
    if let Some(h) = holder.as_ref().filter(|h| h.is_master()) {
        return Err(crate::error::Error::refused(format!("{h} holds {}: another salt-master uses this halite_data_dir", dir.display())));
    }
    let who = holder.map_or_else(|| "another process".to_string(), |h| h.to_string());
    tracing::warn!("{who} holds {}: waiting for it to finish before starting", dir.display());
    let held = DirLock::acquire(dir, MASTER_ROLE)?;
    tracing::info!("{} is free: starting", dir.display());
    checked(held, dir)
}

/// The held directory once its format stamp is checked (`halite_storage::data_format`).
fn checked(held: DirLock, dir: &std::path::Path) -> crate::error::Result<DirLock> {
    if halite_storage::data_format::check(dir)? == halite_storage::data_format::Found::Stamped {
        tracing::info!("{}: stamped data format {}", dir.display(), halite_storage::data_format::CURRENT);
    }
    Ok(held)
}

/// The key view `keys.cache_driver` selects, over the keys directory.
pub fn key_view(cfg: &MasterConfig) -> halite_storage::Result<Box<dyn KeyView>> {
    open_view(&cfg.key_driver, cfg.keys_dir())
}

/// The key view of a given driver (e.g. mmap for a migration while the config still
/// says localfs), over the keys directory.
pub fn key_view_of(cfg: &MasterConfig, driver: &KeyDriver) -> halite_storage::Result<Box<dyn KeyView>> {
    open_view(driver, cfg.keys_dir())
}

/// All views of this master. On a shared filesystem (`cluster_isolated_filesystem`
/// false) they are written one member at a time under their marks
/// (`halite_storage::views::shared`); a cluster member with its own directories reads and
/// drops the marks a copied shared tree may carry.
pub fn views(cfg: &MasterConfig, keys: Box<dyn KeyView>) -> Views {
    let mut v = Views::new(keys, RootsMaterialiser::new(cfg.roots_dirs()));
    if let Some(cluster) = &cfg.cluster_id {
        let marks = SharedViews::new(cfg.keys_dir(), cluster, cfg.key_driver_name());
        if cfg.shared_filesystem() {
            v = v.shared_with(marks);
        } else {
            v.left_shared = Some(marks);
        }
    }
    v
}
