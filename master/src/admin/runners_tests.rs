//! The runners of `jobs`, `manage`, `fileserver`, `pillar` and `cache` answered from an
//! in-memory state machine: content and shape of each answer; also what a publish
//! expects without the minion data cache, and an orchestration run's own job.

use serde_json::{json, Value as J};

use halite_storage::format::{GrainsReport, JobPublished, JobReturn, KeyState, PillarCache, Record, RootsTree};
use halite_storage::state::roots_records;

use super::tests::Fixture;
use crate::wire::payload;

const PUB: &str = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----";
const JID: &str = "20261124001122334455";

fn enc(v: J) -> Vec<u8> {
    payload::encode(&payload::from_json(&v))
}

fn ret(f: &Fixture, req: J) -> J {
    f.now(req)["return"].clone()
}

fn runner(fun: &str, arg: J, kwarg: J) -> J {
    json!({ "cmd": "runner", "fun": fun, "arg": arg, "kwarg": kwarg })
}

/// Two accepted minions with grains (web1 also a pillar and a mine), one accepted
/// minion never heard from, one pending; a job to web1 and web2 that only web1 answered;
/// file and pillar roots on the master's disk.
fn fixture(name: &str) -> Fixture {
    let mut f = Fixture::new(name);
    for id in ["web1", "web2", "db1"] {
        f.key(id, KeyState::Accepted, PUB);
    }
    f.key("new1", KeyState::Pending, PUB);
    for (id, role) in [("web1", "web"), ("web2", "web")] {
        f.apply(&[Record::GrainsReport(GrainsReport { id: id.into(), grains: enc(json!({"id": id, "role": role, "ipv4": ["127.0.0.1", "10.0.0.5"], "saltversion": "3008.5"})), time_ns: 3 })]);
    }
    f.apply(&[Record::PillarCache(PillarCache { id: "web1".into(), pillar: enc(json!({"app": {"port": 8080}})), time_ns: 3 })]);
    let mine = payload::from_json(&json!({"data": {"network.ip_addrs": ["10.0.0.5"]}}));
    f.apply(&[crate::mine::send("web1", &mine, 3).unwrap()]);
    let load = json!({"fun": "test.arg", "arg": ["a", {"metadata": {"ticket": 7}, "__kwarg__": true}], "tgt": "web*", "jid": JID, "ret": "", "tgt_type": "glob", "user": "root"});
    f.apply(&[Record::JobPublished(JobPublished { jid: JID.into(), load: enc(load), minions: vec!["web2".into(), "web1".into()], time_ns: 1, started_by: None, joins: false })]);
    f.apply(&[Record::JobReturn(JobReturn { jid: JID.into(), id: "web1".into(), load: enc(json!({"return": {"args": ["a"]}, "retcode": 0, "success": true, "fun": "test.arg", "jid": JID, "id": "web1"})), time_ns: 4, first_only: false })]);
    for (tree, env, path, body) in [
        (RootsTree::File, "base", "top.sls", "base:\n  '*':\n    - web\n"),
        (RootsTree::File, "base", "web/init.sls", "nginx: {pkg.installed: []}\n"),
        (RootsTree::File, "base", "web/files/nginx.conf", "x\n"),
        (RootsTree::File, "dev", "dev.sls", "{}\n"),
        (RootsTree::Pillar, "base", "top.sls", "base:\n  '*':\n    - common\n  'role:web':\n    - match: grain\n    - web\n"),
        (RootsTree::Pillar, "base", "common.sls", "site: {{ salt['grains.get']('role', 'none') }}\n"),
        (RootsTree::Pillar, "base", "web.sls", "app:\n  port: 80\n"),
    ] {
        f.disk.put(tree, env, path, body.as_bytes());
    }
    f
}

