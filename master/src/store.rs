//! Opening the storage a master config describes: the data directory (log and state
//! machine), the configured key view and the roots materialiser. (Starting the node over
//! them is [`crate::start`].)

use halite_replication::DataDir;
use halite_storage::keys::{open_view, KeyDriver, KeyView};
use halite_storage::roots::RootsMaterialiser;
use halite_storage::views::shared::SharedViews;
use halite_storage::views::Views;

use crate::config::MasterConfig;

/// The data directory of this master.
pub fn data_dir(cfg: &MasterConfig) -> DataDir {
    DataDir::new(&cfg.halite_data_dir)
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
