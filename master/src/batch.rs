//! A master-driven batch run: Salt 3008's `salt --async --batch`. The `salt` command
//! resolves the target (a `test.ping`), the master starts the run and keeps it going
//! after the command has gone: at most `size` minions run at once, each return frees
//! a slot (after `batch_wait`), a minion silent past `timeout` + 10 s frees it as
//! failed, and with `failhard` the first failure halts the run.
//!
//! The run is one value, [`RunState`], and every change to it is a `batch_run` record
//! (`halite_storage::batch_run`) that applies only on the version it was computed from.
//! A step that starts minions carries, in the same entry, the `job_published` that
//! joins them to the run's job, so they are published if and only if the step applied.
//! Whoever proposes (the leader's driver, `crate::daemon::batches`; `batch.stop`), the
//! run moves one step at a time, the same on every member, and a new leader takes over
//! where the log says the run stands.
//!
//! [`RunState::progress`] is Salt's `progress_batch` with the master's clock passed in,
//! a step of the run's [`Slots`]: the slot accounting, `batch_wait` cool-downs, timeouts
//! and `failhard` every batch keeps, the ones `salt` and salt-api drive too
//! (`halite_tools::batch`). The batch size ([`BatchSpec`]) and a return's [`retcode`]
//! are read here for every batch as well.

use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value as J};

use crate::wire::payload;

pub mod slots;
pub use slots::{Slots, GATHER_JOB_TIMEOUT_S};

/// One batch run's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    pub jid: String,
    pub fun: String,
    /// The operator's target, as given (for `batch.status`).
    pub tgt: J,
    pub tgt_type: String,
    pub user: String,
    /// A start's publish load less its target and jid (`arg`, returners, metadata).
    pub load: J,
    /// The batch size as given (`3`, `25%`).
    pub batch: String,
    /// The slots: who waits, runs, returned or failed (their fields are this state's).
    #[serde(flatten)]
    pub slots: Slots,
    pub created_ns: u64,
    pub last_progress_ns: u64,
}

impl RunState {
    /// A run over `minions` (the ones that answered the ping, in id order), nothing
    /// started yet.
    #[allow(clippy::too_many_arguments)]
    pub fn new(jid: &str, fun: &str, tgt: J, tgt_type: &str, user: &str, load: J, batch: &str, size: usize, failhard: bool, batch_wait_ms: u64, timeout_s: u64, minions: Vec<String>, now_ns: u64) -> RunState {
        RunState {
            jid: jid.into(),
            fun: fun.into(),
            tgt,
            tgt_type: tgt_type.into(),
            user: user.into(),
            load,
            batch: batch.into(),
            slots: Slots::new(minions, size, failhard, batch_wait_ms, timeout_s),
            created_ns: now_ns,
            last_progress_ns: now_ns,
        }
    }

    /// How many minions the run holds.
    pub fn total(&self) -> usize {
        self.slots.total()
    }

    /// Nothing more will happen: halted, or every minion returned or failed.
    pub fn finished(&self) -> bool {
        self.slots.finished()
    }

    /// One step: `returns` (minion, retcode) of running minions, at `now_ns`; minions
    /// silent too long time out. Returns the minions to start now (already moved to
    /// `active`).
    pub fn progress(&mut self, returns: &[(String, i64)], now_ns: u64) -> Vec<String> {
        for (id, rc) in returns {
            self.slots.returned(id, *rc, now_ns);
        }
        self.slots.sweep(now_ns);
        let start = self.slots.start(now_ns);
        self.last_progress_ns = now_ns;
        start
    }

    /// The publish load of a start of `minions`.
    pub fn start_load(&self, minions: &[String]) -> J {
        let mut load = self.load.clone();
        if let J::Object(m) = &mut load {
            m.insert("fun".into(), J::String(self.fun.clone()));
            m.insert("tgt".into(), json!(minions));
            m.insert("tgt_type".into(), J::String("list".into()));
            m.insert("jid".into(), J::String(self.jid.clone()));
            m.insert("user".into(), J::String(self.user.clone()));
        }
        load
    }

    /// The state as a `batch_run` record carries it (msgpack).
    pub fn encode(&self) -> Vec<u8> {
        payload::encode(&payload::from_json(&serde_json::to_value(self).unwrap_or(J::Null)))
    }

    /// A stored state; `None` when it does not decode (reported by the caller).
    pub fn decode(bytes: &[u8]) -> Option<RunState> {
        serde_json::from_value(payload::to_json(&payload::decode(bytes).ok()?)).ok()
    }

    /// The fields every batch event carries (Salt's `_base_payload`).
    fn base(&self) -> serde_json::Map<String, J> {
        let mut m = serde_json::Map::new();
        for (k, v) in [("jid", json!(self.jid)), ("fun", json!(self.fun)), ("tgt", self.tgt.clone()), ("tgt_type", json!(self.tgt_type)), ("user", json!(self.user))] {
            m.insert(k.into(), v);
        }
        m
    }

