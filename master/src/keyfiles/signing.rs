//! The signed master public key: Salt's multi-master PKI (`master_sign_pubkey`), with
//! which a minion that sets `verify_master_pubkey_sign` accepts any master whose public
//! key is signed by the key pair it holds as `master_sign.pub`, and so fails over between
//! masters that each have their own `master.pem`.
//!
//! | option | default | what it does |
//! |---|---|---|
//! | `master_sign_pubkey` | False | every accepting `_auth` reply carries `pub_sig`, the signature of the master's public key (`pub_key`, in Salt's clean_key form) |
//! | `master_sign_key_name` | `master_sign` | the signing key pair `<name>.pem` / `<name>.pub` in `pki_dir`, made (2048 bits) at start when absent, as Salt does |
//! | `master_use_pubkey_signature` | False | send the signature held in the file below instead of signing with the key pair (no signing key needed on the master) |
//! | `master_pubkey_signature` | `<id>_pubkey_signature` | that file, in `pki_dir` (Salt's `salt-key --gen-signature` writes it) |
//!
//! The signature is PKCS#1 v1.5 with the algorithm the minion names in its `_auth`
//! (`sig_algo`, its `signing_algorithm`), base64 with a trailing newline as Salt sends it;
//! it depends only on the public key, so both algorithms are signed once at start. Salt
//! sends nothing else for it: the minion must hold the signing public key already.
//!
//! Where the files live: `pki_dir` as plain files (with `localfs_key`, and for a cluster
//! member, whose signing key is its own as in Salt); with `mmap_key` on a lone master,
//! Salt's `master_keys` bank of the mmap view, falling back to a plain file (one copied
//! in by hand, as Salt's tutorial does). They are not records of the log: like Salt, a
//! master without the file makes a new pair, which minions holding the old
//! `master_sign.pub` then refuse.

use rmpv::Value;

use halite_storage::keys::localfs::LocalfsKeys;
use halite_storage::keys::{KeyDriver, KeyView};

use crate::config::MasterConfig;
use crate::error::{Error, Result};
use crate::wire::crypto::{clean_key, PrivateKey, SigAlgo};

/// What an accepting `_auth` reply carries as `pub_sig`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PubkeySignature {
    /// `master_use_pubkey_signature`: the file's text (clean_key form), sent as text.
    Precomputed(String),
    /// Made at start with the signing key: base64 with a trailing newline, per algorithm.
    Computed { sha1: Vec<u8>, sha224: Vec<u8> },
}

impl PubkeySignature {
    /// The `pub_sig` value for a minion that asked for `algo`.
    pub fn value(&self, algo: SigAlgo) -> Value {
        match self {
            PubkeySignature::Precomputed(s) => Value::from(s.as_str()),
            PubkeySignature::Computed { sha1, sha224 } => Value::Binary(match algo {
                SigAlgo::Pkcs1v15Sha1 => sha1.clone(),
                SigAlgo::Pkcs1v15Sha224 => sha224.clone(),
            }),
        }
    }

    /// Signs `pub_clean` (the public key as `_auth` sends it) with `key`, once per algorithm.
    pub fn compute(key: &PrivateKey, pub_clean: &[u8]) -> Result<Self> {
        use base64::Engine;
        let b64 = |algo| -> Result<Vec<u8>> {
            let mut s = base64::engine::general_purpose::STANDARD.encode(key.sign(pub_clean, algo)?).into_bytes();
            s.push(b'\n');
            Ok(s)
        };
        Ok(PubkeySignature::Computed { sha1: b64(SigAlgo::Pkcs1v15Sha1)?, sha224: b64(SigAlgo::Pkcs1v15Sha224)? })
    }
}

/// The signing options of a config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignOptions {
    pub sign_pubkey: bool,
    pub key_name: String,
    pub signature_file: String,
    pub use_signature_file: bool,
}

impl SignOptions {
    pub fn of(cfg: &MasterConfig) -> Self {
        SignOptions {
            sign_pubkey: cfg.master_sign_pubkey,
            key_name: cfg.master_sign_key_name.clone(),
            signature_file: cfg.master_pubkey_signature.clone().unwrap_or_else(|| format!("{}_pubkey_signature", cfg.id)),
            use_signature_file: cfg.master_use_pubkey_signature,
        }
    }
}