#[test]
fn list_jobs_searches_and_last_run_and_list_jobs_filter_pick_the_newest() {
    let f = fixture("runners-list-jobs");
    // A second job (older by its jid: the fixture's clock), published through the admin verb with metadata at the top.
    let plan = f.run(json!({"cmd": "publish", "fun": "test.ping", "tgt": "db1", "metadata": {"ticket": "OPS-2"}, "start_event": true})).unwrap();
    let [Record::JobPublished(j)] = &plan.proposals[0][..] else { panic!("{plan:?}") };
    let (published, load) = (j.jid.clone(), payload::to_json(&payload::decode(&j.load).unwrap()));
    assert_eq!((&load["metadata"], &load["start_event"]), (&json!({"ticket": "OPS-2"}), &json!(true)));
    f.carry_out(plan);
    let list = |kwarg: J| ret(&f, runner("jobs.list_jobs", json!([]), kwarg));
    let jids = |v: &J| v.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    assert_eq!(jids(&list(json!({}))), [published.clone(), JID.to_string()]);
    assert_eq!(list(json!({}))[&published]["Metadata"], json!({"ticket": "OPS-2"}), "metadata is shown");
    assert_eq!(jids(&list(json!({"search_metadata": {"ticket": "OPS-2"}}))), [published.clone()]);
    assert_eq!(jids(&list(json!({"search_metadata": {"ticket": 7}}))), [JID], "metadata given as a keyword is searched too");
    assert_eq!(jids(&list(json!({"search_function": "test.p*"}))), [published.clone()]);
    assert_eq!(jids(&list(json!({"search_target": "web*", "search_function": "test.*"}))), [JID]);
    assert_eq!(jids(&list(json!({"start_time": "2026, Nov 24 00:11:22.334455"}))), [JID], "the start is inclusive");
    assert_eq!(jids(&list(json!({"end_time": "2026-11-24"}))), [published.clone()]);
    assert_eq!(list(json!({"outputter": "yaml"}))["outputter"], "yaml");
    assert!(f.run(runner("jobs.list_jobs", json!([]), json!({"start_time": "soon"}))).unwrap_err().to_string().contains("cannot read the time"));
    assert!(f.run(runner("jobs.list_jobs", json!([]), json!({"nosuch": 1}))).is_err(), "unknown keywords are refused as Python refuses them");
    // last_run: print_job of the newest match, false without one.
    let last = ret(&f, runner("jobs.last_run", json!([]), json!({})));
    assert_eq!(last[JID]["Result"]["web1"]["retcode"], 0, "{last}");
    assert_eq!(jids(&ret(&f, runner("jobs.last_run", json!([]), json!({"function": "test.ping"})))), [published.clone()]);
    assert_eq!(ret(&f, runner("jobs.last_run", json!([]), json!({"target": "nosuch*"}))), json!(false));
    // list_jobs_filter: the newest COUNT, oldest first, with their JID.
    let newest = ret(&f, runner("jobs.list_jobs_filter", json!([1]), json!({})));
    assert_eq!(newest.as_array().map(|a| a.iter().map(|j| j["JID"].clone()).collect::<Vec<_>>()), Some(vec![json!(JID)]));
    assert_eq!(ret(&f, runner("jobs.list_jobs_filter", json!([5]), json!({})))[0]["JID"], json!(published));
    assert!(f.run(runner("jobs.list_jobs_filter", json!(["many"]), json!({}))).is_err());
    // A publish's metadata is bounded and its start_event a boolean.
    assert!(f.run(json!({"cmd": "publish", "fun": "test.ping", "tgt": "db1", "metadata": "x".repeat(70_000)})).is_err());
    assert!(f.run(json!({"cmd": "publish", "fun": "test.ping", "tgt": "db1", "start_event": "yes"})).is_err());
}

#[test]
fn list_job_and_print_job_show_the_job_and_its_returns() {
    let f = fixture("runners-list-job");
    let j = ret(&f, runner("jobs.list_job", json!([JID]), json!({})));
    let keys: Vec<&String> = j.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["jid", "Function", "Arguments", "Target", "Target-type", "User", "Metadata", "Minions", "StartTime", "Result"], "Salt's key order");
    assert_eq!(j["Function"], "test.arg");
    assert_eq!(j["Metadata"], json!({"ticket": 7}), "metadata given as a keyword is surfaced");
    assert_eq!(j["Minions"], json!(["web1", "web2"]));
    assert_eq!(j["StartTime"], "2026, Nov 24 00:11:22.334455");
    assert_eq!(j["Result"], json!({"web1": {"return": {"args": ["a"]}, "retcode": 0, "success": true}}));
    let p = ret(&f, runner("jobs.print_job", json!([]), json!({"jid": JID})));
    let mut expected = j.clone();
    expected.as_object_mut().unwrap().remove("jid");
    assert_eq!(p, json!({ JID: expected }));
    let unknown = ret(&f, runner("jobs.list_job", json!(["20260101000000000000"]), json!({})));
    assert_eq!(unknown, json!({"jid": "20260101000000000000", "Error": "Cannot contact returner or no job with this jid", "StartTime": "2026, Jan 01 00:00:00.000000", "Result": {}}));
    let e = f.run(runner("jobs.list_job", json!([]), json!({}))).unwrap_err().to_string();
    assert!(e.contains("list_job() missing 1 required positional argument: 'jid'"), "{e}");
}

