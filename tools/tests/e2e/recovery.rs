//! The log is the truth, and survives damage: key changes as records, `halite-ctl replay`
//! and `rebuild-views`, a corrupt entry named by `verify` and refused at start, a log
//! older than the state machine refused, a torn tail cut, `kill -9` in the middle of a migration or a replay, and `import-shared` (a Salt
//! cluster's shared tree becoming records and local views).

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;

use crate::keys::changed_keys_env;
use crate::support::*;

#[test]
fn each_key_change_is_one_record_after_the_adoption_import() {
    let env = changed_keys_env();
    let kinds = env.record_kinds();
    assert_eq!(kinds.first().map(String::as_str), Some("import_marker"), "{kinds:?}");
    // Four keys imported, two accepted, one rejected, one deleted; the refused and the
    // unmatched accepts wrote nothing.
    assert_eq!(kinds.iter().filter(|k| *k == "key_set").count(), 4 + 2 + 1 + 1, "{kinds:?}");
}

#[test]
fn replay_rebuilds_the_same_listing() {
    let env = changed_keys_env();
    let before = env.listing();
    env.ok(CTL, &["replay"]);
    assert_eq!(env.listing(), before);
}

#[test]
fn rebuild_views_restores_a_deleted_key_directory() {
    let env = changed_keys_env();
    let before = env.listing();
    std::fs::remove_dir_all(env.pki().join("minions")).expect("remove minions/");
    env.ok(CTL, &["rebuild-views"]);
    assert_eq!(env.listing(), before);
    let v = env.ok(CTL, &["verify", "--views"]);
    assert!(v.ends_with("OK\n"), "{v}");
}

// ---------------------------------------------------------------------------------------
// A corrupt entry.

/// Where `needle` first occurs in the newest log file.
fn find_in_log(env: &Env, needle: &[u8]) -> (PathBuf, usize) {
    let dir = env.root.join("data/log");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).expect("log dir").filter_map(|e| Some(e.ok()?.path())).filter(|p| p.extension().is_some_and(|x| x == "raftlog")).collect();
    files.sort();
    let f = files.pop().expect("a log file");
    let b = std::fs::read(&f).expect("log file");
    let at = b.windows(needle.len()).position(|w| w == needle).expect("needle in log");
    (f, at)
}

/// A log of six accepts, each its own batch, with one byte of the first flipped.
fn corrupt_log_env() -> Env {
    let env = Env::new("localfs_key", "");
    let pre = env.pki().join("minions_pre");
    std::fs::create_dir_all(&pre).expect("minions_pre");
    std::fs::write(pre.join("corrupt-me-01"), fake_pub(7)).expect("key");
    env.ok(SALT_KEY, &["--offline", "-a", "corrupt-me-01", "-y"]);
    for i in 0..5 {
        std::fs::write(pre.join(format!("later-{i}")), fake_pub(100 + i)).expect("key");
        // Each accept is its own batch, so the damaged one is in the middle.
        env.ok(SALT_KEY, &["--offline", "-a", &format!("later-{i}"), "-y"]);
    }
    let v = env.ok(CTL, &["verify"]);
    assert!(v.ends_with("OK\n"), "the log verifies before the damage: {v}");
    let (file, at) = find_in_log(&env, b"corrupt-me-01");
    let mut b = std::fs::read(&file).expect("log file");
    b[at + 3] ^= 0x20;
    std::fs::write(&file, &b).expect("write log file");
    env
}

#[test]
fn verify_names_a_corrupt_log_entry() {
    let env = corrupt_log_env();
    let o = env.run(CTL, &["verify"]);
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("BAD: entry ") && out.contains("checksum"), "{out}");
    // The file and the byte offset of the batch that holds the damage (the flipped
    // byte made `r` an `R`).
    let (file, at) = find_in_log(&env, b"corRupt-me-01");
    let bytes = std::fs::read(&file).expect("log file");
    let batch = halite_storage::framing::batch_offsets(&bytes).into_iter().filter(|o| *o <= at as u64).max().expect("a batch before the damage");
    let named = format!("BAD: {}: the entries block of the batch at byte offset {batch} fails its checksum", file.display());
    assert!(out.contains(&named), "wanted {named:?} in {out}");
}