    /// `batch.status` / `batch.list_active`: Salt's flat summary (`stopped`: a stop
    /// was asked for; `now_ns` for `age_seconds`).
    pub fn summary(&self, stopped: bool, now_ns: u64) -> J {
        let mut m = self.base();
        let halted = self.slots.halted.clone().or_else(|| stopped.then(|| "stop".to_string()));
        for (k, v) in [
            ("total", json!(self.total())),
            ("completed", json!(self.slots.done.len())),
            ("active", json!(self.slots.active.len())),
            ("pending", json!(self.slots.pending.len())),
            ("failed", json!(self.slots.failed.len())),
            ("batch_size", json!(self.slots.size)),
            ("halted", json!(halted.is_some())),
            ("halted_reason", json!(halted)),
            ("driver", json!("master")),
            ("created", json!(secs(self.created_ns))),
            ("last_progress", json!(secs(self.last_progress_ns))),
            ("age_seconds", json!(secs(now_ns.saturating_sub(self.last_progress_ns)))),
        ] {
            m.insert(k.into(), v);
        }
        J::Object(m)
    }

    /// The event of this state: `(tag, data)` for `new`, `progress`, `complete` or
    /// `halted` (Salt's payloads).
    pub fn event(&self, what: &str, now_ns: u64) -> (String, J) {
        let mut m = self.base();
        let duration = json!(secs(now_ns.saturating_sub(self.created_ns)));
        let extra: Vec<(&str, J)> = match what {
            "new" => vec![("total_minions", json!(self.total())), ("batch_size", json!(self.slots.size)), ("driver", json!("master")), ("created", json!(secs(self.created_ns)))],
            "complete" => vec![("completed", json!(self.slots.done.len())), ("failed", json!(self.slots.failed.len())), ("total_minions", json!(self.total())), ("duration", duration)],
            "halted" => {
                let mut active: Vec<&String> = self.slots.active.iter().map(|(id, _)| id).collect();
                active.sort();
                vec![("reason", json!(self.slots.halted)), ("completed", json!(self.slots.done.len())), ("failed", json!(self.slots.failed.len())), ("abandoned_active", json!(active)), ("abandoned_pending", json!(self.slots.pending)), ("duration", duration)]
            }
            _ => vec![
                ("total", json!(self.total())),
                ("completed", json!(self.slots.done.len())),
                ("active", json!(self.slots.active.len())),
                ("pending", json!(self.slots.pending.len())),
                ("failed", json!(self.slots.failed.len())),
                ("iter", J::Null),
                ("last_progress", json!(secs(self.last_progress_ns))),
            ],
        };
        for (k, v) in extra {
            m.insert(k.into(), v);
        }
        (format!("salt/batch/{}/{what}", self.jid), J::Object(m))
    }
}

/// Unix ns as Salt's float seconds.
fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// `--batch N`, `--batch N%` (or Salt's older `%N`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BatchSpec {
    Count(u64),
    Percent(f64),
}

/// A batch size that is not `N`, `N%` or `%N`, as given (Salt's words name it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Invalid batch data sent: {0}\nData must be in the form of %10, 10% or 3")]
pub struct InvalidBatch(pub String);

impl FromStr for BatchSpec {
    type Err = InvalidBatch;

    fn from_str(s: &str) -> Result<Self, InvalidBatch> {
        let bad = || InvalidBatch(s.to_string());
        let t = s.trim();
        if t.contains('%') {
            let p: f64 = t.trim_matches('%').parse().map_err(|_| bad())?;
            if !p.is_finite() || p <= 0.0 {
                return Err(bad());
            }
            Ok(BatchSpec::Percent(p))
        } else {
            t.parse().map(BatchSpec::Count).map_err(|_| bad())
        }
    }
}

impl BatchSpec {
    /// How many minions run at once out of `n` (Salt's `get_batch_size`): a percentage
    /// of `n`, rounded down, but at least 1; a count as given, at least 1.
    pub fn size(&self, n: usize) -> usize {
        match *self {
            BatchSpec::Count(c) => c.clamp(1, usize::MAX as u64) as usize,
            BatchSpec::Percent(p) => {
                let res = p / 100.0 * n as f64;
                if res < 1.0 {
                    1
                } else {
                    res.min(usize::MAX as f64) as usize
                }
            }
        }
    }
}