#[test]
fn exit_success_is_true_only_for_minions_that_returned_something() {
    let f = fixture("runners-exit-success");
    assert_eq!(ret(&f, runner("jobs.exit_success", json!([JID]), json!({}))), json!({"web1": true, "web2": false}));
    assert_eq!(ret(&f, runner("jobs.exit_success", json!(["20260101000000000000"]), json!({}))), json!({}));
}

#[test]
fn active_groups_running_jobs_by_jid_with_who_returned() {
    let f = fixture("runners-active");
    let running = json!({
        "web2": [{"jid": JID, "pid": 42, "fun": "test.arg", "arg": ["a"], "tgt": "web*", "tgt_type": "glob", "user": "root"}],
        "web1": [{"jid": JID, "pid": 41, "fun": "test.arg", "arg": ["a"], "tgt": "web*", "tgt_type": "glob", "user": "root"},
                 {"jid": "20261124001122334499", "pid": 43, "fun": "test.sleep", "arg": [30], "tgt": "web1", "tgt_type": "glob", "user": "sudo_x"}],
        "db1": "'saltutil.running' is not available.",
    });
    let a = ret(&f, json!({"cmd": "runner", "fun": "jobs.active", "running": running}));
    assert_eq!(
        a,
        json!({
            JID: {"Function": "test.arg", "Arguments": ["a"], "Target": "web*", "Target-type": "glob", "User": "root", "StartTime": "2026, Nov 24 00:11:22.334455",
                  "Running": [{"web1": 41}, {"web2": 42}], "Returned": ["web1"]},
            "20261124001122334499": {"Function": "test.sleep", "Arguments": [30], "Target": "web1", "Target-type": "glob", "User": "sudo_x", "StartTime": "2026, Nov 24 00:11:22.334499",
                  "Running": [{"web1": 43}], "Returned": []},
        })
    );
}

#[test]
fn presence_is_recent_contact_recorded_in_the_state() {
    let f = fixture("runners-present");
    assert_eq!(ret(&f, runner("manage.present", json!([]), json!({}))), json!(["web1", "web2"]), "db1 never reported");
    assert_eq!(ret(&f, runner("manage.not_present", json!([]), json!({}))), json!(["db1"]));
    assert_eq!(ret(&f, runner("manage.present", json!([]), json!({"subset": "web2,db1"}))), json!(["web2"]));
    assert_eq!(ret(&f, runner("manage.present", json!([]), json!({"show_ip": true}))), json!({"web1": "10.0.0.5", "web2": "10.0.0.5"}));
    let hour = super::manage::PRESENCE_WINDOW.as_nanos() as u64;
    assert_eq!(super::manage::present(&f.sm, 3 + hour, None).unwrap(), ["web1", "web2"], "at the edge of the window");
    assert_eq!(super::manage::present(&f.sm, 4 + hour, None).unwrap(), ["web1"], "web1's return is newer than its grains");
    assert!(super::manage::present(&f.sm, 5 + hour, None).unwrap().is_empty());
}

