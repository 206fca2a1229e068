//! Opening the storage a master config describes: the data directory (log and state
//! machine), the configured key view and the roots materialiser. (Starting the node over
//! them is [`crate::start`].)

use halite_replication::DataDir;
use halite_storage::keys::{open_view, KeyDriver, KeyView};
use halite_storage::roots::RootsMaterialiser;
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

/// All views of this master.
pub fn views(cfg: &MasterConfig, keys: Box<dyn KeyView>) -> Views {
    Views::new(keys, RootsMaterialiser::new(cfg.roots_dirs()))
}
