//! Tests of the option table: complete against the reference's options, true against
//! the code that reads them, and the same as the documentation.

use super::*;

fn yaml(s: &str) -> serde_yaml::Value {
    serde_yaml::from_str(s).unwrap()
}

fn status(key: &str, value: &str) -> Status {
    classify(key, &yaml(value), &Ctx { user: Some("salt".into()), log_level: Some("info".into()), minion_data_cache: true })
}

fn all_table_keys() -> Vec<&'static str> {
    let mut v: Vec<&str> = HONOURED.to_vec();
    v.extend(NO_EFFECT.iter().flat_map(|(_, k)| k.iter().copied()));
    v.extend(NOT_IMPLEMENTED.iter().flat_map(|(_, k)| k.iter().copied()));
    v
}

/// Each option a Salt 3008.5 master knows is in Halite's table: a key the reference adds
/// (regenerate `master_opts.json` with `scripts/salt-master-opts.py`) fails here until
/// it is classified.
#[test]
fn every_salt_option_is_classified() {
    let salt = salt_options();
    assert!(salt.version.starts_with("3008.5") && salt.defaults.len() > 380, "{} options from {}", salt.defaults.len(), salt.version);
    let missing: Vec<&String> = salt.defaults.keys().filter(|k| rule(k).is_none()).collect();
    assert!(missing.is_empty(), "options of Salt's master not in config_keys/table.rs: {missing:?}");
}

/// No option is in two lists, every checked option is a not-implemented one, and every
/// option of the table outside Salt's defaults is Halite's own or one Salt reads
/// without a default.
#[test]
fn the_table_is_consistent() {
    let keys = all_table_keys();
    let mut seen = BTreeSet::new();
    let twice: Vec<&&str> = keys.iter().filter(|k| !seen.insert(**k)).collect();
    assert!(twice.is_empty(), "in the table twice: {twice:?}");
    for (k, _, _) in CHECKS {
        assert!(matches!(rule(k), Some(Rule::NotImplemented(_))), "{k} has a value check but is not a not-implemented option");
    }
    let outside: Vec<&&str> = keys.iter().filter(|k| !salt_options().defaults.contains_key(**k)).collect();
    let expected = [
        "auth.pam.service", "autoreject_file", "autosign_file", "autosign_grains_dir", "id", "include", "mine_get", "mmap_cache_max_segment_bytes",
        "mmap_key_id_size", "mmap_key_max_segment_bytes", "mmap_key_size", "mmap_key_slot_size", "output_indent", "peer_run",
        "request_channel_timeout", "rest_cherrypy", "ext_pillar_first",
    ];
    let unexpected: Vec<&&str> = outside.iter().filter(|k| !k.starts_with("halite_") && !expected.contains(**k)).copied().collect();
    assert!(unexpected.is_empty(), "options in the table that Salt 3008.5 has no default for: {unexpected:?}");
}

