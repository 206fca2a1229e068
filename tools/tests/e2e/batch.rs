//! The `salt` command against three real salt-minion 3008.5 processes: returns printed
//! as they are committed (a fast minion's before a slow one finishes), Salt's output
//! shapes (`nested`, `json`, `--static`, `txt`, `raw`), `--summary`, `--preview-target`,
//! and `--batch`: one minion at a time under one jid, `N%`, `--failhard`,
//! `--batch-safe-limit`, and `--async --batch` (the master runs it; `batch.*`). Order is proved by what the minions did (a shared file each
//! job appends to, gates the test opens) and by the job cache, never by timing.

use std::process::Command;

use serde_json::Value;

use crate::support::*;

/// A master with three minions, m1, m2 and m3, answering pings. (Fields drop in order:
/// minions, master, then the directory.)
struct Three {
    _minions: Vec<Proc>,
    m: Running,
}

fn three() -> Three {
    let m = Running::start(Env::master(&one_ip(), "localfs_key", "auto_accept: True\n"));
    let conf = format!("master: {}\nmaster_port: {}\n", m.env.ip, m.env.ret);
    let minions = ["m1", "m2", "m3"].iter().map(|id| start_minion(&m.env.root, id, &conf)).collect();
    for id in ["m1", "m2", "m3"] {
        wait_ping(&m.env, id, 90);
    }
    Three { _minions: minions, m }
}

/// `salt ARGS... -t 60` through the master, its output as text, and whether it succeeded.
fn salt(env: &Env, args: &[&str]) -> (String, String, Option<i32>) {
    let o = env.salt(args, 60);
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned(), o.status.code())
}

/// Every JSON document in `s`, in order.
fn documents(s: &str) -> Vec<Value> {
    serde_json::Deserializer::from_str(s).into_iter::<Value>().map(|d| d.unwrap_or_else(|e| panic!("not JSON documents ({e}):\n{s}"))).collect()
}

/// The jobs in the job cache running `fun`, oldest first: each one's jid and minions
/// (`jobs.list_job`'s `Minions`, sorted).
fn runs_of(env: &Env, fun: &str) -> Vec<(String, Value)> {
    let jobs = env.runner(&["jobs.list_jobs"]);
    let mut found: Vec<String> = jobs.as_object().expect("jobs").iter().filter(|(_, j)| j["Function"] == fun).map(|(jid, _)| jid.clone()).collect();
    found.sort();
    found.into_iter().map(|jid| (jid.clone(), env.runner(&["jobs.list_job", &jid])["Minions"].clone())).collect()
}

/// The minions of each job running `fun`, oldest first.
fn minions_of(env: &Env, fun: &str) -> Vec<Value> {
    runs_of(env, fun).into_iter().map(|(_, m)| m).collect()
}

/// A shell command (rendered with Jinja on each minion) that appends `start ID` to
/// `log`, sleeps a second, and appends `end ID`.
fn logged(log: &std::path::Path) -> String {
    let l = log.display();
    format!("echo start {{{{ grains['id'] }}}} >> {l}; sleep 1; echo end {{{{ grains['id'] }}}} >> {l}")
}

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(String::from).collect()
}

#[test]
fn a_fast_return_is_printed_while_a_slow_minion_still_runs() {
    let t = three();
    let env = &t.m.env;
    // m2 waits until its gate file is gone; m1 has no gate and answers at once.
    let gates = env.root.join("gates");
    std::fs::create_dir_all(&gates).expect("gates");
    std::fs::write(gates.join("m2"), "").expect("gate");
    let cmd = format!("while [ -e {}/{{{{ grains['id'] }}}} ]; do sleep 0.1; done; echo done-{{{{ grains['id'] }}}}", gates.display());
    let (mut p, mut out) = Proc::spawn_lines(
        "salt (streaming)",
        Command::new(SALT).args(["-c", &env.conf(), "-L", "m1,m2", "cmd.run", &cmd, "template=jinja", "-t", "60", "--out", "json"]),
        &env.root.join("salt-stream.log"),
    );
    out.wait("m1's return", 60, |l| l.iter().any(|l| l.contains("done-m1")));
    // m2 cannot have finished: its gate is still there. Its return is not printed.
    assert!(gates.join("m2").exists());
    assert!(!out.poll(std::time::Duration::from_millis(200), |l| l.iter().any(|l| l.contains("m2"))), "m2 printed before it could finish: {:?}", out.to_end(0));
    std::fs::remove_file(gates.join("m2")).expect("open the gate");
    let all = out.to_end(60).join("\n");
    assert!(p.wait_exit("salt", 60).success());
    // Salt's streaming JSON: one document per return, in the order they came.
    assert_eq!(documents(&all), vec![serde_json::json!({"m1": "done-m1"}), serde_json::json!({"m2": "done-m2"})]);
}

