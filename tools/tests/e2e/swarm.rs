//! `halite-swarm` across restarts: against a cluster, its simulated minions keep
//! answering jobs published through every member after the member they are connected to
//! restarted (their broken return socket is replaced; before, every return after the
//! restart was lost and `salt` said "Minion did not return"); against a lone master,
//! 200 of them answer again after it restarts (without signing in: the publish key is
//! kept) and after its publish key changes (each signs in again, as salt-minion does).
//! One swarm process can also spread its minions over the members of a cluster (no
//! balancer in front), so a fleet larger than one process's file limit is several
//! processes with their own ranges of ids. A swarm started before its master signs in
//! once the master listens (each minion retries its first sign-in, as salt-minion does).
//! With `--blast`, the swarm holds its publishes and then sends all their returns at
//! once: every one is acknowledged and stored (the returns benchmark, `returns.py`).

use std::process::Command;

use serde_json::{json, Value};

use crate::cluster::three;
use crate::support::*;

#[test]
fn swarm_minions_keep_returning_after_their_member_restarts() {
    let mut c = three();
    let on = &c.envs[1];
    let mut cmd = Command::new(SWARM);
    cmd.args(["--master", &on.ip, "--port", &on.ret.to_string(), "--count", "2", "--acceptance-wait", "1"]).arg("--key-dir").arg(c.envs[0].root.join("keys"));
    let (_swarm, mut lines) = Proc::spawn_lines("halite-swarm", &mut cmd, &c.envs[0].root.join("swarm.log"));
    wait_for("the swarm's keys pending", 60, || c.envs[2].ids("minions_pre") == ["swarm-0", "swarm-1"]);
    c.envs[2].ok(SALT_KEY, &["-A", "-y"]);
    lines.wait("the swarm to sign in", 60, |l| l.iter().any(|l| l.contains("\"ready\"")));
    assert_eq!(c.envs[0].salt_json(&["*", "test.echo", "before"], 20), json!({"swarm-0": "before", "swarm-1": "before"}));
    c.restart(1);
    // The subscription reconnects by itself; the first publish after it may be missed
    // while it does, so wait for one answer, then every member's job must be answered.
    wait_for("the swarm answering again", 60, || c.envs[0].salt_json(&["*", "test.ping"], 5) == json!({"swarm-0": true, "swarm-1": true}));
    for (i, env) in c.envs.iter().enumerate() {
        let v = format!("after-{i}");
        assert_eq!(env.salt_json(&["*", "test.echo", &v], 20), json!({"swarm-0": v, "swarm-1": v}), "through member {i}");
    }
}

/// How many of the `n` swarm minions answered `test.ping` with `true`.
fn answering(env: &Env) -> usize {
    match env.salt_json(&["swarm-*", "test.ping"], 20) {
        Value::Object(m) => m.values().filter(|v| **v == json!(true)).count(),
        _ => 0,
    }
}

/// The swarm's `signed_in_again` lines so far. A minion prints its line before it
/// answers again, so once its answers were seen the line is in the pipe: reading it for a
/// moment takes it (a bound on reading, not a wait for it to be printed).
fn signed_in_again(lines: &mut Lines) -> usize {
    lines.poll(std::time::Duration::from_millis(500), |_| false);
    lines.seen().iter().filter(|l| l.contains("\"signed_in_again\"")).count()
}

