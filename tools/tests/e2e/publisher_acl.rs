//! `publisher_acl` and `publisher_acl_blacklist` for `salt` run by system users other
//! than root on the master's host, against a real salt-minion 3008.5: the master learns
//! who is calling from the admin socket's peer credentials. Needs root and `useradd` (to
//! create the users and run `salt` as them); without them it prints a `SKIPPED` line
//! naming why, and fails instead under `CI=true` (CI runs as root).

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

/// System users made for one test, deleted when it ends.
struct Users(Vec<String>);

impl Users {
    fn add(names: &[String]) -> Users {
        let mut u = Users(Vec::new());
        for n in names {
            run_ok(Command::new("useradd").args(["--no-create-home", "--shell", "/usr/sbin/nologin", n]), Duration::from_secs(60));
            u.0.push(n.clone());
        }
        u
    }

    fn uid_gid(name: &str) -> (u32, u32) {
        let id = |flag: &str| run_ok(Command::new("id").args([flag, name]), Duration::from_secs(30)).trim().parse::<u32>().expect("an id");
        (id("-u"), id("-g"))
    }
}

impl Drop for Users {
    fn drop(&mut self) {
        for n in &self.0 {
            // Not a second panic while a failing test unwinds: a stuck userdel is killed.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(Command::new("userdel").arg(n), Duration::from_secs(60))));
        }
    }
}

/// Why this host cannot run the test (not root, no `useradd`), if it cannot.
fn cannot_run() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("creating system users and running salt as them needs root".into());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if !std::env::split_paths(&path).any(|d| d.join("useradd").is_file() && d.join("userdel").is_file()) {
        return Some("useradd and userdel are not on the PATH".into());
    }
    None
}

#[test]
fn system_users_publish_what_publisher_acl_allows_and_the_blacklist_refuses() {
    if let Some(why) = cannot_run() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "publisher_acl cannot run under CI: {why}");
        eprintln!("SKIPPED publisher_acl::system_users_publish_what_publisher_acl_allows_and_the_blacklist_refuses: {why}");
        return;
    }
    // Names of this process's own (parallel test runs must not share them).
    let tag = std::process::id() % 100_000;
    let (ok, bad, none) = (format!("hacl-ok-{tag}"), format!("hacl-bad-{tag}"), format!("hacl-none-{tag}"));
    let _users = Users::add(&[ok.clone(), bad.clone(), none.clone()]);

    let ip = one_ip();
    let env = Env::master(&ip, "localfs_key", "auto_accept: True\n");
    env.append_conf(&format!("publisher_acl:\n  {ok}:\n    - 'test.*'\n  'hacl-bad-*':\n    - 'test.*'\npublisher_acl_blacklist:\n  users:\n    - 'hacl-bad-.*'\n  modules:\n    - 'sys.doc'\n"));
    // The users must reach the config and the salt binary: the test's root readable by
    // all (the binary linked there, out of root's home).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&env.root, std::fs::Permissions::from_mode(0o755)).expect("chmod root");
    let reachable = |bin: &str, name: &str| {
        let to = env.root.join(name);
        if std::fs::hard_link(bin, &to).is_err() {
            std::fs::copy(bin, &to).expect("copy the binary");
        }
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        to
    };
    let (salt, salt_key) = (reachable(SALT, "salt"), reachable(SALT_KEY, "salt-key"));
    let m = Running::start(env);
    let env = &m.env;
    let _m1 = start_minion(&env.root, "m1", &format!("master: {}\nmaster_port: {}\n", env.ip, env.ret));
    wait_ping(env, "m1", 90);

    // The socket is open to other users, in a directory they may cross but not list.
    let mode = |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!((mode(&env.root.join("sock")), mode(&env.root.join("sock/halite-admin.sock"))), (0o711, 0o666));

    let salt_as = |user: &str, args: &[&str]| {
        let (uid, gid) = Users::uid_gid(user);
        run(Command::new(&salt).arg("-c").arg(env.conf()).args(args).args(["--out", "json", "-t", "30"]).uid(uid).gid(gid).env("HOME", "/"), Duration::from_secs(120))
    };
    let text = |o: &std::process::Output| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));

    // Allowed: test.* as its own name; the job records that user.
    let o = salt_as(&ok, &["m1", "test.ping"]);
    assert!(o.status.success() && json(&String::from_utf8_lossy(&o.stdout))["m1"] == true, "{}", text(&o));
    let jobs = env.runner(&["jobs.list_jobs"]);
    let mine: Vec<_> = jobs.as_object().expect("jobs").values().filter(|j| j["Function"] == "test.ping").collect();
    assert!(mine.iter().any(|j| j["User"] == ok.as_str()), "the job records {ok}: {jobs}");
    // Refused: a function its rules do not allow; a blacklisted user (its rules would
    // allow it); a user with no rules; a blacklisted function even for root.
    for (user, fun) in [(ok.as_str(), "cmd.run"), (bad.as_str(), "test.ping"), (none.as_str(), "test.ping")] {
        let o = salt_as(user, &["m1", fun, "id"]);
        assert!(!o.status.success() && text(&o).contains("Authorization error occurred."), "{user} {fun}: {}", text(&o));
    }
    let o = env.run(SALT, &["m1", "sys.doc", "--out", "json"]);
    assert!(!o.status.success() && text(&o).contains("Authorization error occurred."), "root sys.doc: {}", text(&o));
    // Root is not bound by publisher_acl.
    let o = env.run(SALT, &["m1", "cmd.run", "echo root", "--out", "json"]);
    assert!(o.status.success(), "{}", text(&o));
    // Other admin verbs stay root's: salt-key as an allowed user is refused.
    let (uid, gid) = Users::uid_gid(&ok);
    let key = run(Command::new(&salt_key).arg("-c").arg(env.conf()).arg("-L").uid(uid).gid(gid), TOOL_TIMEOUT);
    assert!(!key.status.success(), "salt-key as {ok}: {}", text(&key));
}
