//! git_pillar and commands end to end short of the daemon: repositories made with the
//! `git` binary (test-only), read with gix, planned as `git_pillar` records, applied to a
//! state machine, compiled; commands through a test [`ExtRun`].

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value as J};

use halite_storage::format::{Record, RootsTree};
use halite_storage::state::StateMachine;

use super::ext::{ExtCmdError, ExtPillarConfig, ExtRun};
use super::{compile, Minion, Sources};
use crate::config::MasterConfig;

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git").arg("-C").arg(dir).args(["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]).args(args).output().expect("git");
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn commit(dir: &Path, files: &[(&str, &str)]) {
    for (p, body) in files {
        let path = dir.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "c"]);
}

fn init(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "master"]);
}

/// Prints fixed outputs by command text.
struct Canned;

impl ExtRun for Canned {
    fn run(&self, command: &str, id: &str) -> Result<Vec<u8>, ExtCmdError> {
        match command {
            "yaml" => Ok(format!("from_cmd: {id}\nshared: {{cmd: 1}}\nmotd: cmd\n").into_bytes()),
            "json" => Ok(br#"{"j": [1, 2], "shared": {"json": true}}"#.to_vec()),
            "fails" => Err(ExtCmdError::Exited { status: std::os::unix::process::ExitStatusExt::from_raw(1 << 8), stderr: String::new() }),
            _ => Err(ExtCmdError::NotRun),
        }
    }
}

fn master_cfg(d: &Path, yaml: &str) -> MasterConfig {
    let mut cfg = MasterConfig::under(d);
    cfg.raw = serde_yaml::from_str(yaml).unwrap();
    cfg
}

/// One update of every git_pillar remote, applied as the log would.
fn update(sm: &StateMachine, cfg: &MasterConfig, at: &mut u64) {
    let ext = ExtPillarConfig::from_raw(&cfg.raw);
    let g = ext.git.gitfs();
    let fetched = crate::gitfs::fetch::fetch_all(&g);
    let applied: Vec<_> = sm.roots_files_of(RootsTree::GitPillar).unwrap().into_iter().map(|(_, e, p, m)| (e, p, m)).collect();
    let plan = crate::gitfs::plan::plan_tree(RootsTree::GitPillar, &g, &fetched, &applied);
    let mut records = plan.records.clone();
    records.push(Record::RootsSync(plan.commit.clone()));
    let entries: Vec<(u64, Record)> = records.into_iter().map(|r| { *at += 1; (*at, r) }).collect();
    sm.apply(&entries).unwrap();
}

fn pillar(cfg: &MasterConfig, sm: &StateMachine, id: &str, pillarenv: Option<&str>) -> J {
    let roots = crate::view::fs::FsRoots::new(cfg);
    let grains = json!({"id": id});
    compile(cfg, &Sources { roots: &roots, git: Some(sm), run: &Canned }, &Minion { id, grains: &grains, saltenv: None, pillarenv })
}

#[test]
fn git_pillar_envs_roots_mountpoints_and_updates() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    init(&a);
    commit(&a, &[("pillar/top.sls", "base:\n  '*':\n    - common\n    - mnt.extra\n"), ("pillar/common.sls", "common: one\n"), ("top.sls", "base:\n  '*':\n    - never\n")]);
    git(&a, &["checkout", "-q", "-b", "dev"]);
    commit(&a, &[("pillar/top.sls", "dev:\n  '*':\n    - devonly\n"), ("pillar/devonly.sls", "dev: yes\n")]);
    git(&a, &["checkout", "-q", "master"]);
    init(&b);
    commit(&b, &[("extra.sls", "extra: mounted\n"), ("top.sls", "base:\n  '*':\n    - never\n")]);
    let yaml = format!(
        "ext_pillar:\n  - git:\n    - master file://{a}:\n      - root: pillar\n    - dev file://{a}:\n      - root: pillar\n    - __env__ {a}:\n      - name: follows\n      - root: pillar\n    - master {b}:\n      - mountpoint: mnt\n",
        a = a.display(),
        b = b.display()
    );
    let cfg = master_cfg(d.path(), &yaml);
    let ext = ExtPillarConfig::from_raw(&cfg.raw);
    assert!(ext.warnings.is_empty(), "{:?}", ext.warnings);
    assert_eq!(ext.git.remotes.iter().map(|r| r.env.as_str()).collect::<Vec<_>>(), ["base", "dev", "", "base"]);
    let sm = StateMachine::open_in_memory("git-pillar").unwrap();
    let mut at = 0;
    update(&sm, &cfg, &mut at);
    let p = pillar(&cfg, &sm, "web1", None);
    // Every remote compiles its own env (base: the fixed master and __env__ → master;
    // dev), merged in order; the repository's own top.sls is not read (root: pillar);
    // the mounted remote's top is not read, its files are found under its mountpoint
    // through git_pillar_includes.
    assert_eq!(p, json!({"common": "one", "extra": "mounted", "dev": "yes"}));
    // pillarenv dev: only the dev remotes (fixed dev, and __env__ following it).
    let p = pillar(&cfg, &sm, "web1", Some("dev"));
    assert_eq!(p, json!({"dev": "yes"}));
    // A second commit is compiled only once an update applied it.
    commit(&a, &[("pillar/common.sls", "common: two\n")]);
    assert_eq!(pillar(&cfg, &sm, "web1", None)["common"], "one");
    update(&sm, &cfg, &mut at);
    assert_eq!(pillar(&cfg, &sm, "web1", None)["common"], "two");
    // A top file that is not YAML is an error under `_errors`, the rest compiled.
    commit(&a, &[("pillar/top.sls", "base: [unclosed\n")]);
    update(&sm, &cfg, &mut at);
    let p = pillar(&cfg, &sm, "web1", None);
    let errs = p["_errors"].as_array().unwrap();
    assert!(errs.iter().any(|e| e.as_str().unwrap().contains("YAML")), "{p}");
}