#[test]
fn returns_print_in_salts_output_shapes() {
    let t = three();
    let env = &t.m.env;
    // --static gathers one document; txt and raw print Python's str of each value.
    let (o, _, code) = salt(env, &["*", "test.echo", "hi", "--static", "--out", "json"]);
    assert_eq!(documents(&o), vec![serde_json::json!({"m1": "hi", "m2": "hi", "m3": "hi"})], "{o}");
    assert_eq!(code, Some(0));
    let (o, _, _) = salt(env, &["m2", "test.ping", "--out", "txt"]);
    assert_eq!(o.trim_end(), "m2: True");
    let (o, _, _) = salt(env, &["m3", "test.arg", "a", "k=1", "--out", "raw"]);
    assert!(o.starts_with("{'m3': {'args': ['a'], 'kwargs': {"), "{o}");
    assert!(o.contains("'k': 1"), "{o}");
    let (o, _, _) = salt(env, &["m1", "test.ping"]);
    assert_eq!(o, "m1:\n    True\n");
    // table: a list of mappings a minion returned, drawn as Salt's outputter draws it.
    let (o, _, _) = salt(env, &["m1", "test.outputter", "[{name: nginx, last_seen: 3}, {name: redis-server, last_seen: 12}]", "--out", "table"]);
    let rule = format!("    {}", "-".repeat(28));
    assert_eq!(o, format!("m1:\n----------\n{rule}\n| Last Seen |     Name     |\n{rule}\n|     3     |    nginx     |\n{rule}\n|     12    | redis-server |\n{rule}\n").replace("\n|", "\n    |"));
    // A listed id nobody answers for: Salt's line, and exit code 1.
    let (o, e, code) = salt(env, &["-L", "m1,nosuch", "test.ping", "--out", "txt"]);
    assert!(o.contains("m1: True\n") && o.contains("nosuch: Minion did not return. [No response]"), "{o}");
    assert_eq!(code, Some(1), "{e}");
    // A minion's non-zero retcode fails the run, with Salt's message.
    let (o, e, code) = salt(env, &["m1", "cmd.run", "exit 3"]);
    assert_eq!(code, Some(1), "{o}{e}");
    assert!(e.contains("ERROR: Minions returned with non-zero exit code"), "{e}");
    // --summary: Salt's counts after the returns; with -v the ids behind them.
    let (o, _, _) = salt(env, &["-L", "m1,m2,nosuch", "cmd.run", "exit {{ 3 if grains['id'] == 'm2' else 0 }}", "template=jinja", "--summary", "-v"]);
    let rule = "-".repeat(43);
    let want = format!("\n\n{rule}\nSummary\n{rule}\n# of minions targeted: 3\n# of minions returned: 2\n# of minions that did not return: 1\n# of minions with errors: 1\nMinions not responding: nosuch\nMinions with failures: m2\n{rule}\n");
    assert!(o.ends_with(&want), "{o}");
    let (o, _, _) = salt(env, &["m1", "test.ping", "--summary", "--out", "json"]);
    assert!(!o.contains("Summary"), "not with --out, as in Salt: {o}");
    // --preview-target: the minions the target matches, through the outputter; nothing runs.
    let before = env.runner(&["jobs.list_jobs"]).as_object().map_or(0, |m| m.len());
    let (o, _, code) = salt(env, &["--preview-target", "m[12]"]);
    assert_eq!((o.as_str(), code), ("- m1\n- m2\n", Some(0)));
    let (o, _, _) = salt(env, &["-C", "m* and not m2", "--preview-target", "--out", "json"]);
    assert_eq!(documents(&o), vec![serde_json::json!(["m1", "m3"])], "{o}");
    assert_eq!(env.runner(&["jobs.list_jobs"]).as_object().map_or(0, |m| m.len()), before, "no job published");
    // --batch-safe-limit: a target that large runs as a batch of --batch-safe-size.
    let (o, e, code) = salt(env, &["--batch-safe-limit", "3", "--batch-safe-size", "2", "*", "test.ping"]);
    assert_eq!(code, Some(0), "{o}{e}");
    assert!(o.starts_with("\nNOTICE: Too many minions targeted, switching to batch execution.\n") && o.contains("Executing run on ['m1', 'm2']") && o.contains("Executing run on ['m3']"), "{o}");
    let (o, _, _) = salt(env, &["--batch-safe-limit", "4", "*", "test.ping", "--out", "txt"]);
    assert!(!o.contains("NOTICE") && !o.contains("Executing run"), "under the limit: {o}");
}

