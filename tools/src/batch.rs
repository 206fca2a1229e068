//! `salt --batch`: the arithmetic and the bookkeeping of a batch run, without I/O.
//!
//! Salt's semantics: the targets are resolved once, at the start (the minions that
//! answer a `test.ping`); at most `size` of them run at a time; each return frees its
//! slot, but with `--batch-wait S` only S seconds after it came; a minion that does not
//! return within the timeout frees its slot the same way; with `--failhard` the first
//! return with a non-zero retcode (or `failed`) stops the run: nothing more is started,
//! and the run ends at once. The driver (`bin/salt/batch.rs`) publishes what [`Batch::start`]
//! hands it, one job per call, and feeds back what returned.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

pub use halite_master::batch::{retcode, BatchSpec};

/// A batch run's bookkeeping.
#[derive(Debug)]
pub struct Batch {
    size: usize,
    wait: Duration,
    failhard: bool,
    pending: VecDeque<String>,
    active: BTreeSet<String>,
    /// When the slots held by `--batch-wait` free up.
    cooling: Vec<Instant>,
    halted: bool,
}

impl Batch {
    /// A run over `minions` (in the order they are started), `size` at a time.
    pub fn new(minions: Vec<String>, size: usize, wait: Duration, failhard: bool) -> Batch {
        Batch { size: size.max(1), wait, failhard, pending: minions.into(), active: BTreeSet::new(), cooling: Vec::new(), halted: false }
    }

    /// The minions to start now (none once halted, or while every slot is busy).
    pub fn start(&mut self, now: Instant) -> Vec<String> {
        self.cooling.retain(|t| *t > now);
        let mut out = Vec::new();
        if self.halted {
            return out;
        }
        while self.active.len() + self.cooling.len() < self.size {
            let Some(m) = self.pending.pop_front() else { break };
            self.active.insert(m.clone());
            out.push(m);
        }
        out
    }

    /// `id` returned with `retcode`; false if it was not running (a duplicate).
    pub fn returned(&mut self, id: &str, retcode: i64, now: Instant) -> bool {
        if !self.active.remove(id) {
            return false;
        }
        self.free(now);
        if self.failhard && retcode > 0 {
            self.halted = true;
        }
        true
    }

    /// `id` did not return in time: its slot frees, failhard is not tripped.
    pub fn timed_out(&mut self, id: &str, now: Instant) {
        if self.active.remove(id) {
            self.free(now);
        }
    }

    fn free(&mut self, now: Instant) {
        if !self.wait.is_zero() {
            self.cooling.push(now + self.wait);
        }
    }

    /// Stopped by `--failhard`.
    pub fn halted(&self) -> bool {
        self.halted
    }

    /// Nothing left to start or to wait for (or halted).
    pub fn done(&self) -> bool {
        self.halted || (self.pending.is_empty() && self.active.is_empty())
    }

    /// When a `--batch-wait` slot frees next, if minions are waiting for one.
    pub fn next_free(&self) -> Option<Instant> {
        if self.pending.is_empty() || self.halted {
            return None;
        }
        self.cooling.iter().min().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ids(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("m{i}")).collect()
    }

    #[test]
    fn specs_parse_as_salt_reads_them() {
        assert_eq!("3".parse(), Ok(BatchSpec::Count(3)));
        assert_eq!("25%".parse(), Ok(BatchSpec::Percent(25.0)));
        assert_eq!("%10".parse(), Ok(BatchSpec::Percent(10.0)));
        for bad in ["", "x", "-3", "1.5", "0%", "-5%", "nan%", "%"] {
            assert!(bad.parse::<BatchSpec>().is_err(), "{bad}");
        }
        assert!("x".parse::<BatchSpec>().unwrap_err().starts_with("Invalid batch data sent: x"));
    }

    #[test]
    fn sizes_follow_salts_rounding() {
        assert_eq!(BatchSpec::Count(3).size(10), 3);
        assert_eq!(BatchSpec::Count(0).size(10), 1, "at least one");
        assert_eq!(BatchSpec::Count(50).size(10), 50, "a count larger than the target is kept; it starts all");
        assert_eq!(BatchSpec::Percent(25.0).size(10), 2, "2.5 rounds down");
        assert_eq!(BatchSpec::Percent(34.0).size(3), 1, "1.02 rounds down");
        assert_eq!(BatchSpec::Percent(10.0).size(3), 1, "below one is one");
        assert_eq!(BatchSpec::Percent(50.0).size(0), 1);
        assert_eq!(BatchSpec::Percent(100.0).size(7), 7);
        assert_eq!(BatchSpec::Percent(250.0).size(4), 10);
    }

    #[test]
    fn retcodes_as_salt_counts_them() {
        assert_eq!(retcode(&json!({"return": true, "retcode": 0})), 0);
        assert_eq!(retcode(&json!({"return": "x", "retcode": 2})), 2);
        assert_eq!(retcode(&json!({"return": {}, "retcode": {"a": 0, "b": 3}})), 3);
        assert_eq!(retcode(&json!({"return": false})), 0, "only the retcode counts");
        assert_eq!(retcode(&json!({"return": "x"})), 0);
    }

    #[test]
    fn one_at_a_time_in_order() {
        let t = Instant::now();
        let mut b = Batch::new(ids(3), 1, Duration::ZERO, false);
        assert_eq!(b.start(t), vec!["m1"]);
        assert!(b.start(t).is_empty(), "the slot is busy");
        assert!(!b.returned("m2", 0, t), "not running");
        assert!(b.returned("m1", 1, t), "a failure without failhard goes on");
        assert_eq!(b.start(t), vec!["m2"]);
        b.timed_out("m2", t);
        assert_eq!(b.start(t), vec!["m3"]);
        assert!(!b.done());
        assert!(b.returned("m3", 0, t));
        assert!(b.done() && !b.halted());
    }

    #[test]
    fn slots_refill_as_returns_come() {
        let t = Instant::now();
        let mut b = Batch::new(ids(5), 2, Duration::ZERO, false);
        assert_eq!(b.start(t), vec!["m1", "m2"]);
        b.returned("m2", 0, t);
        assert_eq!(b.start(t), vec!["m3"], "one slot freed, one minion started");
    }

    #[test]
    fn batch_wait_holds_a_freed_slot() {
        let t = Instant::now();
        let mut b = Batch::new(ids(3), 1, Duration::from_secs(2), false);
        assert_eq!(b.start(t), vec!["m1"]);
        b.returned("m1", 0, t);
        assert!(b.start(t + Duration::from_secs(1)).is_empty(), "still cooling");
        assert_eq!(b.next_free(), Some(t + Duration::from_secs(2)));
        assert_eq!(b.start(t + Duration::from_secs(2)), vec!["m2"]);
    }

    #[test]
    fn failhard_stops_at_the_first_failure() {
        let t = Instant::now();
        let mut b = Batch::new(ids(4), 2, Duration::ZERO, true);
        assert_eq!(b.start(t), vec!["m1", "m2"]);
        b.timed_out("m1", t);
        assert!(!b.halted(), "a timeout does not trip failhard");
        assert_eq!(b.start(t), vec!["m3"]);
        b.returned("m2", 1, t);
        assert!(b.halted() && b.done());
        assert!(b.start(t).is_empty(), "nothing more is started");
        assert_eq!(b.next_free(), None);
    }
}