#[test]
fn fileserver_lists_the_file_roots() {
    let f = fixture("runners-fileserver");
    assert_eq!(ret(&f, runner("fileserver.file_list", json!([]), json!({}))), json!(["top.sls", "web/files/nginx.conf", "web/init.sls"]));
    assert_eq!(ret(&f, runner("fileserver.file_list", json!(["dev"]), json!({}))), json!(["dev.sls"]));
    assert_eq!(ret(&f, runner("fileserver.file_list", json!([]), json!({"backend": "git"}))), json!([]));
    assert_eq!(ret(&f, runner("fileserver.dir_list", json!([]), json!({"saltenv": "base"}))), json!(["web", "web/files"]));
    assert_eq!(ret(&f, runner("fileserver.envs", json!([]), json!({}))), json!(["base", "dev"]));
    assert_eq!(ret(&f, runner("fileserver.envs", json!([]), json!({"sources": true}))), json!(["roots"]));
}

/// A lone master's runners read the roots minions are served (its disk), whatever the
/// log's roots records hold; an isolated-filesystem member's read the records.
#[test]
fn runners_read_the_disk_on_a_lone_master_and_the_log_on_an_isolated_member() {
    let orch = |body: &str| format!("{body}:\n  salt.function:\n    - name: test.ping\n    - tgt: '*'\n");
    let records = |f: &Fixture| {
        f.apply(&roots_records(RootsTree::File, "base", "orch/logged.sls", 0o644, orch("logged").as_bytes()));
        f.apply(&roots_records(RootsTree::File, "logonly", "x.sls", 0o644, b"{}\n"));
        f.apply(&roots_records(RootsTree::Pillar, "base", "top.sls", 0o644, b"base:\n  '*':\n    - p\n"));
        f.apply(&roots_records(RootsTree::Pillar, "base", "p.sls", 0o644, b"from: log\n"));
    };
    let disk = |f: &mut Fixture| {
        f.disk.put(RootsTree::File, "base", "orch/two.sls", orch("two").as_bytes());
        f.disk.put(RootsTree::File, "base", "orch/empty/init.sls", b"");
        f.disk.put(RootsTree::Pillar, "base", "top.sls", b"base:\n  '*':\n    - p\n");
        f.disk.put(RootsTree::Pillar, "base", "p.sls", b"from: disk\n");
    };
    let steps = |f: &Fixture, sls: &str| {
        let plan = f.run(json!({"cmd": "runner", "fun": "state.orchestrate", "arg": [sls], "kwarg": {}})).unwrap();
        let super::Answer::Now(a) = &plan.answer else { panic!() };
        a["return"].clone()
    };
    for isolated in [false, true] {
        let mut f = if isolated { Fixture::isolated("roots-isolated") } else { Fixture::new("roots-lone") };
        records(&f);
        disk(&mut f);
        let (files, dirs, pillar, here, there) = if isolated {
            (json!(["orch/logged.sls"]), json!(["orch"]), json!({"from": "log"}), "orch.logged", "orch.two")
        } else {
            (json!(["orch/empty/init.sls", "orch/two.sls"]), json!(["orch", "orch/empty"]), json!({"from": "disk"}), "orch.two", "orch.logged")
        };
        assert_eq!(ret(&f, runner("fileserver.file_list", json!([]), json!({}))), files, "isolated: {isolated}");
        assert_eq!(ret(&f, runner("fileserver.dir_list", json!([]), json!({}))), dirs, "isolated: {isolated}");
        let envs = ret(&f, runner("fileserver.envs", json!([]), json!({})));
        assert_eq!(envs.as_array().unwrap().contains(&json!("logonly")), isolated, "{envs}");
        assert_eq!(ret(&f, runner("pillar.show_pillar", json!(["m1"]), json!({}))), pillar, "isolated: {isolated}");
        assert_eq!(steps(&f, here)["steps"][0]["name"], json!("test.ping"), "isolated: {isolated}");
        assert_eq!(steps(&f, there)["errors"], json!([format!("No matching sls found for '{there}' in env 'base'")]), "isolated: {isolated}");
    }
    let mut f = Fixture::new("roots-init");
    disk(&mut f);
    assert_eq!(steps(&f, "orch.empty")["steps"], json!([]), "orch/empty/init.sls is orch.empty");
}

