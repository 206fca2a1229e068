//! `salt-run state.orchestrate` with two unmodified salt-minion 3008.5 processes: a
//! `salt.state` step that `require`s a `salt.function` step (declared before it, so the
//! requisite pulls the function forward) runs after it and both succeed, printed in
//! Salt's highstate shape and as Salt's `--out json`; a failing step keeps the step that
//! requires it from running, runs its `onfail` step, spares a `fail_minions` minion, and
//! the run exits 1; a `salt.runner` and a `salt.wheel` (`key.reject` of a pending key) step run. Each step's job is an ordinary job in the job cache, and so
//! is the run itself (`runner.state.orchestrate`, its return the highstate data).

use serde_json::{json, Value};

use crate::support::*;

/// A master whose roots hold `files` (relative to `srv/salt`; `@DIR@` in them is the
/// test's work directory, `root/work`), synced into the state, and minions m1 and m2
/// answering pings.
fn master_with(files: &[(&str, &str)]) -> (Running, [Proc; 2]) {
    let env = Env::master(&one_ip(), "localfs_key", "auto_accept: True\n");
    seed_pending(&env, &["pend1"]);
    let dir = env.root.join("work");
    std::fs::create_dir_all(&dir).expect("work dir");
    for (path, body) in files {
        let body = body.replace("@DIR@", &dir.display().to_string());
        let p = env.root.join("srv/salt").join(path);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("roots dir");
        std::fs::write(p, body).expect("roots file");
    }
    let m = Running::start(env);
    let env = &m.env;
    env.ok(SALT_RUN, &["cluster.sync_roots"]);
    let conf = format!("master: {}\nmaster_port: {}\n", env.ip, env.ret);
    let m1 = start_minion(&env.root, "m1", &conf);
    let m2 = start_minion(&env.root, "m2", &conf);
    wait_ping(env, "m1", 90);
    wait_ping(env, "m2", 90);
    (m, [m1, m2])
}

