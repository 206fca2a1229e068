//! Sign-in storms (`master/src/daemon/request_port/shares.rs`, `signins.rs`): a master
//! that restarts with a new publish key (as Salt's does at every start) under a swarm
//! whose minions are all told a job at once signs every minion in again and stores
//! every return, sign-ins and returns each served from its own queue; and a sign-in
//! sent again, byte for byte, is answered with the first one's reply without a second
//! RSA operation (`halite_rsa_private_operations_total`).

use serde_json::{json, Value};

use crate::health::{metric, metrics_of};
use crate::support::*;

use halite_tools::swarm::minion;

/// The sum of a metric's samples (every label set) in a `/metrics` text.
fn total(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{')))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// One labelled sample of a metric, 0 when absent.
fn sample(text: &str, name_and_labels: &str) -> f64 {
    metric(text, name_and_labels).unwrap_or(0.0)
}

#[test]
fn a_restart_storm_signs_every_minion_in_again_and_stores_every_return() {
    const N: usize = 300;
    let ip = one_ip();
    let health = port_free_on(&[&ip]);
    let mut m = Running::start(Env::master(&ip, "localfs_key", &format!("auto_accept: True\nhalite_health_port: {health}\nhalite_new_publish_key_at_start: True\n")));
    let (_swarm, mut lines) = start_swarm(&m.env, N, &["--auth-timeout", "10", "--acceptance-wait", "1", "--random-reauth-delay", "2", "--distinct-keys", "8"]);
    assert_eq!(swarm_event(&lines, "ready")["count"], json!(N));

    // The restart makes a new publish key: the next publish decrypts for no minion, and
    // every one signs in again, then returns the job, all at once.
    m.proc.stop();
    m.proc = start_master(&m.env);
    let connected = || crate::health::metric(&metrics_of(&m.env, health), "halite_minions_connected");
    wait_for("every swarm minion subscribed again", 120, || connected() == Some(N as f64));
    let out = m.env.ok(SALT, &["*", "test.ping", "--async"]);
    let jid = out.split_whitespace().find(|w| w.len() == 20 && w.bytes().all(|b| b.is_ascii_digit())).unwrap_or_else(|| panic!("no jid in {out}")).to_string();
    lines.wait("every minion to evaluate the job", 300, |l| l.iter().any(|l| l.contains("\"job\"") && l.contains(&jid)));
    let job = lines.seen().iter().map(|l| json(l)).find(|v| v["event"] == "job" && v["jid"] == jid.as_str()).expect("the job's line");
    assert_eq!((job["returned"].clone(), job["failed"].clone()), (json!(N), json!(0)), "{job}");
    let again = lines.seen().iter().filter(|l| l.contains("\"signed_in_again\"")).count();
    assert!(again >= N, "every minion signed in again ({again} of {N})");
    let stored = m.env.runner(&["jobs.lookup_jid", &jid]);
    assert_eq!(stored.as_object().map(|o| o.len()), Some(N), "every return stored: {stored}");
    assert!(stored.as_object().is_some_and(|o| o.values().all(|v| *v == Value::Bool(true))), "{stored}");

    // Each from its own queue, counted by class; nothing waits once it is over.
    let text = metrics_of(&m.env, health);
    assert!(sample(&text, "halite_request_started_total{class=\"sign_in\"}") >= N as f64, "{text}");
    assert!(sample(&text, "halite_request_started_total{class=\"return\"}") >= N as f64, "{text}");
    for class in ["sign_in", "return", "other"] {
        assert_eq!(sample(&text, &format!("halite_request_waiting{{class=\"{class}\"}}")), 0.0, "{class}: {text}");
    }
}

#[test]
fn a_sign_in_sent_again_is_answered_without_a_second_rsa_operation() {
    let ip = one_ip();
    let health = port_free_on(&[&ip]);
    let m = Running::start(Env::master(&ip, "localfs_key", &format!("auto_accept: True\nhalite_health_port: {health}\n")));
    let hand = WireMinion::sign_in(&m.env, "storm-dup");
    let master_pub = hand.creds.master_pub.clone();
    let rsa = || total(&metrics_of(&m.env, health), "halite_rsa_private_operations_total");
    let reused = |how: &str| sample(&metrics_of(&m.env, health), &format!("halite_signin_reused_total{{how=\"{how}\"}}"));

    // A restarted minion's sign-in (its token encrypted to the master's key): the token's
    // decryption and the reply's signature.
    let nonce = minion::nonce();
    let body = minion::auth_request(&hand.me, &nonce, Some(&master_pub)).expect("auth request");
    let (before, cached) = (rsa(), reused("cached"));
    let first = hand.send(body.clone());
    // The same bytes again at once (salt-minion's copy when its `auth_timeout` ran out
    // as the reply was on its way): the same reply, no RSA.
    let second = hand.send(body.clone());
    minion::auth_reply(&hand.me, &nonce, &first, Some(&master_pub)).expect("the first reply signs it in");
    assert_eq!(second, first, "the first reply, byte for byte");
    assert_eq!(rsa() - before, 2.0, "one decryption and one signature, for both");
    assert_eq!(reused("cached") - cached, 1.0);

    // Sixteen copies of a new sign-in at once: one handled, the rest join it or are
    // answered from it, and each reply signs the minion in.
    let nonce = minion::nonce();
    let body = minion::auth_request(&hand.me, &nonce, Some(&master_pub)).expect("auth request");
    let (before, both) = (rsa(), reused("joined") + reused("cached"));
    let replies = hand.send_at_once(body, 16);
    for r in &replies {
        minion::auth_reply(&hand.me, &nonce, r, Some(&master_pub)).expect("each copy's reply signs it in");
    }
    assert_eq!(rsa() - before, 2.0, "one sign-in's RSA for sixteen copies");
    assert_eq!(reused("joined") + reused("cached") - both, 15.0);

    // A new sign-in (a new nonce and token) is handled afresh.
    let nonce = minion::nonce();
    let before = rsa();
    let third = hand.send(minion::auth_request(&hand.me, &nonce, Some(&master_pub)).expect("auth request"));
    minion::auth_reply(&hand.me, &nonce, &third, Some(&master_pub)).expect("signed in");
    assert_eq!(rsa() - before, 2.0, "a new sign-in costs its RSA");
}
