//! The runners operators reach for, with two unmodified salt-minion 3008.5 processes:
//! `jobs.list_job`, `jobs.print_job`, `jobs.exit_success`, `jobs.active` (a job really
//! running on both minions), `manage.present`, `manage.not_present`, `manage.versions`,
//! `fileserver.*`, `pillar.show_pillar`, `pillar.show_top`, `cache.*`, each checked for
//! content and shape (JSON, and Salt's default `nested`, `yaml` and `txt` outputs), and on
//! a three-member cluster two members answering the same.

use serde_json::{json, Value};

use crate::cluster::founding;
use crate::support::*;

/// The minion config: its master, and a mine function so `cache.mine` has data.
fn minion_conf(env: &Env) -> String {
    format!("master: {}\nmaster_port: {}\nmine_functions:\n  test.echo:\n    - mined\n", env.ip, env.ret)
}

/// File and pillar roots in `root/srv`.
fn write_roots(root: &std::path::Path) {
    for (path, body) in [
        ("srv/salt/top.sls", "base:\n  '*':\n    - web\n"),
        ("srv/salt/web/init.sls", "motd:\n  test.nop: []\n"),
        ("srv/salt/web/files/motd.txt", "hello\n"),
        ("srv/pillar/top.sls", "base:\n  '*':\n    - common\n  'm1':\n    - first\n"),
        ("srv/pillar/common.sls", "site: {{ salt['grains.get']('id', 'nobody') }}\n"),
        ("srv/pillar/first.sls", "first: true\n"),
    ] {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("roots dir");
        std::fs::write(p, body).expect("roots file");
    }
}

/// A master with roots, minions m1 and m2 answering pings, and an accepted key `gone`
/// with no minion behind it.
fn master_with_two_minions() -> (Running, [Proc; 2]) {
    let env = Env::master(&one_ip(), "localfs_key", "auto_accept: True\n");
    write_roots(&env.root);
    seed_pending(&env, &["gone"]);
    let m = Running::start(env);
    let env = &m.env;
    env.ok(SALT_KEY, &["-a", "gone", "-y"]);
    env.ok(SALT_RUN, &["cluster.sync_roots"]);
    let m1 = start_minion(&env.root, "m1", &minion_conf(env));
    let m2 = start_minion(&env.root, "m2", &minion_conf(env));
    wait_ping(env, "m1", 90);
    wait_ping(env, "m2", 90);
    (m, [m1, m2])
}

/// `salt --async ARGS...`: the jid it prints.
fn publish_async(env: &Env, args: &[&str]) -> String {
    let mut full = vec!["--async"];
    full.extend_from_slice(args);
    let o = env.salt(&full, 10);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    out.trim().rsplit(' ').next().filter(|j| j.len() >= 20).unwrap_or_else(|| panic!("no jid in {out:?}")).to_string()
}

/// `salt-run ARGS...` printed with its default outputter (or the `--out` in `args`).
fn printed(env: &Env, args: &[&str]) -> String {
    env.ok(SALT_RUN, args).trim_end().to_string()
}

