//! Key files on disk: the master key pair, a cluster member's own key and its peers' keys, the `localfs_key` → `mmap_key` migration.

pub mod masterkeys;
pub mod memberkey;
pub mod pki;
