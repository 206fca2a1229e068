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
    let start = tokio::time::Instant::now();
    while m.node.leader().is_none() && start.elapsed() < FIRST_WAIT {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut schedule = Schedule::new(m.gitfs.remotes.iter().map(|r| (r.id.clone(), Duration::from_secs(r.update_interval))).collect(), tokio::time::Instant::now());
    loop {
        let (due, next) = schedule.due(tokio::time::Instant::now());
        if !due.is_empty() && m.node.leader() == Some(m.node.id()) {
            let mm = m.clone();
            let only = (due.len() < m.gitfs.remotes.len()).then_some(due);
            let cmd = Command::Fileserver(FileserverCmd::update_gitfs(only));
            match tokio::task::spawn_blocking(move || crate::daemon::admin::execute(&mm, cmd)).await {
                Ok(v) if v.get("error").is_some() => tracing::warn!("gitfs update: {}", v["error"]),
                Ok(_) => tracing::debug!("gitfs update done"),
                Err(e) => tracing::error!("gitfs update task: {e}"),
            }
        }
        tokio::time::sleep_until(next).await;
    }
}

/// When each remote is next read: every remote at once at the start, then each on its
/// own `update_interval` (Salt's per-remote intervals).
struct Schedule {
    remotes: Vec<(String, Duration, tokio::time::Instant)>,
}

impl Schedule {
    fn new(remotes: Vec<(String, Duration)>, now: tokio::time::Instant) -> Schedule {
        Schedule { remotes: remotes.into_iter().map(|(id, every)| (id, every.max(Duration::from_secs(1)), now)).collect() }
    }

    /// The remotes due at `now` (each then scheduled one interval on), and when the next
    /// one is due.
    fn due(&mut self, now: tokio::time::Instant) -> (Vec<String>, tokio::time::Instant) {
        let mut due = Vec::new();
        for (id, every, next) in &mut self.remotes {
            if *next <= now {
                due.push(id.clone());
                *next = now + *every;
            }
        }
        let next = self.remotes.iter().map(|r| r.2).min().unwrap_or(now + Duration::from_secs(60));
        (due, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_remote_is_read_on_its_own_interval() {
        let t0 = tokio::time::Instant::now();
        let mut s = Schedule::new(vec![("fast".into(), Duration::from_secs(2)), ("slow".into(), Duration::from_secs(5))], t0);
        let (due, next) = s.due(t0);
        assert_eq!((due, next), (vec!["fast".to_string(), "slow".into()], t0 + Duration::from_secs(2)), "both at the start");
        let at = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(s.due(at(2)), (vec!["fast".to_string()], at(4)));
        assert_eq!(s.due(at(4)), (vec!["fast".to_string()], at(5)));
        assert_eq!(s.due(at(5)), (vec!["slow".to_string()], at(6)));
        assert_eq!(s.due(at(5)).0, Vec::<String>::new(), "nothing twice");
    }
}