/// An option called honoured is read somewhere in Halite's code (by its name, in quotes)
/// outside this table, and each option the config readers take is called honoured.
#[test]
fn honoured_options_are_read_by_the_code() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let mut text = String::new();
    let mut stack = vec![root.join("master/src"), root.join("tools/src"), root.join("api/src")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() && name != "config_keys" {
                stack.push(p);
            } else if name.ends_with(".rs") && !name.contains("tests") {
                text.push_str(&std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let unread: Vec<&&str> = HONOURED.iter().filter(|k| !text.contains(&format!("\"{k}\""))).collect();
    assert!(unread.is_empty(), "called honoured but never read by name: {unread:?}");
    // The other way: an option the config readers take (`r.uint("...")`,
    // `raw.get("...")`) is honoured, or the table says why not; `log_level_logfile` is
    // parsed but the log file is written at `log_level`; `fileserver_backend` is acted on
    // at the values its check accepts (roots and gitfs).
    let read = regex::Regex::new(r#"\b(?:raw\.get|raw|r\.(?:string|opt_string|uint|limit|port|boolean|string_list|string_map|roots))\(\s*"([A-Za-z0-9_.]+)""#).unwrap();
    let unlisted: BTreeSet<&str> = read.captures_iter(&text).map(|c| c.get(1).unwrap().as_str()).filter(|k| !HONOURED.contains(k) && !["log_level_logfile", "fileserver_backend", "ext_pillar", "pillar_source_merging_strategy"].contains(k)).collect();
    assert!(unlisted.is_empty(), "read by the code but not honoured in config_keys/table.rs: {unlisted:?}");
}

/// Values: Salt's default (in its spellings) is fine, another value of a not-implemented
/// option is not; honoured and no-effect options are so at any value.
#[test]
fn values_decide_for_not_implemented_options() {
    assert_eq!(status("interface", "10.0.0.1"), Status::Honoured);
    assert_eq!(status("master_sign_pubkey", "True"), Status::Honoured);
    assert_eq!(status("file_recv", "True"), Status::Honoured);
    assert!(matches!(status("worker_threads", "64"), Status::NoEffect(why) if why.contains("one process")));
    for (k, v) in [("fileserver_backend", "[roots]"), ("fileserver_backend", "roots"), ("fileserver_backend", "[-gitfs]"), ("fileserver_backend", "[roots, gitfs]"), ("fileserver_backend", "[git]"), ("fileserver_backend", "[-roots]"), ("gitfs_remotes", "[file:///srv/states.git, {/srv/other: [{root: salt}]}]"), ("transport", "zeromq"), ("gitfs_remotes", "[]"), ("ext_pillar", "null"), ("ext_pillar", "[{cmd_yaml: cat /etc/x}, {cmd_json: 'echo {}'}, {git: [master file:///srv/p.git]}]"), ("pillar_source_merging_strategy", "smart"), ("pillar_source_merging_strategy", "none"), ("event_return", "''"), ("require_minion_sign_messages", "false"), ("require_minion_sign_messages", "'no'"), ("keysize", "'2048'"), ("user", "salt"), ("allow_minion_key_revoke", "False"), ("log_level_logfile", "info")] {
        assert!(matches!(status(k, v), Status::Default(_)), "{k}: {v} -> {:?}", status(k, v));
    }
    for (k, v, why) in [
        ("fileserver_backend", "[roots, hgfs]", "hgfs"),
        ("fileserver_backend", "[]", "no backend"),
        ("fileserver_backend", "[-roots, -gitfs]", "removes roots and gitfs"),
        ("gitfs_remotes", "[{file:///srv/s.git: [{privkey: /k}]}]", "privkey"),
        ("transport", "tcp", "\"tcp\""),
        ("gitfs_remotes", "[https://example.com/x.git]", "example.com"),
        ("ext_pillar", "[{mongo: {collection: x}}]", "mongo"),
        ("ext_pillar", "[{git: [master https://example.com/p.git]}]", "example.com"),
        ("pillar_source_merging_strategy", "aggregate", "aggregate"),
        ("require_minion_sign_messages", "True", "true"),
        ("user", "root", "runs as salt"),
        ("allow_minion_key_revoke", "True", "behaves as False"),
        ("minion_data_cache_events", "True", "behaves as False"),
        ("log_level_logfile", "debug", "log_level"),
        ("ext_pillar", "{[a]: b}", "JSON cannot hold"),
        ("preserve_minion_cache", "False", "grains and mine stay"),
    ] {
        match status(k, v) {
            Status::NotImplemented { why: w, .. } => assert!(w.contains(why), "{k}: {v} -> {w}"),
            s => panic!("{k}: {v} -> {s:?}"),
        }
    }
    let off = Ctx { minion_data_cache: false, ..Ctx::default() };
    assert!(matches!(classify("enforce_mine_cache", &yaml("False"), &off), Status::NotImplemented { .. }));
    assert!(matches!(classify("enforce_mine_cache", &yaml("True"), &off), Status::Default(_)));
    assert!(matches!(status("enforce_mine_cache", "False"), Status::Default(_)));
    assert_eq!(status("fileserver_backends", "[roots]"), Status::Unknown(format!("{TYPO} (did you mean fileserver_backend?)")));
    assert_eq!(status("halite_data_dri", "/x"), Status::Unknown(format!("{TYPO} (did you mean halite_data_dir?)")));
    assert_eq!(status("quite_unlike_any_option", "1"), Status::Unknown(TYPO.into()));
    assert_eq!(status("startup_states", "highstate"), Status::Unknown(NOT_MASTER.into()));
}

/// The loader collects the options of `master`, `master.d/*.conf` and `include`d files,
/// each with the file it came from; the report lists them all and only them.
#[test]
fn report_collects_options_from_every_file() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("master"), "include: extra/*.conf\nworker_threads: 5\nenable_ssh_minions: True\n").unwrap();
    std::fs::create_dir(d.path().join("master.d")).unwrap();
    std::fs::write(d.path().join("master.d/git.conf"), "gitfs_remotes: [https://example.com/s.git]\nfileserver_backend: [roots, gitfs]\n").unwrap();
    std::fs::create_dir(d.path().join("extra")).unwrap();
    std::fs::write(d.path().join("extra/more.conf"), "transport: zeromq\nworker_thread: 8\n").unwrap();
    let cfg = MasterConfig::load(d.path()).unwrap();
    let r = Report::of(&cfg, Some("root".into()));
    let by_key: BTreeMap<&str, &Entry> = r.entries.iter().map(|e| (e.key.as_str(), e)).collect();
    assert_eq!(by_key.keys().copied().collect::<Vec<_>>(), ["enable_ssh_minions", "fileserver_backend", "gitfs_remotes", "include", "transport", "worker_thread", "worker_threads"]);
    assert_eq!(by_key["gitfs_remotes"].file.as_deref(), Some(d.path().join("master.d/git.conf").as_path()));
    assert_eq!(by_key["worker_thread"].file.as_deref(), Some(d.path().join("extra/more.conf").as_path()));
    let bad: Vec<&str> = r.not_implemented().map(|e| e.key.as_str()).collect();
    assert_eq!(bad, ["enable_ssh_minions", "gitfs_remotes"]);
    assert_eq!(r.unknown().map(|e| e.key.as_str()).collect::<Vec<_>>(), ["worker_thread"]);
    let text = r.text();
    assert!(text.contains("    worker_threads:\n        no effect: ") && text.contains("2 not implemented, 1 unknown"), "{text}");
    assert_eq!(r.json()["options"]["transport"]["status"], "default");
}

/// docs/operations.md's "Coming from Salt" lists are this table's (regenerate with
/// `HALITE_BLESS=1`).
#[test]
fn doc_matches_the_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let want = doc::section();
    let (Some(a), Some(b)) = (text.find(doc::BEGIN), text.find(doc::END)) else { panic!("docs/operations.md has no {} ... {} section", doc::BEGIN, doc::END) };
    let have = &text[a..b + doc::END.len()];
    if have != want {
        if std::env::var_os("HALITE_BLESS").is_some() {
            std::fs::write(&path, format!("{}{}{}", &text[..a], want, &text[b + doc::END.len()..])).unwrap();
        } else {
            panic!("docs/operations.md's Coming from Salt section differs from the table; regenerate it with HALITE_BLESS=1 cargo test -p halite-master --lib config_keys::tests::doc_matches_the_table");
        }
    }
    for (_, keys) in NOT_IMPLEMENTED {
        for k in *keys {
            assert!(want.contains(&format!("`{k}`")), "{k}");
        }
    }
}