/// `salt-run ARGS`: (exit code, stdout).
fn orch(env: &Env, args: &[&str]) -> (i32, String) {
    let o = env.run_for(SALT_RUN, args, std::time::Duration::from_secs(180));
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

/// The run's states (`data.<master>_master`) from `--out json`, checking the envelope.
fn states(out: &str, retcode: i64) -> serde_json::Map<String, Value> {
    let v = json(out);
    assert_eq!(
        (&v["outputter"], &v["retcode"]),
        (&json!("highstate"), &json!(retcode)),
        "{v}"
    );
    let data = v["data"].as_object().expect("data");
    assert_eq!(data.len(), 1, "{v}");
    let (host, states) = data.iter().next().expect("one host");
    assert!(host.ends_with("_master"), "{host}");
    states.as_object().expect("states").clone()
}

/// The functions of the jobs in the job cache.
fn job_functions(env: &Env) -> Vec<(String, String)> {
    let jobs = env.runner(&["jobs.list_jobs"]);
    jobs.as_object()
        .expect("jobs")
        .iter()
        .map(|(jid, j)| {
            (
                jid.clone(),
                j["Function"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn a_state_step_requiring_a_function_step_runs_after_it() {
    let (m, _minions) = master_with(&[
        (
            "orch/deploy.sls",
            "apply:\n  salt.state:\n    - tgt: 'm*'\n    - sls: uses_marker\n    - require:\n      - salt: write_marker\nwrite_marker:\n  salt.function:\n    - name: cmd.run\n    - tgt: 'm*'\n    - arg:\n      - touch {{ pillar['dir'] }}/marker\n",
        ),
        ("uses_marker.sls", "marker:\n  file.exists:\n    - name: @DIR@/marker\ncopy:\n  file.copy:\n    - name: @DIR@/copy-{{ grains['id'] }}\n    - source: @DIR@/marker\n    - require:\n      - file: marker\n"),
    ]);
    let env = &m.env;
    let dir = env.root.join("work");
    let pillar = format!("pillar={{\"dir\": \"{}\"}}", dir.display());

    let (code, out) = orch(
        env,
        &["state.orchestrate", "orch.deploy", &pillar, "--out", "json"],
    );
    assert_eq!(code, 0, "{out}");
    let s = states(&out, 0);
    let f = &s["salt_|-write_marker_|-cmd.run_|-function"];
    let st = &s["salt_|-apply_|-apply_|-state"];
    assert_eq!(
        (&f["result"], &f["__run_num__"], &f["__id__"], &f["__sls__"]),
        (
            &json!(true),
            &json!(0),
            &json!("write_marker"),
            &json!("orch.deploy")
        ),
        "{f}"
    );
    assert_eq!(
        f["comment"], "Function ran successfully. Function cmd.run ran on m1, m2.",
        "{f}"
    );
    assert_eq!(f["changes"], json!({"ret": {"m1": "", "m2": ""}}), "{f}");
    assert_eq!(
        (&st["result"], &st["__run_num__"]),
        (&json!(true), &json!(1)),
        "{st}"
    );
    assert_eq!(
        st["comment"], "States ran successfully. Updating m1, m2.",
        "{st}"
    );
    assert_eq!(st["changes"]["out"], "highstate", "{st}");
    for id in ["m1", "m2"] {
        assert!(
            dir.join(format!("copy-{id}")).exists(),
            "{id} applied the state after the marker was written"
        );
        let copy = st["changes"]["ret"][id]
            .as_object()
            .expect("the minion's states")
            .values()
            .find(|v| v["__id__"] == "copy")
            .expect("copy")
            .clone();
        assert_eq!(copy["result"], true, "{copy}");
    }
    for k in ["start_time", "duration"] {
        assert!(f.get(k).is_some() && st.get(k).is_some(), "{k}");
    }
    // Each step's job is in the job cache, with both minions' returns.
    let jobs = job_functions(env);
    for (step, fun) in [(f, "cmd.run"), (st, "state.sls")] {
        let jid = step["__jid__"].as_str().expect("the step's jid");
        assert!(
            jobs.contains(&(jid.to_string(), fun.to_string())),
            "{jid} {fun}: {jobs:?}"
        );
        assert_eq!(
            env.runner(&["jobs.lookup_jid", jid])
                .as_object()
                .map(|r| r.len()),
            Some(2)
        );
    }

    // Salt's highstate outputter by default; this time the state changes nothing.
    let (code, out) = orch(env, &["state.orchestrate", "orch.deploy", &pillar]);
    assert_eq!(code, 0, "{out}");
    for line in [
        "          ID: write_marker",
        "    Function: salt.function",
        "        Name: cmd.run",
        "      Result: True",
        "     Comment: Function ran successfully. Function cmd.run ran on m1, m2.",
        "          ID: apply",
        "    Function: salt.state",
        "     Comment: States ran successfully. No changes made to m1, m2.",
        "Succeeded: 2 (changed=1)",
        "Failed:    0",
        "Total states run:     2",
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "{line:?} missing from\n{out}"
        );
    }
    assert!(
        out.lines().next().is_some_and(|l| l.ends_with("_master:")),
        "{out}"
    );
    assert!(
        out.contains("\nSummary for ")
            && out.contains("Total run time:")
            && out.contains("     Started: ")
            && out.contains("    Duration: "),
        "{out}"
    );

    // An SLS that does not exist: Salt's compile error shape, retcode 1.
    let (code, out) = orch(env, &["state.orchestrate", "orch.nosuch", "--out", "json"]);
    assert_eq!(code, 1, "{out}");
    let v = json(&out);
    assert_eq!(v["retcode"], 1);
    assert_eq!(
        v["data"]
            .as_object()
            .and_then(|d| d.values().next())
            .cloned(),
        Some(json!([
            "No matching sls found for 'orch.nosuch' in env 'base'"
        ])),
        "{v}"
    );
}

#[test]
fn a_failing_step_stops_what_requires_it_and_runs_its_onfail_step() {
    let (m, _minions) = master_with(&[(
        "orch/fail/init.sls",
        "fail_first:\n  salt.function:\n    - name: cmd.run\n    - tgt: 'm*'\n    - arg: ['false']\n    - fail_minions: ''\nthen_state:\n  salt.state:\n    - tgt: 'm*'\n    - sls: nosuch\n    - require:\n      - salt: fail_first\non_failure:\n  salt.function:\n    - name: cmd.run\n    - tgt: m1\n    - arg: ['touch {{ pillar['dir'] }}/onfail-ran']\n    - onfail:\n      - salt: fail_first\nnot_needed:\n  salt.function:\n    - name: test.ping\n    - tgt: m1\n    - onfail:\n      - salt: on_failure\nspared:\n  salt.function:\n    - name: cmd.run\n    - tgt: m2\n    - arg: ['false']\n    - fail_minions: [m2]\nenvs:\n  salt.runner:\n    - name: fileserver.envs\n    - backend: roots\nreject_pending:\n  salt.wheel:\n    - name: key.reject\n    - match: pend1\n",
    )]);
    let env = &m.env;
    let dir = env.root.join("work");
    let pillar = format!("pillar={{\"dir\": \"{}\"}}", dir.display());
    let before = job_functions(env).len();

    let (code, out) = orch(
        env,
        &["state.orchestrate", "orch.fail", &pillar, "--out", "json"],
    );
    assert_eq!(code, 1, "{out}");
    let s = states(&out, 1);
    let first = &s["salt_|-fail_first_|-cmd.run_|-function"];
    assert_eq!(first["result"], false, "{first}");
    assert!(first["comment"].as_str().is_some_and(|c| c == "Running function cmd.run failed on minions: m1, m2 Function cmd.run ran on m1, m2."), "{first}");
    let then = &s["salt_|-then_state_|-then_state_|-state"];
    assert_eq!(
        (&then["result"], &then["comment"]),
        (
            &json!(false),
            &json!("One or more requisite failed: orch.fail.fail_first")
        ),
        "{then}"
    );
    assert!(
        then.get("__jid__").is_none(),
        "the state step published nothing: {then}"
    );
    let onfail = &s["salt_|-on_failure_|-cmd.run_|-function"];
    assert_eq!(onfail["result"], true, "{onfail}");
    assert!(dir.join("onfail-ran").exists(), "the onfail step ran on m1");
    let not_needed = &s["salt_|-not_needed_|-test.ping_|-function"];
    assert_eq!(
        (&not_needed["result"], &not_needed["comment"]),
        (
            &json!(true),
            &json!("State was not run because onfail req did not change")
        ),
        "{not_needed}"
    );
    let spared = &s["salt_|-spared_|-cmd.run_|-function"];
    assert_eq!(spared["result"], true, "m2 is in fail_minions: {spared}");
    let envs = &s["salt_|-envs_|-fileserver.envs_|-runner"];
    assert_eq!((&envs["result"], &envs["changes"], &envs["comment"]), (&json!(true), &json!({"return": ["base"]}), &json!("Runner function 'fileserver.envs' executed.")), "{envs}");
    let wheel = &s["salt_|-reject_pending_|-key.reject_|-wheel"];
    assert_eq!((&wheel["result"], &wheel["changes"]), (&json!(true), &json!({"return": {"minions": ["pend1"]}})), "{wheel}");
    assert_eq!(env.ids("minions_rejected"), ["pend1"]);
    // Four jobs: the run's own and three steps' (none of them the state step's).
    let jobs = job_functions(env);
    assert_eq!(jobs.len() - before, 4, "{jobs:?}");
    let (run_jid, _) = jobs.iter().find(|(_, f)| f == "runner.state.orchestrate").expect("the run's job");
    let ret = env.runner(&["jobs.lookup_jid", run_jid]);
    let (host, r) = ret.as_object().and_then(|o| o.iter().next()).expect("the run's return");
    assert!(host.ends_with("_master"), "{ret}");
    assert_eq!((&r["outputter"], &r["retcode"]), (&json!("highstate"), &json!(1)), "{ret}");
    assert_eq!(r["data"][host]["salt_|-fail_first_|-cmd.run_|-function"]["result"], json!(false), "{ret}");
    assert!(!jobs.iter().any(|(_, f)| f == "state.sls"), "{jobs:?}");

    let (code, out) = orch(env, &["state.orchestrate", "orch.fail", &pillar]);
    assert_eq!(code, 1, "{out}");
    for line in [
        "          ID: then_state",
        "      Result: False",
        "     Comment: One or more requisite failed: orch.fail.fail_first",
        "Failed:    2",
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "{line:?} missing from\n{out}"
        );
    }
}
