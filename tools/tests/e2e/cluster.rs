//! A master cluster of three founding members on addresses of the test's own: one raft
//! group, keys replicated to every member's view, jobs published by every member, one
//! cluster key pair and one session/publish key, a member lost, restarted, retired; a real
//! salt-minion 3008.5 signed in to one member and answering jobs from another; the same
//! minion behind HAProxy in front of all three.

use std::process::Command;

use serde_json::json;

use crate::support::*;

/// Three founding members, each with its own ports.
pub(crate) fn three() -> Cluster {
    founding(3, "halite-test", "")
}

/// `n` founding members of cluster `cluster_id` on addresses of the test's own, each
/// with its own ports and `extra` appended to its config.
pub(crate) fn founding(n: u8, cluster_id: &str, extra: &str) -> Cluster {
    let ips = loopback(n);
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let pool = port_free_on(&ipr);
    Cluster::start(member_envs(&ips, pool, cluster_id, |_| extra.to_string()))
}

/// A key for `id` registered (pending) through member `on` and accepted through member
/// `by`; returns once every member's view has it accepted.
pub(crate) fn accepted_key(c: &Cluster, id: &str, on: usize, by: usize) {
    register_key(&c.envs[on], id);
    wait_for("the pending key on the accepting member", 30, || c.envs[by].ids("minions_pre").iter().any(|k| k == id));
    c.envs[by].ok(SALT_KEY, &["-a", id, "-y"]);
    for env in &c.envs {
        wait_for("the accepted key on every member", 30, || env.ids("minions").iter().any(|k| k == id));
    }
}

#[test]
fn three_founding_masters_agree_on_three_voters() {
    let c = three();
    let m = members(&c.envs[1]);
    assert_eq!(m["voters"], json!(c.ips()), "{m}");
    assert_eq!((m["voter_count"].as_u64(), m["node_id"].as_str()), (Some(3), Some(c.envs[1].ip.as_str())), "{m}");
    // Each member records its build in the log (docs/operations.md, "Upgrading a
    // cluster"); every member lists all three, and the cluster's record set.
    let builds = |m: &serde_json::Value| m["releases"].as_object().map(|r| r.keys().cloned().collect::<std::collections::BTreeSet<_>>());
    let ips: std::collections::BTreeSet<String> = c.ips().into_iter().map(String::from).collect();
    for env in &c.envs {
        wait_for("every member's build in the log", 30, || builds(&members(env)).as_ref() == Some(&ips));
    }
    let m = members(&c.envs[0]);
    assert!(m["releases"].as_object().unwrap().values().all(|r| r["record_set"] == 1 && r["release"].as_str().is_some_and(|s| s.starts_with("halite "))), "{m}");
    assert_eq!(m["record_set"], 1, "{m}");
}

// ---------------------------------------------------------------------------------------
// Simulated minions signed in to the third member.

/// Two simulated minions signing in to the third member (pending until accepted; they
/// retry every second). Its key pairs are in the first member's `keys/`.
fn swarm_on_third(c: &Cluster) -> (Proc, Lines) {
    let third = &c.envs[2];
    let mut cmd = Command::new(SWARM);
    cmd.args(["--master", &third.ip, "--port", &third.ret.to_string(), "--count", "2", "--acceptance-wait", "1"]).arg("--key-dir").arg(c.envs[0].root.join("keys"));
    Proc::spawn_lines("halite-swarm", &mut cmd, &c.envs[0].root.join("swarm.log"))
}

/// [`swarm_on_third`], accepted through the second member and signed in.
fn swarm_signed_in(c: &Cluster) -> (Proc, Lines) {
    let (p, mut lines) = swarm_on_third(c);
    wait_for("the pending keys on the second member", 60, || c.envs[1].ids("minions_pre") == ["swarm-0", "swarm-1"]);
    c.envs[1].ok(SALT_KEY, &["-A", "-y"]);
    lines.wait("the swarm to sign in", 60, |l| l.iter().any(|l| l.contains("\"ready\"")));
    (p, lines)
}

#[test]
fn a_key_pending_on_one_member_is_pending_on_every_member() {
    let c = three();
    let _swarm = swarm_on_third(&c);
    for env in &c.envs {
        wait_for("the pending keys on every member", 60, || env.ids("minions_pre") == ["swarm-0", "swarm-1"]);
    }
}

#[test]
fn a_key_accepted_on_one_member_is_accepted_in_every_members_view() {
    let c = three();
    let _swarm = swarm_on_third(&c);
    wait_for("the pending keys on the second member", 60, || c.envs[1].ids("minions_pre") == ["swarm-0", "swarm-1"]);
    c.envs[1].ok(SALT_KEY, &["-A", "-y"]);
    for env in &c.envs {
        wait_for("the accepted keys on every member", 30, || env.ids("minions") == ["swarm-0", "swarm-1"]);
        assert!(env.root.join("cpki/minions/swarm-0").exists(), "each member's own key view");
    }
}

