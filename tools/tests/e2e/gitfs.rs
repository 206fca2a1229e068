//! The gitfs file server backend with real salt-minion 3008.5 processes: `file://`
//! remotes made by the test (with the `git` binary; the master reads them with
//! gitoxide, in process), served beside `file_roots` in `fileserver_backend` order, a new
//! commit brought by `salt-run fileserver.update`, a remote that disappears, and a
//! three-member cluster where the tree one member reads reaches every member through
//! the log.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::*;

/// A repository the test writes with `git` (test-only: the product never runs it).
pub(crate) struct Repo {
    pub(crate) dir: PathBuf,
}

impl Repo {
    pub(crate) fn git(&self, args: &[&str]) -> String {
        run_ok(Command::new("git").arg("-C").arg(&self.dir).args(["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]).args(args), Duration::from_secs(30))
    }

    /// A repository at `dir` whose `master` holds `files`.
    pub(crate) fn init(dir: &Path, files: &[(&str, &str)]) -> Repo {
        std::fs::create_dir_all(dir).expect("repo dir");
        let r = Repo { dir: dir.to_path_buf() };
        r.git(&["init", "-q", "-b", "master"]);
        r.commit(files, "first");
        r
    }

    /// Writes `files` and commits them on the checked-out branch; returns the commit id.
    pub(crate) fn commit(&self, files: &[(&str, &str)], msg: &str) -> String {
        for (p, body) in files {
            let path = self.dir.join(p);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
            std::fs::write(path, body).expect("file");
        }
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", msg]);
        self.git(&["rev-parse", "HEAD"]).trim().to_string()
    }

    pub(crate) fn url(&self) -> String {
        format!("file://{}", self.dir.display())
    }
}

/// A repository with `master` (the `base` saltenv) and a `dev` branch.
fn two_branches(dir: &Path) -> Repo {
    let r = Repo::init(dir, &[("motd.txt", "base v1\n"), ("shadowed.txt", "from git\n"), ("gitweb.sls", "")]);
    r.git(&["checkout", "-q", "-b", "dev"]);
    r.commit(&[("motd.txt", "dev v1\n")], "dev");
    r.git(&["checkout", "-q", "master"]);
    r
}

fn gitfs_conf(url: &str) -> String {
    // A long interval: what the test sees comes from the update at start and the ones
    // it asks for.
    format!("log_level: info\nfileserver_backend:\n  - roots\n  - gitfs\ngitfs_update_interval: 3600\ngitfs_remotes:\n  - {url}\n")
}

/// `cp.get_file salt://PATH` into a fresh file on the minion's machine; its content.
fn get_file(env: &Env, minion: &str, path: &str, saltenv: &str) -> Option<String> {
    let dest = env.root.join(format!("got-{}-{saltenv}-{}", path.replace('/', "_"), rand_suffix()));
    let o = env.salt(&[minion, "cp.get_file", &format!("salt://{path}"), &dest.display().to_string(), &format!("saltenv={saltenv}"), "--out", "json"], 60);
    assert!(o.status.success(), "cp.get_file: {}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    std::fs::read_to_string(&dest).ok()
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A lone master with `file_roots` and one gitfs remote, and a minion.
fn served_with(repo: &Repo) -> Served {
    let s = Served::start(Accept::Auto, &gitfs_conf(&repo.url()), "");
    wait_for("the gitfs saltenvs after the update at start", 60, || s.env.runner(&["fileserver.envs"]) == json!(["base", "dev"]));
    s
}

/// `master` is `base`, the `dev` branch is `dev`; a new commit on `master` is served
/// once `salt-run fileserver.update` ran; a remote that disappears keeps its last commit
/// served (the update still answers True, as Salt's does, and the master logs why).
#[test]
fn a_branch_is_a_saltenv_and_a_new_commit_is_served_after_fileserver_update() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = two_branches(&tmp.path().join("states.git"));
    let s = served_with(&repo);
    assert_eq!(get_file(&s.env, MINION, "motd.txt", "base").as_deref(), Some("base v1\n"));
    assert_eq!(get_file(&s.env, MINION, "motd.txt", "dev").as_deref(), Some("dev v1\n"));

    let second = repo.commit(&[("motd.txt", "base v2\n"), ("new/added.txt", "added\n")], "second");
    assert_eq!(get_file(&s.env, MINION, "motd.txt", "base").as_deref(), Some("base v1\n"), "nothing changes before an update");
    assert_eq!(s.env.runner(&["fileserver.update"]), json!(true));
    assert_eq!(get_file(&s.env, MINION, "motd.txt", "base").as_deref(), Some("base v2\n"));
    assert_eq!(get_file(&s.env, MINION, "new/added.txt", "base").as_deref(), Some("added\n"));
    assert_eq!(get_file(&s.env, MINION, "motd.txt", "dev").as_deref(), Some("dev v1\n"), "the other branch is unchanged");
    let log = s.env.master_log();
    assert!(log.contains(&second), "the log names the commit served: {second}");

    std::fs::rename(&repo.dir, tmp.path().join("gone")).expect("the remote disappears");
    assert_eq!(s.env.runner(&["fileserver.update", "backend=gitfs"]), json!(true));
    assert_eq!(get_file(&s.env, MINION, "motd.txt", "base").as_deref(), Some("base v2\n"), "the last commit stays served");
    assert_eq!(s.env.runner(&["fileserver.envs"]), json!(["base", "dev"]));
    let log = s.env.master_log();
    assert!(log.contains("cannot read the remote"), "the failed read is logged");
}

/// `fileserver_backend: [roots, gitfs]`: a path both hold is served from `roots` (the
/// first listed), the others from where they are; lists are the union; a `state.apply`
/// of an sls from git manages a file whose source is in `file_roots`.
#[test]
fn roots_then_gitfs_in_order_and_state_apply_over_both() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = Repo::init(&tmp.path().join("states.git"), &[("motd.txt", "from git\n"), ("shadowed.txt", "from git\n")]);
    let target = tmp.path().join("managed.txt");
    repo.commit(&[("gitweb.sls", &format!("{}:\n  file.managed:\n    - source: salt://files/local.txt\n", target.display()))], "an sls");
    let s = Served::start(Accept::Auto, &gitfs_conf(&repo.url()), "");
    let srv = s.env.root.join("srv/salt");
    std::fs::create_dir_all(srv.join("files")).expect("roots");
    std::fs::write(srv.join("shadowed.txt"), "from roots\n").expect("shadowed");
    std::fs::write(srv.join("files/local.txt"), "roots content\n").expect("local");
    wait_for("the gitfs files after the update at start", 60, || s.env.runner(&["fileserver.file_list"]).as_array().is_some_and(|a| a.contains(&json!("gitweb.sls"))));
    assert_eq!(s.env.runner(&["fileserver.file_list"]), json!(["files/local.txt", "gitweb.sls", "motd.txt", "shadowed.txt"]));
    assert_eq!(s.env.runner(&["fileserver.file_list", "backend=gitfs"]), json!(["gitweb.sls", "motd.txt", "shadowed.txt"]));
    assert_eq!(get_file(&s.env, MINION, "shadowed.txt", "base").as_deref(), Some("from roots\n"), "roots is listed first");
    assert_eq!(get_file(&s.env, MINION, "motd.txt", "base").as_deref(), Some("from git\n"));
    let v = s.env.salt_json(&[MINION, "cp.list_master"], 30);
    assert_eq!(v[MINION], json!(["files/local.txt", "gitweb.sls", "motd.txt", "shadowed.txt"]), "{v}");
    let o = s.env.salt(&[MINION, "state.apply", "gitweb", "--out", "json"], 90);
    assert!(o.status.success(), "state.apply: {}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&target).expect("the managed file"), "roots content\n");
}

/// Three members, one remote: the tree is read by one member (the leader, at start) and
/// reaches every member through the log; after a new commit and one `fileserver.update` (asked of a member
/// that need not lead), every member lists the new files at the same state, and a
/// minion signed in to another member gets the new content.
#[test]
fn every_cluster_member_serves_the_commit_one_update_brought() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = two_branches(&tmp.path().join("states.git"));
    let c = crate::cluster::founding(3, "halite-gitfs", &gitfs_conf(&repo.url()));
    for env in &c.envs {
        wait_for("the gitfs saltenvs on every member", 60, || env.runner(&["fileserver.envs"]) == json!(["base", "dev"]));
    }
    // One member (the leader) read the remotes at start; the others applied its records.
    let readers = c.envs.iter().filter(|e| e.master_log().contains("gitfs update read")).count();
    assert_eq!(readers, 1, "the remotes are read by the leader only");
    let third = &c.envs[2];
    let _minion = crate::cluster::real_minion_on_the_third(&c, "real-1");
    wait_ping(third, "real-1", 90);
    assert_eq!(get_file(third, "real-1", "motd.txt", "base").as_deref(), Some("base v1\n"));

    repo.commit(&[("motd.txt", "base v2\n"), ("new/added.txt", "added\n")], "second");
    assert_eq!(c.envs[0].runner(&["fileserver.update"]), json!(true));
    let want = json!(["gitweb.sls", "motd.txt", "new/added.txt", "shadowed.txt"]);
    for env in &c.envs {
        wait_for("the new commit's files on every member", 30, || env.runner(&["fileserver.file_list", "backend=gitfs"]) == want);
    }
    // Members that applied the same index hold the same state.
    wait_for("every member at the same applied index and state", 30, || {
        let d: Vec<_> = c.envs.iter().map(|e| e.runner(&["cluster.digest"])).collect();
        d.iter().all(|x| x == &d[0])
    });
    assert_eq!(get_file(third, "real-1", "motd.txt", "base").as_deref(), Some("base v2\n"));
    assert_eq!(get_file(third, "real-1", "new/added.txt", "base").as_deref(), Some("added\n"));
}
