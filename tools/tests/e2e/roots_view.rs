//! One view of the roots on a lone master, files only on disk (no `cluster.sync_roots`),
//! with an unmodified salt-minion 3008.5: `salt-run fileserver.file_list`/`dir_list`/
//! `envs`, `state.orchestrate`, `pillar.show_pillar` and a `salt://` reactor file read the
//! tree the minion is served (`cp.list_master`, `cp.list_master_dirs`, `cp.envs`,
//! `pillar.items`, a managed file's source), and a file changed or added on disk is seen
//! by every one of them at the next request.

use serde_json::{json, Value};

use crate::support::*;

fn write(dir: &std::path::Path, rel: &str, body: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().expect("a parent")).expect("roots dir");
    std::fs::write(p, body).expect("roots file");
}

/// `salt-run state.orchestrate SLS --out json`: its states, the run having succeeded.
fn orchestrate(env: &Env, sls: &str) -> serde_json::Map<String, Value> {
    let o = env.run_for(SALT_RUN, &["state.orchestrate", sls, "--out", "json"], std::time::Duration::from_secs(180));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&out);
    assert_eq!(v["retcode"], json!(0), "{v}");
    let states = v["data"].as_object().and_then(|d| d.values().next()).and_then(Value::as_object).expect("the run's states").clone();
    assert!(!states.is_empty() && states.values().all(|s| s["result"] == json!(true)), "{v}");
    states
}

/// The lines of a file the minion writes (none yet: empty).
fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path).map(|t| t.lines().map(String::from).collect()).unwrap_or_default()
}

/// What the runners list and what the minion is served, the same.
fn same_listing(env: &Env) -> Value {
    let files = env.runner(&["fileserver.file_list"]);
    assert_eq!(env.salt_json(&["m1", "cp.list_master"], 30)["m1"], files);
    assert_eq!(env.salt_json(&["m1", "cp.list_master_dirs"], 30)["m1"], env.runner(&["fileserver.dir_list"]));
    assert_eq!(env.salt_json(&["m1", "cp.envs"], 30)["m1"], env.runner(&["fileserver.envs"]));
    files
}

#[test]
fn runners_orchestration_the_reactor_and_the_minion_read_one_tree_on_disk() {
    let s = Served::start(Accept::Auto, "reactor:\n  - 'halite/test/roots':\n    - salt://reactor/react.sls\n", "");
    let env = &s.env;
    let work = env.root.join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    let w = work.display().to_string();
    let (srv, pillar) = (env.root.join("srv/salt"), env.root.join("srv/pillar"));
    let orch = |word: &str| format!("mark:\n  salt.function:\n    - name: cmd.run\n    - tgt: m1\n    - arg: ['echo {word} >> {w}/orch']\nmotd:\n  salt.state:\n    - tgt: m1\n    - sls: motd\n    - require:\n      - salt: mark\n");
    let react = |word: &str| format!("react:\n  local.cmd.run:\n    - tgt: {{{{ data['id'] }}}}\n    - arg: ['echo {word} >> {w}/reacted']\n");
    write(&srv, "orch/two.sls", &orch("two-v1"));
    write(&srv, "motd.sls", &format!("{w}/motd:\n  file.managed:\n    - source: salt://files/motd.txt\n"));
    write(&srv, "files/motd.txt", "v1\n");
    write(&srv, "reactor/react.sls", &react("v1"));
    write(&pillar, "top.sls", "base:\n  '*':\n    - common\n");
    write(&pillar, "common.sls", "word: v1\n");

    assert_eq!(same_listing(env), json!(["files/motd.txt", "motd.sls", "orch/two.sls", "reactor/react.sls"]));
    assert_eq!(env.runner(&["fileserver.dir_list"]), json!(["files", "orch", "reactor"]));
    orchestrate(env, "orch.two");
    assert_eq!(lines(&work.join("orch")), ["two-v1"]);
    assert_eq!(std::fs::read_to_string(work.join("motd")).expect("the managed file"), "v1\n", "the minion was served the file on disk");
    assert_eq!(env.runner(&["pillar.show_pillar", "m1"]), json!({"word": "v1"}));
    assert_eq!(env.salt_json(&["m1", "pillar.items", "unmask=True"], 30)["m1"]["word"], json!("v1"));
    assert_eq!(env.salt_json(&["m1", "event.send", "halite/test/roots"], 20), json!({"m1": true}));
    wait_for("the reaction from the file on disk", 90, || lines(&work.join("reacted")) == ["v1"]);

    // Changed and added on disk: seen at the next request by all of them.
    write(&srv, "orch/two.sls", &orch("two-v2"));
    write(&srv, "orch/three/init.sls", &orch("three"));
    write(&srv, "files/motd.txt", "v2\n");
    write(&srv, "reactor/react.sls", &react("v2"));
    write(&pillar, "common.sls", "word: v2\n");
    assert_eq!(same_listing(env), json!(["files/motd.txt", "motd.sls", "orch/three/init.sls", "orch/two.sls", "reactor/react.sls"]));
    orchestrate(env, "orch.two");
    assert_eq!(lines(&work.join("orch")), ["two-v1", "two-v2"]);
    assert_eq!(std::fs::read_to_string(work.join("motd")).expect("the managed file"), "v2\n");
    orchestrate(env, "orch.three");
    assert_eq!(lines(&work.join("orch")), ["two-v1", "two-v2", "three"]);
    assert_eq!(env.runner(&["pillar.show_pillar", "m1"]), json!({"word": "v2"}));
    assert_eq!(env.salt_json(&["m1", "pillar.items", "unmask=True"], 30)["m1"]["word"], json!("v2"));
    assert_eq!(env.salt_json(&["m1", "event.send", "halite/test/roots"], 20), json!({"m1": true}));
    wait_for("the reaction from the changed file", 90, || lines(&work.join("reacted")) == ["v1", "v2"]);
}
