//! External pillars with real salt-minion 3008.5 processes: git_pillar from `file://`
//! repositories made by the test (read by the master with gitoxide, carried through the
//! log), a new commit brought by `salt-run git_pillar.update` on a lone master and on a
//! three-member cluster; `cmd_yaml` and `cmd_json` merged with `pillar_roots` under
//! `ext_pillar_first` false and true, a failing command and an oversized output logged
//! and left out (not in `_errors`, as Salt); hostile repositories (a `top.sls` that is not YAML, a `root` that climbs
//! out).

use std::path::Path;

use serde_json::{json, Value};

use crate::gitfs::Repo;
use crate::support::*;

fn pillar_items(env: &Env, minion: &str) -> Value {
    env.salt_json(&[minion, "pillar.items", "unmask=True"], 60)[minion].clone()
}

/// A pillar repository whose `master` holds `top.sls` and `common.sls` (`word: <word>`).
fn pillar_repo(dir: &Path, word: &str) -> Repo {
    Repo::init(dir, &[("top.sls", "base:\n  '*':\n    - common\n"), ("common.sls", &format!("word: {word}\nfrom: git\n"))])
}

fn git_conf(remotes: &str) -> String {
    // A long interval: what the test sees comes from the update at start and the ones it
    // asks for.
    format!("log_level: info\ngit_pillar_update_interval: 3600\next_pillar:\n  - git:\n{remotes}")
}

/// `- master <url>` (Salt's one-line form), a second commit served once
/// `salt-run git_pillar.update` ran (which answers Salt's `{remote: True}`, then `None`
/// when nothing changed); a repository whose `top.sls` is not YAML (dict form, with a
/// `name`) is an error under `_errors`, the rest of the pillar intact; a remote whose
/// `root` climbs out of it is left out and named at start.
#[test]
fn a_new_commit_is_served_after_git_pillar_update_and_hostile_repositories_are_contained() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = pillar_repo(&tmp.path().join("pillar.git"), "v1");
    let bad = Repo::init(&tmp.path().join("bad.git"), &[("top.sls", "base: [unclosed\n")]);
    let conf = git_conf(&format!(
        "    - master {}\n    - master {}:\n      - name: broken\n    - master {}:\n      - root: ../../etc\n",
        repo.url(),
        bad.url(),
        repo.url()
    ));
    let s = Served::start(Accept::Auto, &conf, "");
    let id = format!("master {}", repo.url());
    wait_for("the git_pillar update at start", 60, || pillar_items(&s.env, MINION)["word"] == json!("v1"));
    let p = pillar_items(&s.env, MINION);
    assert_eq!(p["from"], json!("git"), "{p}");
    let errors = p["_errors"].as_array().unwrap_or_else(|| panic!("the broken top file is reported: {p}"));
    assert!(errors.iter().any(|e| e.as_str().is_some_and(|e| e.contains("top") && e.contains("YAML"))), "{p}");
    assert!(s.env.master_log().contains("root \\\"../../etc\\\" leaves the repository") || s.env.master_log().contains("root \"../../etc\" leaves the repository"), "the escaping root is named at start");

    let second = repo.commit(&[("common.sls", "word: v2\nfrom: git\n")], "second");
    assert_eq!(pillar_items(&s.env, MINION)["word"], json!("v1"), "nothing changes before an update");
    let ret = s.env.runner(&["git_pillar.update"]);
    assert_eq!(ret[&id], json!(true), "{ret}");
    assert_eq!(ret[format!("master {}", bad.url())], Value::Null, "Salt's id of a named remote is still its branch and URL: {ret}");
    assert_eq!(pillar_items(&s.env, MINION)["word"], json!("v2"));
    assert!(s.env.master_log().contains(&second), "the log names the commit compiled: {second}");
    assert_eq!(s.env.runner(&["git_pillar.update", &format!("repo={}", repo.url())]), json!({ &id: null }), "nothing new: None, as Salt");
    // The pillar the minion got is the one cached for targeting.
    assert_eq!(s.env.runner(&["cache.pillar", MINION])[MINION]["word"], json!("v2"));
}

/// Three members, one remote: the leader reads it at start and the tree reaches every
/// member through the log; after a new commit and one `git_pillar.update` asked of a
/// member that need not lead, every member compiles the new commit
/// (`pillar.show_pillar` on each) and the minion signed in to the third gets it.
#[test]
fn every_cluster_member_compiles_the_commit_one_update_brought() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = pillar_repo(&tmp.path().join("pillar.git"), "v1");
    let c = crate::cluster::founding(3, "halite-git-pillar", &git_conf(&format!("    - master {}\n", repo.url())));
    for env in &c.envs {
        wait_for("the git_pillar tree on every member", 60, || env.runner(&["pillar.show_pillar", "nobody"])["word"] == json!("v1"));
    }
    let readers = c.envs.iter().filter(|e| e.master_log().contains("git_pillar update read")).count();
    assert_eq!(readers, 1, "the remote is read by the leader only");
    let third = &c.envs[2];
    let _minion = crate::cluster::real_minion_on_the_third(&c, "real-1");
    wait_ping(third, "real-1", 90);
    assert_eq!(pillar_items(third, "real-1")["word"], json!("v1"));

    repo.commit(&[("common.sls", "word: v2\nfrom: git\n")], "second");
    let ret = c.envs[0].runner(&["git_pillar.update"]);
    assert_eq!(ret[format!("master {}", repo.url())], json!(true), "{ret}");
    for env in &c.envs {
        wait_for("the new commit compiled on every member", 30, || env.runner(&["pillar.show_pillar", "real-1"])["word"] == json!("v2"));
    }
    wait_for("every member at the same applied index and state", 30, || {
        let d: Vec<_> = c.envs.iter().map(|e| e.runner(&["cluster.digest"])).collect();
        d.iter().all(|x| x == &d[0])
    });
    assert_eq!(pillar_items(third, "real-1")["word"], json!("v2"));
}

