//! `salt-run state.orchestrate` on a three-member cluster with two unmodified
//! salt-minion 3008.5 processes signed in to different members: the run is asked of the
//! member no minion is connected to (and whose own roots directory is empty: it renders
//! from the roots records the log holds), each step's job runs once on each minion,
//! and the run and its steps are in every member's job cache.

use serde_json::json;

use crate::cluster::founding;
use crate::support::*;

#[test]
fn an_orchestration_through_one_member_runs_once_and_is_in_every_members_job_cache() {
    let c = founding(3, "halite-orch", "auto_accept: True\n");
    let (a, via, b) = (&c.envs[0], &c.envs[1], &c.envs[2]);
    let work = a.root.join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    let w = work.display();
    let srv = a.root.join("srv/salt");
    std::fs::create_dir_all(srv.join("orch")).expect("roots");
    std::fs::write(
        srv.join("orch/deploy.sls"),
        format!(
            "mark:\n  salt.function:\n    - name: cmd.run\n    - tgt: 'm*'\n    - arg: ['echo {{{{ pillar[\"word\"] }}}} >> {w}/marks']\n\
             apply:\n  salt.state:\n    - tgt: 'm*'\n    - sls: touched\n    - require:\n      - salt: mark\n"
        ),
    )
    .expect("orch sls");
    std::fs::write(srv.join("touched.sls"), format!("touched:\n  file.append:\n    - name: {w}/states\n    - text: {{{{ grains['id'] }}}}\n")).expect("state sls");
    // The roots go into the log through the first member only.
    a.ok(SALT_RUN, &["cluster.sync_roots"]);
    let _m1 = start_minion(&a.root, "m1", &format!("master: {}\nmaster_port: {}\n", a.ip, a.ret));
    let _m2 = start_minion(&b.root, "m2", &format!("master: {}\nmaster_port: {}\n", b.ip, b.ret));
    wait_minion_ready(&a.root, "m1", 1, 90);
    wait_minion_ready(&b.root, "m2", 1, 90);
    wait_ping(via, "m1", 90);
    wait_ping(via, "m2", 90);

    let o = via.run_for(SALT_RUN, &["state.orchestrate", "orch.deploy", "pillar={word: hello}", "--out", "json"], std::time::Duration::from_secs(180));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&out);
    let (host, states) = v["data"].as_object().and_then(|d| d.iter().next()).expect("one host");
    let mark = &states["salt_|-mark_|-cmd.run_|-function"];
    let apply = &states["salt_|-apply_|-apply_|-state"];
    assert_eq!((&mark["result"], &apply["result"]), (&json!(true), &json!(true)), "{v}");

    // Each minion ran each step once: one line each, whatever member it is signed in to.
    let mut marks: Vec<String> = std::fs::read_to_string(work.join("marks")).expect("marks").lines().map(String::from).collect();
    assert_eq!(marks, ["hello", "hello"]);
    marks = std::fs::read_to_string(work.join("states")).expect("states").lines().map(String::from).collect();
    marks.sort();
    assert_eq!(marks, ["m1", "m2"]);

    // The run and its steps, with their returns, on every member.
    let step_jids: Vec<String> = [mark, apply].iter().map(|s| s["__jid__"].as_str().expect("a step's jid").to_string()).collect();
    let run_jid = {
        let jobs = via.runner(&["jobs.list_jobs"]);
        let runs: Vec<&String> = jobs.as_object().expect("jobs").iter().filter(|(_, j)| j["Function"] == json!("runner.state.orchestrate")).map(|(k, _)| k).collect();
        assert_eq!(runs.len(), 1, "{jobs}");
        runs[0].clone()
    };
    for env in &c.envs {
        wait_for("the run's return on every member", 30, || {
            let r = env.runner(&["jobs.lookup_jid", &run_jid]);
            r[host]["retcode"] == json!(0) && r[host]["data"][host]["salt_|-mark_|-cmd.run_|-function"]["result"] == json!(true)
        });
        let job = env.runner(&["jobs.list_job", &run_jid]);
        assert_eq!((&job["Function"], &job["Target"]), (&json!("runner.state.orchestrate"), &json!(host)), "{job}");
        for jid in &step_jids {
            wait_for("the step's returns on every member", 30, || {
                let r = env.runner(&["jobs.lookup_jid", jid]);
                r.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()) == Some(vec!["m1".to_string(), "m2".to_string()])
            });
        }
    }
}
