//! Pillar compilation from pillar_roots, git_pillar and commands.

use super::*;

fn compile(cfg: &MasterConfig, roots: &dyn RootsSource, id: &str, grains: &J) -> J {
    super::compile(cfg, &Sources { roots, git: None, run: &ext::NoRun }, &Minion { id, grains, saltenv: None, pillarenv: None })
}

#[test]
fn top_matching_jinja_includes_and_merge() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path().join("pillar");
    std::fs::create_dir_all(r.join("users")).unwrap();
    std::fs::write(
        r.join("top.sls"),
        "base:\n  '*':\n    - common\n  'web*':\n    - web\n  'os:Debian':\n    - match: grain\n    - debian\n  'G@os:RedHat':\n    - match: compound\n    - redhat\n  'db01,web01':\n    - match: list\n    - users\n",
    )
    .unwrap();
    std::fs::write(r.join("common.sls"), "motd: hello {{ grains['id'] }}\nsettings:\n  a: 1\n  nested: {x: 1}\n").unwrap();
    std::fs::write(r.join("web.sls"), "include:\n  - .extra\nsettings:\n  b: {{ salt['grains.get']('num_cpus', 1) * 2 }}\n  nested: {y: 2}\nrole: {{ salt['pillar.get']('motd') }}\n").unwrap();
    std::fs::write(r.join("extra.sls"), "extra: true\n").unwrap();
    std::fs::write(r.join("debian.sls"), "pkg: apt\n").unwrap();
    std::fs::write(r.join("redhat.sls"), "pkg: yum\n").unwrap();
    std::fs::write(r.join("users/init.sls"), "users: [alice]\n{% if sls == 'users' %}which: init{% endif %}\n").unwrap();
    let mut cfg = MasterConfig::under(d.path());
    cfg.pillar_roots = [("base".to_string(), vec![r.clone()])].into_iter().collect();
    let roots = crate::view::fs::FsRoots::new(&cfg);
    let grains = serde_json::json!({"id": "web01", "os": "Debian", "num_cpus": 4});
    let p = compile(&cfg, &roots, "web01", &grains);
    assert_eq!(p["motd"], "hello web01");
    assert_eq!(p["settings"]["a"], 1);
    assert_eq!(p["settings"]["b"], 8);
    assert_eq!(p["settings"]["nested"], serde_json::json!({"x": 1, "y": 2}), "maps merge recursively");
    assert_eq!(p["role"], "hello web01", "pillar.get sees what was compiled before");
    assert_eq!(p["extra"], true);
    assert_eq!(p["pkg"], "apt");
    assert_eq!(p["users"], serde_json::json!(["alice"]));
    assert_eq!(p["which"], "init");
    assert!(p.get("_errors").is_none(), "{p}");
    let db = compile(&cfg, &roots, "db02", &serde_json::json!({"os": "RedHat"}));
    assert_eq!(db["pkg"], "yum");
    assert!(db.get("settings").unwrap().get("b").is_none());
    // Errors are collected, not fatal; escapes are refused.
    std::fs::write(r.join("top.sls"), "base:\n  '*':\n    - broken\n    - missing\n    - ..etc\n    - common\n").unwrap();
    std::fs::write(r.join("broken.sls"), "a: {{ unclosed\n").unwrap();
    let p = compile(&cfg, &roots, "x", &serde_json::json!({}));
    assert_eq!(p["motd"], "hello");
    assert_eq!(p["_errors"].as_array().unwrap().len(), 3, "{p}");
}
