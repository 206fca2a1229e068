//! The key pair minions know a master by, and the publish key signed with it.
//!
//! A lone master's pair is a `master_key_pair` record in its log (set once), and the key
//! view's master bank is materialised from it like any other view: `<master_id>.pem` /
//! `<master_id>.pub` (`master_id` = the master's `id` without a trailing `_master`,
//! Salt 3008's naming, `docs/formats.md` §4), with `localfs_key` also the links
//! `master.pem` / `master.pub`. So wiping the keys directory, or `halite-ctl
//! rebuild-views`, never loses the key. On the first start over a pki dir a Salt master
//! (or an earlier Halite) filled, the pair found there is the one recorded; otherwise a
//! new 2048-bit pair (e = 65537) is made. A cluster member presents the cluster's pair
//! (`daemon::cluster`) and keeps no pair of its own in the replicated log.

use halite_storage::format::{MasterKeyPair, Record};
use halite_storage::keys::KeyView;

use crate::config::MasterConfig;
use crate::error::Result;
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
    /// With `master_sign_pubkey`, the signature of `pub_clean` accepting `_auth` replies
    /// carry as `pub_sig` (`keyfiles::signing`).
    pub pubkey_signature: Option<crate::keyfiles::signing::PubkeySignature>,
}

impl MasterKeys {
    /// The keys of a private key PEM.
    pub fn from_pem(pem: &[u8]) -> Result<Self> {
        let private = PrivateKey::from_pem(pem)?;
        let pub_clean = clean_key(&private.public_pem()?);
        Ok(MasterKeys { private, pub_clean, pubkey_signature: None })
    }
}

/// `id` without a trailing `_master`.
pub fn master_id(cfg: &MasterConfig) -> String {
    cfg.id.strip_suffix("_master").unwrap_or(&cfg.id).to_string()
}

/// The private key PEM an existing pki dir holds for this master: `<master_id>.pem`, else
/// `master.pem` (a pre-3008 tree), from the key view's master bank or, for the links
/// `localfs_key` ignores, from the file.
pub fn existing(cfg: &MasterConfig, view: &dyn KeyView) -> Option<Vec<u8>> {
    let mid = master_id(cfg);
    [format!("{mid}.pem"), "master.pem".to_string()].iter().find_map(|name| {
        let found = view.get_master_key(name).ok().flatten().or_else(|| std::fs::read(cfg.pki_dir.join(name)).ok())?;
        match PrivateKey::from_pem(&found) {
            Ok(_) => Some(found),
            Err(e) => {
                tracing::warn!(key = %name, "a master key file that does not parse is ignored: {e}");
                None
            }
        }
    })
}

/// The record of this master's key pair: `found` (see [`existing`]) or a new pair.
pub fn record(cfg: &MasterConfig, found: Option<Vec<u8>>, time_ns: u64) -> Result<Record> {
    let private_pem = match found {
        Some(pem) => {
            tracing::info!(id = %master_id(cfg), "recording the master key found in the pki dir");
            pem
        }
        None => {
            tracing::warn!(id = %master_id(cfg), "no master key found: generating a new 2048-bit key pair");
            PrivateKey::generate(2048)?.to_pem()?
        }
    };
    Ok(Record::MasterKeyPair(MasterKeyPair { name: master_id(cfg), private_pem, time_ns }))
}
