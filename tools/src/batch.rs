//! `salt --batch` and salt-api's `local_batch`: the slots of a run driven from here are
//! the master's [`Slots`] (Salt's `progress_batch`, one bookkeeping for every batch, its
//! tests with it), on a [`Clock`] of this process. The driver (`bin/salt/batch.rs`,
//! `api/clients/batch.rs`) publishes what [`Slots::start`] hands it, one job per call,
//! and feeds back what returned and what did not in time.

use std::time::{Duration, Instant};

pub use halite_master::batch::{retcode, BatchSpec, Slots};

/// A run's time as [`Slots`] counts it: ns since the run began.
#[derive(Debug, Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    /// A clock from now.
    pub fn start() -> Clock {
        Clock(Instant::now())
    }

    /// `t` in ns since the start.
    pub fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.0).as_nanos().min(u64::MAX as u128) as u64
    }

    /// The instant `ns` after the start.
    pub fn at(&self, ns: u64) -> Instant {
        self.0 + Duration::from_nanos(ns)
    }
}

/// The slots of a run driven from here over `minions`: `size` at a time, a freed slot
/// held `wait`, halted by a failure with `failhard`. The driver reports timeouts itself
/// ([`Slots::timed_out`]: its follows end at the run's timeout), so it never sweeps and
/// the slots keep no timeout.
pub fn slots(minions: Vec<String>, size: usize, wait: Duration, failhard: bool) -> Slots {
    let wait_ms = wait.as_nanos().div_ceil(1_000_000).min(u64::MAX as u128) as u64;
    Slots::new(minions, size, failhard, wait_ms, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_and_a_sub_millisecond_batch_wait() {
        let c = Clock::start();
        let t = c.at(1_500);
        assert_eq!(c.ns(t), 1_500);
        assert_eq!(c.ns(Instant::now() - Duration::from_secs(1)), 0, "before the start is the start");
        assert_eq!(slots(vec![], 1, Duration::from_micros(300), false).batch_wait_ms, 1, "a batch wait is never dropped");
    }
}