#[test]
fn a_corrupt_log_is_refused_at_start_naming_the_tool() {
    let env = corrupt_log_env();
    let o = env.run(SALT_KEY, &["--offline", "-A", "-y"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("halite-ctl verify"), "{err}");
}

// ---------------------------------------------------------------------------------------
// A state machine ahead of its log.

/// Two accepts, a copy of the log directory, three more accepts, then the old copy put
/// back: the log ends before what the state machine applied.
#[test]
fn a_log_older_than_the_state_is_refused_by_the_tools_and_named_by_verify() {
    let env = Env::new("localfs_key", "");
    let pre = env.pki().join("minions_pre");
    std::fs::create_dir_all(&pre).expect("minions_pre");
    let accept = |name: &str, n: usize| {
        std::fs::write(pre.join(name), fake_pub(n)).expect("key");
        env.ok(SALT_KEY, &["--offline", "-a", name, "-y"]);
    };
    accept("old-1", 1);
    accept("old-2", 2);
    let log = env.root.join("data/log");
    let backup = env.root.join("log-backup");
    std::fs::create_dir_all(&backup).expect("backup dir");
    for e in std::fs::read_dir(&log).expect("log dir") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), backup.join(e.file_name())).expect("copy");
    }
    for (i, n) in ["new-1", "new-2", "new-3"].iter().zip(3usize..) {
        accept(i, n);
    }
    std::fs::remove_dir_all(&log).expect("remove log");
    std::fs::rename(&backup, &log).expect("restore the older log");
    let before = std::fs::read_dir(&log).expect("log dir").count();

    let o = env.run(SALT_KEY, &["--offline", "-A", "-y"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("state machine ahead of its log") && err.contains("applied log index") && err.contains("ends at index"), "{err}");
    assert!(err.contains("halite-ctl replay"), "the recovery is named: {err}");
    let o = env.run(CTL, &["verify"]);
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("BAD: the state machine applied index") && out.contains("past the end of the log"), "{out}");
    assert_eq!(std::fs::read_dir(&log).expect("log dir").count(), before, "the refused start wrote no new log file");
    // The recovery the message names: replay rebuilds the state from this log.
    env.ok(CTL, &["replay"]);
    assert_eq!(env.listing()["minions"], json!(["old-1", "old-2"]));
    let v = env.ok(CTL, &["verify"]);
    assert!(v.ends_with("OK\n"), "{v}");
}

// ---------------------------------------------------------------------------------------
// A torn tail.

/// m1 accepted, then a half-written batch at the end of the log file: a header claiming
/// 4 KiB, 100 bytes of it, as a crash in the middle of a write leaves.
fn torn_tail_env() -> Env {
    let env = Env::new("localfs_key", "");
    let pre = env.pki().join("minions_pre");
    std::fs::create_dir_all(&pre).expect("minions_pre");
    std::fs::write(pre.join("m1"), fake_pub(1)).expect("key");
    env.ok(SALT_KEY, &["--offline", "-a", "m1", "-y"]);
    let dir = env.root.join("data/log");
    let f = std::fs::read_dir(&dir).expect("log dir").filter_map(|e| Some(e.ok()?.path())).find(|p| p.extension().is_some_and(|x| x == "raftlog")).expect("a log file");
    let mut torn = std::fs::read(&f).expect("log file");
    // Length 4096 in the high bytes, compression type 0 (none) in the low byte.
    torn.extend_from_slice(&(4096u64 << 8).to_be_bytes());
    torn.extend_from_slice(&32u64.to_be_bytes());
    torn.extend_from_slice(&[0xAB; 84]);
    std::fs::write(&f, &torn).expect("write log file");
    env
}

/// A pending key m2 for the next write to accept.
fn place_m2(env: &Env) {
    std::fs::write(env.pki().join("minions_pre/m2"), fake_pub(2)).expect("key");
}

#[test]
fn a_torn_tail_does_not_stop_a_listing() {
    let env = torn_tail_env();
    assert_eq!(env.listing()["minions"], json!(["m1"]));
}

