//! Salt's probe files: `startup`, `ready` and `alive` under `cachedir/health/`, for
//! supervisors that probe by file (a Kubernetes `exec` probe, a systemd wait).
//!
//! As Salt 3008.5 does: the directory is emptied at start (a file left by the last run
//! must not pass a probe); `startup` is written once the ports are open and `ready`
//! once the master serves minions, each holding the Unix time in seconds it was written
//! (written to a temp name, then renamed); `alive` is touched every
//! [`ALIVE_INTERVAL`] while the process runs. Every write is best effort: a failure is
//! logged and never stops the master.
//!
//! Where Halite differs, on purpose:
//! - `ready` follows readiness both ways: it is removed when the member falls behind or
//!   loses its leader (`replication/src/node/status.rs`) and written again once it has
//!   caught up; Salt writes it once.
//! - Cluster members that share `cachedir` (`cluster_id` set and
//!   `cluster_isolated_filesystem` false) each use `cachedir/health/<member>/`, `<member>`
//!   being its `id` (its interface address by default), so one member's files never
//!   speak for another.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::MasterConfig;

/// How often `alive` is touched (Salt's interval).
pub const ALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// This master's probe directory.
#[derive(Debug, Clone)]
pub struct Probes {
    dir: PathBuf,
}

impl Probes {
    /// The directory for `cfg`: `cachedir/health`, or `cachedir/health/<member>` for a
    /// cluster member on a shared `cachedir`.
    pub fn dir_of(cfg: &MasterConfig) -> PathBuf {
        let base = cfg.cachedir.join("health");
        if cfg.cluster_id.is_some() && !cfg.cluster_isolated_filesystem {
            base.join(cfg.node_id())
        } else {
            base
        }
    }

    /// Empties (or makes) this master's probe directory. Only the three probe files
    /// and their temp files are removed, so a shared `health/` keeps other members'.
    pub fn reset(cfg: &MasterConfig) -> Probes {
        let dir = Self::dir_of(cfg);
        for name in ["startup", "ready", "alive", "startup.tmp", "ready.tmp"] {
            let _ = std::fs::remove_file(dir.join(name));
        }
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::warn!(dir = %dir.display(), "health probes: cannot make the directory: {e}");
        }
        Probes { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `startup`.
    pub fn startup(&self) {
        self.write("startup");
        tracing::info!(dir = %self.dir.display(), "health probes: startup written");
    }

    /// Writes `ready` (if absent) or removes it.
    pub fn set_ready(&self, ready: bool) {
        let p = self.dir.join("ready");
        match (ready, p.exists()) {
            (true, false) => {
                self.write("ready");
                tracing::info!(dir = %self.dir.display(), "health probes: ready written");
            }
            (false, true) => {
                if let Err(e) = std::fs::remove_file(&p) {
                    tracing::warn!(file = %p.display(), "health probes: cannot remove: {e}");
                } else {
                    tracing::info!(dir = %self.dir.display(), "health probes: ready removed (not caught up with the cluster)");
                }
            }
            _ => {}
        }
    }

    /// Makes `alive`'s modification time now.
    pub fn touch_alive(&self) {
        let p = self.dir.join("alive");
        let r = std::fs::OpenOptions::new().create(true).append(true).open(&p).and_then(|f| f.set_modified(SystemTime::now()));
        if let Err(e) = r {
            tracing::warn!(file = %p.display(), "health probes: cannot touch: {e}");
        }
    }

    fn write(&self, name: &str) {
        let p = self.dir.join(name);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let r = std::fs::create_dir_all(&self.dir).and_then(|()| std::fs::write(&tmp, now.to_string())).and_then(|()| std::fs::rename(&tmp, &p));
        if let Err(e) = r {
            tracing::warn!(file = %p.display(), "health probes: cannot write: {e}");
        }
    }
}

/// Keeps the probe files current while the master runs: `ready` follows `ready()`
/// (checked every second), `alive` is touched every [`ALIVE_INTERVAL`].
pub async fn run(probes: Probes, ready: impl Fn() -> bool) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut n: u64 = 0;
    loop {
        tick.tick().await;
        let now_ready = ready();
        if now_ready {
            crate::metrics::settled();
        }
        probes.set_ready(now_ready);
        if n % ALIVE_INTERVAL.as_secs() == 0 {
            probes.touch_alive();
        }
        n += 1;
    }
}