#[test]
fn a_batch_of_one_runs_one_minion_at_a_time() {
    let t = three();
    let env = &t.m.env;
    let log = env.root.join("order.log");
    let (o, e, code) = salt(env, &["-b", "1", "*", "cmd.run", &logged(&log), "template=jinja"]);
    assert_eq!(code, Some(0), "{o}{e}");
    // Each minion started only after the one before it ended.
    assert_eq!(lines(&log), ["start m1", "end m1", "start m2", "end m2", "start m3", "end m3"]);
    // Salt's batch lines, then each return beside its job's jid and retcode.
    for id in ["m1", "m2", "m3"] {
        assert!(o.contains(&format!("\nExecuting run on ['{id}']\n\n")), "{o}");
    }
    assert!(o.contains("jid:\n    2") && o.contains("retcode:\n    0"), "{o}");
    // The job cache: the ping that resolved the target, then the run as one job (Salt
    // 3008's one jid a batch), its minions joined start by start; every return printed
    // beside that jid, and `jobs.lookup_jid` of it has them all.
    assert!(!minions_of(env, "test.ping").is_empty());
    let runs = runs_of(env, "cmd.run");
    assert_eq!(runs.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>(), [serde_json::json!(["m1", "m2", "m3"])]);
    let jid = &runs[0].0;
    assert_eq!(o.matches(&format!("jid:\n    {jid}\n")).count(), 3, "{o}");
    let all = env.runner(&["jobs.lookup_jid", jid]);
    assert_eq!(all.as_object().map(|m| m.len()), Some(3), "{all}");

    // 67% of three is two at once: m3 starts only once m1 or m2 ended.
    let log = env.root.join("order-67.log");
    let (o, e, code) = salt(env, &["--batch", "67%", "*", "cmd.run", &logged(&log), "template=jinja", "--out", "json"]);
    assert_eq!(code, Some(0), "{o}{e}");
    let l = lines(&log);
    let at = |s: &str| l.iter().position(|x| x == s).unwrap_or_else(|| panic!("{s} missing: {l:?}"));
    assert!(at("start m1") < at("end m2") && at("start m2") < at("end m1"), "m1 and m2 ran together: {l:?}");
    assert!(at("start m3") > at("end m1").min(at("end m2")), "m3 waited for a slot: {l:?}");
    assert!(o.contains("Executing run on ['m1', 'm2']") && o.contains("Executing run on ['m3']"), "{o}");
    let returns: Vec<Value> = o.split("Executing run on").flat_map(|part| documents(part.split_once("]\n").map(|x| x.1).unwrap_or(""))).collect();
    assert_eq!(returns.len(), 3, "{o}");
    assert!(returns.iter().all(|r| r["retcode"] == 0 && r["jid"].is_string() && r["jid"] == returns[0]["jid"]), "one jid for the run: {o}");
}

#[test]
fn failhard_stops_the_batch_at_the_first_failure() {
    let t = three();
    let env = &t.m.env;
    let log = env.root.join("order.log");
    // m2 fails; with a batch of one, m3 is never started.
    let cmd = format!("echo ran {{{{ grains['id'] }}}} >> {}; test {{{{ grains['id'] }}}} != m2", log.display());
    let (o, e, code) = salt(env, &["-b", "1", "--failhard", "*", "cmd.run", &cmd, "template=jinja"]);
    assert_eq!(lines(&log), ["ran m1", "ran m2"], "{o}{e}");
    assert_eq!(code, Some(1), "the largest retcode returned: {o}{e}");
    assert!(e.contains("--failhard"), "{e}");
    assert!(!o.contains("['m3']"), "{o}");
    assert_eq!(minions_of(env, "cmd.run"), [serde_json::json!(["m1", "m2"])], "m3 never joined the run");

    // Without it, the failure is reported and the run goes on.
    let log2 = env.root.join("order2.log");
    let cmd = format!("echo ran {{{{ grains['id'] }}}} >> {}; test {{{{ grains['id'] }}}} != m2", log2.display());
    let (o, e, code) = salt(env, &["-b", "1", "*", "cmd.run", &cmd, "template=jinja"]);
    assert_eq!(lines(&log2), ["ran m1", "ran m2", "ran m3"], "{o}{e}");
    assert_eq!(code, Some(1));
}

