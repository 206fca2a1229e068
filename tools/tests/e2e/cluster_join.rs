//! A cluster that grows: `cluster.sync_roots` making roots records, a master joining a
//! running cluster from an empty disk (pinned to the cluster's key) and receiving its
//! state from the log, a real salt-minion 3008.5 served through the joined member, and
//! masters that must not get in (a wrong secret, a pin to another key).

use serde_json::json;

use crate::support::*;

const WEB: &str = "nginx:\n  pkg.installed\n";

/// A member's config: auto_accept, roots in `@ROOT@/srv` and `@ROOT@/pillar`.
fn member(ip: &str, peers: &[&str], pool: u16, secret: &str) -> Env {
    Env::master(ip, "localfs_key", &format!("auto_accept: True\nfile_roots:\n  base:\n    - @ROOT@/srv\npillar_roots:\n  base:\n    - @ROOT@/pillar\n{}", member_conf(ip, peers, pool, "join-test", secret)))
}

/// Two founders on the first two of four addresses (the others for newcomers), and the
/// pool port free on all four.
struct Founders {
    c: Cluster,
    ips: Vec<String>,
    pool: u16,
}

fn founders() -> Founders {
    let ips = loopback(4);
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let pool = port_free_on(&ipr);
    let c = Cluster::start(vec![member(&ips[0], &[&ips[1]], pool, "s3cret"), member(&ips[1], &[&ips[0]], pool, "s3cret")]);
    Founders { c, ips, pool }
}

/// One simulated minion signed in to the first founder (and gone again).
fn swarm_0_signed_in(f: &Founders) {
    let env = &f.c.envs[0];
    run_ok(
        std::process::Command::new(SWARM)
            .args(["--master", &env.ip, "--port", &env.ret.to_string(), "--count", "1", "--jobs", "0"])
            .arg("--key-dir")
            .arg(env.root.join("keys")),
        TOOL_TIMEOUT,
    );
}

/// Roots on the first founder (a state tree and a pillar top), synced.
fn roots_synced(f: &Founders) -> serde_json::Value {
    let root = &f.c.envs[0].root;
    let (srv, pil) = (root.join("srv"), root.join("pillar"));
    std::fs::create_dir_all(srv.join("web")).expect("roots");
    std::fs::create_dir_all(&pil).expect("pillar roots");
    std::fs::write(srv.join("top.sls"), "base:\n  '*':\n    - web\n").expect("top.sls");
    std::fs::write(srv.join("web/init.sls"), WEB).expect("init.sls");
    std::fs::write(pil.join("top.sls"), "base:\n  '*':\n    - common\n").expect("pillar top.sls");
    f.c.envs[0].runner(&["cluster.sync_roots"])
}

#[test]
fn a_key_signed_in_on_one_founder_is_accepted_in_the_others_view() {
    let f = founders();
    swarm_0_signed_in(&f);
    wait_for("swarm-0 in the second founder's view", 30, || f.c.envs[1].ids("minions") == ["swarm-0"]);
}

#[test]
fn sync_roots_writes_the_roots_on_every_member() {
    let f = founders();
    let out = roots_synced(&f);
    assert_eq!((out["status"].as_str(), out["written"].as_u64(), out["removed"].as_u64()), (Some("committed"), Some(3), Some(0)), "{out}");
    let second = &f.c.envs[1].root;
    wait_for("the roots on the second founder", 30, || std::fs::read_to_string(second.join("srv/web/init.sls")).ok().as_deref() == Some(WEB));
    wait_for("the pillar roots on the second founder", 30, || second.join("pillar/top.sls").exists());
}

// ---------------------------------------------------------------------------------------
// A master joins.

/// [`founders`] with swarm-0's key and synced roots, then a third master that only knows
/// the first founder, on an empty disk, pinned to the cluster's key (Salt's
/// `cluster_pub_fingerprint`, given in upper case: case does not matter), serving.
/// (Fields drop in order: the newcomer is killed first, the founders last.)
struct Joined {
    _newcomer: Proc,
    env: Env,
    f: Founders,
}

fn joined() -> Joined {
    let f = founders();
    swarm_0_signed_in(&f);
    roots_synced(&f);
    let env = member(&f.ips[2], &[&f.ips[0]], f.pool, "s3cret");
    let pin = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(f.c.envs[0].root.join("cpki/cluster.pub")).expect("cluster.pub"))).to_uppercase()
    };
    env.append_conf(&format!("cluster_pub_fingerprint: {pin}\n"));
    let newcomer = spawn_master(&env);
    wait_master(&env);
    Joined { _newcomer: newcomer, env, f }
}

#[test]
fn a_joined_master_receives_the_keys_from_the_log() {
    let j = joined();
    assert_eq!(j.env.listing()["minions"], json!(["swarm-0"]), "state-sync by the log");
}

#[test]
fn a_joined_master_receives_the_synced_roots() {
    let j = joined();
    wait_for("the synced roots on the newcomer", 30, || std::fs::read_to_string(j.env.root.join("srv/web/init.sls")).ok().as_deref() == Some(WEB));
    wait_for("the synced pillar roots on the newcomer", 30, || j.env.root.join("pillar/top.sls").exists());
}

