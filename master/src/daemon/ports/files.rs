//! Open files: the master's connections never take the descriptors its own files need.
//!
//! A master holds two connections per minion (publish and request), so its fleet is
//! bounded by `RLIMIT_NOFILE`. Out of descriptors, nothing of the master's own works:
//! RocksDB cannot open the table it flushes to, the log cannot rotate, the admin
//! socket cannot accept. (Without the measures below, 8,000 simulated minions
//! reconnecting after a restart, with a 20,000-file limit, end the raft node on
//! "Too many open files" from a RocksDB flush.)
//!
//! So, as Salt does at start, the soft limit is raised to `max_open_files` (Salt's
//! option, default 100,000) or the hard limit if that is lower; then the request and
//! publish ports close at once any accepted connection whose descriptor number is in
//! the top [`RESERVED`] of the limit (`SocketOptions::accept_fd_limit` in the patched
//! `zeromq` crate; counted as `halite_refused_total{reason="too_many_connections"}`).
//! Descriptors are allocated lowest first, so those stay free for the master's files:
//! RocksDB (at most [`halite_storage`]'s bound of open tables), the raft log, session
//! keys, views, the admin and health sockets and peer connections. A refused minion
//! retries on its reconnect interval, as it would against a full Salt master.

use std::sync::OnceLock;

/// Descriptors kept for the master's own files.
pub const RESERVED: u64 = 1024;

/// Salt's default `max_open_files`.
pub const DEFAULT_MAX_OPEN_FILES: u64 = 100_000;

static LIMIT: OnceLock<u64> = OnceLock::new();

/// Raises the soft `RLIMIT_NOFILE` towards `max_open_files` (never above the hard
/// limit), as salt-master does, and fixes the connection limit from the result.
/// Returns `(soft limit, connection limit)`.
pub fn raise_limit(max_open_files: u64) -> (u64, u64) {
    let soft = match nofile() {
        Some(mut rl) => {
            let want = max_open_files.min(rl.rlim_max as u64);
            if want > rl.rlim_cur as u64 {
                let raised = libc::rlimit { rlim_cur: want as libc::rlim_t, rlim_max: rl.rlim_max };
                // SAFETY: setrlimit only reads the struct passed.
                if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                    rl.rlim_cur = raised.rlim_cur;
                } else {
                    tracing::warn!("cannot raise the open-file limit to {want}: {}", std::io::Error::last_os_error());
                }
            }
            if max_open_files > rl.rlim_max as u64 {
                tracing::info!("max_open_files {max_open_files} is above the hard limit {}; using {}", rl.rlim_max, rl.rlim_cur);
            }
            rl.rlim_cur as u64
        }
        None => UNKNOWN_LIMIT,
    };
    let limit = *LIMIT.get_or_init(|| limit_for(soft));
    tracing::info!(open_files = soft, connections_below_descriptor = limit, "open-file limit");
    (soft, limit)
}

/// The descriptor number at and above which an accepted connection is closed.
pub fn limit_for(soft: u64) -> u64 {
    // Half the limit at least, however small it is: a master under a tiny limit still
    // takes connections.
    soft.saturating_sub(RESERVED).max(soft / 2)
}

/// The limit fixed by [`raise_limit`] (or computed from the current limit if it was not
/// called, as in unit tests).
pub fn connection_fd_limit() -> u64 {
    *LIMIT.get_or_init(|| limit_for(nofile().map_or(UNKNOWN_LIMIT, |rl| rl.rlim_cur as u64)))
}

/// Assumed when `getrlimit` fails.
const UNKNOWN_LIMIT: u64 = 4096;

/// The process's `RLIMIT_NOFILE`.
fn nofile() -> Option<libc::rlimit> {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct passed.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0).then_some(rl)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_reserve_is_kept_below_the_limit() {
        assert_eq!(super::limit_for(20_000), 20_000 - super::RESERVED);
        assert_eq!(super::limit_for(1024), 512, "a small limit keeps half for connections");
        assert_eq!(super::limit_for(0), 0);
    }
}
