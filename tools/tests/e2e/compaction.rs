//! A compacted log, offline: `halite-ctl snapshot` and `compact`, then every tool on the
//! compacted log: `dump` and `verify` start from the snapshot, new changes go to the
//! tail, `replay` starts from the snapshot, a lost state machine comes back from the
//! snapshot and the tail at the next start, and a damaged snapshot file is named.

use crate::keys::changed_keys_env;
use crate::support::*;

fn snapshot_dirs(env: &Env) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(env.root.join("data/snapshots")).expect("snapshots dir").filter_map(|e| Some(e.ok()?.path())).collect();
    v.sort();
    v
}

#[test]
fn the_tools_work_on_a_compacted_log() {
    let env = changed_keys_env();
    let before = env.listing();
    let records_before = env.record_kinds().len();
    assert!(records_before > 5);

    let out = env.ok(CTL, &["snapshot"]);
    assert!(out.starts_with("Built snapshot at index "), "{out}");
    assert_eq!(snapshot_dirs(&env).len(), 1);
    // Within the default limits: --if-needed leaves the log alone.
    let out = env.ok(CTL, &["compact", "--if-needed"]);
    assert!(out.starts_with("Nothing to do"), "{out}");
    assert_eq!(env.record_kinds().len(), records_before);
    let out = env.ok(CTL, &["compact"]);
    assert!(out.contains("Compacted the log through index "), "{out}");

    // dump: the compacted records are gone, a note says where they went.
    let o = env.run(CTL, &["dump"]);
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout), "");
    assert!(String::from_utf8_lossy(&o.stderr).contains("are compacted into the snapshot at index"), "{}", String::from_utf8_lossy(&o.stderr));
    let v = env.ok(CTL, &["verify", "--views"]);
    assert!(v.contains("log compacted through") && v.ends_with("OK\n"), "{v}");
    assert_eq!(env.listing(), before);

    // Changes after the compaction are the log's tail.
    env.ok(SALT_KEY, &["--offline", "-d", "db01", "-y"]);
    assert_eq!(env.record_kinds(), vec!["key_set".to_string()]);
    let after = env.listing();
    assert_ne!(after, before);

    // replay: from the snapshot, then the tail.
    let out = env.ok(CTL, &["replay"]);
    assert!(out.starts_with("Replayed 1 records"), "{out}");
    assert_eq!(env.listing(), after);

    // A lost state machine (and a key file lost from the view): the next start
    // installs the snapshot, applies the tail and rebuilds the views from the result;
    // verify --views then compares the key view with the state machine, key by key.
    std::fs::remove_dir_all(env.root.join("data/state")).expect("remove state");
    std::fs::remove_file(env.pki().join("minions/web02")).expect("remove a key file");
    std::fs::write(env.pki().join("minions_pre/late01"), fake_pub(9)).expect("key");
    env.ok(SALT_KEY, &["--offline", "-a", "late01", "-y"]);
    let mut want = after.clone();
    want["minions"] = serde_json::json!(["late01", "web02"]);
    assert_eq!(env.listing(), want);
    let v = env.ok(CTL, &["verify", "--views"]);
    assert!(v.ends_with("OK\n"), "{v}");
    let kinds = env.record_kinds();
    assert_eq!(kinds.last().map(String::as_str), Some("key_set"), "{kinds:?}");

    // A damaged snapshot file is found and named. (Replaced, not written in place: the
    // snapshot's SST files are hard links shared with the state machine.)
    let snap = snapshot_dirs(&env).pop().expect("a snapshot");
    let sst = std::fs::read_dir(snap.join("state")).expect("snapshot state").filter_map(|e| Some(e.ok()?.path())).find(|p| p.extension().is_some_and(|x| x == "sst")).expect("an sst file");
    let mut b = std::fs::read(&sst).expect("sst");
    b[0] ^= 1;
    let tmp = sst.with_extension("damaged");
    std::fs::write(&tmp, b).expect("write sst");
    std::fs::rename(&tmp, &sst).expect("replace sst");
    let o = env.run(CTL, &["verify"]);
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("does not match its manifest"), "{out}");
}
