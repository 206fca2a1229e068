//! salt-api's `runner` and `runner_async` clients running `state.orchestrate` against an
//! unmodified salt-minion 3008.5, with a real HTTP client (curl): the sync `runner`
//! drives the run to its end and answers Salt's `{"data": {"<id>_master": STATES},
//! "outputter": "highstate", "retcode"}` (a `salt.state` step that `require`s a
//! `salt.function` step runs after it, on the minion: the file the first step creates
//! is what the state checks); `runner_async` answers `{"jid", "tag"}` at once, and the
//! run's end comes on `/events` (`salt/run/<jid>/ret`) and through `jobs.lookup_jid`;
//! a failing step fails the run (retcode 1, `success: false`) and keeps the step that
//! requires it from running; one job per run (the run's own, recorded as the eauth
//! user's), each step an ordinary job; `@runner` rules as Salt's.


use serde_json::{json, Value};

use crate::saltapi::{served, Api};
use crate::support::*;

/// One lowstate chunk through `POST /`: the status and the answer's `return`.
fn post(api: &Api, token: &str, chunk: Value) -> (u16, Value) {
    let (status, r) = api.call("POST", "/", token, Some(json!([chunk])));
    let out = if status == 200 { r["return"].clone() } else { r };
    (status, out)
}

/// The jobs in the job cache: jid → the job's `jobs.list_jobs` entry.
fn jobs(api: &Api, token: &str) -> serde_json::Map<String, Value> {
    let (status, r) = post(api, token, json!({ "client": "runner", "fun": "jobs.list_jobs" }));
    assert_eq!(status, 200, "{r}");
    r[0].as_object().cloned().unwrap_or_default()
}

/// The run jobs (`runner.state.orchestrate`) in the job cache: (jid, user).
fn runs(api: &Api, token: &str) -> Vec<(String, Value)> {
    let mut r: Vec<(String, Value)> = jobs(api, token).into_iter().filter(|(_, j)| j["Function"] == "runner.state.orchestrate").map(|(jid, j)| (jid, j["User"].clone())).collect();
    r.sort_by(|a, b| a.0.cmp(&b.0));
    r
}

/// The run's states from its return, checking Salt's envelope: (host, states).
fn states(ret: &Value, retcode: i64) -> (String, serde_json::Map<String, Value>) {
    assert_eq!((&ret["outputter"], &ret["retcode"]), (&json!("highstate"), &json!(retcode)), "{ret}");
    let data = ret["data"].as_object().expect("data");
    assert_eq!(data.len(), 1, "{ret}");
    let (host, states) = data.iter().next().expect("one host");
    assert!(host.ends_with("_master"), "{ret}");
    (host.clone(), states.as_object().cloned().unwrap_or_default())
}

const DEPLOY: &str = "check:\n  salt.state:\n    - tgt: m1\n    - sls: api_check\n    - require:\n      - salt: write_marker\nwrite_marker:\n  salt.function:\n    - name: cmd.run\n    - tgt: m1\n    - arg:\n      - touch @DIR@/api-marker\n";
const CHECK: &str = "marker:\n  file.exists:\n    - name: @DIR@/api-marker\ncopy:\n  file.copy:\n    - name: @DIR@/api-copy\n    - source: @DIR@/api-marker\n    - require:\n      - file: marker\n";
const FAIL: &str = "fail_first:\n  salt.function:\n    - name: cmd.run\n    - tgt: m1\n    - arg: ['false']\nnever:\n  salt.function:\n    - name: cmd.run\n    - tgt: m1\n    - arg: ['touch @DIR@/never-ran']\n    - require:\n      - salt: fail_first\n";