#[test]
fn show_pillar_and_show_top_compile_from_the_pillar_roots() {
    let f = fixture("runners-pillar");
    assert_eq!(ret(&f, runner("pillar.show_pillar", json!(["web1"]), json!({}))), json!({"site": "web", "app": {"port": 80}}));
    assert_eq!(ret(&f, runner("pillar.show_pillar", json!([]), json!({}))), json!({"site": "none"}), "'*' with no grains matches only '*'");
    assert_eq!(ret(&f, runner("pillar.show_pillar", json!([]), json!({"role": "web"}))), json!({"site": "web", "app": {"port": 80}}), "keywords are grains");
    assert_eq!(ret(&f, runner("pillar.show_top", json!([]), json!({}))), json!({"base": {"*": ["common"], "role:web": [{"match": "grain"}, "web"]}}));
}

#[test]
fn cache_runners_read_the_minion_data_cache() {
    let f = fixture("runners-cache");
    let g = ret(&f, runner("cache.grains", json!(["web*"]), json!({})));
    assert_eq!(g["web1"]["role"], "web");
    assert_eq!(g.as_object().unwrap().keys().collect::<Vec<_>>(), ["web1", "web2"]);
    assert_eq!(ret(&f, runner("cache.grains", json!(["role:web"]), json!({"tgt_type": "grain"}))).as_object().unwrap().len(), 2);
    assert_eq!(ret(&f, runner("cache.grains", json!(["db1"]), json!({}))), json!({"db1": {}}), "matched but nothing cached");
    assert!(f.run(runner("cache.grains", json!([]), json!({}))).unwrap_err().to_string().contains("missing 1 required positional argument: 'tgt'"));
    assert_eq!(ret(&f, runner("cache.pillar", json!([]), json!({}))), json!({"db1": {}, "web1": {"app": {"port": 8080}}, "web2": {}}));
    assert_eq!(ret(&f, runner("cache.mine", json!([]), json!({}))), json!({"web1": {"network.ip_addrs": ["10.0.0.5"]}}));
    assert_eq!(ret(&f, runner("cache.mine", json!(["L@web2,db1"]), json!({"tgt_type": "compound"}))), json!({}));
}

#[test]
fn without_the_minion_data_cache_data_targets_expect_every_accepted_minion() {
    let mut f = Fixture::new("no-data-cache");
    f.key("web1", KeyState::Accepted, PUB);
    f.key("db1", KeyState::Accepted, PUB);
    f.key("new1", KeyState::Pending, PUB);
    f.apply(&[Record::GrainsReport(GrainsReport { id: "web1".into(), grains: enc(json!({"role": "web"})), time_ns: 1 })]);
    let publish = |f: &Fixture, tgt: &str, tgt_type: &str| f.now(json!({"cmd": "publish", "fun": "test.ping", "tgt": tgt, "tgt_type": tgt_type}));
    // With the cache (the default) the master resolves the grain target itself.
    let a = publish(&f, "role:web", "grain");
    assert_eq!((&a["minions"], &a["unresolved"]), (&json!(["web1"]), &json!(false)));
    f.cfg.minion_data_cache = false;
    for (tgt, tgt_type) in [("role:web", "grain"), ("tier:x", "pillar"), ("10.0.0.0/8", "ipcidr"), ("G@role:web and web*", "compound")] {
        let mut a = publish(&f, tgt, tgt_type);
        a["minions"].as_array_mut().unwrap().sort_by(|x, y| x.as_str().cmp(&y.as_str()));
        assert_eq!((&a["minions"], &a["unresolved"]), (&json!(["db1", "web1"]), &json!(true)), "{tgt} {tgt_type}");
    }
    // Targets on the id alone are still resolved by the master.
    for (tgt, tgt_type) in [("web*", "glob"), ("web* and not db1", "compound")] {
        let a = publish(&f, tgt, tgt_type);
        assert_eq!((&a["minions"], &a["unresolved"]), (&json!(["web1"]), &json!(false)), "{tgt} {tgt_type}");
    }
}

