//! Salt's documented shared-filesystem master cluster, as Salt 3008's master-cluster page
//! sets it up: its master config (`id`, `cluster_id`, `cluster_peers`, `cluster_pki_dir`,
//! `cachedir`, `file_roots`, `pillar_roots` on one share, and nothing more: no
//! `cluster_secret`, the default `cluster_pool_port`, Salt's ports 4505/4506) behind its
//! reference HAProxy config, with a real salt-minion 3008.5 pointed at the balancer.
//! (What the test environment adds is only where each master listens and keeps its own
//! files on one machine: `interface`, `pki_dir`, `sock_dir`, its data and log paths.)
//! Without `cluster_secret` the members seal their traffic with a secret kept on the
//! share (`memberkey::kept_secret`), so only a host that reads the share can speak to them.
//! Then Salt's dynamic join: a master with the page's joining config (the cluster's
//! `cluster_id`, `cluster_pki_dir`, `cluster_secret` and `cachedir`, one peer) joins.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::support::*;

/// Salt's reference HAProxy config, its addresses replaced by the test's own: the
/// balancer `lb` in front of `members` on 4505 and 4506.
fn reference_haproxy(dir: &Path, lb: &str, members: &[String]) -> Proc {
    let servers = |port: u16| -> String { members.iter().enumerate().map(|(i, ip)| format!("    server rserve{} {ip}:{port} check\n", i + 1)).collect() };
    let cfg = format!(
        "global\n    maxconn 2048\n\n\
         frontend salt-master-pub\n    mode tcp\n    bind {lb}:4505\n    option tcplog\n    timeout client 86400s\n    default_backend salt-master-pub-backend\n\n\
         backend salt-master-pub-backend\n    mode tcp\n    log global\n    balance roundrobin\n    timeout connect 10s\n    timeout server 86400s\n{}\n\
         frontend salt-master-req\n    mode tcp\n    bind {lb}:4506\n    option tcplog\n    timeout client  1m\n    default_backend salt-master-req-backend\n\n\
         backend salt-master-req-backend\n    mode tcp\n    log global\n    balance roundrobin\n    timeout connect 10s\n    timeout server 1m\n{}",
        servers(4505),
        servers(4506)
    );
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, cfg).expect("haproxy.cfg");
    let p = Proc::spawn_logged("haproxy (scripts/setup.sh installs it)", Command::new("haproxy").arg("-f").arg(&path).arg("-db"), &dir.join("haproxy.out"));
    wait_for("haproxy to listen", 20, || std::net::TcpStream::connect((lb, 4506)).is_ok());
    p
}

/// A master of Salt's documented shared cluster on `ip` (its peers `peers`, the share
/// `share`), with `cluster_secret` if given, listening on Salt's ports; not started. Its
/// `root_dir` is `dir`, which holds every member and the share, so no path it does not
/// set resolves on the host.
fn documented(dir: &Path, share: &Path, ip: &str, peers: &[&String], secret: Option<&str>) -> Env {
    let mut env = Env::master_in(dir, ip, "localfs_key", "");
    (env.ret, env.publish) = (4506, 4505);
    let r = env.root.display();
    let peers: String = peers.iter().map(|p| format!("  - {p}\n")).collect();
    let secret = secret.map(|s| format!("cluster_secret: \"{s}\"\n")).unwrap_or_default();
    let s = share.display();
    std::fs::write(
        env.root.join("conf/master"),
        format!(
            "interface: {ip}\nroot_dir: {}\npki_dir: {r}/pki\nsock_dir: {r}/sock\nhalite_data_dir: {r}/data\nlog_file: {r}/log\npidfile: {r}/master.pid\n\
             id: {ip}\ncluster_id: master_cluster\ncluster_peers:\n{peers}cluster_pki_dir: {s}/pki\ncachedir: {s}/cache\n{secret}\
             file_roots:\n  base:\n    - {s}/srv/salt\npillar_roots:\n  base:\n    - {s}/srv/pillar\n",
            dir.display()
        ),
    )
    .expect("write config");
    env
}

