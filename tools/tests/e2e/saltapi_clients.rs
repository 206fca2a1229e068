//! salt-api's `local_batch`, `local_subset`, `runner_async` and `wheel_async` clients
//! with a real HTTP client (curl) in front of a master with unmodified salt-minion
//! 3008.5 processes: each answer's shape, a batch of one running the minions one after
//! the other (under the run's one jid), a subset of one running on exactly one minion, the
//! background runs' results on the event stream and through `jobs.lookup_jid`, the
//! `external_auth` rules as Salt's master applies them to what each client publishes,
//! and bad `batch`/`subset` values refused with 400.


use serde_json::{json, Value};

use crate::saltapi::{served, Api};

/// One lowstate chunk through `POST /`: the status and the answer's `return`.
fn post(api: &Api, token: &str, chunk: Value) -> (u16, Value) {
    let (status, r) = api.call("POST", "/", token, Some(json!([chunk])));
    let out = if status == 200 { r["return"].clone() } else { r };
    (status, out)
}

/// The jobs of `fun` with `arg` in `jobs.list_jobs`: each one's minions
/// (`jobs.list_job`'s `Minions`).
fn job_minions(api: &Api, token: &str, fun: &str, arg: &str) -> Vec<Value> {
    let (status, r) = post(api, token, json!({ "client": "runner", "fun": "jobs.list_jobs" }));
    assert_eq!(status, 200, "{r}");
    let jobs = r[0].as_object().cloned().unwrap_or_default();
    let mut t: Vec<Value> = jobs
        .iter()
        .filter(|(_, j)| j["Function"] == fun && j["Arguments"] == json!([arg]))
        .map(|(jid, _)| post(api, token, json!({ "client": "runner", "fun": "jobs.list_job", "arg": [jid] })).1[0]["Minions"].clone())
        .collect();
    t.sort_by_key(|v| v.to_string());
    t
}