#[test]
fn minions_signed_in_to_a_member_answer_jobs_published_through_it() {
    let c = three();
    let _swarm = swarm_signed_in(&c);
    assert_eq!(c.envs[2].salt_json(&["*", "test.ping"], 20), json!({"swarm-0": true, "swarm-1": true}));
}

#[test]
fn a_job_published_through_one_member_reaches_minions_signed_in_to_another() {
    // Every member publishes the jobs it applies, and the returns reach the member the
    // job came through.
    let c = three();
    let _swarm = swarm_signed_in(&c);
    assert_eq!(c.envs[0].salt_json(&["*", "test.echo", "via-the-log"], 20), json!({"swarm-0": "via-the-log", "swarm-1": "via-the-log"}));
}

/// A real minion `id` signing in to the third member: its key pending on every member,
/// accepted through the second, and the minion ready.
pub(crate) fn real_minion_on_the_third(c: &Cluster, id: &str) -> Proc {
    let third = &c.envs[2];
    let minion = start_minion(&third.root, id, &format!("master: {}\nmaster_port: {}\n", third.ip, third.ret));
    for env in &c.envs {
        wait_for("the real minion's key pending on every member", 90, || env.ids("minions_pre") == [id]);
    }
    c.envs[1].ok(SALT_KEY, &["-a", id, "-y"]);
    wait_minion_ready(&third.root, id, 1, 90);
    minion
}

#[test]
fn a_real_minion_signs_in_to_one_member_and_answers_jobs_published_through_another() {
    let c = three();
    let _minion = real_minion_on_the_third(&c, "real-1");
    wait_ping(&c.envs[0], "real-1", 90);
    assert_eq!(c.envs[1].salt_json(&["real-1", "test.echo", "through-the-second"], 20), json!({"real-1": "through-the-second"}));
}

// ---------------------------------------------------------------------------------------
// One cluster identity: a minion signed in to one member is known to all.

/// A minion identity accepted cluster-wide (pending through the third member, accepted
/// through the second), signed in by hand to the third member and then to the first,
/// which must sign with the key the minion cached from the third and echo its token.
struct TwoSignIns {
    on3: WireMinion,
    on1: WireMinion,
}

fn two_sign_ins(c: &Cluster) -> TwoSignIns {
    let id = "hand-0";
    let pem = halite_master::wire::crypto::PrivateKey::generate(2048).expect("key pair").to_pem().expect("pem");
    let me = || Identity::new(id.to_string(), halite_master::wire::crypto::PrivateKey::from_pem(&pem).expect("key")).expect("identity");
    let (third, first) = (&c.envs[2], &c.envs[0]);
    assert!(WireMinion::try_sign_in_with(&third.ip, third.ret, me(), None).is_err(), "a new key was let in without an operator");
    wait_for("the pending key on the second member", 30, || c.envs[1].ids("minions_pre") == [id]);
    c.envs[1].ok(SALT_KEY, &["-a", id, "-y"]);
    wait_for("the accepted key on the first member", 30, || first.ids("minions") == [id]);
    let on3 = WireMinion::try_sign_in_with(&third.ip, third.ret, me(), None).expect("signed in to the third member");
    let on1 = WireMinion::try_sign_in_with(&first.ip, first.ret, me(), Some(&on3.creds.master_pub)).expect("the first member signs with the cluster key the minion cached from the third");
    TwoSignIns { on3, on1 }
}

#[test]
fn every_member_hands_out_the_same_session_and_publish_keys() {
    let c = three();
    let t = two_sign_ins(&c);
    assert_eq!(t.on1.creds.session.key_string(), t.on3.creds.session.key_string(), "one session key cluster-wide");
    assert_eq!(t.on1.creds.aes.key_string(), t.on3.creds.aes.key_string(), "one publish key cluster-wide");
}

#[test]
fn a_request_sealed_for_one_member_is_accepted_by_another() {
    let c = three();
    let t = two_sign_ins(&c);
    let job = halite_tools::swarm::minion::Job { jid: "20261122000000000042".into(), fun: "test.ping".into(), arg: vec![], user: None, matched: true };
    let (body, nonce) = halite_tools::swarm::minion::aes_request(&t.on3.me, &t.on3.creds.session, halite_tools::swarm::minion::return_load(&job)).expect("request");
    // Sealed with the session from the third, sent to the second.
    let reply = t.on3.send_to(&c.envs[1].ip, c.envs[1].ret, body);
    assert!(matches!(halite_tools::swarm::minion::aes_reply(&t.on3.creds.session, &nonce, &reply).expect("reply"), AesReply::Value(_)), "the second member refused the session from the third");
    wait_for("the return in the first member's job cache", 30, || c.envs[0].runner(&["jobs.lookup_jid", "20261122000000000042"]) == json!({"hand-0": true}));
}