#[test]
fn an_orchestration_run_is_a_job_with_one_return() {
    let mut f = Fixture::new("orch-job");
    f.disk.put(RootsTree::File, "base", "orch/x.sls", b"ping:\n  salt.function:\n    - name: test.ping\n    - tgt: '*'\n");
    let plan = f.run(json!({"cmd": "runner", "fun": "state.orchestrate", "arg": ["orch.x"], "kwarg": {}})).unwrap();
    let [Record::JobPublished(job)] = &plan.proposals.concat()[..] else { panic!("{plan:?}") };
    assert_eq!((job.minions.clone(), job.started_by.clone()), (vec![job.started_by.clone().unwrap()], job.started_by.clone()));
    assert!(!crate::jobs::publishable(job), "a run's job is never sent to minions");
    assert_eq!(plan.events[0].tag, format!("salt/run/{}/new", job.jid));
    let jid = job.jid.clone();
    let host = job.minions[0].clone();
    assert!(host.ends_with("_master"));
    let super::Answer::Now(a) = &plan.answer else { panic!() };
    assert_eq!(a["return"]["jid"], json!(jid));
    f.apply(&plan.proposals.concat());
    let done = json!({"cmd": "orchestrate.return", "jid": jid, "return": {"data": {host.clone(): {}}, "outputter": "highstate", "retcode": 0}});
    let plan = f.run(done.clone()).unwrap();
    f.apply(&plan.proposals.concat());
    let super::Answer::After(settle) = plan.answer else { panic!("answered before the commit") };
    assert_eq!(settle(&f).unwrap().events[0].tag, format!("salt/run/{jid}/ret"));
    assert_eq!(ret(&f, json!({"cmd": "runner", "fun": "jobs.lookup_jid", "jid": jid})), json!({host.clone(): {"data": {host: {}}, "outputter": "highstate", "retcode": 0}}));
    assert!(f.run(done).unwrap_err().to_string().contains("already has its return"));
    // Only a run's job takes such a return.
    f.apply(&[Record::JobPublished(JobPublished { jid: JID.into(), load: enc(json!({"fun": "test.ping"})), minions: vec!["m1".into()], time_ns: 1, started_by: None, joins: false })]);
    assert!(f.run(json!({"cmd": "orchestrate.return", "jid": JID, "return": {}})).unwrap_err().to_string().contains("not an orchestration run"));
    assert!(f.run(json!({"cmd": "orchestrate.return", "jid": "20990101000000000000", "return": {}})).is_err());
}

/// The run is recorded as its caller's (salt-api names its eauth user), in the job, its
/// `new` event and its `ret` event; a bad user is refused before anything is recorded.
#[test]
fn an_orchestration_run_records_who_ran_it() {
    let mut f = Fixture::new("orch-user");
    f.disk.put(RootsTree::File, "base", "orch/x.sls", b"ping:\n  salt.function:\n    - name: test.ping\n    - tgt: '*'\n");
    let plan = f.run(json!({"cmd": "runner", "fun": "state.orchestrate", "arg": ["orch.x"], "kwarg": {}, "user": "fred"})).unwrap();
    assert_eq!(plan.events[0].data()["user"], json!("fred"));
    f.apply(&plan.proposals.concat());
    let super::Answer::Now(a) = &plan.answer else { panic!() };
    let jid = a["return"]["jid"].as_str().unwrap().to_string();
    let plan = f.run(json!({"cmd": "orchestrate.return", "jid": jid, "return": {"data": {}, "outputter": "highstate", "retcode": 1}})).unwrap();
    f.apply(&plan.proposals.concat());
    let super::Answer::After(settle) = plan.answer else { panic!("answered before the commit") };
    let ev = &settle(&f).unwrap().events[0];
    assert_eq!((&ev.data()["user"], &ev.data()["success"], &ev.data()["return"]["retcode"]), (&json!("fred"), &json!(false), &json!(1)), "{:?}", ev.data());
    for bad in [json!(""), json!(7), json!("x".repeat(10_000))] {
        assert!(f.run(json!({"cmd": "runner", "fun": "state.orchestrate", "arg": ["orch.x"], "kwarg": {}, "user": bad})).is_err(), "{bad}");
    }
    // An orchestration is never started as a plain runner's run (it would be two jobs).
    for fun in crate::orchestrate::NAMES {
        assert!(f.run(json!({"cmd": "run.start", "client": "runner", "fun": fun})).is_err(), "{fun}");
    }
}

