//! An existing Salt config with options Halite does not implement: `salt-master
//! --check-config` reports each option (and exits 1 for it, 0 for a plain config)
//! without opening the log or binding a port, and the master started on that config
//! names each unimplemented or unknown option in a warning, and not the ones it accepts
//! by design (`worker_threads`).

use crate::support::*;

/// Options a Salt master config may carry that Halite does not implement at these values.
const UNIMPLEMENTED: &[&str] = &["gitfs_remotes", "enable_ssh_minions", "require_minion_sign_messages", "ext_pillar"];

/// A config with them: in `master` and in `master.d/extra.conf`, with a typo and
/// `worker_threads`.
fn salt_config(ip: &str) -> Env {
    let env = Env::master(ip, "localfs_key", "fileserver_backend:\n  - roots\n  - gitfs\ngitfs_remotes:\n  - https://git.example.com/states.git\nenable_ssh_minions: True\nworker_threads: 5\n");
    let d = env.root.join("conf/master.d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("extra.conf"), "require_minion_sign_messages: True\next_pillar:\n  - mongo: {collection: x}\nkeep_jbos_seconds: 60\n").unwrap();
    env
}

fn check_config(env: &Env, args: &[&str]) -> std::process::Output {
    let mut full = vec!["--check-config"];
    full.extend(args);
    env.run(&sibling_bin("salt-master").display().to_string(), &full)
}

#[test]
fn unimplemented_options_are_named() {
    let ip = one_ip();
    let env = salt_config(&ip);

    let out = check_config(&env, &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for key in UNIMPLEMENTED {
        assert!(text.contains(&format!("    {key}:\n        not implemented: ")), "{key} not reported as not implemented:\n{text}");
    }
    assert!(text.contains("    worker_threads:\n        no effect: "), "{text}");
    assert!(text.contains("    keep_jbos_seconds:\n        unknown: "), "{text}");
    assert!(text.contains(&format!("{}:\n", env.root.join("conf/master.d/extra.conf").display())), "{text}");
    let json = json(&String::from_utf8_lossy(&check_config(&env, &["--out", "json"]).stdout));
    assert_eq!(json["options"]["gitfs_remotes"]["status"], "not implemented", "{json}");
    assert_eq!(json["options"]["interface"]["status"], "honoured", "{json}");
    // Nothing opened: no data dir, no log file, no socket.
    for p in ["data", "log", "sock"] {
        assert!(!env.root.join(p).exists(), "--check-config made {p}");
    }

    let m = Running::start(env);
    let log = m.env.master_log();
    for key in UNIMPLEMENTED {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(&format!("config option not implemented by Halite: {key} "))).collect();
        assert_eq!(lines.len(), 1, "{key} warned {} times:\n{log}", lines.len());
        assert!(lines[0].contains("WARN"), "{}", lines[0]);
    }
    assert_eq!(log.lines().filter(|l| l.contains("unknown config option: keep_jbos_seconds ")).count(), 1, "{log}");
    assert!(!log.lines().any(|l| l.contains("WARN") && l.contains("worker_threads")), "worker_threads warned:\n{log}");
}

#[test]
fn a_plain_config_checks_clean() {
    let ip = one_ip();
    let env = Env::master(&ip, "localfs_key", "worker_threads: 8\nfileserver_backend: [roots]\nenable_ssh_minions: False\ntransport: zeromq\n");
    let out = check_config(&env, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("0 not implemented, 0 unknown"), "{text}");
    assert!(text.contains("    fileserver_backend:\n        default: "), "{text}");
}