#[test]
fn every_member_holds_the_same_cluster_key_pair() {
    let c = three();
    let first = std::fs::read(c.envs[0].root.join("cpki/cluster.pub")).expect("cluster.pub");
    for env in &c.envs {
        assert!(env.root.join("cpki/cluster.pem").exists(), "the cluster key pair is written to cluster_pki_dir");
        assert_eq!(std::fs::read(env.root.join("cpki/cluster.pub")).expect("cluster.pub"), first, "{}", env.ip);
    }
}

// ---------------------------------------------------------------------------------------
// Losing, restarting and retiring members.

#[test]
fn two_of_three_members_keep_changing_keys() {
    let mut c = three();
    accepted_key(&c, "k1", 2, 1);
    c.stop(0);
    c.envs[1].ok(SALT_KEY, &["-d", "k1", "-y"]);
    wait_for("the delete on the third member", 30, || c.envs[2].ids("minions").is_empty());
}

#[test]
fn a_restarted_member_catches_up_from_the_log() {
    let mut c = three();
    accepted_key(&c, "k1", 2, 1);
    accepted_key(&c, "k2", 2, 1);
    c.stop(0);
    c.envs[1].ok(SALT_KEY, &["-d", "k2", "-y"]);
    wait_for("the delete on the third member", 30, || c.envs[2].ids("minions") == ["k1"]);
    c.restart(0);
    wait_for("the first member to catch up", 60, || c.envs[0].ids("minions") == ["k1"]);
}

/// A minion first seen while a member was down is accepted; the
/// member restarts and the minion signs in through it at once, possibly before it has
/// caught up. Whatever that member read, the log decides: the minion is let in and its
/// key stays accepted on every member (the stale member's "pending" must not undo the
/// accept everywhere). In practice the restarted member does decide "pending" from its
/// stale state here (its log says "key change skipped" for that record), then answers
/// from the applied state.
#[test]
fn a_member_behind_cannot_undo_an_accept() {
    let mut c = three();
    c.stop(0);
    let key = halite_master::wire::crypto::PrivateKey::generate(2048).expect("key pair");
    let pem = key.to_pem().expect("pem");
    let me = || Identity::new("late".to_string(), halite_master::wire::crypto::PrivateKey::from_pem(&pem).expect("key")).expect("identity");
    assert!(WireMinion::try_sign_in_with(&c.envs[1].ip, c.envs[1].ret, me(), None).is_err(), "pending first");
    wait_for("the pending key on the third member", 30, || c.envs[2].ids("minions_pre") == ["late"]);
    c.envs[2].ok(SALT_KEY, &["-a", "late", "-y"]);
    wait_for("the accept on the second member", 30, || c.envs[1].ids("minions") == ["late"]);
    c.restart(0);
    let env = &c.envs[0];
    WireMinion::try_sign_in_with(&env.ip, env.ret, me(), None).unwrap_or_else(|e| panic!("the accepted minion was not let in through the restarted member: {e}"));
    for env in &c.envs {
        wait_for("the key accepted on every member", 30, || env.ids("minions") == ["late"]);
        assert!(env.ids("minions_pre").is_empty(), "{}: {:?}", env.ip, env.ids("minions_pre"));
    }
}

#[test]
fn a_retired_member_leaves_a_two_voter_cluster_that_keeps_changing_keys() {
    let mut c = three();
    accepted_key(&c, "k1", 2, 1);
    // Stopped, then removed from the membership: the other two are the whole quorum.
    c.stop(2);
    let out = c.envs[0].runner(&["cluster.remove_member", &c.envs[2].ip]);
    assert_eq!(out["voters"], json!([c.envs[0].ip, c.envs[1].ip]), "{out}");
    wait_for("the second member to see two voters", 30, || members(&c.envs[1])["voter_count"] == 2);
    c.envs[1].ok(SALT_KEY, &["-d", "k1", "-y"]);
    wait_for("the delete on the first member", 30, || c.envs[0].ids("minions").is_empty());
}

// ---------------------------------------------------------------------------------------
// Behind a load balancer.

/// Three members with the same ports, HAProxy in TCP mode on a fourth address in front of
/// both ports (round robin, dead members skipped), and an unmodified salt-minion that
/// only knows the balancer.
struct Balanced {
    _minion: Proc,
    _haproxy: Proc,
    c: Cluster,
}

