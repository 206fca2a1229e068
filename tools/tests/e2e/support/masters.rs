//! Starting `salt-master` processes, alone or as a cluster.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;

/// Starts `salt-master` for `env` without waiting (cluster members wait for each other).
/// Its output is appended to `master.out` in the env.
pub fn spawn_master(env: &Env) -> Proc {
    Proc::spawn_logged("salt-master", Command::new(sibling_bin("salt-master")).args(["-c", &env.conf(), "-l", "info"]), &env.root.join("master.out"))
}

/// Waits until the master's admin socket answers (it serves then).
pub fn wait_master(env: &Env) {
    let sock = env.root.join("sock/halite-admin.sock");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        if Instant::now() > deadline {
            let log = env.master_log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!("timed out after 60s waiting for the master's admin socket in {}; its log ends:\n{}", env.root.display(), tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts the master and waits until it serves.
pub fn start_master(env: &Env) -> Proc {
    let p = spawn_master(env);
    wait_master(env);
    p
}

/// A running master and its env (the process is killed before the directory goes).
pub struct Running {
    pub proc: Proc,
    pub env: Env,
}

impl Running {
    /// Starts the master of `env` and waits until it serves.
    pub fn start(env: Env) -> Running {
        Running { proc: start_master(&env), env }
    }
}

/// `cluster.members` through the env's running master.
pub fn members(env: &Env) -> Value {
    env.runner(&["cluster.members"])
}

/// The config lines of a cluster member with id `ip` (isolated filesystem, its own
/// `cluster_pki_dir`) that knows `peers` on `pool`.
pub fn member_conf(ip: &str, peers: &[&str], pool: u16, cluster_id: &str, secret: &str) -> String {
    let list: String = peers.iter().map(|p| format!("  - {p}\n")).collect();
    format!(
        "id: {ip}\ncluster_id: {cluster_id}\ncluster_secret: {secret}\ncluster_pool_port: {pool}\ncluster_isolated_filesystem: True\n\
         cluster_pki_dir: @ROOT@/cpki\ncluster_peers:\n{list}"
    )
}

/// The environments (`localfs_key`) of the founding members of `cluster_id` on `ips`,
/// each knowing the others on `pool` ([`member_conf`], secret `s3cret`), with `extra(i)`
/// appended to member i's config.
pub fn member_envs(ips: &[String], pool: u16, cluster_id: &str, extra: impl Fn(usize) -> String) -> Vec<Env> {
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    ipr.iter()
        .enumerate()
        .map(|(i, ip)| {
            let peers: Vec<&str> = ipr.iter().copied().filter(|p| p != ip).collect();
            Env::master(ip, "localfs_key", &format!("{}{}", member_conf(ip, &peers, pool, cluster_id, "s3cret"), extra(i)))
        })
        .collect()
}

/// Masters of one cluster, started together (members wait for each other: a quorum
/// agrees on the cluster key and AES key before any serves) and waited for until they
/// serve and elect a leader. A member's slot is `None` while it is stopped. (The members
/// are killed before their directories go: fields drop in order.)
pub struct Cluster {
    pub procs: Vec<Option<Proc>>,
    pub envs: Vec<Env>,
}

impl Cluster {
    /// Starts the founders `envs`, configured as Salt documents them (nothing provisioned
    /// beforehand), and waits until each serves and a leader is elected.
    pub fn start(envs: Vec<Env>) -> Cluster {
        let procs = envs.iter().map(|e| Some(spawn_master(e))).collect();
        let c = Cluster { procs, envs };
        for env in &c.envs {
            wait_master(env);
        }
        wait_for("a cluster leader", 60, || members(&c.envs[0])["leader_id"].is_string());
        c
    }

    pub fn stop(&mut self, i: usize) {
        if let Some(mut p) = self.procs[i].take() {
            p.stop();
        }
    }

    pub fn restart(&mut self, i: usize) {
        self.stop(i);
        self.procs[i] = Some(start_master(&self.envs[i]));
    }

    /// The addresses of the members, in order.
    pub fn ips(&self) -> Vec<&str> {
        self.envs.iter().map(|e| e.ip.as_str()).collect()
    }
}
