//! The reactor with unmodified salt-minion 3008.5 processes: a `local` reaction to a
//! minion's start runs a job on that minion (one job in the job cache, its return
//! there); Salt's classic auto-accept reactor (`wheel.key.accept` on `salt/auth` for the
//! pending keys whose names match) accepts one minion and leaves the other pending; on
//! a three-member cluster an event a minion fires through one member, which every member
//! sees and reacts to, results in exactly one job, counted in every member's job cache.

use serde_json::{json, Value};

use crate::cluster::founding;
use crate::support::*;

/// Writes a reactor SLS under the env's root (`reactor/NAME`).
fn write_sls(env: &Env, name: &str, text: &str) {
    let dir = env.root.join("reactor");
    std::fs::create_dir_all(&dir).expect("reactor dir");
    std::fs::write(dir.join(name), text).expect("write sls");
}

/// The jids of the jobs in `env`'s job cache that ran `fun` with `args`.
fn jobs_of(env: &Env, fun: &str, args: Value) -> Vec<String> {
    let jobs = env.runner(&["jobs.list_jobs"]);
    let mut out: Vec<String> = jobs.as_object().map(|m| m.iter().filter(|(_, j)| j["Function"] == fun && j["Arguments"] == args).map(|(jid, _)| jid.clone()).collect()).unwrap_or_default();
    out.sort();
    out
}

#[test]
fn a_reaction_to_a_minion_start_runs_one_job_on_that_minion() {
    let env = Env::master(&one_ip(), "localfs_key", "auto_accept: True\nreactor:\n  - 'salt/minion/*/start':\n    - @ROOT@/reactor/start.sls\n  - 'salt/minion/*/start':\n    - @ROOT@/reactor/broken.sls\n");
    write_sls(&env, "start.sls", "greet_{{ data['id'] }}:\n  local.test.echo:\n    - tgt: {{ data['id'] }}\n    - arg:\n      - started-{{ data['id'] }}\n");
    // A second file that does not render: logged and counted, the first still reacts.
    write_sls(&env, "broken.sls", "{% if %}\n");
    let m = Running::start(env);
    let env = &m.env;
    let _m1 = start_minion(&env.root, "m1", &format!("master: {}\nmaster_port: {}\n", env.ip, env.ret));
    let args = json!(["started-m1"]);
    wait_for("the reaction's job in the job cache", 90, || !jobs_of(env, "test.echo", args.clone()).is_empty());
    let jids = jobs_of(env, "test.echo", args.clone());
    assert_eq!(jids.len(), 1, "{jids:?}");
    // The minion ran it: its return is in the job cache.
    wait_for("m1's return of the reaction's job", 60, || env.runner(&["jobs.lookup_jid", &jids[0]]) == json!({"m1": "started-m1"}));
    wait_ping(env, "m1", 30);
    assert_eq!(jobs_of(env, "test.echo", args), jids, "one start, one job");
    assert!(env.master_log().contains("reactor SLS for tag salt/minion/m1/start not rendered"), "the bad SLS is reported");
}

#[test]
fn an_auto_accept_reactor_accepts_the_pending_keys_its_template_names() {
    let env = Env::master(&one_ip(), "localfs_key", "reactor:\n  - 'salt/auth':\n    - @ROOT@/reactor/auth.sls\n");
    write_sls(
        &env,
        "auth.sls",
        "{% if 'act' in data and data['act'] == 'pend' and data['id'].startswith('ink') %}\nminion_add:\n  wheel.key.accept:\n    - match: {{ data['id'] }}\n{% endif %}\n",
    );
    let m = Running::start(env);
    let env = &m.env;
    let conf = format!("master: {}\nmaster_port: {}\n", env.ip, env.ret);
    let _ink = start_minion(&env.root, "ink1", &conf);
    let _web = start_minion(&env.root, "web1", &conf);
    wait_ping(env, "ink1", 90);
    wait_for("web1's key to be pending", 60, || env.ids("minions_pre").contains(&"web1".to_string()));
    assert_eq!(env.ids("minions"), ["ink1"]);
    assert_eq!(env.ids("minions_pre"), ["web1"]);
    assert!(!ping_via(env, "web1", 3));
}

#[test]
fn on_a_cluster_an_event_seen_by_every_member_results_in_one_job() {
    let reactor = "auto_accept: True\nreactor:\n  - 'my/custom/*':\n    - @ROOT@/reactor/echo.sls\n";
    let c = founding(3, "halite-reactor", reactor);
    for env in &c.envs {
        write_sls(env, "echo.sls", "echo:\n  local.test.echo:\n    - tgt: {{ data['id'] }}\n    - arg:\n      - reacted-{{ data['data']['n'] }}\n");
    }
    let a = &c.envs[0];
    let _m1 = start_minion(&a.root, "m1", &format!("master: {}\nmaster_port: {}\n", a.ip, a.ret));
    wait_minion_ready(&a.root, "m1", 1, 90);
    wait_ping(a, "m1", 90);
    assert_eq!(a.salt_json(&["m1", "event.send", "my/custom/tag", "{\"n\": 7}"], 20), json!({"m1": true}));
    let args = json!(["reacted-7"]);
    // Every member reacts to what it sees (the member the minion fired through, and the
    // two the event was forwarded to): three entries, of which the first applied and
    // the two others were skipped on every member.
    for env in &c.envs {
        wait_for("the two later reactions skipped", 60, || env.master_log().matches("reaction skipped: another member's reaction to this event applied first").count() == 2);
    }
    let jids = jobs_of(a, "test.echo", args.clone());
    assert_eq!(jids.len(), 1, "{jids:?}");
    for env in &c.envs {
        assert_eq!(jobs_of(env, "test.echo", args.clone()), jids, "the job cache of {}", env.ip);
    }
    wait_for("m1's return of the reaction's job", 60, || a.runner(&["jobs.lookup_jid", &jids[0]]) == json!({"m1": "reacted-7"}));
    let reacted = c.envs.iter().filter(|e| e.master_log().contains("reactor: reacted")).count();
    assert_eq!(reacted, 1, "one member carried the reaction out");
}
