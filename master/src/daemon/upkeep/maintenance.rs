//! Salt's maintenance loop: every `loop_interval` seconds (default 60) the job cache is
//! expired (`keep_jobs_seconds`) by committing a `jobs_expired` record, and a lone
//! master's publish key older than `publish_session` is replaced (`publish_key.rs`).

use std::sync::Arc;

use crate::daemon::live::Master;
use crate::config::MasterConfig;

/// Salt's `loop_interval` (seconds between maintenance rounds, default 60).
pub fn loop_interval(cfg: &MasterConfig) -> u64 {
    cfg.raw.get("loop_interval").and_then(serde_yaml::Value::as_u64).unwrap_or(60).max(1)
}

/// Runs the maintenance rounds forever.
pub async fn run(m: Arc<Master>) {
    let every = std::time::Duration::from_secs(loop_interval(&m.cfg));
    loop {
        tokio::time::sleep(every).await;
        {
            let m = m.clone();
            let _ = tokio::task::spawn_blocking(move || crate::daemon::publish_key::rotate_if_old(&m)).await;
        }
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