#[test]
fn runner_and_runner_async_run_an_orchestration_on_real_minions() {
    let s = served(&["m1"], |env| {
        let dir = env.root.join("work");
        std::fs::create_dir_all(&dir).expect("work dir");
        for (path, body) in [("orch/api.sls", DEPLOY), ("api_check.sls", CHECK), ("orch/fail.sls", FAIL)] {
            let p = env.root.join("srv/salt").join(path);
            std::fs::create_dir_all(p.parent().expect("a parent")).expect("roots dir");
            std::fs::write(p, body.replace("@DIR@", &dir.display().to_string())).expect("roots file");
        }
    });
    let (env, api) = (&s.m.env, &s.api);
    let dir = env.root.join("work");
    env.ok(SALT_RUN, &["cluster.sync_roots"]);
    let fred = api.token("fred", "s3cret");

    // runner: the whole run, then Salt's answer. The state step, declared first, runs
    // second (its requisite first) and finds the file the function step created.
    let (status, r) = post(&api, &fred, json!({ "client": "runner", "fun": "state.orchestrate", "mods": "orch.api", "timeout": 60 }));
    assert_eq!(status, 200, "{r}");
    let (host, s) = states(&r[0], 0);
    let f = &s["salt_|-write_marker_|-cmd.run_|-function"];
    let st = &s["salt_|-check_|-check_|-state"];
    assert_eq!((&f["result"], &f["__run_num__"], &f["comment"]), (&json!(true), &json!(0), &json!("Function ran successfully. Function cmd.run ran on m1.")), "{f}");
    assert_eq!((&st["result"], &st["__run_num__"]), (&json!(true), &json!(1)), "{st}");
    assert_eq!(st["comment"], json!("States ran successfully. Updating m1."), "{st}");
    let m1 = st["changes"]["ret"]["m1"].as_object().expect("m1's states").clone();
    for id in ["marker", "copy"] {
        let state = m1.values().find(|v| v["__id__"] == id).unwrap_or_else(|| panic!("{id} in {m1:?}"));
        assert_eq!(state["result"], json!(true), "the minion found the marker: {state}");
    }
    assert!(dir.join("api-marker").exists() && dir.join("api-copy").exists(), "both steps ran on m1, in order");
    // Each step is a job of its own, with m1's return; the run is one job, fred's.
    let cache = jobs(&api, &fred);
    for (step, fun) in [(f, "cmd.run"), (st, "state.sls")] {
        let jid = step["__jid__"].as_str().expect("the step's jid");
        assert_eq!(cache.get(jid).map(|j| j["Function"].clone()), Some(json!(fun)), "{jid}: {cache:?}");
        let (status, ret) = post(&api, &fred, json!({ "client": "runner", "fun": "jobs.lookup_jid", "jid": jid }));
        // As Salt's runner client answers it: a state job's returns with the outputter
        // they name (`{"outputter": "highstate", "data"}`), others as they are.
        let data = if fun == "state.sls" {
            assert_eq!(ret[0]["outputter"], "highstate", "{ret}");
            &ret[0]["data"]
        } else {
            &ret[0]
        };
        assert!(status == 200 && data.get("m1").is_some(), "{jid}: {ret}");
    }
    let sync_runs = runs(&api, &fred);
    assert_eq!(sync_runs.len(), 1, "{sync_runs:?}");
    assert_eq!(sync_runs[0].1, json!("fred"), "the run is recorded as the eauth user's");
    let (status, kept) = post(&api, &fred, json!({ "client": "runner", "fun": "jobs.lookup_jid", "jid": sync_runs[0].0 }));
    assert_eq!((status, &kept[0][&host]), (200, &r[0]), "the run's return is kept under its job");

    // runner_async: the run's own jid and tag at once; its events; the end, failed.
    let mut events = api.events(&fred, &env.root.join("sse.log"));
    let mut event = |tag: &str| events.data(tag, 120);
    let (status, r) = post(&api, &fred, json!({ "client": "runner_async", "fun": "state.orch", "mods": "orch.fail" }));
    assert_eq!(status, 200, "{r}");
    let jid = r[0]["jid"].as_str().expect("a jid").to_string();
    assert_eq!(r, json!([{ "tag": format!("salt/run/{jid}"), "jid": jid }]), "{r}");
    let new = event(&format!("salt/run/{jid}/new"));
    assert_eq!((&new["fun"], &new["user"], &new["fun_args"]), (&json!("runner.state.orchestrate"), &json!("fred"), &json!(["orch.fail"])), "{new}");
    let done = event(&format!("salt/run/{jid}/ret"));
    assert_eq!((&done["fun"], &done["jid"], &done["user"], &done["success"]), (&json!("runner.state.orchestrate"), &json!(jid), &json!("fred"), &json!(false)), "{done}");
    let (_, s) = states(&done["return"], 1);
    assert_eq!(s["salt_|-fail_first_|-cmd.run_|-function"]["result"], json!(false), "{done}");
    let never = &s["salt_|-never_|-cmd.run_|-function"];
    assert_eq!((&never["result"], &never["comment"]), (&json!(false), &json!("One or more requisite failed: orch.fail.fail_first")), "{never}");
    assert!(!dir.join("never-ran").exists(), "the step requiring the failed one did not run");
    let (status, kept) = post(&api, &fred, json!({ "client": "runner", "fun": "jobs.lookup_jid", "jid": jid }));
    assert_eq!((status, &kept[0][&host]), (200, &done["return"]), "{kept}");
    let all = runs(&api, &fred);
    assert_eq!(all.len(), 2, "one job per run, the async run's is the jid answered: {all:?}");
    assert!(all.iter().any(|(j, _)| *j == jid), "{all:?}");

    // The sync runner on a failing run: Salt's retcode 1; an SLS that is not there: its
    // error under the master, retcode 1; a bad call: 400, nothing recorded.
    let (status, r) = post(&api, &fred, json!({ "client": "runner", "fun": "state.orch", "mods": "orch.fail" }));
    assert_eq!(status, 200, "{r}");
    let (_, s) = states(&r[0], 1);
    assert_eq!(s["salt_|-fail_first_|-cmd.run_|-function"]["result"], json!(false), "{r}");
    let (status, r) = post(&api, &fred, json!({ "client": "runner", "fun": "state.orchestrate", "mods": "orch.nosuch" }));
    assert_eq!(status, 200, "{r}");
    assert_eq!(r[0]["retcode"], json!(1), "{r}");
    assert!(r[0]["data"].as_object().and_then(|d| d.values().next()).and_then(Value::as_array).is_some_and(|e| !e.is_empty()), "the errors: {r}");
    let (status, r) = post(&api, &fred, json!({ "client": "runner_async", "fun": "state.orchestrate" }));
    assert_eq!(status, 400, "no SLS named: {r}");
    assert_eq!(runs(&api, &fred).len(), 4, "every render keeps a job (a missing SLS's too), the refused call none");

    // Without @runner rules: 401, nothing run.
    let limited = api.token("limited", "pw");
    for client in ["runner", "runner_async"] {
        let (status, r) = post(&api, &limited, json!({ "client": client, "fun": "state.orchestrate", "mods": "orch.api" }));
        assert_eq!((status, &r["return"]), (401, &json!("Authorization error occurred.")), "{client}: {r}");
    }
    assert_eq!(runs(&api, &fred).len(), 4, "refused calls run nothing");
}
