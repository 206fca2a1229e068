//! Network partitions of a three-member cluster, made with fault-injecting proxies
//! ([`Mesh`]: every byte between two members passes a proxy the test can cut and heal;
//! the members reach each other through them with `halite_cluster_dial`). The minions'
//! own connections are direct, so a member cut off from its peers still talks to its
//! minions.
//!
//! - The leader cut off: it steps down and refuses writes (`salt-key -a` through it does
//!   not succeed, a minion's return through it gets Salt's retry answer), the two others
//!   elect a leader and go on (keys accepted, jobs answered by a real minion); after the
//!   heal every member holds the same records, those written during the cut included, and
//!   the same state digest.
//! - A member catching up after a cut longer than 30 s does not publish the jobs it missed
//!   (`PUBLISH_MAX_AGE`): its real minion never runs them, yet runs the next job.

use serde_json::json;

use crate::faults::{assert_same_digests, echo_returns, leader, served, settle};
use crate::support::*;

/// A three-member cluster whose members reach each other only through `mesh`.
pub(crate) struct Proxied {
    pub c: Cluster,
    pub mesh: Mesh,
}

pub(crate) fn proxied(cluster_id: &str) -> Proxied {
    let ips = loopback(3);
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let pool = port_free_on(&ipr);
    let (mesh, dial) = Mesh::new(&ips, pool);
    let envs = member_envs(&ips, pool, cluster_id, |i| dial[i].clone());
    Proxied { c: Cluster::start(envs), mesh }
}

/// An identity with a fixed key (so it can sign in more than once).
fn identity(id: &str) -> impl Fn() -> Identity {
    let pem = halite_master::wire::crypto::PrivateKey::generate(2048).expect("key pair").to_pem().expect("pem");
    let id = id.to_string();
    move || Identity::new(id.clone(), halite_master::wire::crypto::PrivateKey::from_pem(&pem).expect("key")).expect("identity")
}

/// Whether a reply is Salt's clear "cluster not ready, sign in again and resend" answer.
pub(crate) fn is_cluster_retry(reply: &[u8]) -> bool {
    let Ok(v) = rmpv::decode::read_value(&mut &reply[..]) else { return false };
    let field = |m: &rmpv::Value, k: &str| m.as_map().and_then(|m| m.iter().find(|(key, _)| key.as_str() == Some(k)).map(|(_, v)| v.clone()));
    let load = field(&v, "load").unwrap_or(rmpv::Value::Nil);
    field(&v, "enc").and_then(|e| e.as_str().map(String::from)).as_deref() == Some("clear") && field(&load, "cluster_retry") == Some(rmpv::Value::Boolean(true))
}

/// A `_return` for a job the master never published, sealed with the minion's session,
/// and its nonce.
fn a_return(m: &WireMinion, jid: &str) -> (Vec<u8>, String) {
    use halite_tools::swarm::minion;
    let job = minion::Job { jid: jid.into(), fun: "test.ping".into(), arg: vec![], user: None, matched: true };
    minion::aes_request(&m.me, &m.creds.session, minion::return_load(&job)).expect("request")
}

