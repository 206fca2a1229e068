//! The checker of a [`super::history`]: pure code over the recorded events, no process,
//! no clock. It finds:
//!
//! - an acknowledged return (`salt` printed it) missing from a member's job cache after
//!   the faults stopped;
//! - a key whose final state on a member is not what the acknowledged decisions leave
//!   (the last acknowledged `register`/`accept`/`reject`/`delete`, or a later one whose
//!   outcome is unknown);
//! - a key decision reverted in one member's sequence of reads (pending after accepted,
//!   rejected after accepted, back after deleted, gone with no delete asked, accepted or
//!   rejected with no such decision asked);
//! - a job handed to a minion more than once (published twice);
//! - members whose state digests differ once healed, or that were not all read;
//! - a member not ready after the faults stopped;
//! - a member whose copy of the synced file (or a minion served by it) differs from what
//!   the last acknowledged `cluster.sync_roots` synced;
//! - a return of the simulated fleet that a member acknowledged (the fleet's own count
//!   per job) missing from a member's job cache;
//! - a member that did not join (serving, counted a voter) while the faults went on;
//! - a member whose process ended by itself (the nemesis starts it again).
//!
//! [`check`] returns a [`Verdict`], printed by [`Verdict::report`] for a human.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::history::{Event, Fault, Op, Outcome, FINAL};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum KeyState {
    Absent,
    Pending,
    Accepted,
    Rejected,
}

/// A key's state in a `salt-key -L --out json` listing.
pub fn key_state(listing: &Value, id: &str) -> KeyState {
    let has = |field: &str| listing[field].as_array().is_some_and(|a| a.iter().any(|v| v.as_str() == Some(id)));
    if has("minions") {
        KeyState::Accepted
    } else if has("minions_rejected") {
        KeyState::Rejected
    } else if has("minions_pre") {
        KeyState::Pending
    } else {
        KeyState::Absent
    }
}

/// What a key operation leaves when it happens.
fn effect(op: &str) -> Option<KeyState> {
    Some(match op {
        "register" => KeyState::Pending,
        "accept" => KeyState::Accepted,
        "reject" => KeyState::Rejected,
        "delete" => KeyState::Absent,
        _ => return None,
    })
}

/// The judgement of one history.
#[derive(Debug, Default)]
pub struct Verdict {
    /// For each operation: how many were ok, failed, unknown.
    pub ops: BTreeMap<String, [usize; 3]>,
    pub faults: Vec<Fault>,
    pub violations: Vec<String>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The verdict for a human: operations, faults, violations.
    pub fn report(&self) -> String {
        let mut s = String::from("operations (ok / failed / unknown):\n");
        for (op, [ok, fail, unknown]) in &self.ops {
            s.push_str(&format!("  {op:<12} {ok:>5} / {fail:>5} / {unknown:>5}\n"));
        }
        s.push_str(&format!("faults ({}):\n", self.faults.len()));
        for f in &self.faults {
            s.push_str(&format!("  {:>8.1}s .. {:>8.1}s  {:<14} {}\n", f.start, f.end, f.kind, f.target));
        }
        s.push_str(&format!("violations ({}):\n", self.violations.len()));
        for v in &self.violations {
            s.push_str(&format!("  - {v}\n"));
        }
        s.push_str(if self.ok() { "verdict: valid\n" } else { "verdict: INVALID\n" });
        s
    }
}

fn arg<'a>(op: &'a Op, k: &str) -> &'a Value {
    &op.args[k]
}

fn member_of(op: &Op) -> String {
    match arg(op, "member") {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|x| x.as_str().map(String::from)).collect()
}

/// Judges a history.
pub fn check(events: &[Event]) -> Verdict {
    let mut v = Verdict::default();
    let mut ops: Vec<&Op> = Vec::new();
    for e in events {
        match e {
            Event::Op(o) => ops.push(o),
            Event::Fault(f) => v.faults.push(f.clone()),
        }
    }
    ops.sort_by(|a, b| a.invoke.total_cmp(&b.invoke));
    for o in &ops {
        let i = match o.outcome {
            Outcome::Ok => 0,
            Outcome::Fail => 1,
            Outcome::Unknown => 2,
        };
        v.ops.entry(o.op.clone()).or_default()[i] += 1;
    }
    v.faults.sort_by(|a, b| a.start.total_cmp(&b.start));
    let members: BTreeSet<String> = ops.iter().filter(|o| !arg(o, "member").is_null()).map(|o| member_of(o)).collect();
    check_keys(&ops, &members, &mut v.violations);
    check_returns(&ops, &members, &mut v.violations);
    check_jobs_once(&ops, &mut v.violations);
    check_digests(&ops, &members, &mut v.violations);
    check_ready(&ops, &members, &mut v.violations);
    check_roots(&ops, &members, &mut v.violations);
    check_fleet(&ops, &members, &mut v.violations);
    check_join(&ops, &mut v.violations);
    v
}

