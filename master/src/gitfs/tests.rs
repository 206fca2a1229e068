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
    let _ = super::fetch(&c, None);
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

/// A remote whose objects are damaged (a new commit's blob cut short, then the commit
/// object itself emptied): the read fails, is counted under `read`, and the commit last
/// served stays served, file for file.
#[test]
fn a_remote_with_damaged_objects_keeps_the_commit_it_served() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("r");
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "master"]);
    commit(&dir, &[("top.sls", "base: {}\n"), ("a.txt", "a1\n")], "one");
    let c = cfg(&format!("gitfs_remotes: [{}]", dir.display()));
    let sm = Arc::new(StateMachine::open_in_memory("gitfs-damaged").unwrap());
    let src = GitfsRoots::new(sm.clone(), c.remotes.iter().map(|r| r.key.clone()).collect());
    let mut at = 0;
    update(&sm, &c, &mut at);
    let served = |sm: &StateMachine| sm.roots_files_of(RootsTree::Gitfs).unwrap();
    let before = served(&sm);
    let counted = || super::FETCH_FAILURES.get_or_create(&super::FailureLabels { remote: c.remotes[0].id.clone(), reason: "read".into() }).get();
    let loose = |id: &str| dir.join(".git/objects").join(&id[..2]).join(&id[2..]);
    let chmod_w = |p: &Path| std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();

    // A new commit whose new blob is cut short (a fetch that stopped half way).
    let second = commit(&dir, &[("a.txt", &"a2, long enough to be compressed into more than a few bytes\n".repeat(20))], "two");
    let blob = git(&dir, &["rev-parse", "HEAD:a.txt"]);
    let obj = loose(&blob);
    chmod_w(&obj);
    let bytes = std::fs::read(&obj).unwrap();
    std::fs::write(&obj, &bytes[..bytes.len() / 2]).unwrap();
    let n = counted();
    assert!(matches!(super::fetch(&c, None).remotes[0], Err(super::GitfsError::Read { .. })));
    assert_eq!(counted(), n + 1, "the failure is counted");
    let plan = update(&sm, &c, &mut at);
    assert_eq!(plan.failed, [c.remotes[0].id.clone()], "the damaged remote fails");
    assert!(!plan.changes(), "nothing is proposed for it");
    assert_eq!(served(&sm), before, "the served files are unchanged");
    assert_eq!(read(&src, "base", "a.txt").as_deref(), Some("a1\n"));
    assert!(plan.commit.commits.iter().all(|x| x.commit != second), "the new commit is not named");

    // The commit object itself emptied: the same.
    let commit_obj = loose(&second);
    chmod_w(&commit_obj);
    std::fs::write(&commit_obj, b"").unwrap();
    assert!(super::fetch(&c, None).remotes[0].is_err());
    let plan = update(&sm, &c, &mut at);
    assert_eq!(plan.failed.len(), 1);
    assert_eq!(served(&sm), before);
}

/// Per-remote `update_interval` (else `gitfs_update_interval`), and an update that reads
/// only the remotes it names (`fileserver.update remotes=...`, the timer's due remotes):
/// the others keep what they serve, and are not failures.
#[test]
fn an_update_of_some_remotes_keeps_the_others() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    for dir in [&a, &b] {
        std::fs::create_dir_all(dir).unwrap();
        git(dir, &["init", "-q", "-b", "master"]);
        commit(dir, &[("one.txt", "1\n")], "one");
    }
    let c = cfg(&format!("gitfs_update_interval: 30\ngitfs_remotes:\n  - {}:\n    - name: fast\n    - update_interval: 2\n  - {}:\n    - mountpoint: b\n", a.display(), b.display()));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(c.remotes.iter().map(|r| r.update_interval).collect::<Vec<_>>(), [2, 30]);
    let sm = Arc::new(StateMachine::open_in_memory("gitfs-some").unwrap());
    let src = GitfsRoots::new(sm.clone(), c.remotes.iter().map(|r| r.key.clone()).collect());
    let mut at = 0;
    update(&sm, &c, &mut at);
    commit(&a, &[("one.txt", "2\n")], "two");
    commit(&b, &[("one.txt", "2\n")], "two");
    let only = ["fast".to_string()];
    let fetched = super::fetch(&c, Some(&only));
    assert!(fetched.remotes[0].is_ok() && matches!(fetched.remotes[1], Err(super::GitfsError::NotRead)));
    let applied: Vec<_> = sm.roots_files_of(RootsTree::Gitfs).unwrap().into_iter().map(|(_, e, p, m)| (e, p, m)).collect();
    let plan = super::plan::plan(&c, &fetched, &applied);
    assert!(plan.failed.is_empty(), "a remote not read is no failure");
    let mut records = plan.records.clone();
    records.push(Record::RootsSync(plan.commit.clone()));
    let entries: Vec<(u64, Record)> = records.into_iter().map(|r| { at += 1; (at, r) }).collect();
    sm.apply(&entries).unwrap();
    assert_eq!(read(&src, "base", "one.txt").as_deref(), Some("2\n"), "the remote named is read");
    assert_eq!(read(&src, "base", "b/one.txt").as_deref(), Some("1\n"), "the other keeps what it served");
    // A glob names remotes too, as Salt's fnmatch of the remote's id.
    assert!(super::fetch(&c, Some(&["fa*".to_string()])).remotes[0].is_ok());
}

