//! Readiness and faults: the health endpoint (`/alive`, `/ready`, `/metrics`) and Salt's
//! probe files on a lone master; a view that cannot be written (a key dir or a roots
//! dir replaced by a file) leaves the master serving and is rebuilt once fixed; HAProxy
//! checking `/ready` drains a member that is cut off from its peers, the minion stays
//! served through the others, and the member is back once it has caught up.

use std::io::{Read, Write};
use std::process::Command;

use serde_json::json;

use crate::support::*;

/// One HTTP/1.0 request; the status and the body.
fn http(ip: &str, port: u16, request: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect((ip, port)).expect("connect to the health port");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).expect("timeout");
    s.write_all(request.as_bytes()).expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read the answer");
    let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("not an HTTP answer: {out:?}"));
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

fn get(ip: &str, port: u16, path: &str) -> (u16, String) {
    http(ip, port, &format!("GET {path} HTTP/1.0\r\n\r\n"))
}

/// The value of an unlabelled (or exactly labelled) metric line.
pub(crate) fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
}

pub(crate) fn metrics_of(env: &Env, port: u16) -> String {
    let (status, body) = get(&env.ip, port, "/metrics");
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn a_lone_master_serves_alive_ready_metrics_and_salts_probe_files() {
    let ip = one_ip();
    let port = port_free_on(&[&ip]);
    let env = Env::master(&ip, "localfs_key", &format!("halite_health_port: {port}\n"));
    // Files from a previous run must not pass a probe.
    std::fs::create_dir_all(env.root.join("cache/health")).unwrap();
    std::fs::write(env.root.join("cache/health/ready"), "stale").unwrap();
    let m = Running::start(env);
    let env = &m.env;
    assert_eq!(get(&ip, port, "/alive"), (200, "alive\n".to_string()));
    let (status, body) = get(&ip, port, "/ready");
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("ready\nrole leader\n"), "{body}");
    // A sign-in and a return move the counters.
    register_key(env, "k1");
    let text = metrics_of(env, port);
    for name in ["halite_commit_index", "halite_applied_index", "halite_term", "halite_proposals_total", "halite_returns_total", "halite_minions_connected", "halite_view_errors_total"] {
        assert!(metric(&text, name).is_some(), "{name} missing from:\n{text}");
    }
    assert_eq!(metric(&text, "halite_ready"), Some(1.0));
    assert_eq!(metric(&text, "halite_is_leader"), Some(1.0));
    assert_eq!(metric(&text, "halite_lag_entries"), Some(0.0));
    assert!(metric(&text, "halite_applied_index").unwrap() >= 2.0);
    assert_eq!(metric(&text, "halite_auths_total{result=\"other\"}"), Some(1.0), "{text}");
    assert_eq!(metric(&text, "halite_view_dirty{view=\"keys\"}"), Some(0.0), "{text}");
    assert!(text.lines().any(|l| l.starts_with("halite_leader_info{leader=") && l.ends_with(" 1")), "{text}");
    // The state machine's memory by part; the memtables hold what was applied.
    for part in ["memtables", "table_readers", "block_cache"] {
        assert!(metric(&text, &format!("halite_state_memory_bytes{{part=\"{part}\"}}")).is_some(), "{part} missing from:\n{text}");
    }
    assert!(metric(&text, "halite_state_memory_bytes{part=\"memtables\"}").unwrap() > 0.0, "{text}");
    // HEAD, other methods, other paths, garbage.
    let (s, b) = http(&ip, port, "HEAD /ready HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((s, b.as_str()), (200, ""));
    assert_eq!(http(&ip, port, "POST /ready HTTP/1.0\r\n\r\n").0, 405);
    assert_eq!(get(&ip, port, "/nothing").0, 404);
    assert_eq!(http(&ip, port, "hello\r\n\r\n").0, 400);
    let text = metrics_of(env, port);
    assert!(text.contains("halite_refused_total{port=\"health\",reason=\"bad_request_line\"} 1"), "{text}");
    // Salt's probe files: startup and ready hold the time they were written; alive is there.
    let health = env.root.join("cache/health");
    for f in ["startup", "ready"] {
        let t: u64 = std::fs::read_to_string(health.join(f)).unwrap().trim().parse().unwrap_or_else(|_| panic!("{f} holds no time"));
        assert!(t > 1_600_000_000, "{f}: {t}");
    }
    wait_for("the alive probe file", 10, || health.join("alive").exists());
}

#[test]
fn a_key_view_that_cannot_be_written_does_not_stop_the_master_and_is_rebuilt() {
    let ip = one_ip();
    let port = port_free_on(&[&ip]);
    let m = Running::start(Env::master(&ip, "localfs_key", &format!("halite_health_port: {port}\n")));
    let env = &m.env;
    register_key(env, "k1");
    wait_for("k1 pending", 20, || env.ids("minions_pre") == ["k1"]);
    // The accepted-keys directory is replaced by a file: the accept cannot be written.
    let minions = env.pki().join("minions");
    std::fs::remove_dir_all(&minions).unwrap();
    std::fs::write(&minions, "not a directory").unwrap();
    env.ok(SALT_KEY, &["-a", "k1", "-y"]);
    wait_for("the key view reported dirty", 20, || metric(&metrics_of(env, port), "halite_view_dirty{view=\"keys\"}") == Some(1.0));
    assert!(metric(&metrics_of(env, port), "halite_view_errors_total").unwrap() >= 1.0);
    // The master goes on: other sign-ins are answered and recorded, it stays ready.
    let applied = metric(&metrics_of(env, port), "halite_applied_index").unwrap();
    register_key(env, "k2");
    // (The reply goes out when k2's entry applies; the status the metrics read is
    // published at the end of that turn of the node's loop, just after.)
    wait_for("k2's sign-in recorded", 20, || metric(&metrics_of(env, port), "halite_applied_index").unwrap() > applied);
    assert_eq!(get(&ip, port, "/ready").0, 200);
    assert!(env.master_log().contains("marked dirty"), "the fault is logged");
    // Fixed: the view is rebuilt from the state machine.
    std::fs::remove_file(&minions).unwrap();
    std::fs::create_dir(&minions).unwrap();
    wait_for("the key view rebuilt", 90, || minions.join("k1").is_file() && env.pki().join("minions_pre/k2").is_file());
    wait_for("the key view clean again", 20, || metric(&metrics_of(env, port), "halite_view_dirty{view=\"keys\"}") == Some(0.0));
    assert_eq!(env.ids("minions"), ["k1"]);
    assert_eq!(env.ids("minions_pre"), ["k2"]);
    assert!(!env.pki().join("minions_pre/k1").exists(), "k1 is no longer pending in the view");
}

/// Two founding members on addresses of the test's own, each with a health port.
fn two(health: u16) -> Cluster {
    crate::cluster::founding(2, "health-test", &format!("halite_health_port: {health}\n"))
}

#[test]
fn a_roots_dir_that_cannot_be_written_on_one_member_is_rebuilt_after_sync_roots() {
    let health = port_free_on(&loopback(1).iter().map(String::as_str).collect::<Vec<_>>());
    let c = two(health);
    let (a, b) = (&c.envs[0], &c.envs[1]);
    // On the second member a directory of the roots is a file.
    std::fs::create_dir_all(b.root.join("srv/salt")).unwrap();
    std::fs::write(b.root.join("srv/salt/web"), "in the way").unwrap();
    std::fs::create_dir_all(a.root.join("srv/salt/web")).unwrap();
    std::fs::write(a.root.join("srv/salt/web/init.sls"), "nginx: pkg.installed\n").unwrap();
    std::fs::write(a.root.join("srv/salt/top.sls"), "base:\n  '*':\n    - web\n").unwrap();
    let out = a.runner(&["cluster.sync_roots"]);
    assert_eq!(out["status"], "committed", "{out}");
    // Every member has the files it can write; the second goes on with a dirty view.
    wait_for("top.sls on the second member", 30, || b.root.join("srv/salt/top.sls").is_file());
    wait_for("the roots view dirty on the second member", 30, || metric(&metrics_of(b, health), "halite_view_dirty{view=\"roots\"}") == Some(1.0));
    assert_eq!(metric(&metrics_of(a, health), "halite_view_dirty{view=\"roots\"}"), Some(0.0));
    assert_eq!(get(&b.ip, health, "/ready").0, 200, "a dirty view does not make a member unready");
    // Writes keep flowing through the member with the dirty view.
    register_key(b, "k1");
    wait_for("k1 pending on the first member", 30, || a.ids("minions_pre") == ["k1"]);
    let m = members(b);
    assert_eq!(m["voter_count"], 2, "{m}");
    // Fixed: the view is rebuilt.
    std::fs::remove_file(b.root.join("srv/salt/web")).unwrap();
    wait_for("web/init.sls rebuilt on the second member", 90, || std::fs::read_to_string(b.root.join("srv/salt/web/init.sls")).is_ok_and(|t| t == "nginx: pkg.installed\n"));
    wait_for("the roots view clean again", 20, || metric(&metrics_of(b, health), "halite_view_dirty{view=\"roots\"}") == Some(0.0));
}

// ---------------------------------------------------------------------------------------
// Behind HAProxy, checked with `option httpchk GET /ready`.

/// The state HAProxy's stats socket reports for `server` of `backend` (`UP`, `DOWN`, ...).
fn haproxy_state(sock: &std::path::Path, backend: &str, server: &str) -> String {
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(sock) else { return "no socket".into() };
    let _ = s.write_all(b"show stat\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").trim_start_matches("# ").split(',').collect();
    let Some(col) = header.iter().position(|h| *h == "status") else { return format!("no status column in {out:?}") };
    lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&backend) && f.get(1) == Some(&server))
        .and_then(|f| f.get(col).map(|s| s.to_string()))
        .unwrap_or_else(|| "absent".into())
}