/// Where the signing files are read and written (see the module docs).
pub struct Store {
    pki_dir: std::path::PathBuf,
    /// The mmap view's master bank, on a lone `mmap_key` master.
    bank: Option<Box<dyn KeyView>>,
}

impl Store {
    pub fn of(cfg: &MasterConfig) -> Result<Self> {
        let bank = match (&cfg.key_driver, &cfg.cluster_id) {
            (KeyDriver::Mmap(_), None) => Some(crate::store::key_view(cfg)?),
            _ => None,
        };
        Ok(Store { pki_dir: cfg.pki_dir.clone(), bank })
    }

    /// A store of plain files in `pki_dir` only.
    pub fn files(pki_dir: &std::path::Path) -> Self {
        Store { pki_dir: pki_dir.to_path_buf(), bank: None }
    }

    fn read(&self, name: &str) -> Result<Option<Vec<u8>>> {
        if let Some(b) = &self.bank {
            if let Some(v) = b.get_master_key(name)? {
                return Ok(Some(v));
            }
        }
        match std::fs::read(self.pki_dir.join(name)) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(format!("reading {}", self.pki_dir.join(name).display()), e)),
        }
    }

    fn write(&mut self, name: &str, data: &[u8]) -> Result<()> {
        match &mut self.bank {
            Some(b) => {
                b.set_master_key(name, data)?;
                b.sync()?;
            }
            None => {
                let mut files = LocalfsKeys::open(&self.pki_dir)?;
                files.set_master_key(name, data)?;
                files.sync()?;
            }
        }
        Ok(())
    }
}

/// A file name of `pki_dir` from the config: one path component.
fn file_name(option: &str, name: &str) -> Result<()> {
    halite_storage::id::validate_relative_path(name).map_err(|e| Error::refused(format!("{option}: {e}")))?;
    if name.contains('/') {
        return Err(Error::refused(format!("{option}: {name:?} must be a file name in pki_dir, not a path")));
    }
    Ok(())
}

/// What signs the master's public key: the signing key pair, or the signature file.
pub enum Signer {
    Key(PrivateKey),
    Precomputed(String),
}

impl Signer {
    /// The `pub_sig` of `pub_clean` (the public key as `_auth` sends it).
    pub fn sign(&self, pub_clean: &[u8]) -> Result<PubkeySignature> {
        match self {
            Signer::Key(k) => PubkeySignature::compute(k, pub_clean),
            Signer::Precomputed(s) => Ok(PubkeySignature::Precomputed(s.clone())),
        }
    }
}

/// The signer, or `None` without `master_sign_pubkey`: reads (or makes) the signing key
/// pair, or reads the signature file; a missing signature file stops the start, as it
/// stops Salt's master. Run before the node opens the key view (it may write to it).
pub fn load(opts: &SignOptions, store: &mut Store) -> Result<Option<Signer>> {
    if !opts.sign_pubkey {
        return Ok(None);
    }
    if opts.use_signature_file {
        file_name("master_pubkey_signature", &opts.signature_file)?;
        let text = store.read(&opts.signature_file)?.ok_or_else(|| {
            Error::refused(format!(
                "master_use_pubkey_signature is set but the signature file {} is missing (salt-key --gen-signature writes it)",
                store.pki_dir.join(&opts.signature_file).display()
            ))
        })?;
        let clean = String::from_utf8(clean_key(&text)).map_err(|_| Error::refused(format!("the signature file {} is not text", opts.signature_file)))?;
        tracing::info!(file = %opts.signature_file, "auth replies carry the master public key's signature read from its file");
        return Ok(Some(Signer::Precomputed(clean)));
    }
    file_name("master_sign_key_name", &opts.key_name)?;
    let (pem, pubname) = (format!("{}.pem", opts.key_name), format!("{}.pub", opts.key_name));
    let key = match store.read(&pem)? {
        Some(found) => PrivateKey::from_pem(&found).map_err(|e| Error::refused(format!("the signing key {pem} does not parse: {e}")))?,
        None => {
            tracing::warn!(key = %pem, "no signing key pair found: generating a new 2048-bit pair; copy {pubname} to the minions' pki dir");
            let key = PrivateKey::generate(2048)?;
            store.write(&pem, &key.to_pem()?)?;
            store.write(&pubname, &key.public_pem()?)?;
            key
        }
    };
    tracing::info!(key = %pem, "auth replies carry the master public key's signature");
    Ok(Some(Signer::Key(key)))
}

#[cfg(test)]
#[path = "signing_tests.rs"]
mod tests;
