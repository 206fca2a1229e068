//! Faults of a three-member cluster, each checked record by record: a member wiped and
//! restarted on an empty disk; the leader killed with `kill -9` while a real minion's
//! returns stream in and keys are accepted; the whole cluster killed and started again;
//! the leader driving an `--async --batch` run stopped mid-run.
//! After each, every member holds every acknowledged change, and every member's state digest
//! (`StateMachine::digest`, printed by `halite-ctl verify` on a stopped member) is the
//! same.

use serde_json::json;

use crate::cluster::{accepted_key, three};
use crate::support::*;

/// The applied index a member reports for itself in `cluster.members`.
pub(crate) fn applied(env: &Env) -> Option<u64> {
    members(env)["progress"][&env.ip]["applied_index"].as_u64()
}

/// Waits until every member reports the same applied index and keeps it for a second
/// (nothing in flight: a minion still connected, or the master's own upkeep, may be
/// writing), then stops them all (cleanly) and returns each one's state digest and
/// applied index, read offline by `halite-ctl verify`.
pub(crate) fn settled_digests(c: &mut Cluster) -> Vec<(String, u64)> {
    let mut same_since: Option<(u64, std::time::Instant)> = None;
    wait_for("every member at the same applied index for a second", 60, || {
        let a: Vec<Option<u64>> = c.envs.iter().map(applied).collect();
        let now = match a[0] {
            Some(i) if a.iter().all(|x| *x == a[0]) => i,
            _ => {
                same_since = None;
                return false;
            }
        };
        match same_since {
            Some((i, t)) if i == now => t.elapsed() >= std::time::Duration::from_secs(1),
            _ => {
                same_since = Some((now, std::time::Instant::now()));
                false
            }
        }
    });
    for i in 0..c.envs.len() {
        c.stop(i);
    }
    c.envs.iter().map(digest).collect()
}

