//! A batch run's slots (Salt 3008's `progress_batch`), the one bookkeeping every batch
//! driver uses: the master's (`RunState`, `crate::daemon::batches`), `salt --batch`'s
//! and salt-api's `local_batch` (`halite_tools::batch`). No I/O and no clock: the
//! driver passes the time in (ns since any origin it keeps).
//!
//! At most `size` minions run at a time, in the order given; each return frees its
//! slot, but with `batch_wait` only that long after it came; a minion that does not
//! return in time (reported by the driver, or past `timeout` + [`GATHER_JOB_TIMEOUT_S`]
//! in [`Slots::sweep`]) frees its slot the same way and fails, without tripping
//! `failhard`; with `failhard` the first return with a retcode above 0 halts the run:
//! nothing more is started. Every minion is in exactly one of `pending`, `active`,
//! `done` and `failed`.

use serde::{Deserialize, Serialize};

/// Salt's `gather_job_timeout` default: added to the timeout before a silent minion
/// counts as failed.
pub const GATHER_JOB_TIMEOUT_S: u64 = 10;

/// The slots of one run (the field names are those of a stored `batch_run` state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slots {
    /// Minions running at once (at least 1).
    pub size: usize,
    pub failhard: bool,
    pub batch_wait_ms: u64,
    pub timeout_s: u64,
    /// Not started yet, in the order they will be.
    pub pending: Vec<String>,
    /// Running: each minion and when it was started (ns).
    pub active: Vec<(String, u64)>,
    /// Returned: each minion and its retcode.
    pub done: Vec<(String, i64)>,
    /// Failed: each minion and why (`timeout`).
    pub failed: Vec<(String, String)>,
    /// When the slots that are cooling down (`batch_wait`) free (ns).
    pub wait: Vec<u64>,
    /// Why the run stopped early (`failhard`, `stop`), if it did.
    pub halted: Option<String>,
}

impl Slots {
    /// A run over `minions` (in the order they are to start), nothing started yet.
    pub fn new(minions: Vec<String>, size: usize, failhard: bool, batch_wait_ms: u64, timeout_s: u64) -> Slots {
        Slots { size: size.max(1), failhard, batch_wait_ms, timeout_s, pending: minions, active: vec![], done: vec![], failed: vec![], wait: vec![], halted: None }
    }

    /// How many minions the run holds.
    pub fn total(&self) -> usize {
        self.pending.len() + self.active.len() + self.done.len() + self.failed.len()
    }

    /// Nothing more will happen: halted, or every minion returned or failed.
    pub fn finished(&self) -> bool {
        self.halted.is_some() || (self.pending.is_empty() && self.active.is_empty())
    }

    /// `id` returned with `retcode` at `now_ns`: false if it was not running (a
    /// stranger, a duplicate, a return after its timeout), and then nothing changes.
    pub fn returned(&mut self, id: &str, retcode: i64, now_ns: u64) -> bool {
        let Some(at) = self.active.iter().position(|(a, _)| a == id) else { return false };
        self.active.remove(at);
        self.done.push((id.to_string(), retcode));
        self.cool(now_ns);
        if self.failhard && retcode > 0 && self.halted.is_none() {
            self.halted = Some("failhard".into());
        }
        true
    }

    /// `id` did not return in time (the driver saw so): it fails, its slot frees;
    /// false if it was not running.
    pub fn timed_out(&mut self, id: &str, now_ns: u64) -> bool {
        let Some(at) = self.active.iter().position(|(a, _)| a == id) else { return false };
        let (id, _) = self.active.remove(at);
        self.failed.push((id, "timeout".into()));
        self.cool(now_ns);
        true
    }

    /// Every running minion started `timeout` + [`GATHER_JOB_TIMEOUT_S`] ago or more
    /// times out.
    pub fn sweep(&mut self, now_ns: u64) {
        let window = (self.timeout_s + GATHER_JOB_TIMEOUT_S).saturating_mul(1_000_000_000);
        let (late, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.active).into_iter().partition(|(_, at)| now_ns.saturating_sub(*at) >= window);
        self.active = running;
        for (id, _) in late {
            self.failed.push((id, "timeout".into()));
            self.cool(now_ns);
        }
    }

    /// The minions to start at `now_ns` (moved to `active`): as many as there are free
    /// slots, none once halted.
    pub fn start(&mut self, now_ns: u64) -> Vec<String> {
        self.wait.retain(|t| *t > now_ns);
        self.wait.sort_unstable();
        if self.halted.is_some() {
            return vec![];
        }
        let free = self.size.saturating_sub(self.active.len() + self.wait.len());
        let n = free.min(self.pending.len());
        let start: Vec<String> = self.pending.drain(..n).collect();
        self.active.extend(start.iter().map(|id| (id.clone(), now_ns)));
        start
    }

