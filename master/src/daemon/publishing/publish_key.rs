//! A lone master's publish (AES) key, kept across restarts.
//!
//! Salt makes a new publish key at every master start, so after a restart every
//! connected minion fails to decrypt its next publish (or hears "bad load") and signs in
//! again: one RSA `_auth` per minion, all at once. A lone Halite master keeps the key as
//! a cluster does: an `aes_key_rotation` record in its own log (set once per generation,
//! decided at apply), so after a restart its minions only reconnect.
//!
//! A new generation is written when Salt would change the key while running: a key
//! rejected or deleted (`rotate_aes_key`, [`rotate_aes`]), and when the key
//! is older than `publish_session` seconds (checked at start and every maintenance
//! round), Salt's bound on a publish key's life. The log and the state store live in the
//! master's own state directory, readable only by the master's user, as Salt's
//! `master.pem` is.

use std::sync::atomic::Ordering;

use halite_replication::Node;
use halite_storage::format::{now_ns, AesKeyRotation};

use crate::daemon::live::Master;
use crate::config::MasterConfig;
use crate::error::{Error, Result};
use crate::view::View;
use crate::wire::crypto::Crypticle;

/// Whether a key generation written at `time_ns` has outlived `publish_session` seconds at `now`.
pub fn expired(publish_session: u64, a: &AesKeyRotation, now: u64) -> bool {
    let life = publish_session.max(1).saturating_mul(1_000_000_000);
    now.saturating_sub(a.time_ns) >= life
}

/// The lone master's publish key and generation at start: the newest applied
/// generation if it has not outlived `publish_session`, otherwise a new generation
/// committed first.
pub fn at_start(cfg: &MasterConfig, node: &Node) -> Result<(Crypticle, u64)> {
    let latest = node.state().latest_aes()?;
    // Salt's behaviour on request (`halite_new_publish_key_at_start`), for comparisons.
    let fresh = cfg.raw.get("halite_new_publish_key_at_start").and_then(serde_yaml::Value::as_bool).unwrap_or(false);
    match &latest {
        Some(a) if fresh => tracing::info!(generation = a.generation, "halite_new_publish_key_at_start: replacing the publish AES key"),
        Some(a) if !expired(cfg.publish_session, a, now_ns()) => {
            tracing::info!(generation = a.generation, "publish AES key kept from the last run");
            return Ok((crate::daemon::cluster::aes_of(a)?, a.generation));
        }
        Some(a) => tracing::info!(generation = a.generation, "publish AES key older than publish_session: replacing it"),
        None => tracing::info!("no publish AES key in the log: making one"),
    }
    let current = latest.as_ref().map_or(0, |a| a.generation);
    node.propose(&[crate::daemon::cluster::rotation(current, now_ns())])?;
    match node.state().latest_aes()? {
        Some(a) if a.generation > current => Ok((crate::daemon::cluster::aes_of(&a)?, a.generation)),
        _ => Err(Error::refused("a publish AES key was proposed but is not applied")),
    }
}

/// A maintenance round's check: proposes a new generation when the lone master's key
/// has outlived `publish_session` (the applied record installs it, `cluster::install_aes`).
pub fn rotate_if_old(m: &Master) {
    if m.cluster {
        return;
    }
    let current = m.aes_generation.load(Ordering::SeqCst);
    match m.sm().latest_aes() {
        Ok(Some(a)) if a.generation == current && expired(m.cfg.publish_session, &a, now_ns()) => {
            tracing::info!(generation = current, "publish AES key older than publish_session: rotating");
            rotate_aes(m);
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot read the publish AES key: {e}"),
    }
}

/// Replaces the publish AES key. Connected minions learn the new one by
/// re-authenticating when a publish fails to decrypt, as salt-minion does. The new key is the
/// next generation's record (a cluster's and a lone master's alike),
/// installed when it applies; if two rotations race for a generation the first
/// committed wins everywhere.
pub fn rotate_aes(m: &Master) {
    let current = m.aes_generation.load(Ordering::SeqCst);
    if let Err(e) = m.node.propose(&[crate::daemon::cluster::rotation(current, m.now_ns())]) {
        tracing::error!("publish AES key rotation not committed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_expires_after_publish_session() {
        let a = AesKeyRotation { generation: 1, key: vec![], time_ns: 5_000_000_000 };
        assert!(!expired(10, &a, 14_999_999_999));
        assert!(expired(10, &a, 15_000_000_000));
        // A clock set back never makes a key expire.
        assert!(!expired(10, &a, 1));
    }
}