fn check_keys(ops: &[&Op], members: &BTreeSet<String>, out: &mut Vec<String>) {
    // Each key's decisions in the order they were asked (one operator asks them in turn).
    let mut decisions: BTreeMap<String, Vec<&Op>> = BTreeMap::new();
    for o in ops.iter().filter(|o| effect(&o.op).is_some()) {
        if let Some(id) = arg(o, "id").as_str() {
            decisions.entry(id.to_string()).or_default().push(o);
        }
    }
    // What each key's final state may be: the effect of the last acknowledged decision,
    // or of any decision after it whose outcome is unknown.
    let possible: BTreeMap<&str, BTreeSet<KeyState>> = decisions
        .iter()
        .map(|(id, ds)| {
            let mut p = BTreeSet::from([KeyState::Absent]);
            for d in ds {
                let s = effect(&d.op).expect("a key decision");
                match d.outcome {
                    Outcome::Ok => p = BTreeSet::from([s]),
                    Outcome::Unknown => {
                        p.insert(s);
                    }
                    Outcome::Fail => {}
                }
            }
            (id.as_str(), p)
        })
        .collect();
    let reads = |m: &str| -> Vec<&Op> { ops.iter().copied().filter(|o| o.op == "keys" && o.outcome == Outcome::Ok && member_of(o) == m).collect() };
    for m in members {
        let rs = reads(m);
        // No decision reverted in this member's sequence of reads: each read is compared
        // with what the earlier ones showed of every key the operator decided.
        let mut seen: BTreeMap<&str, (KeyState, bool)> = BTreeMap::new();
        for r in &rs {
            let at = format!("member {m}, read at {:.1}s", r.invoke);
            let mut now: BTreeMap<&str, KeyState> = BTreeMap::new();
            for field in ["minions_pre", "minions_rejected", "minions"] {
                for id in r.result[field].as_array().into_iter().flatten().filter_map(Value::as_str) {
                    if let Some((id, _)) = decisions.get_key_value(id) {
                        now.insert(id.as_str(), key_state(&r.result, id));
                    }
                }
            }
            let ids: BTreeSet<&str> = now.keys().copied().chain(seen.iter().filter(|(_, (_, gone))| !gone).map(|(id, _)| *id)).collect();
            for id in ids {
                let ds = &decisions[id];
                let asked_before = |op: &str| ds.iter().any(|d| d.op == op && d.invoke <= r.complete);
                let s = now.get(id).copied().unwrap_or(KeyState::Absent);
                let (was, gone) = seen.get(id).copied().unwrap_or((KeyState::Absent, false));
                match s {
                    KeyState::Absent => {
                        if !asked_before("delete") {
                            out.push(format!("{at}: key {id} vanished (it was {was:?}, no delete was asked)"));
                        }
                        seen.insert(id, (was, true));
                        continue;
                    }
                    _ if gone => out.push(format!("{at}: key {id} is {s:?} again after it was seen deleted")),
                    KeyState::Pending if was > KeyState::Pending => out.push(format!("{at}: key {id} reverted from {was:?} to Pending")),
                    KeyState::Accepted | KeyState::Rejected if was > KeyState::Pending && was != s => out.push(format!("{at}: key {id} reverted from {was:?} to {s:?}")),
                    _ => {}
                }
                for (st, op) in [(KeyState::Accepted, "accept"), (KeyState::Rejected, "reject")] {
                    if s == st && !asked_before(op) {
                        out.push(format!("{at}: key {id} is {s:?} though no {op} was asked"));
                    }
                }
                // A key seen again is followed afresh (its return reported once).
                seen.insert(id, (s, false));
            }
        }
        // Every acknowledged decision there once the faults stopped.
        match rs.iter().rev().find(|r| r.process == FINAL) {
            None => out.push(format!("member {m}: no final read of its keys")),
            Some(last) => {
                for (id, p) in &possible {
                    let s = key_state(&last.result, id);
                    if !p.contains(&s) {
                        out.push(format!("member {m}: key {id} is {s:?} at the end; the acknowledged decisions leave one of {p:?}"));
                    }
                }
            }
        }
    }
}