/// A swarm started before its master: the first sign-in goes unanswered, and each
/// minion tries again `acceptance_wait` later, as salt-minion does, until the master
/// listens (none reported failed and left out).
#[test]
fn swarm_minions_started_before_their_master_sign_in_once_it_listens() {
    const N: usize = 20;
    let env = Env::master(&one_ip(), "localfs_key", "auto_accept: True\n");
    // Its first round goes to the master's port while only a silent listener of the
    // test's holds it: each minion's first try has ended, unanswered, once the swarm
    // closed that try's connection.
    let silent = std::net::TcpListener::bind((env.ip.as_str(), env.ret)).expect("a listener on the master's port");
    silent.set_nonblocking(true).expect("nonblocking");
    let mut cmd = Command::new(SWARM);
    cmd.args(["--master", &env.ip, "--port", &env.ret.to_string(), "--count", &N.to_string()]);
    // One unanswered send ends the first try (`auth_tries` 1).
    cmd.args(["--auth-timeout", "1", "--acceptance-wait", "1", "--auth-tries", "1"]);
    cmd.arg("--key-dir").arg(env.root.join("swarm-keys")).args(["--distinct-keys", "4"]);
    let (_swarm, mut lines) = Proc::spawn_lines("halite-swarm", &mut cmd, &env.root.join("swarm.log"));
    lines.wait("the swarm's key pairs", 900, |l| l.iter().any(|l| l.contains("\"keys\"")));
    let (mut open, mut ended) = (Vec::new(), 0);
    wait_for("every first try to end unanswered", 60, || {
        while let Ok((c, _)) = silent.accept() {
            c.set_nonblocking(true).expect("nonblocking");
            open.push(c);
        }
        open.retain_mut(|c| {
            let still_open = loop {
                match std::io::Read::read(c, &mut [0u8; 512]) {
                    Ok(0) => break false,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break true,
                    Err(_) => break false,
                }
            };
            ended += usize::from(!still_open);
            still_open
        });
        ended >= N && open.is_empty()
    });
    drop(silent);
    let _master = start_master(&env);
    lines.wait("the swarm to sign in", 120, |l| l.iter().any(|l| l.contains("\"ready\"")));
    let auth = swarm_event(&lines, "authenticated");
    assert_eq!(auth["count"], json!(N), "{auth}");
    assert_eq!(auth["retried"], json!(N), "every first try went unanswered: {auth}");
    assert_eq!(swarm_event(&lines, "ready")["count"], json!(N));
    wait_for("every swarm minion answering", 60, || answering(&env) == N);
}

#[test]
fn two_hundred_swarm_minions_answer_again_after_a_lone_master_restarts() {
    const N: usize = 200;
    let mut m = Running::start(Env::master(&one_ip(), "localfs_key", "auto_accept: True\n"));
    // Eight key pairs, made in the test's root, shared by the 200: making 200 is slow on
    // a loaded machine and is not under test (the master's work per sign-in is the same).
    let (_swarm, mut lines) = start_swarm(&m.env, N, &["--auth-timeout", "10", "--acceptance-wait", "1", "--random-reauth-delay", "2", "--distinct-keys", "8"]);
    assert_eq!(swarm_event(&lines, "ready")["count"], json!(N));
    wait_for("every swarm minion answering", 60, || answering(&m.env) == N);

    // A restart: every minion reconnects and answers; none is asked to sign in again.
    m.proc.stop();
    m.proc = start_master(&m.env);
    wait_for("every swarm minion answering after the restart", 120, || answering(&m.env) == N);
    assert_eq!(signed_in_again(&mut lines), 0, "the publish key was kept: no minion had to sign in again");

    // A new publish key (deleting a key rotates it): the next publish does not decrypt,
    // so every minion signs in again, once, and answers.
    register_key(&m.env, "ghost");
    m.env.ok(SALT_KEY, &["-d", "ghost", "-y"]);
    wait_for("every swarm minion answering after the key change", 120, || answering(&m.env) == N);
    let again = signed_in_again(&mut lines);
    assert!(again >= N, "every minion signed in again after the publish key changed ({again} of {N})");
}

