//! Repositories made with the `git` binary (test-only), read with gix, planned as
//! records, applied to a state machine and served: the whole path of an update short of
//! the daemon.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use halite_storage::format::{Record, RootsTree};
use halite_storage::state::StateMachine;

use super::config::GitfsConfig;
use super::serve::GitfsRoots;
use crate::view::RootsSource;

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git").arg("-C").arg(dir).args(["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]).args(args).output().expect("git");
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn commit(dir: &Path, files: &[(&str, &str)], msg: &str) -> String {
    for (p, body) in files {
        let path = dir.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", msg]);
    git(dir, &["rev-parse", "HEAD"])
}

/// A repository: `master` with `salt/top.sls`, `salt/web/init.sls`, `README`; a `dev`
/// branch; an annotated tag `v1`; an executable file; a symlink.
fn repo(dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "master"]);
    commit(dir, &[("salt/top.sls", "base: {}\n"), ("salt/web/init.sls", "web\n"), ("README", "readme\n"), ("salt/run.sh", "#!/bin/sh\n")], "one");
    std::process::Command::new("chmod").arg("+x").arg(dir.join("salt/run.sh")).status().unwrap();
    std::os::unix::fs::symlink("top.sls", dir.join("salt/link.sls")).unwrap();
    let master = commit(dir, &[], "exec and link");
    git(dir, &["tag", "-a", "v1", "-m", "v1"]);
    git(dir, &["checkout", "-q", "-b", "dev"]);
    commit(dir, &[("salt/top.sls", "dev: {}\n")], "dev");
    git(dir, &["checkout", "-q", "master"]);
    master
}

fn cfg(yaml: &str) -> GitfsConfig {
    GitfsConfig::from_raw(&serde_yaml::from_str(yaml).unwrap())
}

/// Applies an update's records as the log would, in order.
fn update(sm: &StateMachine, c: &GitfsConfig, at: &mut u64) -> super::plan::UpdatePlan {
    let fetched = super::fetch::fetch_all(c);
    let applied: Vec<_> = sm.roots_files_of(RootsTree::Gitfs).unwrap().into_iter().map(|(_, e, p, m)| (e, p, m)).collect();
    let plan = super::plan::plan(c, &fetched, &applied);
    let mut records = plan.records.clone();
    records.push(Record::RootsSync(plan.commit.clone()));
    let entries: Vec<(u64, Record)> = records.into_iter().map(|r| { *at += 1; (*at, r) }).collect();
    sm.apply(&entries).unwrap();
    plan
}

fn read(src: &GitfsRoots, env: &str, path: &str) -> Option<String> {
    let f = src.find(RootsTree::File, env, path)?;
    Some(String::from_utf8(src.read_all(RootsTree::File, &f)?).unwrap())
}

#[test]
fn a_repository_read_with_gix_is_served_from_the_applied_state() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("r");
    let head = repo(&dir);
    let c = cfg(&format!("gitfs_root: salt\ngitfs_remotes: [file://{}]", dir.display()));
    let sm = Arc::new(StateMachine::open_in_memory("gitfs-served").unwrap());
    let src = GitfsRoots::new(sm.clone(), c.remotes.iter().map(|r| r.key.clone()).collect());
    let mut at = 0;
    let plan = update(&sm, &c, &mut at);
    assert!(plan.failed.is_empty() && plan.changes());
    assert!(plan.commit.commits.iter().any(|x| x.saltenv == "base" && x.commit == head), "{:?}", plan.commit.commits);
    assert_eq!(src.envs(RootsTree::File).into_iter().collect::<Vec<_>>(), ["base", "dev", "v1"], "branches and the tag");
    assert_eq!(read(&src, "base", "top.sls").as_deref(), Some("base: {}\n"), "below gitfs_root");
    assert_eq!(read(&src, "dev", "top.sls").as_deref(), Some("dev: {}\n"));
    assert_eq!(read(&src, "v1", "web/init.sls").as_deref(), Some("web\n"), "an annotated tag peeled to its commit");
    assert_eq!(read(&src, "base", "README"), None, "outside the root");
    let l = src.list(RootsTree::File, "base");
    assert_eq!(l.files.iter().map(String::as_str).collect::<Vec<_>>(), ["run.sh", "top.sls", "web/init.sls"], "no symlink");
    let run = src.find(RootsTree::File, "base", "run.sh").unwrap();
    assert_eq!(src.stat(RootsTree::File, &run).unwrap()[0], 0o100755);

    // Nothing changed: nothing to propose.
    assert!(!update(&sm, &c, &mut at).changes());

    // A new commit: only what changed is staged; a removed file goes.
    std::fs::remove_file(dir.join("salt/web/init.sls")).unwrap();
    commit(&dir, &[("salt/top.sls", "base: {'*': [web]}\n")], "two");
    let plan = update(&sm, &c, &mut at);
    assert_eq!((plan.written, plan.removed), (1, 1));
    assert_eq!(read(&src, "base", "top.sls").as_deref(), Some("base: {'*': [web]}\n"));
    assert_eq!(read(&src, "base", "web/init.sls"), None);
    assert_eq!(read(&src, "v1", "web/init.sls").as_deref(), Some("web\n"), "the tag still names the first commit");

    // The remote disappears: its files stay, and the failure is counted.
    std::fs::rename(&dir, d.path().join("gone")).unwrap();
    let before = super::FETCH_FAILURES.get_or_create(&super::FailureLabels { remote: c.remotes[0].id.clone(), reason: "open".into() }).get();
    let _ = super::fetch(&c);
    let after = super::FETCH_FAILURES.get_or_create(&super::FailureLabels { remote: c.remotes[0].id.clone(), reason: "open".into() }).get();
    assert_eq!(after, before + 1);
    let plan = update(&sm, &c, &mut at);
    assert_eq!(plan.failed, [c.remotes[0].id.clone()]);
    assert!(!plan.changes());
    assert_eq!(read(&src, "base", "top.sls").as_deref(), Some("base: {'*': [web]}\n"));
}