fn check_returns(ops: &[&Op], members: &BTreeSet<String>, out: &mut Vec<String>) {
    let acked: BTreeSet<(String, String)> = ops
        .iter()
        .filter(|o| o.op == "job")
        .flat_map(|o| {
            let value = arg(o, "value").as_str().unwrap_or_default().to_string();
            strings(&o.result["returns"]).into_iter().map(move |m| (m, value.clone()))
        })
        .collect();
    for m in members {
        let Some(r) = ops.iter().rev().find(|o| o.op == "returns" && member_of(o) == *m && o.outcome == Outcome::Ok) else {
            out.push(format!("member {m}: its job cache was not read at the end"));
            continue;
        };
        let held: BTreeSet<(String, String)> = r.result["returns"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| Some((p[0].as_str()?.to_string(), p[1].as_str()?.to_string())))
            .collect();
        for (minion, value) in acked.difference(&held) {
            out.push(format!("member {m}: the acknowledged return of {minion} for {value:?} is missing"));
        }
    }
}

fn check_jobs_once(ops: &[&Op], out: &mut Vec<String>) {
    for o in ops.iter().filter(|o| o.op == "minion_jobs") {
        let minion = arg(o, "minion").as_str().unwrap_or("?");
        for (jid, n) in o.result["jids"].as_object().into_iter().flatten() {
            if n.as_u64().unwrap_or(0) > 1 {
                out.push(format!("minion {minion} was handed job {jid} {n} times (published more than once)"));
            }
        }
    }
}

fn check_digests(ops: &[&Op], members: &BTreeSet<String>, out: &mut Vec<String>) {
    let mut got: BTreeMap<String, (String, u64)> = BTreeMap::new();
    for o in ops.iter().filter(|o| o.op == "digest" && o.process == FINAL && o.outcome == Outcome::Ok) {
        got.insert(member_of(o), (o.result["digest"].as_str().unwrap_or_default().to_string(), o.result["applied_index"].as_u64().unwrap_or(0)));
    }
    for m in members.iter().filter(|m| !got.contains_key(*m)) {
        out.push(format!("member {m}: its state digest was not read at the end"));
    }
    let distinct: BTreeSet<&(String, u64)> = got.values().collect();
    if distinct.len() > 1 {
        out.push(format!("the members' state digests (digest, applied index) differ once healed: {got:?}"));
    }
}

fn check_ready(ops: &[&Op], members: &BTreeSet<String>, out: &mut Vec<String>) {
    for m in members {
        match ops.iter().rev().find(|o| o.op == "ready" && member_of(o) == *m) {
            None => out.push(format!("member {m}: its readiness was not read at the end")),
            Some(o) if o.outcome != Outcome::Ok => out.push(format!("member {m} is not ready after the faults stopped: {}", o.result)),
            Some(_) => {}
        }
    }
}

fn check_roots(ops: &[&Op], members: &BTreeSet<String>, out: &mut Vec<String>) {
    let syncs: Vec<&&Op> = ops.iter().filter(|o| o.op == "sync_roots").collect();
    if syncs.is_empty() {
        return;
    }
    let Some(last) = syncs.iter().rev().find(|o| o.outcome == Outcome::Ok) else {
        out.push("no cluster.sync_roots was acknowledged, not even after the faults stopped".into());
        return;
    };
    let want = arg(last, "content");
    for m in members {
        match ops.iter().rev().find(|o| o.op == "roots" && o.process == FINAL && member_of(o) == *m) {
            None => out.push(format!("member {m}: its copy of the synced file was not read at the end")),
            Some(r) if r.result["content"] != *want => out.push(format!("member {m}: the synced file holds {} at the end; the last acknowledged sync_roots synced {want}", r.result["content"])),
            Some(_) => {}
        }
    }
    for o in ops.iter().filter(|o| o.op == "served" && o.process == FINAL) {
        // A minion that did not answer is not in the result.
        for id in strings(arg(o, "minions")).into_iter().filter(|id| !o.result[id].is_null()) {
            if o.result[&id] != *want {
                out.push(format!("minion {id} is served {} as the synced file; the last acknowledged sync_roots synced {want}", o.result[&id]));
            }
        }
    }
}