#[test]
fn two_ends_of_one_run_racing_leave_one_return_and_one_refusal() {
    // Two members of an isolated-filesystem cluster, which render from the log.
    let f = Fixture::isolated("orch-race");
    f.apply(&roots_records(RootsTree::File, "base", "orch/x.sls", 0o644, b"ping:\n  salt.function:\n    - name: test.ping\n    - tgt: '*'\n"));
    let plan = f.run(json!({"cmd": "runner", "fun": "state.orchestrate", "arg": ["orch.x"], "kwarg": {}})).unwrap();
    f.apply(&plan.proposals.concat());
    let jid = plan.proposals.concat().iter().find_map(|r| match r { Record::JobPublished(j) => Some(j.jid.clone()), _ => None }).unwrap();
    let end = |retcode: i64| json!({"cmd": "orchestrate.return", "jid": jid, "return": {"data": {}, "outputter": "highstate", "retcode": retcode}});
    // Both are decided from the same read (two members, or one before the other commits).
    let (first, second) = (f.run(end(0)).unwrap(), f.run(end(2)).unwrap());
    for p in [&first, &second] {
        f.apply(&p.proposals.concat());
    }
    let super::Answer::After(a1) = first.answer else { panic!("answered before the commit") };
    let super::Answer::After(a2) = second.answer else { panic!("answered before the commit") };
    let won = a1(&f).unwrap();
    assert_eq!(won.value, json!({"return": true}));
    assert_eq!(won.events[0].tag, format!("salt/run/{jid}/ret"));
    assert!(a2(&f).unwrap_err().to_string().contains("already has its return"), "the later end is refused, not answered");
    let stored = ret(&f, json!({"cmd": "runner", "fun": "jobs.lookup_jid", "jid": jid}));
    assert_eq!(stored.as_object().unwrap().values().next().unwrap()["retcode"], json!(0), "the first applied end is the one stored");
}

#[test]
fn end_time_is_the_last_return_with_job_cache_store_endtime() {
    let mut f = Fixture::new("endtime");
    let job = Record::JobPublished(JobPublished { jid: JID.into(), load: enc(json!({"fun": "test.ping", "tgt": "*"})), minions: vec!["m1".into(), "m2".into()], time_ns: 1, started_by: None, joins: false });
    f.apply(&[job]);
    let list = |f: &Fixture| ret(f, json!({"cmd": "runner", "fun": "jobs.list_job", "arg": [JID], "kwarg": {}}));
    assert!(list(&f).get("EndTime").is_none(), "off by default, as in Salt");
    f.cfg.job_cache_store_endtime = true;
    assert!(list(&f).get("EndTime").is_none(), "nothing returned yet: no EndTime");
    // 2026-11-23 03:51:20.5 and 03:51:21.25 UTC: the later one is the end.
    let at = |id: &str, ns: u64| Record::JobReturn(JobReturn { jid: JID.into(), id: id.into(), load: enc(json!({"return": true, "retcode": 0})), time_ns: ns, first_only: false });
    f.apply(&[at("m2", 1_795_405_881_250_000_000), at("m1", 1_795_405_880_500_000_000)]);
    assert_eq!(list(&f)["EndTime"], json!("2026, Nov 23 03:51:21.250000"));
    let printed = ret(&f, json!({"cmd": "runner", "fun": "jobs.print_job", "arg": [JID], "kwarg": {}}));
    assert_eq!(printed[JID]["EndTime"], json!("2026, Nov 23 03:51:21.250000"));
}

