//! Refusals on the cluster port: why a connection was closed, counted per reason and
//! logged at most once per source and reason per [`LOG_INTERVAL`].
//!
//! The replication crate sits below the master (which owns the process's metrics), so
//! the transport keeps its own counts ([`super::TcpTransport::refused`]); a process
//! that exports metrics installs [`set_hook`] to take over counting and logging.

use std::collections::HashMap;
use std::fmt::Display;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often the same refusal (source, reason) is logged at most.
pub const LOG_INTERVAL: Duration = Duration::from_secs(60);
/// Most (source, reason) pairs remembered for the rate limit; past it the memory is
/// cleared.
const MAX_REMEMBERED: usize = 10_000;

/// Why a connection or frame was refused: a short fixed word, and what happened.
#[derive(Debug)]
pub struct Refused {
    pub reason: &'static str,
    pub detail: String,
}

impl Refused {
    pub fn new(reason: &'static str, detail: impl Display) -> Self {
        Refused { reason, detail: detail.to_string() }
    }

    /// The peer closed the connection: not a refusal.
    pub fn closed() -> Self {
        Refused { reason: "closed", detail: String::new() }
    }
}

/// Where refusals go instead of the transport's own log: `(source, reason, detail)`.
pub type Hook = fn(&str, &'static str, &dyn Display);

static HOOK: OnceLock<Hook> = OnceLock::new();

/// Sends every cluster-port refusal of this process to `hook` (e.g. the master's
/// `metrics::refuse`); the first call wins. The transport's own counts still go up.
pub fn set_hook(hook: Hook) {
    let _ = HOOK.set(hook);
}

/// One transport's refusal counts and log rate limit.
#[derive(Default)]
pub struct Refusals {
    counts: Mutex<HashMap<&'static str, u64>>,
    logged: Mutex<HashMap<(String, &'static str), Instant>>,
}

impl Refusals {
    /// Counts `r` and logs it (rate-limited) against `source` (the peer's address).
    pub fn refuse(&self, source: &str, r: &Refused) {
        if matches!(r.reason, "closed" | "io") {
            tracing::debug!(%source, reason = r.reason, "peer connection ended: {}", r.detail);
            return;
        }
        *self.counts.lock().unwrap_or_else(|p| p.into_inner()).entry(r.reason).or_default() += 1;
        if let Some(hook) = HOOK.get() {
            return hook(source, r.reason, &r.detail);
        }
        let now = Instant::now();
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if logged.len() >= MAX_REMEMBERED {
            logged.clear();
        }
        let key = (source.to_string(), r.reason);
        if logged.get(&key).is_some_and(|t| now.duration_since(*t) < LOG_INTERVAL) {
            return;
        }
        logged.insert(key, now);
        tracing::warn!(%source, reason = r.reason, "cluster port: refused: {}", r.detail);
    }

    /// How many refusals for `reason` so far.
    pub fn count(&self, reason: &str) -> u64 {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).get(reason).copied().unwrap_or(0)
    }
}