fn check_fleet(ops: &[&Op], members: &BTreeSet<String>, out: &mut Vec<String>) {
    let Some(acks) = ops.iter().rev().find(|o| o.op == "fleet_acks") else { return };
    for m in members {
        let Some(r) = ops.iter().rev().find(|o| o.op == "returns" && member_of(o) == *m && o.outcome == Outcome::Ok) else { continue };
        let mut held: BTreeMap<&str, u64> = BTreeMap::new();
        for p in r.result["returns"].as_array().into_iter().flatten() {
            if let (Some(minion), Some(jid)) = (p[0].as_str(), p[2].as_str()) {
                if minion.starts_with("swarm-") {
                    *held.entry(jid).or_default() += 1;
                }
            }
        }
        for (jid, n) in acks.result["jids"].as_object().into_iter().flatten() {
            let (n, got) = (n.as_u64().unwrap_or(0), held.get(jid.as_str()).copied().unwrap_or(0));
            if got < n {
                out.push(format!("member {m}: job {jid} holds {got} of the fleet's returns; the fleet had {n} acknowledged"));
            }
        }
    }
}

fn check_join(ops: &[&Op], out: &mut Vec<String>) {
    for o in ops.iter().filter(|o| o.op == "join" && o.outcome != Outcome::Ok) {
        out.push(format!("member {} did not join while the faults went on: {}", member_of(o), o.result));
    }
    for o in ops.iter().filter(|o| o.op == "exited") {
        out.push(format!("member {}'s process ended by itself at {:.1}s: {}", member_of(o), o.invoke, o.result));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn op(process: &str, name: &str, args: Value, t: f64, outcome: Outcome, result: Value) -> Event {
        Event::Op(Op { process: process.into(), op: name.into(), args, invoke: t, complete: t + 0.5, outcome, result })
    }

    fn keys(process: &str, member: u64, t: f64, listing: Value) -> Event {
        op(process, "keys", json!({ "member": member }), t, Outcome::Ok, listing)
    }

    fn decide(name: &str, id: &str, t: f64, outcome: Outcome) -> Event {
        op("operator", name, json!({ "id": id, "via": 0 }), t, outcome, Value::Null)
    }

    /// The end of a run on two members that agree: digests, readiness, job caches, one
    /// minion that ran each job once, and the final key listing `listing` on both.
    fn ending(listing: Value, returns: Value) -> Vec<Event> {
        let mut e = Vec::new();
        for m in 0..2u64 {
            e.push(op(FINAL, "ready", json!({ "member": m }), 100.0, Outcome::Ok, json!("ready")));
            e.push(op(FINAL, "digest", json!({ "member": m }), 101.0, Outcome::Ok, json!({ "digest": "abc", "applied_index": 42 })));
            e.push(keys(FINAL, m, 102.0, listing.clone()));
            e.push(op(FINAL, "returns", json!({ "member": m }), 103.0, Outcome::Ok, json!({ "returns": returns.clone() })));
        }
        e.push(op(FINAL, "minion_jobs", json!({ "minion": "m1" }), 104.0, Outcome::Ok, json!({ "jids": { "1": 1, "2": 1 } })));
        e
    }

    /// Asserts that one of the verdict's violations says `text`.
    fn assert_names(v: &Verdict, text: &str) {
        assert!(v.violations.iter().any(|x| x.contains(text)), "no violation says {text:?}: {}", v.report());
    }

    /// A clean run: a key registered, accepted (the outcome of a reject after it
    /// unknown), jobs returned, reads that only move forward.
    fn valid() -> Vec<Event> {
        let mut e = vec![
            decide("register", "k1", 1.0, Outcome::Ok),
            keys("reader", 0, 2.0, json!({ "minions_pre": ["k1"] })),
            decide("accept", "k1", 3.0, Outcome::Ok),
            keys("reader", 1, 3.2, json!({ "minions_pre": ["k1"] })),
            keys("reader", 0, 4.0, json!({ "minions": ["k1"] })),
            decide("register", "k2", 5.0, Outcome::Unknown),
            decide("register", "k3", 5.5, Outcome::Ok),
            decide("reject", "k3", 6.0, Outcome::Ok),
            decide("delete", "k3", 7.0, Outcome::Unknown),
            op("jobs", "job", json!({ "value": "v1", "via": 1 }), 8.0, Outcome::Ok, json!({ "returns": ["m1"] })),
            op("jobs", "job", json!({ "value": "v2", "via": 0 }), 9.0, Outcome::Unknown, json!({ "returns": [] })),
        ];
        e.push(Event::Fault(Fault { kind: "kill".into(), target: "member 0".into(), start: 2.5, end: 6.5 }));
        e.extend(ending(json!({ "minions": ["k1"], "minions_rejected": ["k3"] }), json!([["m1", "v1"]])));
        e
    }

    #[test]
    fn a_valid_history_has_no_violation() {
        let v = check(&valid());
        assert!(v.ok(), "{}", v.report());
        assert_eq!(v.ops["register"], [2, 0, 1]);
        assert_eq!(v.faults.len(), 1);
        assert!(v.report().ends_with("verdict: valid\n"), "{}", v.report());
    }

    #[test]
    fn an_acknowledged_return_missing_on_a_member_is_a_violation() {
        let mut e = valid();
        e.retain(|e| !matches!(e, Event::Op(o) if o.op == "returns" && o.args["member"] == 1));
        e.push(op(FINAL, "returns", json!({ "member": 1 }), 103.0, Outcome::Ok, json!({ "returns": [] })));
        let v = check(&e);
        assert_eq!(v.violations, ["member 1: the acknowledged return of m1 for \"v1\" is missing"], "{}", v.report());
    }

    #[test]
    fn an_acknowledged_accept_lost_at_the_end_is_a_violation() {
        let mut e = valid();
        e.retain(|e| !matches!(e, Event::Op(o) if o.op == "keys" && o.process == FINAL && o.args["member"] == 0));
        e.push(keys(FINAL, 0, 102.0, json!({ "minions_pre": ["k1"], "minions_rejected": ["k3"] })));
        let v = check(&e);
        assert_names(&v, "member 0: key k1 is Pending at the end");
        assert_names(&v, "key k1 reverted from Accepted to Pending");
    }

    #[test]
    fn a_decision_reverted_in_one_members_reads_is_a_violation() {
        let mut e = valid();
        e.push(keys("reader", 0, 4.5, json!({ "minions_pre": ["k1"] })));
        let v = check(&e);
        assert_eq!(v.violations, ["member 0, read at 4.5s: key k1 reverted from Accepted to Pending"], "{}", v.report());
    }

    #[test]
    fn a_key_that_vanishes_or_comes_back_is_a_violation() {
        let mut e = valid();
        e.push(keys("reader", 1, 4.2, json!({})));
        e.push(keys("reader", 1, 4.4, json!({ "minions": ["k1"] })));
        let v = check(&e);
        assert_names(&v, "key k1 vanished");
        assert_names(&v, "key k1 is Accepted again after it was seen deleted");
    }

    #[test]
    fn a_decision_nobody_asked_for_is_a_violation() {
        let mut e = valid();
        e.push(keys("reader", 1, 3.5, json!({ "minions_rejected": ["k1"] })));
        let v = check(&e);
        assert_names(&v, "key k1 is Rejected though no reject was asked");
    }

    #[test]
    fn a_job_handed_twice_to_a_minion_is_a_violation() {
        let mut e = valid();
        e.push(op(FINAL, "minion_jobs", json!({ "minion": "m2" }), 104.0, Outcome::Ok, json!({ "jids": { "7": 2 } })));
        let v = check(&e);
        assert_eq!(v.violations, ["minion m2 was handed job 7 2 times (published more than once)"], "{}", v.report());
    }

    #[test]
    fn digests_that_differ_or_a_member_not_ready_are_violations() {
        let mut e = valid();
        e.retain(|e| !matches!(e, Event::Op(o) if (o.op == "digest" || o.op == "ready") && o.args["member"] == 1));
        e.push(op(FINAL, "digest", json!({ "member": 1 }), 101.0, Outcome::Ok, json!({ "digest": "abd", "applied_index": 42 })));
        e.push(op(FINAL, "ready", json!({ "member": 1 }), 100.0, Outcome::Fail, json!("not ready")));
        let v = check(&e);
        assert_eq!(v.violations.len(), 2, "{}", v.report());
        assert!(v.violations[0].contains("state digests"), "{}", v.report());
        assert!(v.violations[1].contains("member 1 is not ready"), "{}", v.report());
    }

    #[test]
    fn an_unknown_outcome_allows_either_state_and_a_failed_one_none() {
        let mut e = valid();
        // k2's register was unknown: pending at the end is allowed; accepted is not (the
        // accept of k4 failed: nothing was done).
        e.push(decide("register", "k4", 10.0, Outcome::Ok));
        e.push(decide("accept", "k4", 11.0, Outcome::Fail));
        e.retain(|e| !matches!(e, Event::Op(o) if o.op == "keys" && o.process == FINAL));
        for m in 0..2 {
            e.push(keys(FINAL, m, 102.0, json!({ "minions": ["k1", "k4"], "minions_pre": ["k2"], "minions_rejected": ["k3"] })));
        }
        let v = check(&e);
        assert!(v.violations.iter().all(|x| x.contains("k4")), "{}", v.report());
        assert_names(&v, "member 0: key k4 is Accepted at the end");
    }

    #[test]
    fn a_member_holding_another_synced_file_than_the_last_acknowledged_is_a_violation() {
        let mut e = valid();
        let sync = |content: &str, t: f64, outcome| op("roots", "sync_roots", json!({ "via": 0, "content": content }), t, outcome, Value::Null);
        e.push(sync("r1\n", 5.0, Outcome::Ok));
        e.push(sync("r2\n", 6.0, Outcome::Unknown));
        e.push(sync("r3\n", 99.0, Outcome::Ok));
        e.push(op(FINAL, "roots", json!({ "member": 0 }), 105.0, Outcome::Ok, json!({ "content": "r3\n" })));
        e.push(op(FINAL, "roots", json!({ "member": 1 }), 105.0, Outcome::Ok, json!({ "content": "r2\n" })));
        e.push(op(FINAL, "served", json!({ "minions": ["m1", "m2", "m3"] }), 106.0, Outcome::Unknown, json!({ "m1": "r3\n", "m2": "r1\n" })));
        let v = check(&e);
        assert_eq!(v.violations.len(), 2, "{}", v.report());
        assert!(v.violations[0].starts_with("member 1: the synced file holds \"r2\\n\""), "{}", v.report());
        assert!(v.violations[1].starts_with("minion m2 is served \"r1\\n\""), "{}", v.report());
        // Nothing acknowledged at all is a violation of its own.
        e.retain(|e| !matches!(e, Event::Op(o) if o.op == "sync_roots" && o.outcome == Outcome::Ok));
        assert!(check(&e).violations.iter().any(|x| x.contains("no cluster.sync_roots was acknowledged")));
    }

    #[test]
    fn a_fleet_return_acknowledged_and_missing_on_a_member_is_a_violation() {
        let mut e = valid();
        e.retain(|e| !matches!(e, Event::Op(o) if o.op == "returns"));
        let held = json!([["m1", "v1", "1"], ["swarm-0", "f1", "7"], ["swarm-1", "f1", "7"]]);
        e.push(op(FINAL, "returns", json!({ "member": 0 }), 103.0, Outcome::Ok, json!({ "returns": held })));
        e.push(op(FINAL, "returns", json!({ "member": 1 }), 103.0, Outcome::Ok, json!({ "returns": [["m1", "v1", "1"], ["swarm-0", "f1", "7"]] })));
        e.push(op(FINAL, "fleet_acks", json!({}), 104.0, Outcome::Ok, json!({ "jids": { "7": 2, "8": 0 } })));
        let v = check(&e);
        assert_eq!(v.violations, ["member 1: job 7 holds 1 of the fleet's returns; the fleet had 2 acknowledged"], "{}", v.report());
    }

    #[test]
    fn a_member_that_did_not_join_or_whose_process_ended_is_a_violation() {
        let mut e = valid();
        e.push(op("membership", "join", json!({ "member": 2, "ip": "127.0.0.9" }), 30.0, Outcome::Unknown, json!({ "serving": true, "voter": false })));
        e.push(op("supervisor", "exited", json!({ "member": 0 }), 40.0, Outcome::Fail, json!({ "status": "signal: 6 (SIGABRT)" })));
        let v = check(&e);
        assert!(v.violations.iter().any(|x| x.starts_with("member 2 did not join while the faults went on")), "{}", v.report());
        assert!(v.violations.iter().any(|x| x.starts_with("member 0's process ended by itself at 40.0s")), "{}", v.report());
    }
}
