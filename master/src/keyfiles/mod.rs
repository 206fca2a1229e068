//! Key files on disk: the master key pair, the signing key pair of its public key, a cluster member's own key and its peers' keys, the `localfs_key` → `mmap_key` migration.

pub mod gen_signature;
pub mod masterkeys;
pub mod memberkey;
pub mod pki;
pub mod signing;