#[test]
fn a_torn_tail_is_cut_and_logged_by_the_next_write() {
    let env = torn_tail_env();
    place_m2(&env);
    let o = env.run(SALT_KEY, &["--offline", "-a", "m2", "-y", "--log-level", "warning"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("torn tail"), "{err}");
}

#[test]
fn a_write_after_a_torn_tail_is_kept_with_the_earlier_ones() {
    let env = torn_tail_env();
    place_m2(&env);
    env.ok(SALT_KEY, &["--offline", "-a", "m2", "-y"]);
    assert_eq!(env.listing()["minions"], json!(["m1", "m2"]));
    let v = env.ok(CTL, &["verify", "--views"]);
    assert!(v.ends_with("OK\n"), "{v}");
}

// ---------------------------------------------------------------------------------------
// kill -9.

/// Two full batches of records (4,096 each; the tools log their progress per batch) and
/// seconds of view writes.
const MANY: usize = 8_192;

/// 8,192 keys, a third accepted, the rest pending, in a localfs tree with a large mmap
/// geometry for the migration.
fn many_keys_env() -> Env {
    let env = Env::new("localfs_key", "mmap_key_size: 65536\n");
    let pre = env.pki().join("minions_pre");
    let acc = env.pki().join("minions");
    std::fs::create_dir_all(&pre).expect("minions_pre");
    std::fs::create_dir_all(&acc).expect("minions");
    for i in 0..MANY {
        let dir = if i % 3 == 0 { &acc } else { &pre };
        std::fs::write(dir.join(format!("minion-{i:05}")), fake_pub(i)).expect("key");
    }
    env
}

/// For each point, a fresh run of `bin -c CONF -l info args`, sent SIGKILL the moment its
/// log shows the point, with work still to do after it. Fails the test if a run ends
/// before its point or before the kill.
fn kill_9_at(env: &Env, bin: &str, args: &[&str], points: &[&str]) {
    for (i, point) in points.iter().enumerate() {
        let mut cmd = Command::new(bin);
        cmd.arg("-c").arg(env.conf()).args(["-l", "info"]).args(args);
        let (mut p, mut lines) = Proc::spawn_stderr_lines(bin, &mut cmd, &env.root.join(format!("killed-{i}.out")));
        lines.wait(&format!("{point:?} in the log of {args:?}"), 120, |l| l.iter().any(|l| l.contains(point)));
        assert!(p.exited().is_none(), "{args:?} ended before the kill at {point:?}:\n{}", lines.seen().join("\n"));
        p.kill9();
    }
}

fn assert_many_migrated(env: &Env) {
    let l = env.listing();
    assert_eq!(l["minions"].as_array().map(Vec::len), Some(MANY.div_ceil(3)));
    assert_eq!(l["minions_pre"].as_array().map(Vec::len), Some(MANY - MANY.div_ceil(3)));
    let v = env.ok(CTL, &["verify", "--views"]);
    assert!(v.ends_with("OK\n"), "{v}");
}

#[test]
fn a_migration_killed_with_kill_9_finishes_when_run_again() {
    let env = many_keys_env();
    // Killed with the node up and nothing proposed, with the first batch committed and
    // the others not, and with every record committed but the view not written.
    kill_9_at(&env, SALT_RUN, &["--offline", "pki.migrate_to_mmap"], &["raft role changed", "migrating keys into the log: starting", "migrating keys into the log: 100%"]);
    let out = env.ok(SALT_RUN, &["--offline", "pki.migrate_to_mmap"]);
    assert!(out.contains(&format!("Accepted: {}", halite_tools::common::thousands((MANY as u64).div_ceil(3)))), "{out}");
    env.set_driver("mmap_key");
    assert_many_migrated(&env);
}

#[test]
fn a_replay_killed_with_kill_9_finishes_when_run_again() {
    let env = many_keys_env();
    env.ok(SALT_RUN, &["--offline", "pki.migrate_to_mmap"]);
    env.set_driver("mmap_key");
    let before = env.listing();
    // Killed while applying the log to a new state machine, and while rewriting the view.
    kill_9_at(&env, CTL, &["replay"], &["replaying the log: starting", "rebuilding the key view: 50%"]);
    env.ok(CTL, &["replay"]);
    assert_eq!(env.listing(), before);
    assert_many_migrated(&env);
}

// ---------------------------------------------------------------------------------------
// import-shared.

fn msgpack(v: &rmpv::Value) -> Vec<u8> {
    let mut b = Vec::new();
    rmpv::encode::write_value(&mut b, v).expect("msgpack");
    b
}

/// A Salt cluster's shared tree (pki, job cache, two file roots for base and a pillar
/// root, with a symlink pointing out of the roots) imported into an env whose roots are
/// local directories. Returns the env, the local roots' parent and the tool's report.
struct Imported {
    env: Env,
    local: tempfile::TempDir,
    _shared: tempfile::TempDir,
    report: String,
}

fn imported() -> Imported {
    let local = tempfile::tempdir().expect("tempdir");
    let l = local.path().display().to_string();
    let env = Env::new("localfs_key", &format!("file_roots:\n  base: [{l}/srv/salt]\npillar_roots:\n  base: [{l}/srv/pillar]\n"));
    let shared = tempfile::tempdir().expect("tempdir");
    let s = shared.path();
    let w = |rel: &str, content: &[u8]| {
        let p = s.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, content).expect("write");
    };
    // Shared cluster pki dir.
    w("pki/minions/web01", fake_pub(1).as_bytes());
    w("pki/minions_pre/web02", fake_pub(2).as_bytes());
    // Shared job cache (Salt's local_cache layout).
    let jd = "cache/jobs/ab/cdef0123";
    w(&format!("{jd}/jid"), b"20261122024512345678");
    w(&format!("{jd}/.load.p"), &msgpack(&rmpv::Value::Map(vec![("fun".into(), "test.ping".into())])));
    w(&format!("{jd}/.minions.p"), &msgpack(&rmpv::Value::Array(vec!["web01".into()])));
    w(&format!("{jd}/web01/return.p"), &msgpack(&rmpv::Value::Map(vec![("return".into(), true.into()), ("retcode".into(), 0.into())])));
    // Shared roots: two dirs for base; the first one holding a path wins, as Salt searches.
    w("salt1/top.sls", b"base:\n  '*':\n    - web\n");
    w("salt1/web/init.sls", b"nginx:\n  pkg.installed\n");
    w("salt2/top.sls", b"shadowed\n");
    w("salt2/extra.sls", b"extra\n");
    w("pillar/top.sls", b"base:\n  '*':\n    - common\n");
    w("outside/secret", b"not part of the roots\n");
    std::os::unix::fs::symlink(s.join("outside/secret"), s.join("salt1/escape")).expect("symlink");
    let report = env.ok(
        CTL,
        &[
            "import-shared",
            "--pki-dir",
            &s.join("pki").display().to_string(),
            "--cachedir",
            &s.join("cache").display().to_string(),
            "--file-root",
            &format!("base={}", s.join("salt1").display()),
            "--file-root",
            &format!("base={}", s.join("salt2").display()),
            "--pillar-root",
            &format!("base={}", s.join("pillar").display()),
        ],
    );
    Imported { env, local, _shared: shared, report }
}

