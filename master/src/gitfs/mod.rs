//! The gitfs file server backend: Salt's `gitfs` (`salt/fileserver/gitfs.py`) over
//! local git repositories read in process with gitoxide, its tree carried through the
//! log. See `README.md` beside this file.
//!
//! | file | concept |
//! |---|---|
//! | [`config`] | `gitfs_remotes`, per-remote options and the global `gitfs_*` defaults |
//! | [`saltenv`] | refs → saltenvs, a saltenv's ref, root and mountpoint, whitelist and blacklist |
//! | [`repo`] | one repository read with `gix`: refs, commits, trees, blobs, each bounded |
//! | [`bounds`] | the bounds on objects, files and bytes of one update |
//! | [`fetch`] | one update's reads of every remote |
//! | [`plan`] | an update as `roots_stage` / `roots_sync` records of the `gitfs` tree |
//! | [`serve`] | the applied gitfs tree as what minions are served |
//! | [`backends`] | `fileserver_backend`: which backends serve, in order |
//! | [`error`] | [`GitfsError`] |

pub mod backends;
pub mod bounds;
pub mod config;
pub mod error;
pub mod fetch;
pub mod plan;
pub mod repo;
pub mod saltenv;
pub mod serve;

pub use backends::Backend;
pub use config::GitfsConfig;
pub use error::GitfsError;

use std::sync::{LazyLock, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub remote: String,
    pub reason: String,
}

/// `halite_gitfs_fetch_failures_total{remote, reason}`: reads of a remote that failed
/// (its last fetched files stay served).
pub static FETCH_FAILURES: LazyLock<Family<FailureLabels, Counter>> = LazyLock::new(|| {
    let f = Family::<FailureLabels, Counter>::default();
    crate::metrics::metrics().register("gitfs_fetch_failures", "Reads of a gitfs remote that failed; its last fetched files stay served", f.clone());
    f
});

/// `halite_gitfs_updates_total`: gitfs updates that read every remote.
pub static UPDATES: LazyLock<Counter> = LazyLock::new(|| {
    let c = Counter::default();
    crate::metrics::metrics().register("gitfs_updates", "gitfs updates run (each reads every remote)", c.clone());
    c
});

/// One update at a time on this master.
static UPDATE_LOCK: Mutex<()> = Mutex::new(());

/// Reads the remotes `only` names (every remote with `None`) for one update (I/O),
/// counting the failures.
pub fn fetch(cfg: &GitfsConfig, only: Option<&[String]>) -> fetch::Fetched {
    let _one = UPDATE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let fetched = fetch::fetch_some(cfg, only);
    UPDATES.inc();
    for (r, got) in cfg.remotes.iter().zip(&fetched.remotes) {
        if let Err(e) = got {
            if matches!(e, GitfsError::NotRead) {
                continue;
            }
            FETCH_FAILURES.get_or_create(&FailureLabels { remote: r.id.clone(), reason: e.reason().to_string() }).inc();
        }
    }
    fetched
}

/// Registers the gitfs metrics (at start, so they show before the first update).
pub fn register_metrics() {
    LazyLock::force(&FETCH_FAILURES);
    LazyLock::force(&UPDATES);
}

#[cfg(test)]
mod tests;
