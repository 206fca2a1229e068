//! `salt-key --gen-signature`: the signature of the master's public key, written where
//! Salt's `salt-key` writes it, for `master_use_pubkey_signature` (`super::signing`).
//!
//! As Salt 3008.5 does it:
//! - the public key is `--pub FILE`, else `pki_dir/master.pub`; the private key is
//!   `--priv FILE`, else `pki_dir/master_sign.pem` (that name, whatever
//!   `master_sign_key_name` says); with neither and `--auto-create`, a new pair
//!   `<master_sign_key_name>.pem`/`.pub` is made in `pki_dir` (`--keysize`, at least 2048);
//! - the signature is PKCS#1 v1.5 with SHA-1 (Salt's default `publish_signing_algorithm`,
//!   an option Halite does not implement) of the public key as SubjectPublicKeyInfo PEM in Salt's `clean_key` form (what a
//!   minion verifies), base64 with a trailing newline, in the file
//!   `master_pubkey_signature` names (unset: `<id>_pubkey_signature`) in `pki_dir`, or in
//!   `--signature-path`, mode 0400;
//! - an existing signature file is left alone and the answer is `False`.
//!
//! With a cluster (`cluster_id`), the default files are looked up in `cluster_pki_dir`,
//! as Salt's `salt-key` looks them up; the signature still goes to `pki_dir`.

use std::path::{Path, PathBuf};

use halite_storage::keys::localfs::LocalfsKeys;
use halite_storage::keys::KeyView;

use crate::config::MasterConfig;
use crate::error::{Error, Result};
use crate::wire::crypto::{clean_key, PrivateKey, PublicKey, SigAlgo};

/// What the command line asked for.
#[derive(Debug, Clone, Default)]
pub struct GenSignature {
    /// `--pub`: the public key to sign.
    pub public: Option<PathBuf>,
    /// `--priv`: the signing private key.
    pub private: Option<PathBuf>,
    /// `--signature-path`: the folder the signature file goes to.
    pub signature_path: Option<PathBuf>,
    /// `--auto-create`: make a signing pair when none is found.
    pub auto_create: bool,
    /// `--keysize` for a pair made by `auto_create`.
    pub keysize: Option<u32>,
}

/// What `--gen-signature` did: Salt prints it as `{"return": ...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The signature was written here.
    Written(PathBuf),
    /// The signature file exists already (Salt's `False`).
    Exists(PathBuf),
    /// A key was not found or not usable: Salt's message, as its `return`.
    Refused(String),
}

/// Runs `--gen-signature` for the master config `cfg`.
pub fn gen_signature(cfg: &MasterConfig, req: &GenSignature) -> Result<Outcome> {
    let key_dir = match (&cfg.cluster_id, &cfg.cluster_pki_dir) {
        (Some(_), Some(d)) => d.clone(),
        _ => cfg.pki_dir.clone(),
    };
    let public = match &req.public {
        Some(p) if !p.is_file() => return Ok(Outcome::Refused(format!("Public-key {} does not exist", p.display()))),
        Some(p) => Some(p.clone()),
        None => Some(key_dir.join("master.pub")).filter(|p| p.is_file()),
    };
    let private = match &req.private {
        Some(p) if !p.is_file() => return Ok(Outcome::Refused(format!("Private-key {} does not exist", p.display()))),
        Some(p) => Some(p.clone()),
        None => Some(key_dir.join("master_sign.pem")).filter(|p| p.is_file()),
    };
    // Salt signs with `publish_signing_algorithm`, which Halite does not implement (named
    // at start at another value): its default.
    let algo = SigAlgo::Pkcs1v15Sha1;
    let name = cfg.master_pubkey_signature.clone().unwrap_or_else(|| format!("{}_pubkey_signature", cfg.id));
    if name.contains('/') {
        return Err(Error::refused(format!("master_pubkey_signature: {name:?} must be a file name, not a path")));
    }
    halite_storage::id::validate_relative_path(&name).map_err(|e| Error::refused(format!("master_pubkey_signature: {e}")))?;
    let key = match private {
        Some(p) => PrivateKey::from_pem(&read(&p)?).map_err(|e| Error::refused(format!("the private key {} does not parse: {e}", p.display())))?,
        None if req.auto_create => make_pair(&cfg.pki_dir, &cfg.master_sign_key_name, req.keysize)?,
        None => return Ok(Outcome::Refused("No usable private-key found".into())),
    };
    let Some(public) = public else { return Ok(Outcome::Refused("No usable public-key found".into())) };
    let public = PublicKey::from_pem(&read(&public)?).map_err(|e| Error::refused(format!("the public key {} does not parse: {e}", public.display())))?;
    let dir = req.signature_path.clone().unwrap_or_else(|| cfg.pki_dir.clone());
    let target = dir.join(&name);
    if target.exists() {
        tracing::error!(file = %target.display(), "the signature file exists already; remove it to make a new one");
        return Ok(Outcome::Exists(target));
    }
    let signed = sign(&key, &public, algo)?;
    let mut files = LocalfsKeys::open(&dir)?;
    files.set_master_key(&name, &signed)?;
    files.sync()?;
    Ok(Outcome::Written(target))
}

/// The signature file's bytes: base64 of the PKCS#1 v1.5 signature of `public` (its
/// SubjectPublicKeyInfo PEM in `clean_key` form), and a newline.
pub fn sign(key: &PrivateKey, public: &PublicKey, algo: SigAlgo) -> Result<Vec<u8>> {
    use base64::Engine;
    let pem = clean_key(&public.to_pem()?);
    let mut out = base64::engine::general_purpose::STANDARD.encode(key.sign(&pem, algo)?).into_bytes();
    out.push(b'\n');
    Ok(out)
}

fn read(p: &Path) -> Result<Vec<u8>> {
    std::fs::read(p).map_err(|e| Error::io(format!("reading {}", p.display()), e))
}

/// A new signing pair `<name>.pem`/`.pub` in `pki_dir` (Salt replaces one there).
fn make_pair(pki_dir: &Path, name: &str, keysize: Option<u32>) -> Result<PrivateKey> {
    if name.contains('/') || name.is_empty() {
        return Err(Error::refused(format!("master_sign_key_name: {name:?} must be a file name, not a path")));
    }
    let bits = keysize.unwrap_or(2048).clamp(2048, 16384);
    tracing::info!(pair = name, bits, dir = %pki_dir.display(), "making a new signing key pair");
    let key = PrivateKey::generate(bits)?;
    let mut files = LocalfsKeys::open(pki_dir)?;
    files.set_master_key(&format!("{name}.pem"), &key.to_pem()?)?;
    files.set_master_key(&format!("{name}.pub"), &key.public_pem()?)?;
    files.sync()?;
    Ok(key)
}

#[cfg(test)]
#[path = "gen_signature_tests.rs"]
mod tests;