#[test]
fn local_batch_and_local_subset_with_real_minions() {
    let s = served(&["m1", "m2"], |_| {});
    let api = &s.api;
    let fred = api.token("fred", "s3cret");

    let (_, welcome) = api.call("GET", "/", "", None);
    for c in ["local_batch", "local_subset", "runner_async", "wheel_async"] {
        assert!(welcome["clients"].as_array().expect("clients").contains(&json!(c)), "{welcome}");
    }

    // local_batch, one at a time: each minion's return is an item of its own, in the
    // order of the batches (ids sorted), the run one job (Salt 3008's one jid a batch).
    let (status, r) = post(&api, &fred, json!({ "client": "local_batch", "tgt": "*", "fun": "test.echo", "arg": ["one-by-one"], "batch": 1 }));
    assert_eq!((status, &r), (200, &json!([{ "m1": "one-by-one" }, { "m2": "one-by-one" }])), "{r}");
    assert_eq!(job_minions(&api, &fred, "test.echo", "one-by-one"), vec![json!(["m1", "m2"])], "one job for the run");
    // A batch of both (a percentage, a form's string): one job, two items.
    let (status, r) = post(&api, &fred, json!({ "client": "local_batch", "tgt": "*", "fun": "test.echo", "arg": ["together"], "batch": "100%" }));
    assert_eq!(status, 200, "{r}");
    let mut items: Vec<String> = r.as_array().expect("a list").iter().map(Value::to_string).collect();
    items.sort();
    assert_eq!(items, vec![json!({ "m1": "together" }).to_string(), json!({ "m2": "together" }).to_string()], "{r}");
    assert_eq!(job_minions(&api, &fred, "test.echo", "together"), vec![json!(["m1", "m2"])], "one batch, one job");
    // Chunks of other clients beside it keep their own items.
    let (status, r) = api.call("POST", "/", &fred, Some(json!([
        { "client": "local_batch", "tgt": "m2", "fun": "test.echo", "arg": ["mixed"], "batch": "1" },
        { "client": "local", "tgt": "m1", "fun": "test.echo", "arg": ["mixed"] },
    ])));
    assert_eq!((status, &r["return"]), (200, &json!([{ "m2": "mixed" }, { "m1": "mixed" }])), "{r}");
    // Nothing matched: no item.
    let (status, r) = post(&api, &fred, json!({ "client": "local_batch", "tgt": "nobody*", "fun": "test.ping", "batch": 1 }));
    assert_eq!((status, &r), (200, &json!([])), "{r}");
    // Bad batch values: 400, nothing published.
    for bad in [json!("x"), json!(0), json!(-1), json!(true), json!(1.5), json!("1.5"), json!([1]), json!("9".repeat(40))] {
        let (status, r) = post(&api, &fred, json!({ "client": "local_batch", "tgt": "*", "fun": "test.echo", "arg": ["never"], "batch": bad }));
        assert_eq!(status, 400, "batch {bad}: {r}");
        assert!(r["return"].as_str().is_some_and(|m| m.starts_with("Invalid batch data sent")), "{r}");
    }
    let (status, _) = post(&api, &fred, json!({ "client": "local_batch", "tgt": "*", "fun": "test.echo", "arg": ["never"], "batch": 1, "batch_wait": "soon" }));
    assert_eq!(status, 400);
    assert!(job_minions(&api, &fred, "test.echo", "never").is_empty(), "a refused chunk publishes nothing");

    // local_subset of one: exactly one of the two runs it.
    let (status, r) = post(&api, &fred, json!({ "client": "local_subset", "tgt": "*", "fun": "test.echo", "arg": ["just-one"], "subset": 1 }));
    assert_eq!(status, 200, "{r}");
    let one = r[0].as_object().expect("a map").clone();
    assert_eq!(one.len(), 1, "{r}");
    let (id, ret) = one.iter().next().expect("one minion");
    assert!(["m1", "m2"].contains(&id.as_str()) && *ret == json!("just-one"), "{r}");
    assert_eq!(job_minions(&api, &fred, "test.echo", "just-one"), vec![json!([id])], "published to the picked minion only");
    // More than there are: every minion with the function; a function none has: nobody.
    let (status, r) = post(&api, &fred, json!({ "client": "local_subset", "tgt": "*", "fun": "test.echo", "arg": ["all"], "subset": "5" }));
    assert_eq!((status, &r), (200, &json!([{ "m1": "all", "m2": "all" }])), "{r}");
    let (status, r) = post(&api, &fred, json!({ "client": "local_subset", "tgt": "*", "fun": "nosuch.function", "subset": 1 }));
    assert_eq!((status, &r), (200, &json!([{}])), "{r}");
    for bad in [json!("one"), json!(0), json!(-1), json!(false), json!(2.5), json!(u64::MAX)] {
        let (status, r) = post(&api, &fred, json!({ "client": "local_subset", "tgt": "*", "fun": "test.echo", "arg": ["never"], "subset": bad }));
        assert_eq!(status, 400, "subset {bad}: {r}");
        assert!(r["return"].as_str().is_some_and(|m| m.starts_with("subset must be a whole number")), "{r}");
    }

    // external_auth as Salt's master applies it to what each client publishes: `limited`
    // (test.*) may batch test.echo (the ping is test.* too) but not take a subset (that
    // asks sys.list_functions); `web` (test.* on m1 only) may not ping both.
    let limited = api.token("limited", "pw");
    let (status, r) = post(&api, &limited, json!({ "client": "local_batch", "tgt": "*", "fun": "test.echo", "arg": ["limited"], "batch": 1 }));
    assert_eq!((status, &r), (200, &json!([{ "m1": "limited" }, { "m2": "limited" }])), "{r}");
    let (status, r) = post(&api, &limited, json!({ "client": "local_subset", "tgt": "*", "fun": "test.echo", "arg": ["refused"], "subset": 1 }));
    assert_eq!((status, &r["return"]), (401, &json!("Authorization error occurred.")), "{r}");
    let (status, r) = post(&api, &limited, json!({ "client": "local_batch", "tgt": "*", "fun": "cmd.run", "arg": ["refused"], "batch": 1 }));
    assert_eq!(status, 401, "{r}");
    let web = api.token("web", "pw");
    let (status, r) = post(&api, &web, json!({ "client": "local_batch", "tgt": "*", "fun": "test.echo", "arg": ["refused"], "batch": 1 }));
    assert_eq!(status, 401, "{r}");
    let (status, r) = post(&api, &web, json!({ "client": "local_batch", "tgt": "m1", "fun": "test.echo", "arg": ["web"], "batch": 1 }));
    assert_eq!((status, &r), (200, &json!([{ "m1": "web" }])), "{r}");
    assert!(job_minions(&api, &fred, "cmd.run", "refused").is_empty() && job_minions(&api, &fred, "test.echo", "refused").is_empty(), "refused calls publish nothing");
}