impl Imported {
    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.local.path().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }
}

#[test]
fn import_shared_reports_what_it_imported() {
    let i = imported();
    let out = &i.report;
    assert!(out.contains("file_roots: 3") && out.contains("pillar_roots: 1") && out.contains("jobs: 1") && out.contains("returns: 1"), "{out}");
}

#[test]
fn import_shared_skips_a_symlink_out_of_the_roots() {
    let i = imported();
    assert!(i.report.contains("skipped: 1"), "the symlink is not imported: {}", i.report);
    assert!(!i.local.path().join("srv/salt/escape").exists());
}

#[test]
fn import_shared_writes_the_roots_locally_the_first_directory_winning() {
    let i = imported();
    assert_eq!(i.read("srv/salt/top.sls"), "base:\n  '*':\n    - web\n");
    assert_eq!(i.read("srv/salt/web/init.sls"), "nginx:\n  pkg.installed\n");
    assert_eq!(i.read("srv/salt/extra.sls"), "extra\n");
    assert_eq!(i.read("srv/pillar/top.sls"), "base:\n  '*':\n    - common\n");
}

#[test]
fn import_shared_turns_the_job_cache_into_return_records() {
    let i = imported();
    let dump = i.env.ok(CTL, &["dump", "--json", "--kind", "job_return"]);
    let v = json(dump.trim());
    assert_eq!(v["record"]["jid"], "20261122024512345678");
    assert_eq!(v["record"]["load"]["return"], true);
}

#[test]
fn import_shared_imports_the_keys_in_their_states() {
    let i = imported();
    let l = i.env.listing();
    assert_eq!(l["minions"], json!(["web01"]));
    assert_eq!(l["minions_pre"], json!(["web02"]));
}

#[test]
fn imported_roots_are_views_rebuilt_from_the_log() {
    let i = imported();
    std::fs::remove_dir_all(i.local.path().join("srv")).expect("remove roots");
    i.env.ok(CTL, &["rebuild-views"]);
    assert_eq!(i.read("srv/salt/web/init.sls"), "nginx:\n  pkg.installed\n");
}