#[test]
fn remotes_in_order_mountpoints_and_a_removed_remote() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    for (dir, body) in [(&a, "from a\n"), (&b, "from b\n")] {
        std::fs::create_dir_all(dir).unwrap();
        git(dir, &["init", "-q", "-b", "master"]);
        commit(dir, &[("same.txt", body), (&format!("only-{}.txt", dir.file_name().unwrap().to_str().unwrap()), body)], "one");
    }
    let both = cfg(&format!("gitfs_remotes: [file://{}, {{file://{}: [{{mountpoint: salt://mnt}}]}}, file://{}]", a.display(), b.display(), b.display()));
    assert_eq!(both.remotes.len(), 2, "the same URL twice without names: {:?}", both.warnings);
    let both = cfg(&format!("gitfs_remotes: [{}, {{{}: [{{name: b2}}]}}, {{file://{}: [{{mountpoint: salt://mnt}}]}}]", b.display(), a.display(), a.display()));
    let sm = Arc::new(StateMachine::open_in_memory("gitfs-order").unwrap());
    let src = GitfsRoots::new(sm.clone(), both.remotes.iter().map(|r| r.key.clone()).collect());
    let mut at = 0;
    update(&sm, &both, &mut at);
    assert_eq!(read(&src, "base", "same.txt").as_deref(), Some("from b\n"), "the first remote listed wins");
    assert_eq!(read(&src, "base", "mnt/same.txt").as_deref(), Some("from a\n"), "under its mountpoint");
    assert_eq!(read(&src, "base", "only-a.txt").as_deref(), Some("from a\n"));
    // Remote b2 is taken out of the config: its files go.
    let one = cfg(&format!("gitfs_remotes: [{}]", b.display()));
    let plan = update(&sm, &one, &mut at);
    assert_eq!(plan.removed, 4);
    let src = GitfsRoots::new(sm.clone(), one.remotes.iter().map(|r| r.key.clone()).collect());
    assert_eq!(read(&src, "base", "only-a.txt"), None);
}

/// Every byte of a remote is hostile: a file over the bound (its size read from the
/// object's header, before it is inflated) or a tree deeper than the bound fails the
/// whole remote, which keeps the files it was last read with.
#[test]
fn a_remote_over_a_bound_fails_and_keeps_its_last_files() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("r");
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "master"]);
    commit(&dir, &[("top.sls", "base: {}\n")], "one");
    let c = cfg(&format!("gitfs_remotes: [{}]", dir.display()));
    let sm = Arc::new(StateMachine::open_in_memory("gitfs-bounds").unwrap());
    let src = GitfsRoots::new(sm.clone(), c.remotes.iter().map(|r| r.key.clone()).collect());
    let mut at = 0;
    update(&sm, &c, &mut at);

    let big = vec![b'x'; (super::bounds::MAX_FILE_BYTES + 1) as usize];
    std::fs::write(dir.join("big.bin"), &big).unwrap();
    commit(&dir, &[("top.sls", "changed\n")], "big");
    match &super::fetch::fetch_all(&c).remotes[0] {
        Err(super::GitfsError::TooLarge { what, .. }) => assert!(what.contains("file"), "{what}"),
        other => panic!("{other:?}"),
    }
    let plan = update(&sm, &c, &mut at);
    assert_eq!(plan.failed.len(), 1);
    assert_eq!(read(&src, "base", "top.sls").as_deref(), Some("base: {}\n"), "the last files stay");
    assert_eq!(read(&src, "base", "big.bin"), None);

    git(&dir, &["rm", "-q", "big.bin"]);
    let deep: String = (0..=super::bounds::MAX_DEPTH).map(|i| format!("d{i}/")).collect();
    commit(&dir, &[(&format!("{deep}f"), "deep\n")], "deep");
    assert!(matches!(&super::fetch::fetch_all(&c).remotes[0], Err(super::GitfsError::TooLarge { .. })));
}
