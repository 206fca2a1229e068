//! Offline access to a stopped master's data directory (its log and state machine):
//! only `halite-ctl` and the `--offline` forms of `salt-key` and `salt-run`, each under
//! the directory's owner lock (`halite_storage::dirlock`), taken without waiting. A
//! master running or starting holds that lock, so an offline tool is refused instead of
//! taking the log's or RocksDB's own lock from under it. Without `--offline`, the tools
//! only ever speak to the master's admin socket.

use halite_master::MasterConfig;
use halite_storage::dirlock::{Attempt, DirLock};

use crate::common::{Failure, Result};

/// What Salt's clients say when the master cannot be reached.
pub const NO_MASTER: &str = "The salt master could not be contacted. Is master running?";

/// [`NO_MASTER`], naming the explicit offline form when there is one (`hint`).
pub fn no_master(hint: Option<&str>) -> Failure {
    match hint {
        Some(h) => Failure::new(format!("{NO_MASTER}\n({h})"), 1),
        None => Failure::new(NO_MASTER, 1),
    }
}

/// Takes the data directory for `role` (`halite-ctl dump`, `salt-key --offline`), or
/// refuses: "the master (pid N) holds DIR: ...". `online` is how to do it through the
/// running master, if there is a way.
pub fn hold(cfg: &MasterConfig, role: &str, online: Option<&str>) -> Result<DirLock> {
    let dir = &cfg.halite_data_dir;
    match DirLock::try_acquire(dir, role)? {
        Attempt::Held(l) => {
            halite_storage::data_format::check(dir)?;
            Ok(l)
        }
        Attempt::Busy(Some(h)) if h.is_master() => {
            let alt = online.map(|o| format!("; {o}")).unwrap_or_default();
            Err(Failure::new(format!("{h} holds {}: `{role}` works only on a stopped master's data directory{alt}", dir.display()), 1))
        }
        Attempt::Busy(Some(h)) => Err(Failure::new(format!("{h} holds {}: try again once it has finished", dir.display()), 1)),
        Attempt::Busy(None) => Err(Failure::new(format!("another process holds {}: try again once it has finished", dir.display()), 1)),
    }
}
