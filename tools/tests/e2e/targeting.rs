//! Targeting with two real salt-minion 3008.5 processes, as Salt documents it: pillar
//! (`-I`, `-J`, `I@`) from the pillar the master compiled and cached for each minion,
//! nodegroups (`-N`, `N@`, nested), ipcidr (`-S`, `S@`) from the `ipv4` grains, `--subset`,
//! the same targets in the pillar top and in the state top the minions evaluate, and a
//! pillar target resolved by another member of a cluster than the one that compiled it.

use serde_json::{json, Value};

use crate::support::*;

/// A master with `nodegroups` and a pillar top, and two minions: `m1` (pillar role web,
/// address 10.1.0.5) and `m2` (role db, address 10.2.0.5), both answering `test.ping`.
/// (Fields drop in order: minions, master, then the directory.)
struct Two {
    _m1: Proc,
    _m2: Proc,
    master: Proc,
    env: Env,
}

fn two() -> Two {
    let env = Env::master(
        &one_ip(),
        "localfs_key",
        "auto_accept: True\nnodegroups:\n  first: [m1]\n  byrole: 'I@role:web'\n  both: 'N@first or L@m2'\n  net1: 'S@10.1.0.0/16'\n",
    );
    let pil = env.root.join("srv/pillar");
    std::fs::create_dir_all(&pil).expect("pillar roots");
    std::fs::write(
        pil.join("top.sls"),
        "base:\n  m1:\n    - web\n  m2:\n    - db\n  first:\n    - match: nodegroup\n    - infirst\n  '10.2.0.0/16':\n    - match: ipcidr\n    - net2\n",
    )
    .expect("top.sls");
    for (f, body) in [("web.sls", "role: web\n"), ("db.sls", "role: db\n"), ("infirst.sls", "in_first: true\n"), ("net2.sls", "net: two\n")] {
        std::fs::write(pil.join(f), body).expect("pillar sls");
    }
    let srv = env.root.join("srv/salt");
    std::fs::create_dir_all(&srv).expect("file roots");
    std::fs::write(srv.join("top.sls"), "base:\n  first:\n    - match: nodegroup\n    - a\n  'I@role:db':\n    - match: compound\n    - b\n  'S@10.1.0.0/16':\n    - match: compound\n    - c\n").expect("state top");
    for f in ["a.sls", "b.sls", "c.sls"] {
        std::fs::write(srv.join(f), "{}\n").expect("sls");
    }
    let master = start_master(&env);
    let conf = |ip: &str| format!("master: {}\nmaster_port: {}\ngrains:\n  ipv4: [127.0.0.1, {ip}]\n", env.ip, env.ret);
    let m1 = start_minion(&env.root, "m1", &conf("10.1.0.5"));
    let m2 = start_minion(&env.root, "m2", &conf("10.2.0.5"));
    for id in ["m1", "m2"] {
        wait_minion_ready(&env.root, id, 1, 90);
        wait_ping(&env, id, 90);
    }
    Two { _m1: m1, _m2: m2, master, env }
}

fn ping(t: &Two, args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.push("test.ping");
    t.env.salt_json(&full, 30)
}

