//! Salt's documented isolated-filesystem master cluster, as Salt 3008's master-cluster
//! page sets it up and nothing more: each master with its `id`, `cluster_id`,
//! `cluster_peers` (the others), its own `cluster_pki_dir`, the same `cluster_secret` and
//! `cluster_pool_port`, `cluster_isolated_filesystem: True` and the recommended
//! `keys.cache_driver`. No key is provisioned beforehand: the secret authenticates the
//! founders, and each founder's member key is bound in the log once it is recorded.
//! (What the test environment adds is only where each master listens and keeps its
//! files: `interface`, ports and paths of its own on one machine.) Founders started
//! together, one after another, and one restarted while the others found; a real
//! salt-minion 3008.5 signs in through one member, is accepted through another and
//! answers a job published through the third.

use serde_json::json;

use crate::support::*;

/// Salt's isolated-filesystem member config for member `ip` of `ips`, with `driver` as
/// `keys.cache_driver`, on `pool`.
fn documented(ip: &str, ips: &[String], pool: u16, driver: &str) -> Env {
    let peers: String = ips.iter().filter(|p| *p != ip).map(|p| format!("  - {p}\n")).collect();
    Env::master(
        ip,
        driver,
        &format!(
            "id: {ip}\ncluster_id: master_cluster\ncluster_peers:\n{peers}cluster_pki_dir: @ROOT@/cluster_pki\n\
             cluster_secret: \"d8b4c2e1f07a4c3e8a1b5d0a9c7f3e42b6d9a1c4f8e2b7d0a3c6e9f1b4d7a0c3\"\ncluster_pool_port: {pool}\n\
             cluster_isolated_filesystem: True\n"
        ),
    )
}

/// Three documented members on addresses of the test's own (not started).
fn three(driver: &str) -> Vec<Env> {
    let ips = loopback(3);
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let pool = port_free_on(&ipr);
    ips.iter().map(|ip| documented(ip, &ips, pool, driver)).collect()
}

/// Every member lists the three addresses as voters, one of them leading.
fn three_voters(c: &Cluster) {
    for env in &c.envs {
        wait_for("three voters and a leader on every member", 90, || {
            let m = members(env);
            m["leader_id"].is_string() && m["voters"] == json!(c.ips())
        });
    }
}

/// A real minion signs in through member 0, is accepted through member 1 and answers
/// `test.ping` published through member 2; every member's view holds its key.
fn a_minion_is_served_across_members(c: &Cluster, id: &str) {
    let _minion = start_minion(&c.envs[0].root, id, &format!("master: {}\nmaster_port: {}\n", c.envs[0].ip, c.envs[0].ret));
    wait_for("the minion's key pending on member 1", 90, || c.envs[1].ids("minions_pre").iter().any(|k| k == id));
    c.envs[1].ok(SALT_KEY, &["-a", id, "-y"]);
    for env in &c.envs {
        wait_for("the accepted key in every member's view", 60, || env.ids("minions").iter().any(|k| k == id));
    }
    wait_minion_ready(&c.envs[0].root, id, 1, 90);
    wait_ping(&c.envs[2], id, 90);
}

#[test]
fn founders_started_together_form_the_cluster_on_mmap_key() {
    let c = Cluster::start(three("mmap_key"));
    three_voters(&c);
    a_minion_is_served_across_members(&c, "docs-iso-mmap");
    for env in &c.envs {
        assert!(!env.master_log().contains("not founding the cluster yet"), "no founder waited for provisioned keys");
    }
}

#[test]
fn founders_started_one_after_another_form_the_cluster_on_localfs_key() {
    let envs = three("localfs_key");
    // The first founds alone (nobody answers) and waits for a quorum; the second finds
    // it and founds with it; the third finds an established cluster that lists it and
    // joins it (as a new incarnation of its name).
    let first = spawn_master(&envs[0]);
    wait_for("the first founder founding", 60, || envs[0].master_log().contains("founding one"));
    let second = spawn_master(&envs[1]);
    wait_master(&envs[0]);
    wait_master(&envs[1]);
    wait_for("a leader of the first two", 60, || members(&envs[0])["leader_id"].is_string());
    let third = start_master(&envs[2]);
    let c = Cluster { procs: vec![Some(first), Some(second), Some(third)], envs };
    three_voters(&c);
    a_minion_is_served_across_members(&c, "docs-iso-localfs");
}

#[test]
fn a_founder_restarted_while_the_others_found_takes_its_place() {
    let envs = three("mmap_key");
    let mut procs: Vec<Option<Proc>> = envs.iter().map(|e| Some(spawn_master(e))).collect();
    // Founder 2 is killed as soon as it has founded its log, before any leader exists
    // among the founders, and started again.
    wait_for("founder 2 founding", 60, || envs[2].master_log().contains("new log: bootstrapped with its founding voters"));
    if let Some(mut p) = procs[2].take() {
        p.kill9();
    }
    procs[2] = Some(spawn_master(&envs[2]));
    let c = Cluster { procs, envs };
    for env in &c.envs {
        wait_master(env);
    }
    three_voters(&c);
    // Every member's log binds the three founders' keys (each recorded its own).
    for env in &c.envs {
        wait_for("each founder's key recorded", 60, || env.master_log().contains("recording this member's key in the log"));
    }
    crate::cluster::accepted_key(&c, "docs-iso-restarted", 2, 0);
}