fn balanced() -> Balanced {
    let ips = loopback(4);
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let (members, lb) = (&ips[..3], &ips[3]);
    let (ret, publish) = two_ports_on(&ipr);
    let pool = port_free_on(&ipr);
    let envs = members
        .iter()
        .map(|ip| {
            let peers: Vec<&str> = ipr[..3].iter().copied().filter(|p| p != ip).collect();
            Env::master_on(ip, ret, publish, "localfs_key", &member_conf(ip, &peers, pool, "lb-test", "s3cret"))
        })
        .collect();
    let c = Cluster::start(envs);
    let backend = |name: &str, port: u16| -> String {
        let servers: String = members.iter().enumerate().map(|(i, ip)| format!("  server m{i} {ip}:{port} check inter 500ms fall 1 rise 1\n")).collect();
        format!("frontend {name}\n  bind {lb}:{port}\n  default_backend {name}_members\nbackend {name}_members\n  balance roundrobin\n{servers}")
    };
    let cfg = c.envs[0].root.join("haproxy.cfg");
    std::fs::write(&cfg, format!("global\n  maxconn 2048\ndefaults\n  mode tcp\n  timeout connect 1s\n  timeout client 1h\n  timeout server 1h\n{}{}", backend("ret", ret), backend("pub", publish)))
        .expect("haproxy.cfg");
    let haproxy = Proc::spawn_logged("haproxy (scripts/setup.sh installs it)", Command::new("haproxy").arg("-f").arg(&cfg).arg("-db"), &c.envs[0].root.join("haproxy.out"));
    wait_for("haproxy to listen", 20, || std::net::TcpStream::connect((lb.as_str(), ret)).is_ok());
    let minion = start_minion(&c.envs[0].root, "m1", &format!("master: {lb}\nmaster_port: {ret}\n"));
    Balanced { _minion: minion, _haproxy: haproxy, c }
}

/// [`balanced`] with the minion's key accepted through the second member and the minion
/// answering through the first.
fn balanced_and_served() -> Balanced {
    let b = balanced();
    wait_for("m1's key pending on the second member", 90, || b.c.envs[1].ids("minions_pre") == ["m1"]);
    b.c.envs[1].ok(SALT_KEY, &["-a", "m1", "-y"]);
    wait_minion_ready(&b.c.envs[0].root, "m1", 1, 90);
    wait_ping(&b.c.envs[0], "m1", 120);
    b
}

#[test]
fn a_minion_behind_a_load_balancer_is_pending_on_every_member() {
    let b = balanced();
    for env in &b.c.envs {
        wait_for("m1's key pending on every member", 90, || env.ids("minions_pre") == ["m1"]);
    }
}

#[test]
fn a_minion_behind_a_load_balancer_answers_jobs_published_through_any_member() {
    // Answered through whichever member the balancer picked for each connection.
    let b = balanced_and_served();
    for env in &b.c.envs {
        assert_eq!(env.salt_json(&["m1", "test.echo", "lb"], 20), json!({"m1": "lb"}), "through {}", env.ip);
    }
}

/// Whether some established TCP connection has `ip:port` as its local end (this host's
/// `/proc/net/tcp`, where every master's sockets are).
fn has_established(ip: &str, port: u16) -> bool {
    let ip: std::net::Ipv4Addr = ip.parse().expect("an IPv4 address");
    let local = format!("{:08X}:{port:04X}", u32::from_le_bytes(ip.octets()));
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1] == local && f[3] == "01"
    })
}

/// The member holding the minion's subscription (the balancer's connection to its
/// publish port; the only lasting one, as the balancer's checks close at once): the one
/// member with an established connection there in ten samples 50 ms apart.
fn subscription_holder(c: &Cluster) -> Option<usize> {
    let mut held = vec![true; c.envs.len()];
    for _ in 0..10 {
        for (i, env) in c.envs.iter().enumerate() {
            held[i] &= has_established(&env.ip, env.publish);
        }
        // The spacing of the samples (a lasting connection is one seen in all ten).
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let holders: Vec<usize> = (0..held.len()).filter(|i| held[*i]).collect();
    (holders.len() == 1).then(|| holders[0])
}

#[test]
fn a_minion_behind_a_load_balancer_survives_the_member_holding_its_connection_stopping() {
    // The minion's subscription to the stopped member breaks, the balancer sends it to
    // another, and jobs keep working.
    let mut b = balanced_and_served();
    let mut holder = None;
    wait_for("one member holding the minion's subscription", 30, || {
        holder = subscription_holder(&b.c);
        holder.is_some()
    });
    let h = holder.expect("a holder");
    b.c.stop(h);
    let other = (h + 1) % 3;
    wait_for("test.ping after the member holding the minion stopped", 120, || ping_via(&b.c.envs[other], "m1", 5));
    let now = subscription_holder(&b.c);
    assert!(now.is_some_and(|n| n != h), "the subscription did not move to another member: {now:?}");
}