#[test]
fn job_runners_show_jobs_their_returns_and_what_is_running() {
    let (m, _minions) = master_with_two_minions();
    let env = &m.env;
    let jid = publish_async(env, &["*", "test.echo", "hi"]);
    wait_for("both returns in the job cache", 60, || env.runner(&["jobs.lookup_jid", &jid]).as_object().is_some_and(|r| r.len() == 2));

    let job = env.runner(&["jobs.list_job", &jid]);
    let keys: Vec<&String> = job.as_object().expect("a mapping").keys().collect();
    assert_eq!(keys, ["jid", "Function", "Arguments", "Target", "Target-type", "User", "Minions", "StartTime", "Result"], "{job}");
    assert_eq!((&job["jid"], &job["Function"], &job["Arguments"], &job["Target"]), (&json!(jid), &json!("test.echo"), &json!(["hi"]), &json!("*")));
    assert_eq!(job["Minions"], json!(["gone", "m1", "m2"]), "every accepted minion was expected");
    for id in ["m1", "m2"] {
        assert_eq!(job["Result"][id]["return"], "hi", "{job}");
        assert_eq!(job["Result"][id]["retcode"], 0, "{job}");
    }
    assert!(job["Result"].get("gone").is_none());
    let mut under_jid = job.clone();
    under_jid.as_object_mut().expect("a mapping").remove("jid");
    assert_eq!(env.runner(&["jobs.print_job", &format!("jid={jid}")]), json!({ jid.clone(): under_jid }));
    assert_eq!(env.runner(&["jobs.exit_success", &jid]), json!({"gone": false, "m1": true, "m2": true}));
    // A return Python counts false is not a success.
    let empty = publish_async(env, &["-L", "m1,m2", "test.echo", ""]);
    wait_for("the empty echoes", 60, || env.runner(&["jobs.lookup_jid", &empty]).as_object().is_some_and(|r| r.len() == 2));
    assert_eq!(env.runner(&["jobs.exit_success", &empty]), json!({"m1": false, "m2": false}));
    // Salt's default output of a job.
    let shown = printed(env, &["jobs.print_job", &jid]);
    assert!(shown.starts_with(&format!("{jid}:\n    ----------\n    Arguments:\n        - hi\n    Function:\n        test.echo\n    Minions:\n        - gone\n        - m1\n        - m2\n    Result:\n        ----------\n        m1:\n            ----------\n")), "{shown}");
    assert!(shown.contains("\n            retcode:\n                0\n            return:\n                hi\n"), "{shown}");
    assert!(shown.contains("\n    Target-type:\n        glob\n    User:\n        root"), "{shown}");

    // A job still running on both minions is found by asking them (saltutil.running).
    let sleeping = publish_async(env, &["-L", "m1,m2", "test.sleep", "40"]);
    let mut active = Value::Null;
    wait_for("the sleeping job to be seen running", 60, || {
        active = env.runner(&["jobs.active", "-t", "8"]);
        active[&sleeping]["Running"].as_array().is_some_and(|r| r.len() == 2)
    });
    let a = &active[&sleeping];
    assert_eq!((&a["Function"], &a["Arguments"], &a["Target"], &a["Target-type"]), (&json!("test.sleep"), &json!([40]), &json!(["m1", "m2"]), &json!("list")), "{active}");
    let running: Vec<&String> = a["Running"].as_array().expect("a list").iter().flat_map(|r| r.as_object().expect("{minion: pid}").keys()).collect();
    assert_eq!(running, ["m1", "m2"]);
    assert!(a["Running"][0]["m1"].as_u64().is_some_and(|p| p > 0), "a pid: {active}");
    assert_eq!(a["Returned"], json!([]), "neither has returned");
    assert!(active.get(&jid).is_none(), "a finished job is not active: {active}");
}