/// The retcode Salt counts for a return load: its `retcode` (the largest of a mapping of
/// them), 0 when it has none.
pub fn retcode(load: &J) -> i64 {
    match load.get("retcode") {
        Some(J::Number(n)) => n.as_i64().unwrap_or(1),
        Some(J::Object(m)) => m.values().filter_map(J::as_i64).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn run(size: usize, failhard: bool, wait_ms: u64) -> RunState {
        RunState::new("20261125000000000001", "cmd.run", json!("*"), "glob", "root", json!({"arg": ["x"], "ret": ""}), "2", size, failhard, wait_ms, 5, vec!["a".into(), "b".into(), "c".into()], 0)
    }

    #[test]
    fn slots_are_filled_freed_by_returns_and_timeouts() {
        let mut r = run(2, false, 0);
        assert_eq!(r.progress(&[], 0), ["a", "b"]);
        assert!(r.progress(&[], S).is_empty(), "no slot free");
        assert_eq!(r.progress(&[("a".into(), 0), ("zz".into(), 0)], 2 * S), ["c"], "a return frees a slot; a stranger's return is ignored");
        // b never returns: after timeout + gather_job_timeout it fails.
        assert!(r.progress(&[], 14 * S).is_empty());
        assert!(r.progress(&[("c".into(), 2)], 15 * S).is_empty());
        assert_eq!(r.slots.failed, [("b".to_string(), "timeout".to_string())]);
        assert_eq!(r.slots.done, [("a".to_string(), 0), ("c".to_string(), 2)]);
        assert!(r.finished() && r.slots.halted.is_none(), "a non-zero retcode does not halt without failhard");
        let load = r.start_load(&["c".into()]);
        assert_eq!(load, json!({"arg": ["x"], "ret": "", "fun": "cmd.run", "tgt": ["c"], "tgt_type": "list", "jid": "20261125000000000001", "user": "root"}));
    }

    #[test]
    fn failhard_halts_and_batch_wait_cools_a_slot() {
        let mut r = run(1, true, 1500);
        assert_eq!(r.progress(&[], 0), ["a"]);
        assert!(r.progress(&[("a".into(), 0)], S).is_empty(), "the freed slot cools down for 1.5 s");
        assert_eq!(r.progress(&[], 2 * S + S / 2), ["b"]);
        assert!(r.progress(&[("b".into(), 1)], 3 * S).is_empty());
        assert_eq!(r.slots.halted.as_deref(), Some("failhard"));
        assert!(r.finished() && r.slots.pending == ["c"]);
        let (tag, data) = r.event("halted", 4 * S);
        assert_eq!(tag, "salt/batch/20261125000000000001/halted");
        assert_eq!((&data["reason"], &data["abandoned_pending"], &data["duration"]), (&json!("failhard"), &json!(["c"]), &json!(4.0)));
    }

    #[test]
    fn the_state_round_trips_and_summarises_as_salt() {
        let mut r = run(2, false, 0);
        r.progress(&[], 3 * S);
        assert_eq!(RunState::decode(&r.encode()), Some(r.clone()));
        assert_eq!(RunState::decode(b"\x93junk"), None);
        let s = r.summary(false, 5 * S);
        assert_eq!((&s["total"], &s["active"], &s["pending"], &s["halted"], &s["driver"], &s["age_seconds"]), (&json!(3), &json!(2), &json!(1), &json!(false), &json!("master"), &json!(2.0)));
        assert_eq!(r.summary(true, 5 * S)["halted_reason"], "stop");
    }

    #[test]
    fn the_stored_state_keeps_its_fields_in_order() {
        let v = serde_json::to_value(run(2, false, 0)).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let layout = ["jid", "fun", "tgt", "tgt_type", "user", "load", "batch", "size", "failhard", "batch_wait_ms", "timeout_s", "pending", "active", "done", "failed", "wait", "halted", "created_ns", "last_progress_ns"];
        assert_eq!(keys, layout, "a batch_run record's state is read by every member");
    }

    #[test]
    fn specs_parse_as_salt_reads_them() {
        assert_eq!("3".parse(), Ok(BatchSpec::Count(3)));
        assert_eq!("25%".parse(), Ok(BatchSpec::Percent(25.0)));
        assert_eq!("%10".parse(), Ok(BatchSpec::Percent(10.0)));
        for bad in ["", "x", "-3", "1.5", "0%", "-5%", "nan%", "%"] {
            assert!(bad.parse::<BatchSpec>().is_err(), "{bad}");
        }
        assert!("x".parse::<BatchSpec>().unwrap_err().to_string().starts_with("Invalid batch data sent: x"));
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
    fn a_step_of_ten_thousand_minions_is_a_few_hundred_kb() {
        let ids: Vec<String> = (0..10_000).map(|i| format!("web-{i:05}.example.com")).collect();
        let mut r = RunState::new("20261125000000000001", "test.ping", json!("*"), "glob", "root", json!({"arg": []}), "10%", 1000, false, 0, 5, ids, 0);
        r.progress(&[], 0);
        let done: Vec<(String, i64)> = r.slots.active.iter().map(|(id, _)| (id.clone(), 0)).collect();
        r.progress(&done, S);
        assert_eq!(r.total(), 10_000);
        let n = r.encode().len();
        assert!(n < 400 << 10, "{n} bytes");
    }
}