    /// When a `batch_wait` slot frees next (ns), if minions are waiting for one.
    pub fn next_free(&self) -> Option<u64> {
        if self.pending.is_empty() || self.halted.is_some() {
            return None;
        }
        self.wait.iter().min().copied()
    }

    /// A freed slot cools down for `batch_wait`.
    fn cool(&mut self, now_ns: u64) {
        if self.batch_wait_ms > 0 {
            self.wait.push(now_ns.saturating_add(self.batch_wait_ms.saturating_mul(1_000_000)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn ids(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("m{i}")).collect()
    }

    #[test]
    fn one_at_a_time_in_order() {
        let mut b = Slots::new(ids(3), 1, false, 0, 5);
        assert_eq!(b.start(0), ["m1"]);
        assert!(b.start(0).is_empty(), "the slot is busy");
        assert!(!b.returned("m2", 0, 0), "not running");
        assert!(b.returned("m1", 1, 0), "a failure without failhard goes on");
        assert!(!b.returned("m1", 0, 0), "a duplicate");
        assert_eq!(b.start(0), ["m2"]);
        assert!(b.timed_out("m2", 0));
        assert!(!b.returned("m2", 0, 0), "a return after its timeout");
        assert_eq!(b.start(0), ["m3"]);
        assert!(!b.finished());
        assert!(b.returned("m3", 0, 0));
        assert!(b.finished() && b.halted.is_none());
        assert_eq!(b.done, [("m1".to_string(), 1), ("m3".to_string(), 0)]);
        assert_eq!(b.failed, [("m2".to_string(), "timeout".to_string())]);
        assert_eq!(b.total(), 3);
    }

    #[test]
    fn slots_refill_as_returns_come_and_the_size_is_at_least_one() {
        let mut b = Slots::new(ids(5), 2, false, 0, 5);
        assert_eq!(b.start(0), ["m1", "m2"]);
        b.returned("m2", 0, 0);
        assert_eq!(b.start(0), ["m3"], "one slot freed, one minion started");
        assert_eq!(Slots::new(ids(2), 0, false, 0, 5).start(0), ["m1"]);
    }

    #[test]
    fn batch_wait_holds_a_freed_slot() {
        let mut b = Slots::new(ids(3), 1, false, 2000, 5);
        assert_eq!(b.start(0), ["m1"]);
        b.returned("m1", 0, 0);
        assert!(b.start(S).is_empty(), "still cooling");
        assert_eq!(b.next_free(), Some(2 * S));
        assert_eq!(b.start(2 * S), ["m2"]);
        b.timed_out("m2", 3 * S);
        assert_eq!(b.next_free(), Some(5 * S), "a timeout cools its slot too");
        assert_eq!(b.start(5 * S), ["m3"]);
        assert_eq!(b.next_free(), None, "nothing waits for a slot");
    }

    #[test]
    fn silent_minions_fail_after_timeout_and_gather_job_timeout() {
        let mut b = Slots::new(ids(3), 2, false, 0, 5);
        assert_eq!(b.start(0), ["m1", "m2"]);
        b.sweep(14 * S);
        assert!(b.failed.is_empty());
        b.returned("m1", 0, 14 * S);
        assert_eq!(b.start(14 * S), ["m3"]);
        b.sweep(15 * S);
        assert_eq!(b.failed, [("m2".to_string(), "timeout".to_string())]);
        assert!(!b.finished(), "m3 runs");
        b.sweep(29 * S);
        assert!(b.finished() && b.halted.is_none());
    }

    #[test]
    fn failhard_stops_at_the_first_failure() {
        let mut b = Slots::new(ids(4), 2, true, 0, 5);
        assert_eq!(b.start(0), ["m1", "m2"]);
        b.timed_out("m1", 0);
        assert!(b.halted.is_none(), "a timeout does not trip failhard");
        assert_eq!(b.start(0), ["m3"]);
        b.returned("m2", 1, 0);
        assert_eq!(b.halted.as_deref(), Some("failhard"));
        assert!(b.finished());
        assert!(b.returned("m3", 2, 0), "a running minion's return still counts");
        assert!(b.start(0).is_empty(), "nothing more is started");
        assert_eq!(b.next_free(), None);
        assert_eq!(b.pending, ["m4"]);
        let mut stopped = Slots::new(ids(2), 1, true, 0, 5);
        stopped.start(0);
        stopped.halted = Some("stop".into());
        stopped.returned("m1", 1, 0);
        assert_eq!(stopped.halted.as_deref(), Some("stop"), "the first reason stays");
    }
}