#[test]
fn a_background_runner_or_wheel_run_is_a_job_with_one_return() {
    let f = Fixture::new("run-job");
    let plan = f.run(json!({"cmd": "run.start", "client": "runner", "fun": "jobs.list_jobs", "fun_args": [{"search_function": "test.*"}], "user": "fred"})).unwrap();
    let [Record::JobPublished(job)] = &plan.proposals.concat()[..] else { panic!("{plan:?}") };
    assert!(!crate::jobs::publishable(job), "a run's job is never sent to minions");
    let (jid, host) = (job.jid.clone(), job.minions[0].clone());
    assert!(host.ends_with("_master"));
    let super::Answer::Now(a) = &plan.answer else { panic!() };
    assert_eq!(a, &json!({"jid": jid, "tag": format!("salt/run/{jid}")}));
    assert_eq!(plan.events[0].tag, format!("salt/run/{jid}/new"));
    assert_eq!(plan.events[0].data()["fun"], json!("runner.jobs.list_jobs"));
    assert_eq!(plan.events[0].data()["user"], json!("fred"));
    f.apply(&plan.proposals.concat());
    let end = json!({"cmd": "run.return", "jid": jid, "return": {"x": 1}, "success": true});
    let plan = f.run(end.clone()).unwrap();
    f.apply(&plan.proposals.concat());
    let super::Answer::After(settle) = plan.answer else { panic!("answered before the commit") };
    let settled = settle(&f).unwrap();
    assert_eq!(settled.events[0].tag, format!("salt/run/{jid}/ret"));
    let data = settled.events[0].data().clone();
    assert_eq!((&data["fun"], &data["return"], &data["success"], &data["user"], &data["fun_args"]), (&json!("runner.jobs.list_jobs"), &json!({"x": 1}), &json!(true), &json!("fred"), &json!([{"search_function": "test.*"}])));
    let looked = ret(&f, json!({"cmd": "runner", "fun": "jobs.lookup_jid", "jid": jid}));
    assert_eq!(looked[&host]["return"], json!({"x": 1}), "kept as Salt's store_job keeps a runner's data: {looked}");
    assert!(f.run(end).unwrap_err().to_string().contains("already has its return"));

    // A wheel's run: its own tags (a fixture of its own: the fixture's jids repeat).
    let f = Fixture::new("run-job-wheel");
    let plan = f.run(json!({"cmd": "run.start", "client": "wheel", "fun": "key.list_all"})).unwrap();
    let super::Answer::Now(a) = &plan.answer else { panic!() };
    let wjid = a["jid"].as_str().unwrap().to_string();
    assert_eq!(a["tag"], json!(format!("salt/wheel/{wjid}")));
    assert_eq!(plan.events[0].tag, format!("salt/wheel/{wjid}/new"));
    f.apply(&plan.proposals.concat());
    let plan = f.run(json!({"cmd": "run.return", "jid": wjid, "return": "no", "success": false})).unwrap();
    f.apply(&plan.proposals.concat());
    let super::Answer::After(settle) = plan.answer else { panic!() };
    assert_eq!(settle(&f).unwrap().events[0].tag, format!("salt/wheel/{wjid}/ret"));

    // Hostile or mistaken requests.
    for bad in [
        json!({"cmd": "run.start", "client": "local", "fun": "test.ping"}),
        json!({"cmd": "run.start", "client": "runner", "fun": "jobs"}),
        json!({"cmd": "run.start", "client": "runner", "fun": "../x.y"}),
        json!({"cmd": "run.start", "client": "runner", "fun": "a.b.c"}),
        json!({"cmd": "run.start", "client": "runner", "fun": format!("a.{}", "b".repeat(300))}),
        json!({"cmd": "run.start", "client": "runner", "fun": "jobs.list_jobs", "fun_args": "x"}),
        json!({"cmd": "run.start", "client": "runner", "fun": "jobs.list_jobs", "user": ""}),
        json!({"cmd": "run.return", "jid": jid, "return": 1}),
    ] {
        assert!(f.run(bad.clone()).is_err(), "{bad}");
    }
    // Only a run.start job takes such a return (not a minion's job, not an orchestration run).
    let f = Fixture::new("run-job-others");
    f.apply(&[Record::JobPublished(JobPublished { jid: JID.into(), load: enc(json!({"fun": "test.ping"})), minions: vec!["m1".into()], time_ns: 1, started_by: None, joins: false })]);
    assert!(f.run(json!({"cmd": "run.return", "jid": JID, "return": 1, "success": true})).unwrap_err().to_string().contains("not a runner's or a wheel's run"));
    f.apply(&roots_records(RootsTree::File, "base", "orch/x.sls", 0o644, b"ping:\n  test.nop: []\n"));
    let orch = f.run(json!({"cmd": "runner", "fun": "state.orchestrate", "arg": ["orch.x"], "kwarg": {}})).unwrap();
    f.apply(&orch.proposals.concat());
    let ojid = orch.proposals.concat().iter().find_map(|r| match r { Record::JobPublished(j) => Some(j.jid.clone()), _ => None }).unwrap();
    assert!(f.run(json!({"cmd": "run.return", "jid": ojid, "return": 1, "success": true})).is_err());
}