#[test]
fn a_leader_cut_off_refuses_writes_the_majority_goes_on_and_after_healing_every_member_agrees() {
    let Proxied { mut c, mesh } = proxied("cut-test");
    let cut = leader(&c, 0);
    let (a, b) = ((cut + 1) % 3, (cut + 2) % 3);
    // A real minion on a member of the future majority; a key pending everywhere; a
    // minion signed in (by hand) through the member to be cut off.
    let mut steady = served(&c, "steady", a, b);
    register_key(&c.envs[a], "before-cut");
    for env in &c.envs {
        wait_for("the pending key on every member", 30, || env.ids("minions_pre").iter().any(|k| k == "before-cut"));
    }
    let hand = identity("hand");
    let (ce, ae, be) = (&c.envs[cut], &c.envs[a], &c.envs[b]);
    assert!(WireMinion::try_sign_in_with(&ce.ip, ce.ret, hand(), None).is_err(), "pending first");
    wait_for("hand pending on the majority", 30, || be.ids("minions_pre").iter().any(|k| k == "hand"));
    be.ok(SALT_KEY, &["-a", "hand", "-y"]);
    wait_for("hand accepted on the member to be cut off", 30, || ce.ids("minions").iter().any(|k| k == "hand"));
    let hand_m = WireMinion::try_sign_in_with(&ce.ip, ce.ret, hand(), None).expect("hand signed in through the leader");
    settle(&c);

    mesh.isolate(cut);

    // The majority elects another leader and goes on: a key accepted, a job answered.
    wait_for("a new leader among the majority", 60, || members(ae)["leader_id"].as_str().is_some_and(|l| l != ce.ip));
    // (Sent again while the member answers Salt's retry: it may still be catching up
    // with the new leader, and then records nothing.)
    let during = identity("during-cut");
    wait_for("the key registered during the cut pending on the majority", 60, || {
        let _ = WireMinion::try_sign_in_with(&ae.ip, ae.ret, during(), None);
        be.ids("minions_pre").iter().any(|k| k == "during-cut")
    });
    let out = be.ok(SALT_KEY, &["-a", "during-cut", "-y"]);
    assert!(out.contains("Key for minion during-cut accepted."), "{out}");
    assert_eq!(ae.salt_json(&["steady", "test.echo", "during-the-cut"], 20), json!({"steady": "during-the-cut"}));

    // The cut-off member has no leader: a minion's return gets Salt's retry answer...
    wait_for("Salt's retry answer from the cut-off member", 60, || is_cluster_retry(&hand_m.send(a_return(&hand_m, "20261123000000000001").0)));
    // ...a sign-in is not let in...
    assert!(WireMinion::try_sign_in_with(&ce.ip, ce.ret, hand(), None).is_err(), "a sign-in through the cut-off member was let in");
    // ...and an accept through it does not succeed; reads there still answer.
    let o = ce.run(SALT_KEY, &["-a", "before-cut", "-y"]);
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(!said.contains("Key for minion before-cut accepted."), "an accept through the cut-off member succeeded: {said}");
    assert!(ce.ids("minions_pre").iter().any(|k| k == "before-cut"), "the cut-off member's view changed");
    assert!(!ce.ids("minions").iter().any(|k| k == "during-cut"), "the cut-off member applied a write of the majority");
    assert!(be.ids("minions_pre").iter().any(|k| k == "before-cut"), "the refused accept reached the majority");
    assert!(members(ce)["leader_id"].is_null(), "the cut-off member still names a leader: {}", members(ce));

    mesh.heal_all();

    // The healed member catches up: the records of the cut are there, record by record.
    wait_for("the healed member to apply what the majority wrote", 60, || ce.ids("minions").iter().any(|k| k == "during-cut"));
    settle(&c);
    assert!(echo_returns(ce).contains(&("steady".to_string(), "during-the-cut".to_string())), "the return of the cut is missing on the healed member");
    assert!(ce.ids("minions_pre").iter().any(|k| k == "before-cut"), "the refused accept applied after all (it was never handed to the log)");
    let expected = echo_returns(ae);
    for env in &c.envs {
        assert_eq!(env.listing(), ae.listing(), "{}: keys differ", env.ip);
        assert_eq!(echo_returns(env), expected, "{}: returns differ", env.ip);
    }
    // And it serves again: the hand-made minion's return is accepted through it.
    wait_for("the healed member to take a return again", 60, || {
        let (body, nonce) = a_return(&hand_m, "20261123000000000002");
        matches!(halite_tools::swarm::minion::aes_reply(&hand_m.creds.session, &nonce, &hand_m.send(body)), Ok(AesReply::Value(_)))
    });
    wait_for("the return on the majority", 30, || be.runner(&["jobs.lookup_jid", "20261123000000000002"]) == json!({"hand": true}));
    steady.stop();
    assert_same_digests(&mut c);
}

#[test]
fn a_member_catching_up_after_a_long_cut_does_not_publish_the_jobs_it_missed() {
    let Proxied { c, mesh } = proxied("old-jobs");
    let cut = 2;
    let (a, b) = (0, 1);
    // A real minion connected only to the member that will be cut off.
    let _minion = served(&c, "edge", cut, a);
    let root = &c.envs[cut].root;
    mesh.isolate(cut);
    wait_for("the cut-off member to lose its leader", 60, || members(&c.envs[cut])["leader_id"].is_null());
    // A job published through the majority while the minion's member is cut off: it
    // cannot reach the minion.
    c.envs[a].salt(&["edge", "test.echo", "missed"], 5);
    let jobs = c.envs[b].runner(&["jobs.list_jobs"]);
    let old = jobs
        .as_object()
        .and_then(|m| m.iter().find(|(_, j)| j["Function"] == "test.echo" && j["Arguments"] == json!(["missed"])).map(|(jid, _)| jid.clone()))
        .unwrap_or_else(|| panic!("the job is not in the majority's job cache: {jobs}"));
    // Kept cut off past the 30 s after which a catching-up member does not publish: the
    // time passing is the condition under test, not a wait for a signal.
    std::thread::sleep(std::time::Duration::from_secs(32));
    assert_eq!(minion_log_count(root, "edge", &old), 0, "the minion ran the job while its member was cut off");
    mesh.heal_all();
    wait_for("the healed member to apply the old job", 60, || c.envs[cut].runner(&["jobs.list_jobs"]).get(&old).is_some());
    // The next job reaches the minion through the same member (which publishes in log
    // order: the old job, had it been published, would have come first).
    wait_for("edge to answer a new job published through the majority", 90, || c.envs[a].salt_json(&["edge", "test.echo", "fresh"], 5) == json!({"edge": "fresh"}));
    assert_eq!(minion_log_count(root, "edge", &old), 0, "the minion ran a job its member found while catching up:\n{}", minion_log(root, "edge"));
    assert!(c.envs[cut].master_log().contains("not publishing an old job found while catching up"), "{}", c.envs[cut].master_log());
    assert!(c.envs[b].runner(&["jobs.lookup_jid", &old]).as_object().is_none_or(|m| m.is_empty()), "the old job has a return");
}