#[test]
fn haproxy_drains_a_member_cut_off_from_its_peers_until_it_has_caught_up() {
    let ips = loopback(4);
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let (names, lb) = (&ips[..3], &ips[3]);
    let (ret, publish) = two_ports_on(&ipr);
    let (pool, health) = two_ports_on(&ipr);
    let envs = names
        .iter()
        .map(|ip| {
            let peers: Vec<&str> = ipr[..3].iter().copied().filter(|p| p != ip).collect();
            Env::master_on(ip, ret, publish, "localfs_key", &format!("{}halite_health_port: {health}\n", member_conf(ip, &peers, pool, "lb-ready", "s3cret")))
        })
        .collect();
    let mut c = Cluster::start(envs);
    let sock = c.envs[0].root.join("haproxy.sock");
    let backend = |name: &str, port: u16| -> String {
        let servers: String = names.iter().enumerate().map(|(i, ip)| format!("  server m{i} {ip}:{port} check port {health} inter 300ms fall 1 rise 1 on-marked-down shutdown-sessions\n")).collect();
        format!("frontend {name}\n  bind {lb}:{port}\n  default_backend {name}_members\nbackend {name}_members\n  balance roundrobin\n  option httpchk GET /ready\n{servers}")
    };
    let cfg = c.envs[0].root.join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n  maxconn 2048\n  stats socket {} level admin\ndefaults\n  mode tcp\n  timeout connect 1s\n  timeout check 1s\n  timeout client 1h\n  timeout server 1h\n{}{}",
            sock.display(),
            backend("ret", ret),
            backend("pub", publish)
        ),
    )
    .unwrap();
    let _haproxy = Proc::spawn_logged("haproxy (scripts/setup.sh installs it)", Command::new("haproxy").arg("-f").arg(&cfg).arg("-db"), &c.envs[0].root.join("haproxy.out"));
    for i in 0..3 {
        wait_for("HAProxy to see every member ready", 30, || haproxy_state(&sock, "ret_members", &format!("m{i}")) == "UP");
    }
    let _minion = start_minion(&c.envs[0].root, "m1", &format!("master: {lb}\nmaster_port: {ret}\n"));
    wait_for("m1's key pending", 90, || c.envs[1].ids("minions_pre") == ["m1"]);
    c.envs[1].ok(SALT_KEY, &["-a", "m1", "-y"]);
    wait_minion_ready(&c.envs[0].root, "m1", 1, 90);
    wait_ping(&c.envs[0], "m1", 120);
    // The third member restarts cut off from its peers (its frames cannot be opened: its
    // secret no longer matches): no leader, so not ready, so drained.
    c.stop(2);
    let conf = c.envs[2].root.join("conf/master");
    let good = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, good.replace("cluster_secret: s3cret", "cluster_secret: cut-off")).unwrap();
    c.procs[2] = Some(start_master(&c.envs[2]));
    let (status, body) = get(&c.envs[2].ip, health, "/ready");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("leader none"), "{body}");
    wait_for("HAProxy to drain the cut-off member", 30, || haproxy_state(&sock, "ret_members", "m2") == "DOWN" && haproxy_state(&sock, "pub_members", "m2") == "DOWN");
    // The minion is served by the others, and the others take writes meanwhile. (If its
    // connections were on the member that went away, it first reconnects through HAProxy
    // on its own schedule: Salt's randomized `recon_default`..`recon_max` interval and its
    // return retries, which under a loaded machine can take longer than one job's timeout.)
    wait_ping(&c.envs[0], "m1", 120);
    for i in 0..5 {
        assert_eq!(c.envs[i % 2].salt_json(&["m1", "test.echo", &format!("while-drained-{i}")], 30), json!({"m1": format!("while-drained-{i}")}));
    }
    for i in 0..50 {
        register_key(&c.envs[i % 2], &format!("extra-{i}"));
    }
    // Asked directly, the cut-off member answers a sign-in with a retry and records nothing.
    register_key(&c.envs[2], "via-cut-off");
    assert!(c.envs[2].master_log().contains("sign-in answered with a retry"));
    let applied_before = metric(&metrics_of(&c.envs[0], health), "halite_applied_index").unwrap();
    // Healed: back in once it has applied what the others committed.
    c.stop(2);
    std::fs::write(&conf, &good).unwrap();
    c.procs[2] = Some(start_master(&c.envs[2]));
    wait_for("HAProxy to take the member back", 60, || haproxy_state(&sock, "ret_members", "m2") == "UP");
    let text = metrics_of(&c.envs[2], health);
    assert!(metric(&text, "halite_applied_index").unwrap() >= applied_before, "{text}");
    assert_eq!(metric(&text, "halite_ready"), Some(1.0));
    assert!(c.envs[2].ids("minions_pre").contains(&"extra-49".to_string()));
    assert!(!c.envs[0].ids("minions_pre").contains(&"via-cut-off".to_string()), "nothing was recorded through the cut-off member");
    // The members report each other's progress from the leader.
    let leader = members(&c.envs[0])["leader_id"].as_str().unwrap().to_string();
    let li = c.envs.iter().position(|e| e.ip == leader).unwrap();
    let m = members(&c.envs[li]);
    for e in &c.envs {
        assert!(m["progress"][&e.ip]["lag"].is_u64(), "{m}");
    }
    assert!(m["progress"][&leader]["applied_index"].as_u64().unwrap() >= applied_before as u64, "{m}");
    assert_eq!(c.envs[0].salt_json(&["m1", "test.echo", "after"], 30), json!({"m1": "after"}));
}
