//! What makes cluster members interchangeable to a minion: one key pair and one AES key.
//!
//! Salt's cluster hands every minion the cluster key (`cluster.pem`/`cluster.pub`) as the
//! master key and the cluster AES key both as the publish key and as the session key, so
//! a minion behind a load balancer may sign in on one member, send requests to another
//! and subscribe to a third. In Halite both secrets are records in the log
//! (`cluster_key_pair`, `aes_key_rotation`), set once per generation, so every member
//! applies exactly the same ones; the reference copies files and can diverge.
//!
//! At start a member waits until both are applied. The leader proposes what is missing:
//! the `cluster.pem` already in `cluster_pki_dir` if there is one (a shared-filesystem
//! cluster, or one migrated from Salt), otherwise a new 2048-bit pair, and a new AES key.
//! Every member's key view writes the applied pair to `cluster_pki_dir` as Salt keeps it
//! (`cluster.pem`, `cluster.pub`, mode 0400); nothing else writes those files.

use std::time::{Duration, Instant};

use halite_replication::Node;
use halite_storage::format::{now_ns, AesKeyRotation, ClusterKeyPair, Record};

use crate::daemon::live::Master;
use crate::config::MasterConfig;
use crate::error::{Error, Result};
use crate::masterkeys::MasterKeys;
use crate::wire::crypto::{Crypticle, PrivateKey};

/// The applied cluster secrets: the key pair, the publish/session key and its generation.
pub struct Secrets {
    pub keys: MasterKeys,
    pub aes: Crypticle,
    pub generation: u64,
}

fn read(node: &Node) -> Result<(Option<ClusterKeyPair>, Option<AesKeyRotation>)> {
    let sm = node.state();
    Ok((sm.cluster_key_pair()?, sm.latest_aes()?))
}

/// The publish key of an applied rotation record.
pub fn aes_of(a: &AesKeyRotation) -> Result<Crypticle> {
    let text = std::str::from_utf8(&a.key).map_err(|_| Error::refused(format!("AES key generation {} is not text", a.generation)))?;
    Ok(Crypticle::from_key_string(text)?)
}

/// Waits until the cluster key pair and an AES key are applied here, proposing them when
/// this member leads and they are missing. Logs while it waits (no quorum, no leader).
pub fn secrets(cfg: &MasterConfig, node: &Node) -> Result<Secrets> {
    let started = Instant::now();
    let mut last_note = Instant::now();
    let mut proposed_at: Option<Instant> = None;
    loop {
        let (pair, aes) = read(node)?;
        if let (Some(pair), Some(aes)) = (&pair, &aes) {
            let keys = MasterKeys::from_pem(&pair.private_pem).map_err(|e| Error::refused(format!("the cluster key pair in the log does not parse: {e}")))?;
            // The exact bytes of `cluster.pub` as the key view writes them.
            let public = halite_storage::keys::pair::public_pem_of(&pair.private_pem)?;
            if let Some(fp) = cfg.raw.get("cluster_pub_fingerprint").and_then(|v| v.as_str()) {
                let got = crate::wire::crypto::sha256_hex(&public);
                if !got.eq_ignore_ascii_case(fp.trim()) {
                    return Err(Error::refused(format!("the cluster key pair's cluster.pub has SHA-256 {got}, not the configured cluster_pub_fingerprint {fp}; refusing to serve")));
                }
            }
            tracing::info!(generation = aes.generation, waited_ms = started.elapsed().as_millis() as u64, "cluster key pair and AES key in place");
            return Ok(Secrets { keys, aes: aes_of(aes)?, generation: aes.generation });
        }
        let leading = node.leader() == Some(node.id());
        if leading && proposed_at.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
            let mut recs = Vec::new();
            if pair.is_none() {
                let pem = match std::fs::read(cfg.keys_dir().join("cluster.pem")) {
                    Ok(p) if PrivateKey::from_pem(&p).is_ok() => {
                        tracing::info!("proposing the cluster key pair found in {}", cfg.keys_dir().display());
                        p
                    }
                    _ => {
                        tracing::info!("generating the cluster key pair (2048-bit RSA)");
                        PrivateKey::generate(2048).and_then(|k| k.to_pem())?
                    }
                };
                recs.push(Record::ClusterKeyPair(ClusterKeyPair { private_pem: pem, time_ns: now_ns() }));
            }
            if aes.is_none() {
                recs.push(Record::AesKeyRotation(AesKeyRotation { generation: 1, key: Crypticle::generate().key_string().as_bytes().to_vec(), time_ns: now_ns() }));
            }
            proposed_at = Some(Instant::now());
            if let Err(e) = node.propose(&recs) {
                tracing::warn!("proposing the cluster secrets: {e}");
            }
            continue;
        }
        if last_note.elapsed() > Duration::from_secs(10) {
            last_note = Instant::now();
            tracing::warn!(leader = ?node.leader(), "waiting for the cluster (a leader, a quorum) to agree on the cluster key pair and AES key");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The record that replaces the AES key (generation `current + 1`).
pub fn rotation(current: u64, time_ns: u64) -> Record {
    Record::AesKeyRotation(AesKeyRotation { generation: current + 1, key: Crypticle::generate().key_string().as_bytes().to_vec(), time_ns })
}

/// Installs an AES key generation once applied (every member does the same; a lone
/// master keeps its key in its log the same way, `publish_key.rs`).
pub fn install_aes(m: &Master, a: &AesKeyRotation) {
    use std::sync::atomic::Ordering;
    if a.generation <= m.aes_generation.load(Ordering::SeqCst) {
        return;
    }
    match aes_of(a).and_then(|aes| m.install_publish_key(aes)) {
        Ok(()) => {
            m.aes_generation.store(a.generation, Ordering::SeqCst);
            if m.cluster {
                tracing::info!(generation = a.generation, "cluster AES key rotated");
            } else {
                tracing::info!(generation = a.generation, "publish AES key rotated");
            }
        }
        Err(e) => tracing::error!(generation = a.generation, "publish AES key not installed: {e}"),
    }
}