fn no_match(t: &Two, args: &[&str]) -> String {
    let mut full = args.to_vec();
    full.push("test.ping");
    let o = t.env.salt(&full, 10);
    assert!(!o.status.success(), "{args:?} matched: {}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout)
}

#[test]
fn pillar_targets_match_the_pillar_compiled_for_each_minion() {
    let t = two();
    assert_eq!(ping(&t, &["-I", "role:web"]), json!({"m1": true}));
    assert_eq!(ping(&t, &["-I", "role:d*"]), json!({"m2": true}));
    assert_eq!(ping(&t, &["-J", "role:w.b"]), json!({"m1": true}));
    assert_eq!(ping(&t, &["-C", "I@role:db or L@m1"]), json!({"m1": true, "m2": true}));
    assert_eq!(ping(&t, &["-C", "I@role:* and not m1"]), json!({"m2": true}));
    assert_eq!(ping(&t, &["-C", "( J@role:(web|db) and E@m(1|9) ) or L@nosuch"]), json!({"m1": true}), "a regex with parentheses in a word");
    assert!(no_match(&t, &["-I", "role:nosuch"]).contains("No minions matched"));
    // What the master cached is what the minion sees.
    assert_eq!(t.env.salt_json(&["m2", "pillar.items", "unmask=True"], 30)["m2"]["role"], json!("db"));
    // The cache is a record per change, not per compilation: the pillar was compiled
    // for m2 again just now, the same, and nothing new was logged for it.
    let mut t = t;
    t.master.stop();
    assert_eq!(t.env.record_kinds().iter().filter(|k| *k == "pillar_cache").count(), 2, "one pillar_cache record per minion");
}

#[test]
fn nodegroups_expand_on_the_master_nested_and_in_compounds() {
    let t = two();
    assert_eq!(ping(&t, &["-N", "first"]), json!({"m1": true}));
    assert_eq!(ping(&t, &["-N", "both"]), json!({"m1": true, "m2": true}), "a nested group");
    assert_eq!(ping(&t, &["-N", "byrole"]), json!({"m1": true}), "a group of pillar targets");
    assert_eq!(ping(&t, &["-C", "N@both and not N@first"]), json!({"m2": true}));
    assert!(no_match(&t, &["-N", "nosuch"]).contains("Node group nosuch unavailable"));
}

#[test]
fn ipcidr_targets_match_the_ipv4_grains() {
    let t = two();
    assert_eq!(ping(&t, &["-S", "10.1.0.0/16"]), json!({"m1": true}));
    assert_eq!(ping(&t, &["-S", "10.2.0.5"]), json!({"m2": true}));
    assert_eq!(ping(&t, &["-S", "127.0.0.0/8"]), json!({"m1": true, "m2": true}));
    assert_eq!(ping(&t, &["-C", "S@10.0.0.0/8 and not m2"]), json!({"m1": true}));
    assert_eq!(ping(&t, &["-N", "net1"]), json!({"m1": true}));
    assert!(no_match(&t, &["-S", "192.168.0.0/16"]).contains("No minions matched"));
}

#[test]
fn subset_runs_on_the_asked_number_of_matching_minions() {
    let t = two();
    for _ in 0..3 {
        let v = ping(&t, &["--subset", "1", "*"]);
        let ids: Vec<&String> = v.as_object().expect("returns").keys().collect();
        assert!(ids == ["m1"] || ids == ["m2"], "{v}");
    }
    assert_eq!(ping(&t, &["--subset", "5", "-I", "role:*"]), json!({"m1": true, "m2": true}), "fewer matching than asked: all of them");
}

#[test]
fn tops_use_nodegroups_pillar_and_ipcidr() {
    let t = two();
    // The pillar top, on the master: a nodegroup and an ipcidr match.
    let p = t.env.salt_json(&["*", "pillar.items", "unmask=True"], 30);
    assert_eq!(p["m1"], json!({"role": "web", "in_first": true}), "{p}");
    assert_eq!(p["m2"], json!({"role": "db", "net": "two"}), "{p}");
    // The state top, on each minion: the nodegroups the master sent and its own pillar.
    let top = t.env.salt_json(&["*", "state.show_top"], 30);
    assert_eq!(top["m1"], json!({"base": ["a", "c"]}), "{top}");
    assert_eq!(top["m2"], json!({"base": ["b"]}), "{top}");
}

#[test]
fn a_pillar_target_resolves_on_every_member_of_a_cluster() {
    // The minion signs in to the third member, which compiles its pillar; the cache is a
    // record, so the first member resolves `-I` the same and its job reaches the minion.
    let c = crate::cluster::founding(3, "targeting", "auto_accept: True\n");
    for env in &c.envs {
        let pil = env.root.join("srv/pillar");
        std::fs::create_dir_all(&pil).expect("pillar roots");
        std::fs::write(pil.join("top.sls"), "base:\n  '*':\n    - web\n").expect("top.sls");
        std::fs::write(pil.join("web.sls"), "role: web\n").expect("web.sls");
    }
    let third = &c.envs[2];
    let _minion = start_minion(&third.root, "real-1", &format!("master: {}\nmaster_port: {}\n", third.ip, third.ret));
    wait_minion_ready(&third.root, "real-1", 1, 90);
    wait_ping(&c.envs[0], "real-1", 90);
    // Each member applies the record when it learns it is committed: retried, not timed.
    wait_for("-I through the first member", 60, || c.envs[0].salt_json(&["-I", "role:web", "test.ping"], 10) == json!({"real-1": true}));
    wait_for("I@ through the second member", 60, || c.envs[1].salt_json(&["-C", "I@role:web and real-*", "test.ping"], 10) == json!({"real-1": true}));
}