#[test]
fn a_joined_master_holds_the_clusters_key_pair() {
    let j = joined();
    assert_eq!(std::fs::read(j.env.root.join("cpki/cluster.pub")).expect("newcomer's cluster.pub"), std::fs::read(j.f.c.envs[0].root.join("cpki/cluster.pub")).expect("founder's cluster.pub"));
}

#[test]
fn a_joined_master_is_promoted_to_voter() {
    let j = joined();
    wait_for("the newcomer promoted to voter", 30, || members(&j.f.c.envs[1])["voters"] == json!(j.f.ips[..3]));
    wait_for("the newcomer's build in the log", 30, || members(&j.f.c.envs[1])["releases"].get(&j.f.ips[2]).is_some_and(|r| r["record_set"] == 1));
}

#[test]
fn ring_info_lists_every_member_of_a_grown_cluster() {
    let j = joined();
    wait_for("the newcomer promoted to voter", 30, || members(&j.f.c.envs[1])["voter_count"] == 3);
    assert_eq!(j.env.runner(&["cluster.ring_info"]), json!({"is_clustered": true, "node_count": 3, "nodes": j.f.ips[..3], "vnodes": 150}));
}

#[test]
fn key_changes_made_on_a_joined_master_reach_the_founders() {
    let j = joined();
    j.env.ok(SALT_KEY, &["-d", "swarm-0", "-y"]);
    wait_for("the delete on the founders", 30, || j.f.c.envs.iter().all(|e| e.ids("minions").is_empty()));
}

#[test]
fn sync_roots_removes_a_file_removed_at_the_source_on_every_member() {
    let j = joined();
    wait_for("the synced roots on the newcomer", 30, || j.env.root.join("srv/top.sls").exists());
    std::fs::remove_file(j.f.c.envs[0].root.join("srv/top.sls")).expect("remove top.sls");
    let out = j.f.c.envs[0].runner(&["cluster.sync_roots", "roots=file"]);
    assert_eq!((out["written"].as_u64(), out["removed"].as_u64(), out["unchanged"].as_u64()), (Some(0), Some(1), Some(1)), "{out}");
    wait_for("the removal on the other members", 30, || !j.f.c.envs[1].root.join("srv/top.sls").exists() && !j.env.root.join("srv/top.sls").exists());
}

#[test]
fn a_real_minion_signs_in_through_a_joined_master_and_answers_its_jobs() {
    let j = joined();
    let _minion = start_minion(&j.env.root, "real-1", &format!("master: {}\nmaster_port: {}\n", j.env.ip, j.env.ret));
    wait_minion_ready(&j.env.root, "real-1", 1, 90);
    wait_ping(&j.env, "real-1", 90);
    wait_for("the real minion's key on the founders", 30, || j.f.c.envs.iter().all(|e| e.ids("minions").contains(&"real-1".to_string())));
    assert_eq!(j.f.c.envs[0].salt_json(&["real-1", "test.echo", "through-a-founder"], 20), json!({"real-1": "through-a-founder"}));
}

// ---------------------------------------------------------------------------------------
// Masters that must not get in.

#[test]
fn a_master_with_a_wrong_secret_is_not_let_in() {
    let f = founders();
    let intruder = member(&f.ips[3], &[&f.ips[0]], f.pool, "wrong");
    let _p = spawn_master(&intruder);
    // Its frames do not open.
    wait_for("the refusal in the first founder's log", 30, || f.c.envs[0].master_log().contains("does not authenticate"));
    assert_eq!(members(&f.c.envs[0])["voter_count"], 2);
}

#[test]
fn a_master_pinned_to_another_cluster_key_refuses_to_join() {
    let f = founders();
    let pinned = member(&f.ips[3], &[&f.ips[0]], f.pool, "s3cret");
    pinned.append_conf(&format!("cluster_pub_fingerprint: {}\n", "ab".repeat(32)));
    let mut p = spawn_master(&pinned);
    let status = p.wait_exit("the wrongly pinned master to exit", 30);
    assert!(!status.success());
    let log = pinned.master_log();
    assert!(log.contains("refusing to join") && log.contains("cluster_pub_fingerprint"), "{log}");
    assert_eq!(members(&f.c.envs[0])["voter_count"], 2);
}

/// A member on an isolated filesystem configured without `cluster_secret` (or with an
/// empty one), and no secret kept in its `cluster_pki_dir`, refuses to start: Halite seals
/// every byte between members with keys derived from a secret they share.
#[test]
fn a_member_without_a_cluster_secret_refuses_to_start() {
    let ips = loopback(2);
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let pool = port_free_on(&ipr);
    for (i, secret_line) in ["", "cluster_secret: ''\n"].into_iter().enumerate() {
        let conf = member_conf(&ips[i], &[&ips[1 - i]], pool, "no-secret", "s3cret").replace("cluster_secret: s3cret\n", secret_line);
        assert!(!conf.contains("s3cret"));
        let env = Env::master(&ips[i], "localfs_key", &conf);
        let mut p = spawn_master(&env);
        let status = p.wait_exit("the member without a secret to exit", 30);
        assert!(!status.success());
        let log = env.master_log();
        assert!(log.contains("cluster_id is set but cluster_secret is not"), "{log}");
        assert!(!env.root.join("data").join("log").exists() || std::fs::read_dir(env.root.join("data").join("log")).map(|d| d.count()).unwrap_or(0) == 0, "nothing is founded");
    }
}