/// Scripts for the command pillars, in `dir`.
fn scripts(dir: &Path) -> String {
    let script = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("script");
        std::process::Command::new("chmod").arg("+x").arg(&p).status().expect("chmod");
        p.display().to_string()
    };
    let yaml = script("yaml.sh", "printf 'motd: from cmd_yaml\\nshared:\\n  yaml: 1\\nwho: %s\\n' \"$1\"");
    let jsn = script("json.sh", "printf '{\"listed\": [1, 2], \"shared\": {\"json\": true}}'");
    let fail = script("fail.sh", "echo broken >&2; exit 3");
    format!("ext_pillar:\n  - cmd_yaml: {yaml} %s\n  - cmd_json: {jsn}\n  - cmd_yaml: {fail}\n  - cmd_json: yes '{{}}'\n")
}

fn roots_pillar(env: &Env) {
    let pil = env.root.join("srv/pillar");
    std::fs::create_dir_all(&pil).expect("pillar roots");
    std::fs::write(pil.join("top.sls"), "base:\n  '*':\n    - roots\n").expect("top.sls");
    std::fs::write(pil.join("roots.sls"), "motd: from roots\nshared:\n  roots: 1\nsaw: {{ salt['pillar.get']('who', 'nothing') }}\n").expect("roots.sls");
}

/// `cmd_yaml` (with the minion id for `%s`) and `cmd_json` merged with `pillar_roots`:
/// after it by default (the commands win), before it with `ext_pillar_first` (the SLS
/// files see the commands' data and win); a command that fails and one whose output is
/// over the bound are each logged and merge nothing, the rest intact and no `_errors`
/// (as Salt: the minion's state runs go on); the
/// pillar with the commands' data is the one cached for pillar targeting.
#[test]
fn command_pillars_merge_after_or_before_pillar_roots() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ext = scripts(tmp.path());
    let errors_ok = |env: &Env, p: &Value| {
        assert!(p.get("_errors").is_none(), "failed commands are logged, not put in _errors: {p}");
        let log = env.master_log();
        assert!(log.contains("Failed to load ext_pillar cmd_yaml: the command exited with exit status: 3: broken"), "{log}");
        assert!(log.contains("Failed to load ext_pillar cmd_json: the command printed more than"), "{log}");
    };

    let s = Served::start(Accept::Auto, &format!("log_level: info\n{ext}"), "");
    roots_pillar(&s.env);
    let p = pillar_items(&s.env, MINION);
    assert_eq!(p["motd"], json!("from cmd_yaml"), "ext pillars merge last: {p}");
    assert_eq!(p["who"], json!(MINION));
    assert_eq!(p["saw"], json!("nothing"), "pillar_roots is compiled before the commands ran");
    assert_eq!(p["shared"], json!({"roots": 1, "yaml": 1, "json": true}));
    assert_eq!(p["listed"], json!([1, 2]));
    errors_ok(&s.env, &p);
    assert_eq!(s.env.runner(&["cache.pillar", MINION])[MINION]["who"], json!(MINION), "the compiled pillar enters the log");
    let v = s.env.salt_json(&["-I", &format!("who:{MINION}"), "test.ping"], 30);
    assert_eq!(v, json!({ MINION: true }), "pillar targeting sees the command's data");
    drop(s);

    let s = Served::start(Accept::Auto, &format!("log_level: info\next_pillar_first: True\n{ext}"), "");
    roots_pillar(&s.env);
    let p = pillar_items(&s.env, MINION);
    assert_eq!(p["motd"], json!("from roots"), "pillar_roots merges last: {p}");
    assert_eq!(p["saw"], json!(MINION), "SLS files see the external pillar");
    assert_eq!(p["shared"], json!({"roots": 1, "yaml": 1, "json": true}));
    errors_ok(&s.env, &p);
}

/// `git_pillar_update_interval`: the leader's timer brings a new commit without the
/// runner.
#[test]
fn the_update_interval_brings_a_new_commit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = pillar_repo(&tmp.path().join("pillar.git"), "v1");
    let conf = format!("log_level: info\ngit_pillar_update_interval: 1\next_pillar:\n  - git:\n    - master {}:\n      - env: base\n", repo.url());
    let s = Served::start(Accept::Auto, &conf, "");
    wait_for("the first commit", 60, || pillar_items(&s.env, MINION)["word"] == json!("v1"));
    repo.commit(&[("common.sls", "word: v2\nfrom: git\n")], "second");
    wait_for("the second commit, brought by the timer", 60, || pillar_items(&s.env, MINION)["word"] == json!("v2"));
}