/// `batch.status` of `jid`, polled until `done` says so (60 s at most).
fn status_until(env: &Env, jid: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let s = env.runner(&["batch.status", jid]);
        if done(&s) {
            return s;
        }
        assert!(std::time::Instant::now() < deadline, "batch.status never got there: {s}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Salt 3008's `salt --async --batch`: the command starts the run and exits; the master
/// runs it one minion at a time (proved by what the minions did), under one jid, with
/// `salt/batch/<jid>/*` events; `batch.status`, `batch.list_active` and `batch.stop`
/// show and stop it.
#[test]
fn an_async_batch_is_run_by_the_master_after_salt_exits() {
    let t = three();
    let env = &t.m.env;
    let (_watcher, mut events) = Proc::spawn_lines("salt-run state.event", Command::new(SALT_RUN).args(["-c", &env.conf(), "state.event", "tagmatch=salt/batch/*"]), &env.root.join("batch-events.log"));
    let log = env.root.join("async.log");
    let (o, e, code) = salt(env, &["--async", "-b", "1", "*", "cmd.run", &logged(&log), "template=jinja"]);
    assert_eq!(code, Some(0), "{o}{e}");
    let jid = o.trim().strip_prefix("Executed batch command with job ID: ").unwrap_or_else(|| panic!("no jid: {o}{e}")).to_string();
    assert!(lines(&log).len() < 6, "salt returned before the run ended: {:?}", lines(&log));
    let s = status_until(env, &jid, |s| s["completed"] == 3);
    assert_eq!((&s["total"], &s["failed"], &s["active"], &s["pending"], &s["halted"], &s["driver"], &s["fun"]), (&serde_json::json!(3), &serde_json::json!(0), &serde_json::json!(0), &serde_json::json!(0), &serde_json::json!(false), &serde_json::json!("master"), &serde_json::json!("cmd.run")), "{s}");
    assert_eq!(lines(&log), ["start m1", "end m1", "start m2", "end m2", "start m3", "end m3"], "one at a time");
    assert_eq!(env.runner(&["jobs.list_job", &jid])["Minions"], serde_json::json!(["m1", "m2", "m3"]));
    assert_eq!(env.runner(&["jobs.lookup_jid", &jid]).as_object().map(|m| m.len()), Some(3));
    assert_eq!(env.runner(&["batch.list_active"]), serde_json::json!([]));
    let tags = |l: &[String]| l.iter().filter_map(|x| x.split('\t').next()).map(String::from).collect::<Vec<_>>();
    let done_tag = format!("salt/batch/{jid}/complete");
    assert!(events.poll(std::time::Duration::from_secs(10), |l| tags(l).contains(&done_tag)), "{:?}", events.seen());
    assert!(tags(events.seen()).contains(&format!("salt/batch/{jid}/progress")), "{:?}", events.seen());

    // A slower run, stopped after its first start: nobody more is started.
    let log2 = env.root.join("async-stop.log");
    let cmd = format!("sleep 3; echo {{{{ grains['id'] }}}} >> {}", log2.display());
    let (o, e, _) = salt(env, &["--async", "-b", "1", "*", "cmd.run", &cmd, "template=jinja"]);
    let jid2 = o.trim().strip_prefix("Executed batch command with job ID: ").unwrap_or_else(|| panic!("no jid: {o}{e}")).to_string();
    let active = env.runner(&["batch.list_active"]);
    assert_eq!(active.as_array().map(|a| a.iter().map(|s| s["jid"].clone()).collect::<Vec<_>>()), Some(vec![serde_json::json!(jid2)]), "{active}");
    assert_eq!(env.runner(&["batch.stop", &jid2]), serde_json::json!(true));
    let s = status_until(env, &jid2, |s| s["halted"] == true);
    assert_eq!(s["halted_reason"], "stop", "{s}");
    assert_eq!(env.runner(&["batch.stop", &jid2]), serde_json::json!(false), "stopped already");
    // The `halted` event is fired by the driver's last step for the run: after it, the
    // run never starts anyone.
    let halted_tag = format!("salt/batch/{jid2}/halted");
    assert!(events.poll(std::time::Duration::from_secs(10), |l| tags(l).contains(&halted_tag)), "{:?}", events.seen());
    // The minion running when it stopped finishes (its line, then its return stored, the
    // moment a running batch would start the next one); the others never start.
    wait_for("m1's return of the stopped run", 60, || env.runner(&["jobs.lookup_jid", &jid2]).get("m1").is_some());
    assert_eq!(lines(&log2), ["m1"], "{}", env.runner(&["batch.status", &jid2]));
    assert_eq!(env.runner(&["jobs.list_job", &jid2])["Minions"], serde_json::json!(["m1"]));
    assert_eq!(env.runner(&["batch.status", "20200101000000000000"]), Value::Null, "no such run");
}
