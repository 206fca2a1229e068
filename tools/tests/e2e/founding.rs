//! Founding a cluster with `halite_cluster_pin_founders: True` (the hardening beyond
//! Salt's trust in the cluster secret): founders on isolated filesystems wait until the
//! operator has provisioned every founder's public key (`halite-ctl member-key` /
//! `peer-key`), and a holder of the cluster secret that races a founder at cluster start,
//! under that founder's id with a key of its own, is refused by every member from its
//! first frame; the real founder then takes its place. (Without the option founders need
//! no step: `salt_docs_isolated`, `cluster_topologies`.)

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use halite_replication::{member_id, TcpTransport};
use raft::eraftpb::MessageType;
use serde_json::json;

use crate::attacks::{raft, refused, secret_holder};
use crate::support::*;

#[test]
fn with_pinned_founders_isolated_founders_wait_for_every_key_and_an_impostor_racing_a_founder_is_refused() {
    let ips = loopback(3);
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let pool = port_free_on(&ipr);
    let health = port_free_on(&ipr);
    let envs = member_envs(&ips, pool, "founding-test", |_| format!("halite_health_port: {health}\nhalite_cluster_pin_founders: True\n"));
    // Founders 0 and 1 start with nothing provisioned: they do not found, and say why.
    let mut c = Cluster { procs: vec![Some(spawn_master(&envs[0])), Some(spawn_master(&envs[1])), None], envs };
    for env in &c.envs[..2] {
        wait_for("the founder waiting for the founders' keys", 60, || env.master_log().contains("not founding the cluster yet"));
    }

    // From now until the end, a holder of the secret claims founder 2's id with a key of
    // its own, sending founders 0 and 1 heartbeats far ahead in term.
    let id2 = member_id(&c.envs[2].ip);
    let addr = |i: usize| -> SocketAddr { format!("{}:{pool}", c.envs[i].ip).parse().expect("addr") };
    let targets = [(member_id(&c.envs[0].ip), addr(0)), (member_id(&c.envs[1].ip), addr(1))];
    let impostor = TcpTransport::start(id2, format!("{}:0", c.envs[2].ip).parse().expect("addr"), targets.into(), secret_holder("s3cret"), Arc::new(|_| {})).expect("impostor");
    let racing = Arc::new(AtomicBool::new(true));
    let rounds = Arc::new(AtomicUsize::new(0));
    let sender = {
        let (impostor, racing, rounds) = (impostor.clone(), racing.clone(), rounds.clone());
        std::thread::spawn(move || {
            while racing.load(Ordering::SeqCst) {
                impostor.send(targets.iter().flat_map(|(to, _)| [raft(MessageType::MsgHeartbeat, id2, *to, 1_000_000), raft(MessageType::MsgRequestVote, id2, *to, 1_000_000)]).collect());
                rounds.fetch_add(1, Ordering::SeqCst);
                // Paces the impostor's frames for as long as it races.
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    // The race is on before any key is provisioned: the impostor has sent its frames.
    wait_for("the impostor sending", 30, || rounds.load(Ordering::SeqCst) >= 10);

    // The operator provisions every founder's key (`halite-ctl member-key` on each, founder
    // 2's made before it ever starts; `peer-key` on the others): founder 2 first, which
    // then starts and founds (nobody runs a cluster yet), then founders 0 and 1.
    let pems: Vec<String> = c.envs.iter().map(|e| e.ok(CTL, &["member-key"])).collect();
    let install = |e: &Env| {
        for (o, pem) in c.envs.iter().zip(&pems).filter(|(o, _)| o.ip != e.ip) {
            let file = e.root.join(format!("{}.member.pub", o.ip));
            std::fs::write(&file, pem).expect("member key file");
            e.ok(CTL, &["peer-key", &o.ip, &file.display().to_string()]);
        }
    };
    install(&c.envs[2]);
    c.procs[2] = Some(spawn_master(&c.envs[2]));
    wait_for("founder 2 founding", 60, || c.envs[2].master_log().contains("founding one"));
    install(&c.envs[0]);
    install(&c.envs[1]);
    for env in &c.envs {
        wait_master(env);
    }
    wait_for("a cluster leader", 60, || members(&c.envs[0])["leader_id"].is_string());

    // Both founders refused the impostor (counted), and none of its frames got through:
    // the term is nowhere near its, and the real founder 2 is a voter whose writes commit.
    for env in &c.envs[..2] {
        let counted = within(60, || refused(env, health, "cluster", "peer_key_mismatch") >= 1.0);
        let refusals: Vec<String> = crate::health::metrics_of(env, health).lines().filter(|l| l.starts_with("halite_refused_total{port=\"cluster\"")).map(str::to_string).collect();
        let log = env.master_log();
        let said: Vec<&str> = log.lines().filter(|l| l.contains("refused") || l.contains("member key") || l.contains("founding")).collect();
        assert!(counted, "the impostor was not refused (peer_key_mismatch) by {} within 60 s; its cluster refusals: {refusals:?}; its log:\n{}", env.ip, said[said.len().saturating_sub(40)..].join("\n"));
    }
    racing.store(false, Ordering::SeqCst);
    sender.join().expect("sender");
    impostor.shutdown();
    let m = members(&c.envs[2]);
    assert_eq!(m["voters"], json!(c.ips()), "{m}");
    assert!(m["term"].as_u64().is_some_and(|t| t < 1_000_000), "{m}");
    crate::cluster::accepted_key(&c, "founding-minion", 2, 2);
    assert!(c.envs[2].master_log().contains("recording this member's key in the log"), "founder 2 recorded its own key");
}