/// A stopped member's state digest and applied index (`halite-ctl verify`).
fn digest(env: &Env) -> (String, u64) {
    let out = env.run(CTL, &["verify"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let after = |what: &str| text.lines().find_map(|l| l.split_once(what).map(|(_, r)| r.trim().to_string()));
    let d = after("state digest ").unwrap_or_else(|| panic!("{}: no state digest in verify's output:\n{text}", env.ip));
    let a = after("state machine applied ").and_then(|r| r.split(',').next()?.trim().parse().ok()).unwrap_or_else(|| panic!("{}: no applied index in:\n{text}", env.ip));
    (d, a)
}

pub(crate) fn assert_same_digests(c: &mut Cluster) {
    let d = settled_digests(c);
    assert!(d.iter().all(|x| x == &d[0]), "state digests (digest, applied index) differ between members: {d:?}");
}

/// Empties a member's disk: its log and state, its key view and the cluster's pki
/// (isolated filesystem: its own copy) and its cache.
fn wipe(env: &Env) {
    for d in ["data", "pki", "cpki", "cache"] {
        match std::fs::remove_dir_all(env.root.join(d)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("wiping {d}: {e}"),
        }
    }
}

/// A real salt-minion signed in to member `on`, its key accepted through member `by`,
/// answering jobs published through every member.
pub(crate) fn served(c: &Cluster, id: &str, on: usize, by: usize) -> Proc {
    let env = &c.envs[on];
    let minion = start_minion(&env.root, id, &format!("master: {}\nmaster_port: {}\n", env.ip, env.ret));
    wait_for("the real minion's key pending on the accepting member", 90, || c.envs[by].ids("minions_pre").iter().any(|k| k == id));
    c.envs[by].ok(SALT_KEY, &["-a", id, "-y"]);
    wait_minion_ready(&env.root, id, 1, 90);
    for e in &c.envs {
        wait_ping(e, id, 90);
    }
    minion
}

#[test]
fn a_wiped_member_joins_again_as_a_new_incarnation_and_serves_a_minion() {
    let mut c = three();
    accepted_key(&c, "k1", 0, 1);
    accepted_key(&c, "k2", 1, 2);
    // The third member dies and comes back on an empty disk, same config.
    if let Some(mut p) = c.procs[2].take() {
        p.kill9();
    }
    wipe(&c.envs[2]);
    c.procs[2] = Some(start_master(&c.envs[2]));
    let ips: Vec<String> = c.ips().iter().map(|s| s.to_string()).collect();
    wait_for("three voters again, the old incarnation gone", 90, || {
        let m = members(&c.envs[0]);
        m["voters"] == json!(ips) && m["learner_count"] == 0 && m["voter_count"] == 3
    });
    let log = c.envs[2].master_log();
    assert_eq!(log.matches("bootstrapped with its founding voters").count(), 1, "founded once, at the first start, never again:\n{log}");
    assert!(log.contains("joining again as a new incarnation"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    let m = members(&c.envs[2]);
    assert!(m["term"].as_u64().is_some_and(|t| t > 1), "the wiped member took the cluster's term: {m}");
    wait_for("the keys on the wiped member", 60, || c.envs[2].ids("minions") == ["k1", "k2"]);
    // It serves: a real minion signs in to it, accepted through another member, and
    // answers jobs published through each.
    let mut minion = served(&c, "after-wipe", 2, 0);
    assert_eq!(c.envs[2].salt_json(&["after-wipe", "test.echo", "from-the-wiped"], 20), json!({"after-wipe": "from-the-wiped"}));
    minion.stop();
    for env in &c.envs {
        assert_eq!(env.ids("minions"), ["after-wipe", "k1", "k2"], "{}", env.ip);
    }
    assert_same_digests(&mut c);
    // And it starts again as the incarnation it became (no new join, no founding).
    c.procs[2] = Some(start_master(&c.envs[2]));
    let log = c.envs[2].master_log();
    assert_eq!(log.matches("joining again as a new incarnation (never founding anew)").count(), 1, "{log}");
    assert_eq!(c.envs[2].ids("minions"), ["after-wipe", "k1", "k2"]);
}

/// A member killed with `kill -9` restarts with its state machine behind its own log
/// (it replays the tail) and its key view ahead of that state: a key the cluster deleted
/// while it was down must not come back from its view.
#[test]
fn a_key_deleted_while_a_member_was_down_stays_deleted_after_it_restarts() {
    let mut c = three();
    register_key(&c.envs[0], "gone");
    for env in &c.envs {
        wait_for("the pending key on every member's view", 30, || env.ids("minions_pre").iter().any(|k| k == "gone"));
    }
    if let Some(mut p) = c.procs[2].take() {
        p.kill9();
    }
    let out = c.envs[0].ok(SALT_KEY, &["-d", "gone", "-y"]);
    assert!(out.contains("Key for minion gone deleted."), "{out}");
    register_key(&c.envs[1], "after");
    wait_for("the later key pending on the first member", 30, || c.envs[0].ids("minions_pre").iter().any(|k| k == "after"));
    c.envs[0].ok(SALT_KEY, &["-a", "after", "-y"]);
    c.procs[2] = Some(start_master(&c.envs[2]));
    wait_for("the restarted member to apply what it missed", 60, || c.envs[2].ids("minions").iter().any(|k| k == "after"));
    settle(&c);
    for env in &c.envs {
        let l = env.listing();
        assert!(!l.to_string().contains("\"gone\""), "{}: the deleted key came back: {l}", env.ip);
    }
    assert_same_digests(&mut c);
}

// ---------------------------------------------------------------------------------------
// Killed with kill -9: the leader under load, then the whole cluster.

/// The ips of the cluster, in member order.
fn ips(c: &Cluster) -> Vec<String> {
    c.ips().iter().map(|s| s.to_string()).collect()
}

/// The member index of the current leader, as member `via` reports it.
pub(crate) fn leader(c: &Cluster, via: usize) -> usize {
    let mut at = None;
    wait_for("a leader", 60, || {
        at = members(&c.envs[via])["leader_id"].as_str().and_then(|l| ips(c).iter().position(|ip| ip == l));
        at.is_some()
    });
    at.unwrap_or_default()
}

/// Every (minion, returned value) of the `test.echo` jobs in a member's job cache,
/// read job by job (`jobs.list_jobs`, then `jobs.lookup_jid` for each).
pub(crate) fn echo_returns(env: &Env) -> std::collections::BTreeSet<(String, String)> {
    let jobs = env.runner(&["jobs.list_jobs"]);
    let mut out = std::collections::BTreeSet::new();
    for (jid, job) in jobs.as_object().into_iter().flatten() {
        if job["Function"] != "test.echo" {
            continue;
        }
        for (minion, ret) in env.runner(&["jobs.lookup_jid", jid]).as_object().into_iter().flatten() {
            out.insert((minion.clone(), ret.as_str().unwrap_or_default().to_string()));
        }
    }
    out
}

/// Waits until every member reports the same applied index.
pub(crate) fn settle(c: &Cluster) {
    wait_for("every member at the same applied index", 60, || {
        let a: Vec<Option<u64>> = c.envs.iter().map(applied).collect();
        a[0].is_some() && a.iter().all(|x| *x == a[0])
    });
}

/// What the clients were told succeeded: the (minion, echoed value) returns `salt`
/// printed, and the keys `salt-key -a` reported accepted.
#[derive(Default)]
struct Acked {
    returns: Vec<(String, String)>,
    keys: Vec<String>,
}

/// Every acknowledged return and key is on every member, and the members agree on every
/// return and key they hold (record by record), then on their state digests.
fn assert_every_member_holds(c: &mut Cluster, acked: &Acked) {
    settle(c);
    let first = echo_returns(&c.envs[0]);
    for env in &c.envs {
        let returns = echo_returns(env);
        for r in &acked.returns {
            assert!(returns.contains(r), "{}: the acknowledged return {r:?} is missing", env.ip);
        }
        assert_eq!(returns, first, "{}: the returns differ from the first member's", env.ip);
        let accepted = env.ids("minions");
        for k in &acked.keys {
            assert!(accepted.contains(k), "{}: the acknowledged accept of {k} is missing: {accepted:?}", env.ip);
        }
        assert_eq!(env.listing(), c.envs[0].listing(), "{}: the keys differ from the first member's", env.ip);
    }
    assert_same_digests(c);
}

#[test]
fn a_whole_cluster_killed_and_started_again_holds_the_same_state_and_serves() {
    let mut c = three();
    let mut minion = served(&c, "before", 1, 2);
    let mut acked = Acked::default();
    for i in 0..3 {
        let v = format!("r{i}");
        assert_eq!(c.envs[i].salt_json(&["before", "test.echo", &v], 20), json!({"before": v}));
        acked.returns.push(("before".into(), v));
    }
    accepted_key(&c, "k1", 0, 2);
    acked.keys.extend(["before".into(), "k1".into()]);
    minion.stop();
    for p in c.procs.iter_mut().filter_map(Option::take) {
        let mut p = p;
        p.kill9();
    }
    // All three again, together (each waits for a quorum).
    c.procs = c.envs.iter().map(|e| Some(spawn_master(e))).collect();
    for env in &c.envs {
        wait_master(env);
    }
    leader(&c, 0);
    for env in &c.envs {
        assert_eq!(echo_returns(env).len(), 3, "{}", env.ip);
    }
    let mut minion = served(&c, "after-restart", 2, 0);
    assert_eq!(c.envs[1].salt_json(&["after-restart", "test.echo", "again"], 20), json!({"after-restart": "again"}));
    minion.stop();
    acked.keys.push("after-restart".into());
    assert_every_member_holds(&mut c, &acked);
}

#[test]
fn every_acknowledged_return_and_accept_survives_a_leader_killed_under_load() {
    let mut c = three();
    let l = leader(&c, 0);
    let s = (l + 1) % 3;
    let mut minion = served(&c, "streaming", s, s);
    let mut killed = c.procs[l].take().expect("the leader runs");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (nr, nk) = (std::sync::atomic::AtomicUsize::new(0), std::sync::atomic::AtomicUsize::new(0));
    let env = &c.envs[s];
    let mut acked = std::thread::scope(|sc| {
        use std::sync::atomic::Ordering::SeqCst;
        // The clients stop when this scope ends, also when a wait in it fails.
        struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, SeqCst);
            }
        }
        let _stop = Stop(&stop);
        // Returns stream in: jobs published through the survivor, one after another.
        let returns = sc.spawn(|| {
            let mut ok = Vec::new();
            for i in 0.. {
                if stop.load(SeqCst) {
                    break;
                }
                let v = format!("r{i}");
                if env.salt_json(&["streaming", "test.echo", &v], 10) == json!({"streaming": v}) {
                    ok.push(("streaming".to_string(), v));
                    nr.fetch_add(1, SeqCst);
                }
            }
            ok
        });
        // Keys: a new minion's key registered and accepted, one after another.
        let keys = sc.spawn(|| {
            let mut ok = Vec::new();
            for i in 0.. {
                if stop.load(SeqCst) {
                    break;
                }
                let id = format!("k{i}");
                register_key(env, &id);
                let out = env.run(SALT_KEY, &["-a", &id, "-y"]);
                if out.status.success() && String::from_utf8_lossy(&out.stdout).contains(&format!("Key for minion {id} accepted.")) {
                    ok.push(id);
                    nk.fetch_add(1, SeqCst);
                }
            }
            ok
        });
        wait_for("returns and accepts acknowledged before the kill", 120, || nr.load(SeqCst) >= 3 && nk.load(SeqCst) >= 2);
        killed.kill9();
        wait_for("another leader", 60, || members(env)["leader_id"].as_str().is_some_and(|id| id != c.envs[l].ip));
        let (r, k) = (nr.load(SeqCst), nk.load(SeqCst));
        wait_for("returns and accepts acknowledged after the kill", 120, || nr.load(SeqCst) >= r + 3 && nk.load(SeqCst) >= k + 2);
        stop.store(true, SeqCst);
        Acked { returns: returns.join().expect("returns thread"), keys: keys.join().expect("keys thread") }
    });
    minion.stop();
    acked.keys.push("streaming".into());
    c.procs[l] = Some(start_master(&c.envs[l]));
    assert_every_member_holds(&mut c, &acked);
}

/// A master-driven batch run (`salt --async --batch`) goes on when the leader driving it
/// stops: the new leader reads from the log where the run stands and starts the rest,
/// one minion at a time, each once (proved by what the minions did).
#[test]
fn an_async_batch_goes_on_under_a_new_leader() {
    let mut c = crate::cluster::founding(3, "batch-failover", "auto_accept: True\n");
    let l = leader(&c, 0);
    // The minions sign in to a member that stays up.
    let home = (l + 1) % 3;
    let conf = format!("master: {}\nmaster_port: {}\n", c.envs[home].ip, c.envs[home].ret);
    let _minions: Vec<Proc> = ["m1", "m2", "m3"].iter().map(|id| start_minion(&c.envs[home].root, id, &conf)).collect();
    for id in ["m1", "m2", "m3"] {
        wait_ping(&c.envs[home], id, 120);
    }
    let log = c.envs[home].root.join("failover.log");
    let cmd = format!("echo start {{{{ grains['id'] }}}} >> {l}; sleep 2; echo end {{{{ grains['id'] }}}} >> {l}", l = log.display());
    let o = c.envs[home].salt(&["--async", "-b", "1", "*", "cmd.run", &cmd, "template=jinja"], 60);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let jid = out.trim().strip_prefix("Executed batch command with job ID: ").unwrap_or_else(|| panic!("no jid: {out}{}", String::from_utf8_lossy(&o.stderr))).to_string();
    let lines = || std::fs::read_to_string(&log).unwrap_or_default().lines().map(String::from).collect::<Vec<_>>();
    wait_for("m1 to start", 60, || lines().contains(&"start m1".to_string()));
    c.stop(l);
    let env = &c.envs[home];
    wait_for("the run to complete under the new leader", 120, || env.runner(&["batch.status", &jid])["completed"] == 3);
    assert_eq!(lines(), ["start m1", "end m1", "start m2", "end m2", "start m3", "end m3"]);
    assert_eq!(env.runner(&["jobs.list_job", &jid])["Minions"], json!(["m1", "m2", "m3"]));
    let s = env.runner(&["batch.status", &jid]);
    assert_eq!((&s["failed"], &s["halted"]), (&json!(0), &json!(false)), "{s}");
}