#[test]
fn runner_async_and_wheel_async_results_on_the_bus_and_in_the_job_cache() {
    let s = served(&["m1"], |_| {});
    let (env, api) = (&s.m.env, &s.api);
    let fred = api.token("fred", "s3cret");
    let mut events = api.events(&fred, &env.root.join("sse.log"));
    // The data of the event tagged `tag`, once it came.
    let mut event = |tag: &str| events.data(tag, 60);

    // runner_async: the tag and the jid at once; the run's events; its return kept.
    let (status, r) = post(&api, &fred, json!({ "client": "runner_async", "fun": "manage.present" }));
    assert_eq!(status, 200, "{r}");
    let jid = r[0]["jid"].as_str().expect("a jid").to_string();
    assert_eq!(r, json!([{ "tag": format!("salt/run/{jid}"), "jid": jid }]), "{r}");
    let new = event(&format!("salt/run/{jid}/new"));
    assert_eq!((&new["fun"], &new["user"], &new["jid"]), (&json!("runner.manage.present"), &json!("fred"), &json!(jid)), "{new}");
    let done = event(&format!("salt/run/{jid}/ret"));
    assert_eq!((&done["fun"], &done["return"], &done["success"]), (&json!("runner.manage.present"), &json!(["m1"]), &json!(true)), "{done}");
    let (status, r) = post(&api, &fred, json!({ "client": "runner", "fun": "jobs.lookup_jid", "jid": jid }));
    assert_eq!(status, 200, "{r}");
    let kept = r[0].as_object().expect("a map").values().next().cloned().expect("the master's return");
    assert_eq!((&kept["return"], &kept["success"], &kept["jid"]), (&json!(["m1"]), &json!(true), &json!(jid)), "{r}");
    // A runner that fails still ends its run, unsuccessfully.
    let (status, r) = post(&api, &fred, json!({ "client": "runner_async", "fun": "nosuch.runner" }));
    assert_eq!(status, 200, "{r}");
    let bad_jid = r[0]["jid"].as_str().expect("a jid").to_string();
    let failed = event(&format!("salt/run/{bad_jid}/ret"));
    assert_eq!(failed["success"], json!(false), "{failed}");
    assert!(failed["return"].as_str().is_some_and(|m| m.contains("nosuch.runner")), "{failed}");

    // wheel_async: its own tag; the key listing on the bus.
    let (status, r) = post(&api, &fred, json!({ "client": "wheel_async", "fun": "key.list_all" }));
    assert_eq!(status, 200, "{r}");
    let wjid = r[0]["jid"].as_str().expect("a jid").to_string();
    assert_eq!(r, json!([{ "tag": format!("salt/wheel/{wjid}"), "jid": wjid }]), "{r}");
    event(&format!("salt/wheel/{wjid}/new"));
    let done = event(&format!("salt/wheel/{wjid}/ret"));
    assert_eq!((&done["fun"], &done["return"]["minions"], &done["success"]), (&json!("wheel.key.list_all"), &json!(["m1"]), &json!(true)), "{done}");
    // The synchronous wheel client's call is a kept run too: its answer's jid has the
    // ret event with the same return.
    let (status, r) = post(&api, &fred, json!({ "client": "wheel", "fun": "key.list_all" }));
    assert_eq!(status, 200, "{r}");
    let sjid = r[0]["data"]["jid"].as_str().expect("a jid").to_string();
    assert_eq!(r[0]["tag"], json!(format!("salt/wheel/{sjid}")), "{r}");
    let done = event(&format!("salt/wheel/{sjid}/ret"));
    assert_eq!((&done["return"], &done["success"]), (&r[0]["data"]["return"], &json!(true)), "{done}");
    let (status, r) = post(&api, &fred, json!({ "client": "wheel_async", "fun": "key.gen" }));
    assert_eq!(status, 400, "a wheel function Halite lacks: {r}");

    // Without @runner / @wheel rules: 401, nothing started.
    let limited = api.token("limited", "pw");
    for c in [json!({ "client": "runner_async", "fun": "manage.present" }), json!({ "client": "wheel_async", "fun": "key.list_all" })] {
        let (status, r) = post(&api, &limited, c.clone());
        assert_eq!((status, &r["return"]), (401, &json!("Authorization error occurred.")), "{c}: {r}");
    }
    let (_, jobs) = post(&api, &fred, json!({ "client": "runner", "fun": "jobs.list_jobs" }));
    let runs: Vec<(&str, &str)> = jobs[0]
        .as_object()
        .expect("jobs")
        .values()
        .filter_map(|j| Some((j["Function"].as_str()?, j["User"].as_str()?)))
        .filter(|(f, _)| f.starts_with("runner.") || f.starts_with("wheel."))
        .collect();
    assert!(runs.iter().all(|(_, u)| *u == "fred"), "none for the refused calls: {jobs}");
    assert_eq!(runs.iter().filter(|(f, _)| ["runner.manage.present", "wheel.key.list_all"].contains(f)).count(), 3, "both background runs and the synchronous wheel call: {jobs}");
    // Synchronous runner calls are kept as jobs too, as Salt's runner client keeps them
    // (the listing's own call included).
    for f in ["runner.jobs.lookup_jid", "runner.jobs.list_jobs"] {
        assert!(runs.contains(&(f, "fred")), "{f}: {jobs}");
    }
    // full_return: the runner client answers the run's whole ret event data.
    let (status, r) = post(api, &fred, json!({ "client": "runner", "fun": "manage.present", "full_return": true }));
    assert_eq!(status, 200, "{r}");
    assert_eq!((&r[0]["fun"], &r[0]["return"], &r[0]["success"], &r[0]["user"]), (&json!("runner.manage.present"), &json!(["m1"]), &json!(true), &json!("fred")), "{r}");
    let fjid = r[0]["jid"].as_str().expect("a jid");
    assert_eq!(event(&format!("salt/run/{fjid}/ret"))["return"], json!(["m1"]));
}