#[test]
fn presence_versions_files_pillar_and_caches_come_from_the_master() {
    let (m, _minions) = master_with_two_minions();
    let env = &m.env;

    // Presence: m1 and m2 reported; `gone` never did.
    assert_eq!(env.runner(&["manage.present"]), json!(["m1", "m2"]));
    assert_eq!(env.runner(&["manage.not_present"]), json!(["gone"]));
    assert_eq!(env.runner(&["manage.present", "subset=[m2, gone]"]), json!(["m2"]));
    let ips = env.runner(&["manage.present", "show_ip=True"]);
    assert_eq!(ips.as_object().expect("{minion: ip}").keys().collect::<Vec<_>>(), ["m1", "m2"]);
    assert_eq!(printed(env, &["manage.present"]), "- m1\n- m2", "Salt's nested output of a list");
    assert_eq!(printed(env, &["manage.not_present", "--out", "yaml"]), "- gone");
    assert_eq!(printed(env, &["manage.not_present", "--out", "txt"]), "['gone']");
    let e = env.run(SALT_RUN, &["manage.present", "bogus=1"]);
    assert!(!e.status.success() && String::from_utf8_lossy(&e.stderr).contains("present() got an unexpected keyword argument 'bogus'"), "{e:?}");

    // Versions: both minions run 3008.5; `gone` does not answer.
    assert_eq!(env.runner(&["manage.versions", "-t", "8"]), json!({"Minion offline": {"gone": false}, "Up to date": {"m1": "3008.5", "m2": "3008.5"}, "Master": "3008.5"}));

    // The file server of the applied state.
    assert_eq!(env.runner(&["fileserver.file_list"]), json!(["top.sls", "web/files/motd.txt", "web/init.sls"]));
    assert_eq!(env.runner(&["fileserver.file_list", "saltenv=base", "backend=roots"]), json!(["top.sls", "web/files/motd.txt", "web/init.sls"]));
    assert_eq!(env.runner(&["fileserver.dir_list"]), json!(["web", "web/files"]));
    assert_eq!(env.runner(&["fileserver.envs"]), json!(["base"]));
    assert_eq!(printed(env, &["fileserver.dir_list"]), "- web\n- web/files");

    // Pillar compiled on the master with the cached grains; the top data.
    assert_eq!(env.runner(&["pillar.show_pillar", "m1"]), json!({"site": "m1", "first": true}));
    assert_eq!(env.runner(&["pillar.show_pillar", "minion=m2"]), json!({"site": "m2"}));
    assert_eq!(env.runner(&["pillar.show_top"]), json!({"base": {"*": ["common"], "m1": ["first"]}}));
    assert_eq!(printed(env, &["pillar.show_pillar", "m1"]), "first:\n    True\nsite:\n    m1");

    // The minion data cache: grains each minion reported, the pillar compiled for it, its mine.
    let grains = env.runner(&["cache.grains", "*"]);
    assert_eq!(grains.as_object().expect("{minion: grains}").keys().collect::<Vec<_>>(), ["gone", "m1", "m2"]);
    assert_eq!((&grains["m1"]["id"], &grains["m2"]["id"], &grains["gone"]), (&json!("m1"), &json!("m2"), &json!({})));
    assert_eq!(grains["m1"]["saltversion"], "3008.5");
    assert_eq!(env.runner(&["cache.grains", "m2", "tgt_type=glob"]).as_object().map(|g| g.len()), Some(1));
    let pillar = env.runner(&["cache.pillar"]);
    assert_eq!((&pillar["m1"], &pillar["m2"], &pillar["gone"]), (&json!({"site": "m1", "first": true}), &json!({"site": "m2"}), &json!({})));
    wait_for("the mines", 60, || env.runner(&["cache.mine"]) == json!({"m1": {"test.echo": "mined"}, "m2": {"test.echo": "mined"}}));
    assert_eq!(env.runner(&["cache.mine", "L@m2", "compound"]), json!({"m2": {"test.echo": "mined"}}));
}

#[test]
fn two_cluster_members_answer_the_runners_the_same() {
    let c = founding(3, "halite-runners", "auto_accept: True\n");
    write_roots(&c.envs[0].root);
    c.envs[0].ok(SALT_RUN, &["cluster.sync_roots"]);
    let (a, b) = (&c.envs[0], &c.envs[2]);
    let _m1 = start_minion(&a.root, "m1", &minion_conf(a));
    let _m2 = start_minion(&b.root, "m2", &minion_conf(b));
    wait_ping(a, "m1", 90);
    wait_ping(a, "m2", 90);
    let jid = publish_async(a, &["*", "test.echo", "hi"]);
    wait_for("both returns on the first member", 60, || a.runner(&["jobs.lookup_jid", &jid]).as_object().is_some_and(|r| r.len() == 2));
    let asks: Vec<Vec<String>> = [
        vec!["jobs.list_job".to_string(), jid.clone()],
        vec!["jobs.exit_success".into(), jid.clone()],
        vec!["manage.present".into()],
        vec!["fileserver.file_list".into()],
        vec!["pillar.show_pillar".into(), "m2".into()],
        vec!["cache.grains".into(), "*".into()],
        vec!["cache.pillar".into()],
    ]
    .into_iter()
    .collect();
    // The second and third members: neither published the job; the third serves m2.
    let (x, y) = (&c.envs[1], &c.envs[2]);
    for ask in &asks {
        let args: Vec<&str> = ask.iter().map(String::as_str).collect();
        let first = a.runner(&args);
        wait_for(&format!("{ask:?} the same on two members"), 30, || x.runner(&args) == first && y.runner(&args) == first);
    }
    assert_eq!(x.runner(&["jobs.exit_success", &jid]), json!({"m1": true, "m2": true}));
    assert_eq!(y.runner(&["manage.present"]), json!(["m1", "m2"]));
}
