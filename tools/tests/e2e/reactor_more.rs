//! Reactor files named by `salt://` (read from the master's `base` file roots) with
//! unmodified salt-minion 3008.5 processes: a `local.state.apply` reaction whose state
//! comes from the roots too (the minion fetches `salt://touched.sls`), and a
//! `wheel.key.delete` reaction that deletes the key an event names.

use serde_json::json;

use crate::support::*;

#[test]
fn salt_url_reactor_files_apply_states_and_delete_keys() {
    let env = Env::master(
        &one_ip(),
        "localfs_key",
        "reactor:\n  - 'halite/test/apply':\n    - salt://reactor/apply.sls\n  - 'halite/test/delete':\n    - salt://reactor/delete.sls\n",
    );
    let work = env.root.join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    let srv = env.root.join("srv/salt");
    std::fs::create_dir_all(srv.join("reactor")).expect("roots");
    std::fs::write(srv.join("reactor/apply.sls"), "apply_{{ data['id'] }}:\n  local.state.apply:\n    - tgt: {{ data['id'] }}\n    - arg:\n      - touched\n").expect("apply.sls");
    std::fs::write(srv.join("reactor/delete.sls"), "{% if data['data'].get('who') %}\ndrop:\n  wheel.key.delete:\n    - match: {{ data['data']['who'] }}\n{% endif %}\n").expect("delete.sls");
    std::fs::write(srv.join("touched.sls"), format!("touched:\n  file.append:\n    - name: {}/applied\n    - text: {{{{ grains['id'] }}}}\n", work.display())).expect("touched.sls");
    let m = Running::start(env);
    let env = &m.env;
    env.ok(SALT_RUN, &["cluster.sync_roots"]);
    let conf = format!("master: {}\nmaster_port: {}\n", env.ip, env.ret);
    let _m1 = start_minion(&env.root, "m1", &conf);
    let _m2 = start_minion(&env.root, "m2", &conf);
    wait_for("both keys pending", 60, || env.ids("minions_pre").len() == 2);
    env.ok(SALT_KEY, &["-A", "-y"]);
    wait_ping(env, "m1", 90);
    wait_ping(env, "m2", 90);

    // The apply reaction: m1's state run, from a state file in the roots.
    assert_eq!(env.salt_json(&["m1", "event.send", "halite/test/apply"], 20), json!({"m1": true}));
    wait_for("m1's reaction state run", 90, || std::fs::read_to_string(work.join("applied")).is_ok_and(|t| t.lines().any(|l| l == "m1")));
    let state_jobs = env.runner(&["jobs.list_jobs"]);
    let applied: Vec<&str> = state_jobs.as_object().expect("jobs").values().filter(|j| j["Function"] == json!("state.apply")).filter_map(|j| j["Target"].as_str()).collect();
    assert_eq!(applied, ["m1"], "{state_jobs}");

    // The delete reaction: m1 names m2, whose key goes.
    assert_eq!(env.salt_json(&["m1", "event.send", "halite/test/delete", "{\"who\": \"m2\"}"], 20), json!({"m1": true}));
    wait_for("m2's key deleted", 60, || !env.ids("minions").contains(&"m2".to_string()));
    assert_eq!(env.ids("minions"), ["m1"]);
    assert!(!ping_via(env, "m2", 3), "m2 is no longer reached");
}