#[test]
fn hostile_git_pillar_config_is_refused_and_named() {
    let raw: serde_yaml::Mapping = serde_yaml::from_str(
        "ext_pillar:\n  - git:\n    - master /srv/a:\n      - root: ../../etc\n    - master /srv/b:\n      - mountpoint: x/../../y\n    - master /srv/c:\n      - privkey: /k\n    - one two three\n    - master /srv/d:\n      - env: 'a/b'\n",
    )
    .unwrap();
    let ext = ExtPillarConfig::from_raw(&raw);
    let w = ext.warnings.join("\n");
    assert_eq!(ext.git.remotes.len(), 1, "only /srv/c is kept: {w}");
    for named in ["root \"../../etc\" leaves", "mountpoint \"x/../../y\" leaves", "privkey is not implemented", "\"one two three\"", "\"a/b\" cannot be a pillar env"] {
        assert!(w.contains(named), "{named} not in {w}");
    }
}

#[test]
fn commands_merge_before_or_after_pillar_roots() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path().join("pillar");
    std::fs::create_dir_all(&r).unwrap();
    std::fs::write(r.join("top.sls"), "base:\n  '*':\n    - roots\n").unwrap();
    std::fs::write(r.join("roots.sls"), "motd: roots\nshared: {roots: 1}\nsaw: {{ salt['pillar.get']('from_cmd', 'nothing') }}\n").unwrap();
    let sm = StateMachine::open_in_memory("cmd").unwrap();
    let run = |extra: &str| {
        let mut cfg = master_cfg(d.path(), &format!("ext_pillar:\n  - cmd_yaml: yaml\n  - cmd_json: json\n  - cmd_yaml: fails\n{extra}"));
        cfg.pillar_roots = [("base".to_string(), vec![r.clone()])].into_iter().collect();
        pillar(&cfg, &sm, "m1", None)
    };
    let after = run("");
    assert_eq!(after["motd"], "cmd", "the commands merge last: {after}");
    assert_eq!(after["saw"], "nothing");
    assert_eq!(after["shared"], json!({"roots": 1, "cmd": 1, "json": true}));
    assert_eq!(after["from_cmd"], "m1");
    assert_eq!(after["j"], json!([1, 2]));
    assert!(after.get("_errors").is_none(), "a failed command is logged, as Salt does: {after}");
    let first = run("ext_pillar_first: true\n");
    assert_eq!(first["motd"], "roots", "pillar_roots merges last: {first}");
    assert_eq!(first["saw"], "m1", "SLS files see the external pillar");
    assert_eq!(first["shared"], json!({"roots": 1, "cmd": 1, "json": true}));
    assert!(first.get("_errors").is_none(), "{first}");
    let over = run("pillar_source_merging_strategy: overwrite\n");
    assert_eq!(over["shared"], json!({"json": true}), "overwrite: top-level keys replaced");
}