/// The share, with a file in its `file_roots`.
fn share(dir: &Path) -> std::path::PathBuf {
    let share = dir.join("share");
    std::fs::create_dir_all(share.join("srv/salt")).expect("share");
    std::fs::write(share.join("srv/salt/motd.txt"), "served from the share\n").expect("a file on the share");
    share
}

/// `n` documented members on the first `n` of `ips`, started, each listing the others.
fn founders(dir: &Path, share: &Path, ips: &[String], n: usize, secret: Option<&str>) -> Cluster {
    let envs = ips[..n]
        .iter()
        .map(|ip| {
            let peers: Vec<&String> = ips[..n].iter().filter(|p| *p != ip).collect();
            documented(dir, share, ip, &peers, secret)
        })
        .collect();
    Cluster::start(envs)
}

/// Every member lists `ips` as voters, one of them leading.
fn voters_everywhere(c: &Cluster, ips: &[&str]) {
    for env in &c.envs {
        wait_for("the voters and a leader on every member", 90, || {
            let m = members(env);
            m["leader_id"].is_string() && m["voters"] == json!(ips)
        });
    }
}

#[test]
fn the_documented_shared_cluster_behind_the_reference_haproxy_serves_a_minion() {
    let ips = loopback(4);
    let (lb, members_ips) = (&ips[3], &ips[..3]);
    let dir = tempfile::tempdir().expect("tempdir");
    let share = share(dir.path());
    let c = founders(dir.path(), &share, &ips, 3, None);
    voters_everywhere(&c, &c.ips());
    assert!(share.join("pki/cluster_pool.secret").exists(), "the members keep their secret on the share");
    let _lb = reference_haproxy(dir.path(), lb, members_ips);
    let id = "docs-shared-minion";
    let _minion = start_minion(dir.path(), id, &format!("master: {lb}\n"));
    wait_for("the minion's key pending", 90, || c.envs[1].ids("minions_pre").iter().any(|k| k == id));
    c.envs[1].ok(SALT_KEY, &["-a", id, "-y"]);
    wait_minion_ready(dir.path(), id, 1, 90);
    for env in &c.envs {
        wait_ping(env, id, 90);
    }
    let got = c.envs[2].salt_json(&[id, "cp.get_file_str", "salt://motd.txt"], 60);
    assert_eq!(got, json!({ id: "served from the share\n" }));
}

#[test]
fn a_master_with_the_documented_joining_config_joins_the_shared_cluster() {
    const SECRET: &str = "d8b4c2e1f07a4c3e8a1b5d0a9c7f3e42b6d9a1c4f8e2b7d0a3c6e9f1b4d7a0c3";
    let ips = loopback(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let share = share(dir.path());
    let mut c = founders(dir.path(), &share, &ips, 2, Some(SECRET));
    // The joining master knows one peer only; its pki and cache are the share's.
    let joiner = documented(dir.path(), &share, &ips[2], &[&ips[0]], Some(SECRET));
    c.procs.push(Some(spawn_master(&joiner)));
    c.envs.push(joiner);
    wait_master(&c.envs[2]);
    let all: Vec<&str> = ips.iter().map(String::as_str).collect();
    voters_everywhere(&c, &all);
    // It serves: a minion signed in through it is accepted through a founder and answers
    // a job published through it.
    let id = "docs-joined-minion";
    let _minion = start_minion(dir.path(), id, &format!("master: {}\n", ips[2]));
    wait_for("the minion's key pending on a founder", 90, || c.envs[0].ids("minions_pre").iter().any(|k| k == id));
    c.envs[0].ok(SALT_KEY, &["-a", id, "-y"]);
    wait_minion_ready(dir.path(), id, 1, 90);
    wait_ping(&c.envs[2], id, 90);
}
