//! The master key pair: loaded from the configured key view's master bank, created on
//! first start (2048-bit, e = 65537) and never replaced.
//!
//! Names follow Salt 3008 (`key-storage.md` §1.6): the pair is `<master_id>.pem` /
//! `<master_id>.pub` (`master_id` = the master's `id` without a trailing `_master`); an
//! existing `master.pem` (a pre-3008 tree, or the symlink 3008 leaves) is used as is.
//! With `localfs_key`, a new pair is written mode 0400 and `master.pem`/`master.pub` are
//! made symlinks to it, as the reference does.

use std::path::Path;

use halite_storage::keys::{KeyDriver, KeyView};

use crate::config::MasterConfig;
use crate::error::{Error, Result};
use crate::wire::crypto::{clean_key, sha256_hex, Crypticle, PrivateKey};

/// The master's publish key ("aes") and the `_auth` reply's `sig` for it: the X9.31
/// signature of the key's SHA-256 hex digest with the master key. The signature depends
/// only on the publish key, so it is made once per key (at start and at each rotation)
/// instead of once per sign-in, halving the RSA private operations of an `_auth` accept.
#[derive(Clone)]
pub struct PublishKey {
    pub aes: Crypticle,
    pub sig: Vec<u8>,
}

impl PublishKey {
    pub fn new(aes: Crypticle, keys: &MasterKeys) -> Result<Self> {
        let sig = keys.private.x931_sign(sha256_hex(aes.key_string().as_bytes()).as_bytes())?;
        Ok(Self { aes, sig })
    }
}

pub struct MasterKeys {
    pub private: PrivateKey,
    /// `master.pub` in Salt's clean_key form (what `_auth` replies carry as `pub_key`).
    pub pub_clean: Vec<u8>,
}

/// `id` without a trailing `_master`.
pub fn master_id(cfg: &MasterConfig) -> String {
    cfg.id.strip_suffix("_master").unwrap_or(&cfg.id).to_string()
}

fn symlink(target: &Path, link: &Path) -> Result<()> {
    match std::fs::symlink_metadata(link) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(format!("stat {}", link.display()), e)),
    }
    std::os::unix::fs::symlink(target, link).map_err(|e| Error::io(format!("linking {}", link.display()), e))
}

/// Loads the master key pair from `view`, creating it if there is none.
pub fn load_or_create(cfg: &MasterConfig, view: &mut dyn KeyView) -> Result<MasterKeys> {
    let mid = master_id(cfg);
    let names = [format!("{mid}.pem"), "master.pem".to_string()];
    for name in &names {
        // A localfs `master.pem` is a symlink, which the view ignores; read through it.
        let found: Option<Vec<u8>> = view.get_master_key(name).unwrap_or_default();
        let found = found.or_else(|| std::fs::read(cfg.pki_dir.join(name)).ok());
        if let Some(pem) = found {
            let private = PrivateKey::from_pem(&pem)?;
            let pub_clean = clean_key(&private.public_pem()?);
            tracing::info!(key = %name, "master key loaded");
            return Ok(MasterKeys { private, pub_clean });
        }
    }
    tracing::warn!(id = %mid, "no master key found: generating a new 2048-bit key pair");
    let private = PrivateKey::generate(2048)?;
    let pem = private.to_pem()?;
    let public = private.public_pem()?;
    std::fs::create_dir_all(&cfg.pki_dir).map_err(|e| Error::io(format!("creating {}", cfg.pki_dir.display()), e))?;
    view.set_master_key(&format!("{mid}.pem"), &pem)?;
    view.set_master_key(&format!("{mid}.pub"), &public)?;
    if view.driver() == "localfs_key" || matches!(cfg.key_driver, KeyDriver::Localfs) {
        symlink(&cfg.pki_dir.join(format!("{mid}.pem")), &cfg.pki_dir.join("master.pem"))?;
        symlink(&cfg.pki_dir.join(format!("{mid}.pub")), &cfg.pki_dir.join("master.pub"))?;
    }
    view.sync()?;
    Ok(MasterKeys { pub_clean: clean_key(&public), private })
}