/// `gitfs_fallback` (and per-remote `fallback`), as Salt's `get_tree`: a saltenv whose
/// ref the repository does not hold is served from the fallback ref, one whose ref it
/// holds is not (a file missing there is missing); the whitelist, blacklist and
/// `disable_saltenv_mapping` still decide which saltenvs exist; the fallback files stay
/// when the remote fails.
#[test]
fn a_saltenv_without_a_ref_is_served_from_the_fallback() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("r");
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "master"]);
    commit(&dir, &[("top.sls", "from master\n")], "one");
    git(&dir, &["checkout", "-q", "-b", "fb"]);
    commit(&dir, &[("top.sls", "from fb\n"), ("fb.txt", "fb only\n")], "fb");
    git(&dir, &["checkout", "-q", "master"]);
    let c = cfg(&format!("gitfs_fallback: fb\ngitfs_remotes: [{}]", dir.display()));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let sm = Arc::new(StateMachine::open_in_memory("gitfs-fallback").unwrap());
    let src = GitfsRoots::of(sm.clone(), &c);
    let mut at = 0;
    update(&sm, &c, &mut at);
    assert_eq!(src.envs(RootsTree::File).into_iter().collect::<Vec<_>>(), ["base", "fb"], "no saltenv of its own");
    assert_eq!(read(&src, "qa", "top.sls").as_deref(), Some("from fb\n"), "a saltenv with no ref: the fallback");
    assert_eq!(read(&src, "base", "top.sls").as_deref(), Some("from master\n"));
    assert_eq!(read(&src, "base", "fb.txt"), None, "a saltenv the repository holds does not fall back per file");
    assert_eq!(src.list(RootsTree::File, "qa").files.into_iter().collect::<Vec<_>>(), ["fb.txt", "top.sls"]);
    assert_eq!(src.list(RootsTree::File, "base").files.into_iter().collect::<Vec<_>>(), ["top.sls"]);
    // Without the option: nothing for qa.
    let plain = cfg(&format!("gitfs_remotes: [{}]", dir.display()));
    assert_eq!(read(&GitfsRoots::of(sm.clone(), &plain), "qa", "top.sls"), None);
    // The whitelist and disable_saltenv_mapping decide which saltenvs exist.
    let listed = cfg(&format!("gitfs_fallback: fb\ngitfs_saltenv_whitelist: [base, fb]\ngitfs_remotes: [{}]", dir.display()));
    assert_eq!(read(&GitfsRoots::of(sm.clone(), &listed), "qa", "top.sls"), None);
    let unmapped = cfg(&format!("gitfs_fallback: fb\ngitfs_disable_saltenv_mapping: True\ngitfs_remotes: [{}]", dir.display()));
    assert_eq!(read(&GitfsRoots::of(sm.clone(), &unmapped), "qa", "top.sls"), None);
    // The per-remote option, the same tree.
    let own = cfg(&format!("gitfs_remotes:\n  - {}:\n    - fallback: fb\n", dir.display()));
    assert_eq!(own.remotes[0].fallback.as_deref(), Some("fb"));
    assert_eq!(read(&GitfsRoots::of(sm.clone(), &own), "qa", "fb.txt").as_deref(), Some("fb only\n"));
    // The remote fails: its fallback files stay with the rest.
    std::fs::rename(&dir, d.path().join("gone")).unwrap();
    let plan = update(&sm, &c, &mut at);
    assert_eq!((plan.failed.len(), plan.removed), (1, 0));
    assert_eq!(read(&src, "qa", "top.sls").as_deref(), Some("from fb\n"));
}

/// `gitfs_refspecs` (and per-remote `refspecs`): the refs they map under
/// `refs/remotes/origin/` are the branches, under `refs/tags/` the tags, as Salt's fetch
/// makes them; a pull request's ref mapped to a branch `pr/1` is served through a
/// saltenv's `ref`; refspecs naming only `master` leave the other branches out.
#[test]
fn refspecs_decide_the_branches_and_tags() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("r");
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "master"]);
    let first = commit(&dir, &[("top.sls", "one\n")], "one");
    commit(&dir, &[("top.sls", "two\n")], "two");
    git(&dir, &["update-ref", "refs/pull/1/head", &first]);
    git(&dir, &["branch", "dev"]);
    git(&dir, &["tag", "v1"]);
    let c = cfg(&format!(
        "gitfs_refspecs:\n  - '+refs/heads/*:refs/remotes/origin/*'\n  - '+refs/pull/*/head:refs/remotes/origin/pr/*'\n  - 'refs/heads/*'\ngitfs_saltenv:\n  - pr1:\n    - ref: pr/1\ngitfs_remotes: [{}]",
        dir.display()
    ));
    assert!(c.warnings.iter().any(|w| w.contains("refs/heads/*") && w.contains("gitfs_refspecs")), "a refspec without a destination is named: {:?}", c.warnings);
    let sm = Arc::new(StateMachine::open_in_memory("gitfs-refspecs").unwrap());
    let src = GitfsRoots::of(sm.clone(), &c);
    let mut at = 0;
    update(&sm, &c, &mut at);
    assert_eq!(read(&src, "pr1", "top.sls").as_deref(), Some("one\n"), "the pull request's ref, mapped to a branch");
    assert_eq!(read(&src, "base", "top.sls").as_deref(), Some("two\n"));
    assert_eq!(src.envs(RootsTree::File).into_iter().collect::<Vec<_>>(), ["base", "dev", "pr1"], "no tag: no refspec maps refs/tags");
    // Only master.
    let only = cfg(&format!("gitfs_remotes:\n  - {}:\n    - refspecs: ['+refs/heads/master:refs/remotes/origin/master', '+refs/tags/*:refs/tags/*']\n", dir.display()));
    assert!(only.warnings.is_empty(), "{:?}", only.warnings);
    let sm2 = Arc::new(StateMachine::open_in_memory("gitfs-refspecs-2").unwrap());
    let mut at2 = 0;
    update(&sm2, &only, &mut at2);
    assert_eq!(GitfsRoots::of(sm2.clone(), &only).envs(RootsTree::File).into_iter().collect::<Vec<_>>(), ["base", "v1"]);
}
