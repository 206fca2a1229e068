//! Salt's classic multi-master with two independent Halite masters (no cluster): a hot
//! minion talks to both, a failover minion to one at a time, moves when it stops and goes
//! back when it returns. Real salt-minion 3008.5 processes throughout.

use crate::support::*;

/// Two masters on two addresses of the test's own with the same ports (as two hosts
/// would have) and the same key pair (Salt's rule for multi-master and failover: the
/// tutorial's copied `master.pem`), both auto-accepting: the first with localfs_key, the second with mmap_key. (The masters are
/// killed before their directories go: fields drop in order.)
struct Pair {
    masters: [Option<Proc>; 2],
    envs: [Env; 2],
    minions: tempfile::TempDir,
    ret: u16,
    publish: u16,
}

impl Pair {
    fn start() -> Pair {
        let ips = loopback(2);
        let (ret, publish) = two_ports_on(&[&ips[0], &ips[1]]);
        let e1 = Env::master_on(&ips[0], ret, publish, "localfs_key", "auto_accept: True\n");
        let e2 = Env::master_on(&ips[1], ret, publish, "mmap_key", "auto_accept: True\nmmap_key_size: 1024\n");
        let m1 = start_master(&e1);
        // Salt's multi-master tutorial: the first master's `master.pem`, copied to the same
        // place on the redundant master before its first start, and nothing else.
        std::fs::copy(e1.pki().join("master.pem"), e2.pki().join("master.pem")).expect("copy master.pem");
        let m2 = start_master(&e2);
        Pair { masters: [Some(m1), Some(m2)], envs: [e1, e2], minions: tempfile::tempdir().expect("tempdir"), ret, publish }
    }

    fn masters_cfg(&self) -> String {
        format!("master:\n  - {}\n  - {}\nmaster_port: {}\n", self.envs[0].ip, self.envs[1].ip, self.ret)
    }

    /// A minion that talks to both masters at once.
    fn hot(&self, id: &str) -> Proc {
        start_minion(self.minions.path(), id, &self.masters_cfg())
    }

    /// A minion that talks to the first master that answers, checks every 2 s that it is
    /// alive, and goes back to the first of the list when it returns.
    fn failover(&self, id: &str) -> Proc {
        let cfg = format!(
            "{}publish_port: {}\nmaster_type: failover\nmaster_alive_interval: 2\nmaster_failback: True\nmaster_failback_interval: 2\n",
            self.masters_cfg(),
            self.publish
        );
        start_minion(self.minions.path(), id, &cfg)
    }

    fn stop(&mut self, i: usize) {
        if let Some(mut m) = self.masters[i].take() {
            m.stop();
        }
    }

    fn restart(&mut self, i: usize) {
        self.stop(i);
        self.masters[i] = Some(start_master(&self.envs[i]));
    }
}

#[test]
fn a_hot_minion_answers_both_masters() {
    let pair = Pair::start();
    let _hot = pair.hot("hot1");
    wait_ping(&pair.envs[0], "hot1", 90);
    wait_ping(&pair.envs[1], "hot1", 90);
}

#[test]
fn a_hot_minion_is_served_again_by_a_restarted_master() {
    let mut pair = Pair::start();
    let _hot = pair.hot("hot1");
    wait_ping(&pair.envs[0], "hot1", 90);
    pair.restart(0);
    wait_ping(&pair.envs[0], "hot1", 120);
}

#[test]
fn a_failover_minion_signs_in_to_one_master_only() {
    let pair = Pair::start();
    let _fo = pair.failover("fo1");
    // Started with it, a hot minion is the signal that the sign-ins of the start are
    // over: once it answers the second master, fo1 would have signed in there too if it
    // were going to.
    let _hot = pair.hot("hot1");
    wait_ping(&pair.envs[0], "fo1", 90);
    wait_ping(&pair.envs[1], "hot1", 90);
    let keys2 = pair.envs[1].listing();
    assert!(!keys2.to_string().contains("fo1"), "a failover minion talks to one master at a time: {keys2}");
}

#[test]
fn a_failover_minion_moves_to_the_second_master_when_the_first_stops() {
    let mut pair = Pair::start();
    let _fo = pair.failover("fo1");
    wait_ping(&pair.envs[0], "fo1", 90);
    pair.stop(0);
    wait_ping(&pair.envs[1], "fo1", 120);
}

#[test]
fn a_failover_minion_fails_back_when_the_first_master_returns() {
    let mut pair = Pair::start();
    let _fo = pair.failover("fo1");
    wait_ping(&pair.envs[0], "fo1", 90);
    pair.stop(0);
    wait_ping(&pair.envs[1], "fo1", 120);
    // Master 1 returns (answering the minion's clear ping) and the minion goes back.
    pair.restart(0);
    wait_ping(&pair.envs[0], "fo1", 120);
}