#[test]
fn one_swarm_spreads_its_minions_over_three_members() {
    // The members share their port numbers (on their own addresses), as members behind
    // a balancer do: a swarm takes one `--port` for all of them.
    let ips = loopback(3);
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let (ret, publish) = two_ports_on(&ipr);
    let (pool, health) = two_ports_on(&ipr);
    let envs = ips
        .iter()
        .map(|ip| {
            let peers: Vec<&str> = ipr.iter().copied().filter(|p| p != ip).collect();
            Env::master_on(ip, ret, publish, "localfs_key", &format!("{}auto_accept: True\nhalite_health_port: {health}\n", member_conf(ip, &peers, pool, "swarm-spread", "s3cret")))
        })
        .collect();
    let c = Cluster::start(envs);
    let masters = ips.join(",");
    // Six minions, fleet-10..fleet-15, sharing two key pairs (from the first member's
    // keys/ dir, made for this test): two on each member.
    let mut cmd = Command::new(SWARM);
    cmd.args(["--master", &masters, "--port", &c.envs[0].ret.to_string(), "--count", "6", "--first", "10", "--distinct-keys", "2", "--prefix", "fleet-"]);
    cmd.args(["--acceptance-wait", "1"]).arg("--key-dir").arg(c.envs[0].root.join("keys"));
    let (_swarm, mut lines) = Proc::spawn_lines("halite-swarm", &mut cmd, &c.envs[0].root.join("swarm.log"));
    lines.wait("the swarm to sign in", 120, |l| l.iter().any(|l| l.contains("\"ready\"")));
    assert_eq!(swarm_event(&lines, "ready")["count"], json!(6));
    let all: Value = (10..16).map(|n| (format!("fleet-{n}"), json!(true))).collect::<serde_json::Map<_, _>>().into();
    wait_for("every minion answering through the first member", 60, || c.envs[0].salt_json(&["fleet-*", "test.ping"], 10) == all);
    for (i, env) in c.envs.iter().enumerate() {
        let connected = crate::health::metric(&crate::health::metrics_of(env, health), "halite_minions_connected");
        assert_eq!(connected, Some(2.0), "member {i} holds the subscriptions of its two minions");
    }
}

/// `--blast 3`: each of 30 minions holds three published jobs, then all send their
/// returns at once; the `blast` line counts the 90 acknowledged and the job cache holds
/// every return of the three jobs.
#[test]
fn a_blast_of_held_returns_is_acknowledged_and_stored() {
    const N: usize = 30;
    let ip = one_ip();
    let health = port_free_on(&[&ip]);
    let m = Running::start(Env::master(&ip, "localfs_key", &format!("auto_accept: True\nhalite_health_port: {health}\n")));
    let mut cmd = Command::new(SWARM);
    cmd.args(["--master", &m.env.ip, "--port", &m.env.ret.to_string(), "--count", &N.to_string(), "--blast", "3"]);
    cmd.arg("--key-dir").arg(m.env.root.join("swarm-keys")).args(["--distinct-keys", "4"]);
    let (_swarm, mut lines) = Proc::spawn_lines("halite-swarm", &mut cmd, &m.env.root.join("swarm.log"));
    lines.wait("the swarm's key pairs", 900, |l| l.iter().any(|l| l.contains("\"keys\"")));
    lines.wait("the swarm to sign in", 120, |l| l.iter().any(|l| l.contains("\"ready\"")));
    // The jobs reach every minion once the master holds every subscription.
    wait_for("every swarm minion subscribed", 60, || crate::health::metric(&crate::health::metrics_of(&m.env, health), "halite_minions_connected") == Some(N as f64));
    let jids: Vec<String> = (0..3)
        .map(|_| {
            let out = m.env.ok(SALT, &["*", "test.ping", "--async"]);
            out.split_whitespace().find(|w| w.len() == 20 && w.bytes().all(|b| b.is_ascii_digit())).unwrap_or_else(|| panic!("no jid in {out}")).to_string()
        })
        .collect();
    lines.wait("the blast", 120, |l| l.iter().any(|l| l.contains("\"blast\"")));
    let blast = swarm_event(&lines, "blast");
    assert_eq!((blast["acknowledged"].clone(), blast["failed"].clone()), (json!(3 * N), json!(0)), "{blast}");
    assert!(blast["returns_per_s"].as_f64().is_some_and(|r| r > 0.0), "{blast}");
    for jid in &jids {
        let stored = m.env.runner(&["jobs.lookup_jid", jid]);
        let ids = stored.as_object().map(|o| o.len()).unwrap_or(0);
        assert_eq!(ids, N, "every return of {jid} stored: {stored}");
    }
}
