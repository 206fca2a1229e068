//! gitfs updates on a timer (`gitfs_update_interval`, Salt's default 60 s): the member
//! that leads the raft group (a lone master leads its own) runs `fileserver.update` for
//! gitfs, which reads the remotes and commits what changed through the log; the other
//! members serve what the log carries. A new leader takes over at its next tick. The
//! first update runs as soon as a leader is known after start.

use std::sync::Arc;
use std::time::Duration;

use crate::admin::fileserver::FileserverCmd;
use crate::admin::Command;
use crate::daemon::live::Master;
use crate::gitfs::Backend;

/// How long the first update waits for a leader to be known.
const FIRST_WAIT: Duration = Duration::from_secs(30);

/// Runs the updates forever (returns at once when gitfs is not served).
pub async fn run(m: Arc<Master>) {
    if !m.backends.contains(&Backend::Gitfs) {
        return;
    }
    for w in &m.gitfs.warnings {
        tracing::warn!("gitfs: {w}");
    }
    if !m.gitfs.enabled() {
        return;
    }
    crate::gitfs::register_metrics();
    let every = Duration::from_secs(m.gitfs.update_interval);
    let start = tokio::time::Instant::now();
    while m.node.leader().is_none() && start.elapsed() < FIRST_WAIT {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    loop {
        if m.node.leader() == Some(m.node.id()) {
            let mm = m.clone();
            let cmd = Command::Fileserver(FileserverCmd::update_gitfs());
            match tokio::task::spawn_blocking(move || crate::daemon::admin::execute(&mm, cmd)).await {
                Ok(v) if v.get("error").is_some() => tracing::warn!("gitfs update: {}", v["error"]),
                Ok(_) => tracing::debug!("gitfs update done"),
                Err(e) => tracing::error!("gitfs update task: {e}"),
            }
        }
        tokio::time::sleep(every).await;
    }
}
