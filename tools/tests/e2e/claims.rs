//! Claims of `docs/operations.md` about a cluster, each checked against real masters:
//!
//! - With a majority of members down, writes wait (and fail with an error that says why)
//!   while reads go on; once a majority is back, the same write succeeds.
//! - A key rejected through one member rotates the AES key on every member: a real
//!   minion connected through another member signs in again and keeps answering, the
//!   rejected minion is refused.
//! - A member whose cluster key pair does not match its `cluster_pub_fingerprint`
//!   refuses to serve (and serves with the right pin).
//! - A member joining a cluster whose log was compacted (`cluster_max_log_size`) is given
//!   the state as a snapshot over the peer transport (Salt's `state-sync ... installed N
//!   items` line), catches up on the tail, serves a real minion, and ends with the same
//!   state digest as the founders.

use serde_json::json;

use crate::cluster::{accepted_key, three};
use crate::faults::{assert_same_digests, served, settle};
use crate::support::*;

/// What a tool printed, both streams.
fn said(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn with_a_majority_down_writes_wait_and_fail_while_reads_go_on_until_the_majority_is_back() {
    let mut c = three();
    accepted_key(&c, "k1", 0, 1);
    register_key(&c.envs[0], "waiting");
    for env in &c.envs {
        wait_for("the pending key on every member", 30, || env.ids("minions_pre") == ["waiting"]);
    }
    c.stop(1);
    c.stop(2);
    let s = &c.envs[0];
    // Reads answer on the survivor.
    assert_eq!((s.ids("minions"), s.ids("minions_pre")), (vec!["k1".to_string()], vec!["waiting".to_string()]));
    let m = members(s);
    assert_eq!(m["voter_count"], 3, "{m}");
    wait_for("the survivor to lose its leader", 60, || members(s)["leader_id"].is_null());
    // A write waits, then fails and says so; nothing changed.
    let o = s.run(SALT_KEY, &["-a", "waiting", "-y"]);
    let text = said(&o);
    assert!(!text.contains("Key for minion waiting accepted."), "an accept succeeded without a majority: {text}");
    assert!(text.contains("no leader was elected in time"), "the error does not say why: {text}");
    assert_eq!(s.ids("minions_pre"), ["waiting"]);
    // One member back: a majority again, and the same write succeeds.
    c.procs[1] = Some(spawn_master(&c.envs[1]));
    let s = &c.envs[0];
    wait_for("the accept to succeed once a majority is back", 90, || said(&s.run(SALT_KEY, &["-a", "waiting", "-y"])).contains("Key for minion waiting accepted."));
    wait_for("the accept on the member that came back", 60, || c.envs[1].ids("minions") == ["k1", "waiting"]);
}

/// An identity with a fixed key (it can sign in again).
fn identity(id: &str) -> impl Fn() -> Identity {
    let pem = halite_master::wire::crypto::PrivateKey::generate(2048).expect("key pair").to_pem().expect("pem");
    let id = id.to_string();
    move || Identity::new(id.clone(), halite_master::wire::crypto::PrivateKey::from_pem(&pem).expect("key")).expect("identity")
}

/// Signs `me` in to member `on` of `c`, its key accepted through member `by` first.
fn signed_in(c: &Cluster, me: &dyn Fn() -> Identity, on: usize, by: usize) -> WireMinion {
    let (env, id) = (&c.envs[on], me().id);
    assert!(WireMinion::try_sign_in_with(&env.ip, env.ret, me(), None).is_err(), "pending first");
    wait_for("the pending key on the accepting member", 30, || c.envs[by].ids("minions_pre").contains(&id));
    c.envs[by].ok(SALT_KEY, &["-a", &id, "-y"]);
    wait_for("the accepted key on the member signed in to", 30, || env.ids("minions").contains(&id));
    WireMinion::try_sign_in_with(&env.ip, env.ret, me(), None).expect("signed in")
}

/// The publish (AES) key each member hands out to a signing-in minion.
fn aes_keys(c: &Cluster, probe: &dyn Fn() -> Identity) -> Vec<String> {
    c.envs.iter().map(|e| WireMinion::try_sign_in_with(&e.ip, e.ret, probe(), None).expect("probe signed in").creds.aes.key_string().to_string()).collect()
}

#[test]
fn a_key_rejected_through_one_member_rotates_the_aes_key_on_every_member() {
    let c = three();
    let probe = identity("probe");
    signed_in(&c, &probe, 2, 2);
    let before = aes_keys(&c, &probe);
    assert!(before.iter().all(|k| k == &before[0]), "one AES key cluster-wide");
    // A real minion connected through the second member; one to be rejected, through the
    // first.
    let _keep = served(&c, "keep", 1, 2);
    let bad_id = identity("bad");
    let bad = signed_in(&c, &bad_id, 0, 1);
    let out = c.envs[0].ok(SALT_KEY, &["-r", "bad", "--include-accepted", "-y"]);
    assert!(out.contains("Key for minion bad rejected."), "{out}");
    // Every member installs the same new key.
    let mut after = Vec::new();
    wait_for("a new AES key on every member", 60, || {
        after = aes_keys(&c, &probe);
        after.iter().all(|k| k != &before[0] && k == &after[0])
    });
    for env in &c.envs {
        assert!(env.master_log().contains("cluster AES key rotated"), "{}", env.ip);
    }
    // The minion connected through the second member signs in again (its publishes no
    // longer decrypt with the old key) and answers jobs published through each member.
    for env in &c.envs {
        wait_ping(env, "keep", 120);
    }
    // The rejected minion: its old session is refused, and it cannot sign in again.
    assert!(matches!(bad.ask(load(&[("cmd", "_pillar".into()), ("id", "bad".into())])), AesReply::BadLoad), "the rejected minion's old session still works");
    for env in &c.envs {
        assert!(WireMinion::try_sign_in_with(&env.ip, env.ret, bad_id(), None).is_err(), "{}: the rejected minion signed in", env.ip);
    }
}

/// Sends `_auth` for `n` new ids (one key shared) to `env`: each becomes a pending key, a
/// record and a log entry of its own. One at a time: sign-ins made at once would share
/// entries (groups, formats.md §1.1), and the caller counts entries.
fn pending_keys(env: &Env, prefix: &str, n: usize) {
    use halite_tools::swarm::minion;
    let pem = halite_master::wire::crypto::PrivateKey::generate(2048).expect("key pair").to_pem().expect("pem");
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let ep = format!("tcp://{}:{}", env.ip, env.ret);
    for i in 0..n {
        let me = Identity::new(format!("{prefix}-{i:05}"), halite_master::wire::crypto::PrivateKey::from_pem(&pem).expect("key")).expect("identity");
        // Retried after a timeout, as a minion retries its sign-in (a request in flight
        // during an election under load may go unanswered).
        let answered = (0..3).any(|_| {
            let body = minion::auth_request(&me, &minion::nonce(), None).expect("auth request");
            rt.block_on(minion::request_once(&ep, body, std::time::Duration::from_secs(20), "auth")).is_ok()
        });
        assert!(answered, "{prefix}-{i:05}: no answer to three sign-ins");
    }
}

#[test]
fn a_member_joining_after_compaction_gets_a_snapshot_catches_up_and_serves() {
    // cluster_max_log_size 1: the policy's floor (1000 entries since the last snapshot)
    // decides; the 1,100 sign-ins are made one at a time, so that each is an entry.
    let ips = loopback(4);
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let pool = port_free_on(&ipr);
    let conf = |ip: &str, peers: &[&str]| Env::master(ip, "localfs_key", &format!("cluster_max_log_size: 1\n{}", member_conf(ip, peers, pool, "compacted", "s3cret")));
    let envs = (0..3).map(|i| conf(&ips[i], &ipr[..3].iter().copied().filter(|p| *p != ips[i]).collect::<Vec<_>>())).collect();
    let mut c = Cluster::start(envs);
    pending_keys(&c.envs[0], "bulk", 1100);
    for env in &c.envs {
        wait_for("a compaction on every founder", 120, || env.master_log().contains("log compacted by the policy"));
    }
    // A change after the snapshot: the joiner gets it from the log's tail.
    accepted_key(&c, "late-key", 1, 2);
    settle(&c);
    // The fourth master knows only the first founder and starts on an empty disk.
    let joiner = conf(&ips[3], &[&ips[0]]);
    c.procs.push(Some(spawn_master(&joiner)));
    c.envs.push(joiner);
    let j = &c.envs[3];
    wait_master(j);
    let log = j.master_log();
    let items = log.lines().find_map(|l| l.split_once("installed ").filter(|_| l.contains("state-sync snapshot-")).and_then(|(_, r)| r.split(' ').next()?.parse::<u64>().ok()));
    assert!(items.is_some_and(|n| n > 1000), "no state-sync line with the snapshot's items in the joiner's log:\n{log}");
    wait_for("the joiner promoted to voter", 60, || members(&c.envs[0])["voter_count"] == 4);
    wait_for("the joiner's view of the keys", 60, || j.ids("minions") == ["late-key"] && j.ids("minions_pre").len() == 1100);
    // It serves: a real minion signs in through it, accepted through a founder.
    let mut minion = served(&c, "after-join", 3, 0);
    assert_eq!(c.envs[3].salt_json(&["after-join", "test.echo", "joined"], 20), json!({"after-join": "joined"}));
    minion.stop();
    assert_same_digests(&mut c);
}

#[test]
fn a_member_refuses_to_serve_with_a_cluster_key_pair_that_does_not_match_its_pin() {
    let mut c = three();
    accepted_key(&c, "k1", 0, 1);
    let right = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(c.envs[0].root.join("cpki/cluster.pub")).expect("cluster.pub")))
    };
    // A member already in the cluster (its log holds the key pair) restarted with a pin
    // to another key: it exits, saying why, and never opens its ports.
    c.stop(2);
    let env = &c.envs[2];
    let conf = std::fs::read_to_string(env.root.join("conf/master")).expect("config");
    env.append_conf(&format!("cluster_pub_fingerprint: {}\n", "ab".repeat(32)));
    let mut p = spawn_master(env);
    let status = p.wait_exit("the wrongly pinned member to exit", 60);
    assert!(!status.success());
    let log = env.master_log();
    assert!(log.contains("not the configured cluster_pub_fingerprint") && log.contains("refusing to serve") && log.contains(&right), "{log}");
    assert!(std::net::TcpStream::connect((env.ip.as_str(), env.ret)).is_err(), "the request port is open");
    // Pinned to the cluster's key (upper case: case does not matter), it serves.
    std::fs::write(env.root.join("conf/master"), format!("{conf}cluster_pub_fingerprint: {}\n", right.to_uppercase())).expect("config");
    c.procs[2] = Some(start_master(&c.envs[2]));
    assert_eq!(c.envs[2].ids("minions"), ["k1"]);
    accepted_key(&c, "k2", 2, 2);
}
