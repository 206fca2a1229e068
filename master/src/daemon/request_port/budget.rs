//! The memory budget of the requests in flight on `ret_port` (`halite_max_inflight_bytes`).
//!
//! At most [`crate::daemon::requests::MAX_IN_FLIGHT`] requests are handled at once, each up to
//! `halite_max_request_bytes`: 1,024 × 64 MiB would be 64 GiB. The budget bounds the
//! sum instead: every received message is charged its bytes (all its frames) before it
//! is handed to a handler and holds the charge until its reply is sent. When the budget
//! is spent, requests wait in the intake's bounded queue (`daemon::intake`) for charges
//! to come back; once that queue is full too, the request socket is not read: messages
//! stay in the kernel's socket buffers and TCP flow control holds the senders back
//! (Salt's minions retry a request that times out). One message larger than the whole
//! budget is charged the whole budget: it waits until nothing else is in flight, then
//! runs alone.
//!
//! So the request bodies held by the master at once are at most the budget plus the
//! intake's queue (`intake::MAX_WAITING_BYTES`, and one message past it while the reader
//! waits) (each connection's reader also holds its message in progress, bounded by the
//! transport: `daemon::sockets`).
//!
//! Metrics (registered in the process-wide registry the first time a budget is made):
//!
//! | metric | type | what |
//! |---|---|---|
//! | `halite_inflight_bytes` | gauge | bytes of requests being handled now |
//! | `halite_inflight_budget_bytes` | gauge | `halite_max_inflight_bytes` |
//! | `halite_inflight_waits_total` | counter | times a request waited because the budget was spent |

use std::sync::{Arc, LazyLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::metrics;

/// Charges are counted in units of this many bytes (tokio's semaphore counts in u32).
const UNIT: usize = 1024;

struct BudgetMetrics {
    inflight: Gauge,
    budget: Gauge,
    waits: Counter,
}

static METRICS: LazyLock<BudgetMetrics> = LazyLock::new(|| {
    let m = BudgetMetrics { inflight: Gauge::default(), budget: Gauge::default(), waits: Counter::default() };
    metrics().register("inflight_bytes", "Bytes of requests being handled on the request port", m.inflight.clone());
    metrics().register("inflight_budget_bytes", "Most bytes of requests handled at once (halite_max_inflight_bytes)", m.budget.clone());
    metrics().register("inflight_waits", "Times a request on the request port waited because the in-flight budget was spent", m.waits.clone());
    m
});

/// The budget; cloned handles share it.
#[derive(Clone)]
pub struct Budget {
    sem: Arc<Semaphore>,
    units: u32,
}

/// A request's charge, given back when dropped.
pub struct Charge {
    _permit: OwnedSemaphorePermit,
    bytes: usize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        METRICS.inflight.dec_by(self.bytes as i64);
    }
}

impl Budget {
    /// A budget of `bytes` (at least one unit).
    pub fn new(bytes: usize) -> Self {
        let units = bytes.div_ceil(UNIT).clamp(1, u32::MAX as usize >> 3) as u32;
        METRICS.budget.set((units as usize * UNIT) as i64);
        Budget { sem: Arc::new(Semaphore::new(units as usize)), units }
    }

    fn units_for(&self, bytes: usize) -> u32 {
        (bytes.div_ceil(UNIT).max(1)).min(self.units as usize) as u32
    }

    /// Charges `bytes` if the budget has them now.
    pub fn try_charge(&self, bytes: usize) -> Option<Charge> {
        let permit = self.sem.clone().try_acquire_many_owned(self.units_for(bytes)).ok()?;
        METRICS.inflight.inc_by(bytes as i64);
        Some(Charge { _permit: permit, bytes })
    }

    /// Charges `bytes`, waiting (and counting the wait) until the budget has them.
    /// `None` only if the budget was closed.
    pub async fn charge(&self, bytes: usize) -> Option<Charge> {
        if let Some(c) = self.try_charge(bytes) {
            return Some(c);
        }
        METRICS.waits.inc();
        tracing::debug!(bytes, "request in-flight budget spent: requests wait");
        let permit = self.sem.clone().acquire_many_owned(self.units_for(bytes)).await.ok()?;
        METRICS.inflight.inc_by(bytes as i64);
        Some(Charge { _permit: permit, bytes })
    }

    /// Bytes of the budget not charged now.
    pub fn available(&self) -> usize {
        self.sem.available_permits() * UNIT
    }
}

/// The bytes a received message is charged: every frame's.
pub fn message_bytes(msg: &zeromq::ZmqMessage) -> usize {
    msg.iter().map(|f| f.len()).sum()
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[test]
    fn charges_wait_while_the_budget_is_spent_and_resume_when_given_back() {
        let b = Budget::new(100 * UNIT);
        let waits = METRICS.waits.get();
        let first = b.try_charge(60 * UNIT).expect("room for the first");
        assert!(b.try_charge(60 * UNIT).is_none(), "no room for a second 60");
        // A second charge waits (the request port is not read meanwhile) ...
        let mut second = Box::pin(b.charge(60 * UNIT));
        assert!(second.as_mut().now_or_never().is_none());
        assert!(METRICS.waits.get() > waits, "the wait is counted");
        // ... and goes on once the first is given back.
        drop(first);
        let second = second.now_or_never().flatten().expect("charged once the first is back");
        assert_eq!(b.available(), 40 * UNIT);
        drop(second);
        assert_eq!(b.available(), 100 * UNIT);
    }

    #[test]
    fn a_message_larger_than_the_budget_runs_alone() {
        let b = Budget::new(10 * UNIT);
        let small = b.try_charge(1).expect("a tiny message");
        assert!(b.try_charge(1 << 20).is_none(), "the big one waits for the small one");
        drop(small);
        let big = b.try_charge(1 << 20).expect("alone, it is charged the whole budget");
        assert_eq!(b.available(), 0);
        assert!(b.try_charge(1).is_none());
        drop(big);
        assert_eq!(b.available(), 10 * UNIT);
    }

    #[test]
    fn in_flight_bytes_are_exported() {
        let b = Budget::new(1 << 20);
        let c = b.try_charge(12_345).unwrap();
        let text = crate::metrics::encode();
        assert!(text.contains("halite_inflight_bytes") && text.contains("halite_inflight_waits_total") && text.contains("halite_inflight_budget_bytes"), "{text}");
        drop(c);
    }
}
