//! Salt's maintenance loop: every `loop_interval` seconds (default 60) the job cache is
//! expired (`keep_jobs_seconds`) by committing a `jobs_expired` record; and the publish
//! key rotation Salt performs when a key is rejected or deleted (`rotate_aes_key`).

use std::sync::Arc;

use super::live::Master;
use crate::config::MasterConfig;
use crate::view::View;
use crate::wire::crypto::Crypticle;

/// Salt's `loop_interval` (seconds between maintenance rounds, default 60).
pub fn loop_interval(cfg: &MasterConfig) -> u64 {
    cfg.raw.get("loop_interval").and_then(serde_yaml::Value::as_u64).unwrap_or(60).max(1)
}

/// Runs the maintenance rounds forever.
pub async fn run(m: Arc<Master>) {
    let every = std::time::Duration::from_secs(loop_interval(&m.cfg));
    loop {
        tokio::time::sleep(every).await;
        let Some(rec) = crate::jobs::expiry_due(m.sm(), m.cfg.keep_jobs_seconds) else { continue };
        match m.node.propose_async(std::slice::from_ref(&rec)) {
            Ok(p) => match p.committed().await {
                Ok(_) => tracing::info!(?rec, "job cache expired"),
                Err(e) => tracing::warn!("job cache expiry not committed: {e}"),
            },
            Err(e) => tracing::warn!("job cache expiry not proposed: {e}"),
        }
    }
}

/// Replaces the publish AES key. Connected minions learn the new one by
/// re-authenticating when a publish fails to decrypt (spec §10). In a cluster the new
/// key is a record every member installs when it applies it.
pub fn rotate_aes(m: &Master) {
    if m.cluster {
        let current = m.aes_generation.load(std::sync::atomic::Ordering::SeqCst);
        if let Err(e) = m.node.propose(&[super::cluster::rotation(current, m.now_ns())]) {
            tracing::error!("cluster AES key rotation not committed: {e}");
        }
        return;
    }
    match m.install_publish_key(Crypticle::generate()) {
        Ok(()) => tracing::info!("publish AES key rotated"),
        Err(e) => tracing::error!("publish AES key not rotated: {e}"),
    }
}
