//! git_pillar updates on a timer (`git_pillar_update_interval`, Salt's default 60 s):
//! the member that leads the raft group (a lone master leads its own) runs
//! `git_pillar.update`, which reads the remotes and commits what changed through the
//! log; every member compiles pillar from what the log carries. The first update runs as
//! soon as a leader is known after start. The `ext_pillar` and pillar merge options
//! Halite does not implement are named in warnings here, at start.

use std::sync::Arc;
use std::time::Duration;

use crate::admin::git_pillar::GitPillarUpdate;
use crate::admin::Command;
use crate::daemon::live::Master;
use crate::pillar::ext::ExtPillarConfig;

/// How long the first update waits for a leader to be known.
const FIRST_WAIT: Duration = Duration::from_secs(30);

/// Runs the updates forever (returns at once when no git_pillar remote is configured).
pub async fn run(m: Arc<Master>) {
    let ext = ExtPillarConfig::from_raw(&m.cfg.raw);
    let mut warnings = ext.warnings.clone();
    crate::pillar::merge::MergeOpts::from_raw(&m.cfg.raw, &mut warnings);
    for w in &warnings {
        tracing::warn!("ext_pillar: {w}");
    }
    if ext.git.remotes.is_empty() {
        return;
    }
    crate::gitfs::register_metrics();
    let every = Duration::from_secs(ext.git.update_interval);
    let start = tokio::time::Instant::now();
    while m.node.leader().is_none() && start.elapsed() < FIRST_WAIT {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    loop {
        if m.node.leader() == Some(m.node.id()) {
            let mm = m.clone();
            let cmd = Command::GitPillarUpdate(GitPillarUpdate::default());
            match tokio::task::spawn_blocking(move || crate::daemon::admin::execute(&mm, cmd)).await {
                Ok(v) if v.get("error").is_some() => tracing::warn!("git_pillar update: {}", v["error"]),
                Ok(_) => tracing::debug!("git_pillar update done"),
                Err(e) => tracing::error!("git_pillar update task: {e}"),
            }
        }
        tokio::time::sleep(every).await;
    }
}
