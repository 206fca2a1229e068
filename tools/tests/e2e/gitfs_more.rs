//! gitfs beyond serving minions, with real salt-minion 3008.5 processes: a remote read on
//! its own `update_interval` while another waits for the global one (and
//! `fileserver.update remotes=...` reading only the one it names), a remote whose
//! objects are damaged keeping the commit it served, orchestration and reactor
//! `salt://` files read from gitfs as minions' files are, and `gitfs_fallback`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::gitfs::Repo;
use crate::support::*;

fn files(env: &Env) -> Value {
    env.runner(&["fileserver.file_list", "backend=gitfs"])
}

fn lists(env: &Env, name: &str) -> bool {
    files(env).as_array().is_some_and(|a| a.iter().any(|f| f == name))
}

#[test]
fn a_remote_is_read_on_its_own_update_interval_and_by_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fast = Repo::init(&tmp.path().join("fast"), &[("fast1.txt", "f1\n")]);
    let slow = Repo::init(&tmp.path().join("slow"), &[("slow1.txt", "s1\n")]);
    let conf = format!(
        "log_level: info\nfileserver_backend: [roots, gitfs]\ngitfs_update_interval: 3600\ngitfs_remotes:\n  - {}:\n    - update_interval: 1\n  - {}\n",
        fast.url(),
        slow.url()
    );
    let s = Served::start(Accept::Auto, &conf, "");
    wait_for("both remotes read at start", 60, || lists(&s.env, "fast1.txt") && lists(&s.env, "slow1.txt"));
    fast.commit(&[("fast2.txt", "f2\n")], "fast two");
    slow.commit(&[("slow2.txt", "s2\n")], "slow two");
    // The remote with update_interval 1 is read again by the timer; the other waits for
    // gitfs_update_interval (an hour).
    wait_for("the fast remote's new commit, read by the timer", 30, || lists(&s.env, "fast2.txt"));
    assert!(!lists(&s.env, "slow2.txt"), "the slow remote is not read before its interval: {}", files(&s.env));
    // `fileserver.update remotes=...` reads only the remote it names.
    fast.commit(&[("fast3.txt", "f3\n")], "fast three");
    assert_eq!(s.env.runner(&["fileserver.update", "backend=gitfs", &format!("remotes={}", slow.url())]), json!(true));
    assert!(lists(&s.env, "slow2.txt"), "{}", files(&s.env));
}

/// A new commit whose objects are damaged (its blob cut short, as a fetch that stopped
/// half way leaves it): the update still answers True, the master logs the failure and
/// counts it, and minions keep getting the commit served before.
#[test]
fn a_remote_with_damaged_objects_keeps_the_commit_it_served() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = Repo::init(&tmp.path().join("r"), &[("motd.txt", "good\n")]);
    let ip = one_ip();
    let health = port_free_on(&[&ip]);
    let conf = format!("log_level: info\nhalite_health_port: {health}\nfileserver_backend: [gitfs]\ngitfs_update_interval: 3600\ngitfs_remotes:\n  - {}\n", repo.url());
    let s = Served::start_on(&ip, Accept::Auto, &conf, "");
    wait_for("the remote read at start", 60, || lists(&s.env, "motd.txt"));
    let second = repo.commit(&[("motd.txt", &"damaged on its way in\n".repeat(50))], "second");
    let blob = repo.git(&["rev-parse", "HEAD:motd.txt"]).trim().to_string();
    let obj = repo.dir.join(".git/objects").join(&blob[..2]).join(&blob[2..]);
    std::fs::set_permissions(&obj, std::os::unix::fs::PermissionsExt::from_mode(0o644)).expect("chmod");
    let bytes = std::fs::read(&obj).expect("the loose object");
    std::fs::write(&obj, &bytes[..bytes.len() / 2]).expect("cut it short");
    assert_eq!(s.env.runner(&["fileserver.update"]), json!(true));
    let dest = s.env.root.join("got-motd");
    let o = s.env.salt(&[MINION, "cp.get_file", "salt://motd.txt", &dest.display().to_string(), "--out", "json"], 60);
    assert!(o.status.success());
    assert_eq!(std::fs::read_to_string(&dest).expect("the file served"), "good\n", "the commit served before stays served");
    let log = s.env.master_log();
    assert!(log.contains("cannot read the remote"), "the failure is logged");
    assert!(!log.contains(&second), "the damaged commit is never named as served");
    let counted = crate::health::metric(&crate::health::metrics_of(&s.env, health), &format!("halite_gitfs_fetch_failures_total{{remote=\"{}\",reason=\"read\"}}", repo.url()));
    assert_eq!(counted, Some(1.0), "the failure is counted");
}

/// `state.orchestrate` of an orchestration SLS that only gitfs holds, and a reactor
/// whose `salt://` SLS only gitfs holds: both read through the file server as minions
/// are served; with `gitfs_fallback`, a minion's file of a saltenv no ref names comes
/// from the fallback ref.
#[test]
fn orchestration_and_reactor_salt_files_are_read_from_gitfs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = Repo::init(
        &tmp.path().join("r"),
        &[
            ("orch/hello.sls", "hello:\n  salt.function:\n    - name: test.echo\n    - tgt: m1\n    - arg: [orchestrated-from-git]\n"),
            ("reactor/echo.sls", "echo:\n  local.test.echo:\n    - tgt: m1\n    - arg: [reacted-from-git]\n"),
        ],
    );
    let conf = format!(
        "log_level: info\nfileserver_backend: [roots, gitfs]\ngitfs_update_interval: 3600\ngitfs_fallback: master\ngitfs_remotes:\n  - {}\nreactor:\n  - 'test/gitfs/*':\n    - salt://reactor/echo.sls\n",
        repo.url()
    );
    let s = Served::start(Accept::Auto, &conf, "");
    wait_for("the remote read at start", 60, || lists(&s.env, "orch/hello.sls"));
    // gitfs_fallback: a saltenv no ref names is served from the fallback ref.
    let dest = s.env.root.join("got-fallback");
    let o = s.env.salt(&[MINION, "cp.get_file", "salt://reactor/echo.sls", &dest.display().to_string(), "saltenv=qa", "--out", "json"], 60);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read_to_string(&dest).expect("served from the fallback").contains("reacted-from-git"));
    let o = s.env.run_for(SALT_RUN, &["state.orchestrate", "orch.hello", "--out", "json"], Duration::from_secs(180));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("orchestrated-from-git"), "orchestration from gitfs: {out}\n{}", String::from_utf8_lossy(&o.stderr));
    let o = s.env.salt(&[MINION, "event.send", "test/gitfs/go"], 60);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let reacted = || {
        s.env.runner(&["jobs.list_jobs"]).as_object().is_some_and(|m| m.values().any(|j| j["Function"] == "test.echo" && j["Arguments"] == json!(["reacted-from-git"])))
    };
    wait_for("the reaction rendered from gitfs to run its job", 60, reacted);
}
