//! State machine, roots materialiser and view rebuild tests (real RocksDB, real files);
//! the keys bank's own are in `state_keys_tests.rs`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::format::{KeySet, KeyState, Record, RootsTombstone, RootsTree, ROOTS_CHUNK_LEN};
use crate::keys::localfs::LocalfsKeys;
use crate::keys::mmap::MmapKeys;
use crate::keys::{BankState, Geometry};
use crate::roots::{RootsDirs, RootsMaterialiser};
use crate::state::{roots_records, Effect, StateMachine};
use crate::views::Views;

pub(crate) fn key(id: &str, state: KeyState, t: u64) -> Record {
    Record::KeySet(KeySet { id: id.into(), state, pub_key: format!("PUB {id}").into_bytes(), time_ns: t, expect: None, pending_below: None })
}

pub(crate) fn numbered(recs: Vec<Record>, from: u64) -> Vec<(u64, Record)> {
    recs.into_iter().enumerate().map(|(i, r)| (from + i as u64, r)).collect()
}

#[test]
fn apply_is_idempotent_and_follows_salt_key_rules() {
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let recs = numbered(
        vec![
            key("a", KeyState::Pending, 1),
            key("a", KeyState::Accepted, 2),
            key("a", KeyState::Denied, 3),
            Record::KeySet(KeySet { id: "a".into(), state: KeyState::Denied, pub_key: b"SECOND".to_vec(), time_ns: 4, expect: None, pending_below: None }),
            key("b", KeyState::Rejected, 5),
            key("b", KeyState::Deleted, 6),
            key("c", KeyState::Deleted, 7),
        ],
        1,
    );
    let fx = sm.apply(&recs).unwrap();
    assert_eq!(sm.applied_index().unwrap(), 7);
    // Only the first denied key is kept; deleting an absent key has no effect.
    assert_eq!(sm.get_denied("a").unwrap().unwrap().1, b"PUB a");
    assert_eq!(fx.iter().filter(|f| matches!(f, Effect::DeniedSet { .. })).count(), 1);
    assert_eq!(fx.iter().filter(|f| matches!(f, Effect::KeyRemoved { .. })).count(), 1);
    assert_eq!(sm.get_key("a").unwrap().unwrap().state, BankState::Accepted);
    assert!(sm.get_key("b").unwrap().is_none());
    // Re-applying the same indexes changes nothing and yields no effects.
    assert!(sm.apply(&recs).unwrap().is_empty());
    assert_eq!(sm.count("keys").unwrap(), 1);
    // A snapshot restores the same state and applied index.
    let snap = d.path().join("snap");
    assert_eq!(sm.checkpoint(&snap).unwrap(), 7);
    sm.apply(&numbered(vec![key("z", KeyState::Pending, 8)], 8)).unwrap();
    drop(sm);
    StateMachine::restore(&snap, &d.path().join("s")).unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    assert_eq!(sm.applied_index().unwrap(), 7);
    assert!(sm.get_key("z").unwrap().is_none());
    assert!(sm.get_key("a").unwrap().is_some());
}

fn tree_bytes(dir: &Path) -> Vec<(String, Vec<u8>, u32)> {
    let mut out = Vec::new();
    fn walk(root: &Path, d: &Path, out: &mut Vec<(String, Vec<u8>, u32)>) {
        let mut ents: Vec<_> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap()).collect();
        ents.sort_by_key(|e| e.file_name());
        for e in ents {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let m = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
                out.push((p.strip_prefix(root).unwrap().display().to_string(), std::fs::read(&p).unwrap(), m));
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

#[test]
fn roots_are_materialised_checked_and_removed() {
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let file_root = d.path().join("srv/salt");
    let mut dirs = RootsDirs::default();
    dirs.file.insert("base".into(), file_root.clone());
    dirs.pillar.insert("base".into(), d.path().join("srv/pillar"));
    let mut views = Views::new(Box::new(LocalfsKeys::open(&d.path().join("pki")).unwrap()), RootsMaterialiser::new(dirs.clone()));
    let big: Vec<u8> = (0..(ROOTS_CHUNK_LEN * 2 + 123)).map(|i| (i % 251) as u8).collect();
    let mut recs = roots_records(RootsTree::File, "base", "big/blob.bin", 0o640, &big);
    assert_eq!(recs.len(), 3);
    recs.extend(roots_records(RootsTree::File, "base", "top.sls", 0o644, b"base:\n  '*':\n    - web\n"));
    recs.extend(roots_records(RootsTree::File, "base", "empty", 0o600, b""));
    recs.extend(roots_records(RootsTree::Pillar, "base", "top.sls", 0o644, b"base: {}\n"));
    recs.extend(roots_records(RootsTree::File, "dev", "nowhere.sls", 0o644, b"x"));
    let fx = sm.apply(&numbered(recs, 1)).unwrap();
    views.apply(&sm, &fx).unwrap();
    assert_eq!(std::fs::read(file_root.join("big/blob.bin")).unwrap(), big);
    assert_eq!(std::fs::metadata(file_root.join("big/blob.bin")).unwrap().permissions().mode() & 0o777, 0o640);
    assert_eq!(std::fs::read(file_root.join("empty")).unwrap(), b"");
    assert_eq!(std::fs::read(d.path().join("srv/pillar/top.sls")).unwrap(), b"base: {}\n");
    // A file whose chunks do not match its sha256 is never materialised.
    let mut bad = roots_records(RootsTree::File, "base", "bad.sls", 0o644, b"original");
    if let Record::RootsBlob(b) = &mut bad[0] {
        b.data = b"tampered".to_vec();
    }
    let fx = sm.apply(&numbered(bad, 100)).unwrap();
    views.apply(&sm, &fx).unwrap();
    assert!(!file_root.join("bad.sls").exists());
    // Tombstones delete.
    let fx = sm.apply(&numbered(vec![Record::RootsTombstone(RootsTombstone { tree: RootsTree::File, saltenv: "base".into(), path: "top.sls".into() })], 200)).unwrap();
    views.apply(&sm, &fx).unwrap();
    assert!(!file_root.join("top.sls").exists());
    // Deleting the tree and rebuilding gives the same bytes and modes.
    let before = tree_bytes(&file_root);
    std::fs::remove_dir_all(&file_root).unwrap();
    assert_eq!(views.roots.rebuild(&sm).unwrap(), 4, "base: 2 files, pillar: 1, dev (no dir configured): 1");
    assert_eq!(tree_bytes(&file_root), before);
    // A symlink planted in the tree is never written through.
    let outside = d.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, file_root.join("link")).unwrap();
    let m = RootsMaterialiser::new(dirs);
    assert!(m.write(RootsTree::File, "base", "link/evil.sls", 0o644, b"x").is_err());
    assert!(!outside.join("evil.sls").exists());
    assert!(m.write(RootsTree::File, "base", "../escape", 0o644, b"x").is_err());
}

#[test]
fn rebuilt_views_are_deterministic() {
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let mut recs = Vec::new();
    for i in 0..200 {
        let st = [KeyState::Accepted, KeyState::Pending, KeyState::Rejected][i % 3];
        recs.push(key(&format!("m{i:03}"), st, 1000 + i as u64));
    }
    recs.push(key("m001", KeyState::Denied, 5));
    recs.push(key("m002", KeyState::Deleted, 6));
    sm.apply(&numbered(recs, 1)).unwrap();
    let geo = Geometry { size: 512, slot_size: 96, key_size: 64, max_segment_bytes: 8192 };
    let snapshot = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| !e.file_name().to_string_lossy().ends_with(".lock"))
            .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
            .collect();
        v.sort();
        v
    };
    let pki = d.path().join("pki");
    let mut views = Views::new(Box::new(MmapKeys::open(&pki, geo).unwrap()), RootsMaterialiser::new(RootsDirs::default()));
    let c = views.rebuild_keys(&sm, |_, _| {}).unwrap();
    assert_eq!((c.accepted, c.pending, c.rejected, c.denied), (67, 67, 65, 1));
    let first = snapshot(&pki);
    views.rebuild_keys(&sm, |_, _| {}).unwrap();
    assert_eq!(snapshot(&pki), first, "same state, same bytes");
    assert!(views.diff_keys(&sm).unwrap().is_empty());
    // A flipped byte in the heap is found by the view check.
    let heap = pki.join(".mmap_keys.idx.heap");
    let mut b = std::fs::read(&heap).unwrap();
    b[100] ^= 1;
    std::fs::write(&heap, b).unwrap();
    let diff = views.diff_keys(&sm).unwrap();
    assert_eq!(diff.len(), 1, "{diff:?}");
    // localfs: the same state gives files with the record times as mtimes.
    let lpki = d.path().join("lpki");
    let mut lviews = Views::new(Box::new(LocalfsKeys::open(&lpki).unwrap()), RootsMaterialiser::new(RootsDirs::default()));
    lviews.rebuild_keys(&sm, |_, _| {}).unwrap();
    let m = std::fs::metadata(lpki.join("minions/m000")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::mtime_nsec(&m), 1000);
    assert!(lviews.diff_keys(&sm).unwrap().is_empty());
}

#[test]
fn jobs_expire_by_cutoff_with_their_returns_and_nothing_else() {
    use crate::format::{JobPublished, JobReturn, JobsExpired};
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let job = |jid: &str| Record::JobPublished(JobPublished { jid: jid.into(), load: vec![0x80], minions: vec!["m1".into()], time_ns: 1, started_by: None, joins: false });
    let ret = |jid: &str, id: &str| Record::JobReturn(JobReturn { jid: jid.into(), id: id.into(), load: vec![0xc3], time_ns: 1, first_only: false });
    let (old, edge, new) = ("20261120000000000001", "20261121000000000000", "20261122000000000002");
    sm.apply(&numbered(vec![job(old), ret(old, "m1"), ret(old, "m2"), job(edge), ret(edge, "m1"), job(new), ret(new, "m1"), job("custom-jid"), key("m1", KeyState::Accepted, 1)], 1)).unwrap();
    assert!(sm.has_job_before(edge).unwrap());
    assert!(!sm.has_job_before(old).unwrap());
    // The point read finds one minion's return, and only its own (`m1` is a prefix of no other id here, `m` is of both).
    assert_eq!(sm.job_return(old, "m2").unwrap().map(|r| r.id), Some("m2".to_string()));
    assert!(sm.job_return(old, "m").unwrap().is_none());
    assert!(sm.job_return(new, "m2").unwrap().is_none());
    let expiry = Record::JobsExpired(JobsExpired { before_jid: edge.into(), time_ns: 2 });
    sm.apply(&numbered(vec![expiry.clone()], 10)).unwrap();
    let left: Vec<String> = sm.jobs().unwrap().into_iter().map(|j| j.jid).collect();
    assert_eq!(left, vec![edge.to_string(), new.to_string(), "custom-jid".to_string()], "the cutoff jid itself is kept");
    assert!(sm.job_returns(old).unwrap().is_empty());
    assert_eq!(sm.job_returns(edge).unwrap().len(), 1);
    assert!(sm.get_key("m1").unwrap().is_some(), "keys are untouched");
    assert!(!sm.has_job_before(edge).unwrap());
    // A cutoff that is not a 20-digit jid never reaches the log.
    assert!(Record::JobsExpired(JobsExpired { before_jid: "9".into(), time_ns: 3 }).encode().is_err());
}

#[test]
fn returns_put_in_key_order_keep_what_the_batch_did_in_log_order() {
    use crate::format::{JobReturn, JobsExpired};
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let ret = |jid: &str, id: &str, load: u8, first_only: bool| Record::JobReturn(JobReturn { jid: jid.into(), id: id.into(), load: vec![load], time_ns: 1, first_only });
    let (old, edge, new) = ("20261120000000000001", "20261121000000000000", "20261122000000000002");
    // One batch, ids out of order: a key put twice (the later wins), a range deletion
    // after some returns (they are gone) and before others (they stay), and a
    // first-only return after a put of its key earlier in the batch (skipped).
    let batch = vec![
        ret(new, "m3", 1, false),
        ret(old, "m2", 1, false),
        ret(new, "m1", 1, false),
        ret(new, "m3", 2, false),
        Record::JobsExpired(JobsExpired { before_jid: edge.into(), time_ns: 2 }),
        ret(old, "m1", 3, false),
        ret(new, "m2", 4, false),
        ret(new, "m1", 5, true),
    ];
    sm.apply(&numbered(batch, 1)).unwrap();
    let load = |jid: &str, id: &str| sm.job_return(jid, id).unwrap().map(|r| r.load);
    assert_eq!(load(new, "m3"), Some(vec![2]), "the later of two puts of one key wins");
    assert_eq!(load(old, "m2"), None, "a return before the range deletion is deleted");
    assert_eq!(load(old, "m1"), Some(vec![3]), "a return after the range deletion stays");
    assert_eq!(load(new, "m1"), Some(vec![1]), "a first-only return sees the batch's earlier put");
    assert_eq!(load(new, "m2"), Some(vec![4]));
    let ids: Vec<String> = sm.job_returns(new).unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(ids, ["m1", "m2", "m3"]);
}

#[test]
fn a_joining_group_adds_its_minions_to_the_stored_job_and_keeps_its_load() {
    use crate::format::JobPublished;
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let jid = "20261125000000000001";
    let group = |load: u8, minions: &[&str], time_ns: u64, joins: bool| Record::JobPublished(JobPublished { jid: jid.into(), load: vec![0x91, load], minions: minions.iter().map(|m| m.to_string()).collect(), time_ns, started_by: None, joins });
    // A join with no job stored is stored as it is (and is no longer a join).
    sm.apply(&numbered(vec![group(1, &["m1"], 1, true)], 1)).unwrap();
    let j = sm.job(jid).unwrap().unwrap();
    assert_eq!((j.minions.clone(), j.load.clone(), j.joins), (vec!["m1".to_string()], vec![0x91, 1], false));
    // Two joins in one batch, one repeating a minion: each sees the one before.
    sm.apply(&numbered(vec![group(2, &["m2", "m1"], 2, true), group(3, &["m3"], 3, true)], 2)).unwrap();
    let j = sm.job(jid).unwrap().unwrap();
    assert_eq!(j.minions, ["m1", "m2", "m3"]);
    assert_eq!((j.load, j.time_ns), (vec![0x91, 1], 1), "the first group's load and time stay");
    // A record that does not join replaces the job, as before.
    sm.apply(&numbered(vec![group(4, &["m9"], 4, false)], 4)).unwrap();
    assert_eq!(sm.job(jid).unwrap().unwrap().minions, ["m9"]);
    // `joins` travels in the payload only when set.
    let plain = group(5, &["m1"], 5, false).encode().unwrap();
    let joining = group(5, &["m1"], 5, true).encode().unwrap();
    assert!(!plain.windows(5).any(|w| w == b"joins") && joining.windows(5).any(|w| w == b"joins"));
    assert_eq!(Record::decode(&joining).unwrap(), group(5, &["m1"], 5, true));
}

fn test_key(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/keys").join(name)).unwrap()
}

#[test]
fn public_key_files_are_the_bytes_openssl_writes() {
    let expected = test_key("test-master.pub");
    assert_eq!(crate::keys::pair::public_pem_of(&test_key("test-master-pkcs1.pem")).unwrap(), expected);
    assert_eq!(crate::keys::pair::public_pem_of(&test_key("test-master-pkcs8.pem")).unwrap(), expected);
}

#[test]
fn key_pairs_are_set_once_and_the_key_view_follows_them() {
    use crate::format::{ClusterKeyPair, MasterKeyPair};
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let pem = test_key("test-master-pkcs1.pem");
    let pair = |name: &str, pem: &[u8]| Record::MasterKeyPair(MasterKeyPair { name: name.into(), private_pem: pem.to_vec(), time_ns: 1 });
    let fx = sm
        .apply(&numbered(vec![pair("salt", &pem), pair("other", &test_key("test-master-pkcs8.pem")), Record::ClusterKeyPair(ClusterKeyPair { private_pem: pem.clone(), time_ns: 2 })], 1))
        .unwrap();
    assert_eq!(fx.len(), 2, "the second master pair is ignored: {fx:?}");
    assert_eq!(sm.master_key_pair().unwrap().unwrap().name, "salt");
    let pki = d.path().join("pki");
    let mut views = Views::new(Box::new(LocalfsKeys::open(&pki).unwrap()), RootsMaterialiser::new(RootsDirs::default()));
    assert!(views.missing_pairs(&sm).unwrap());
    views.apply(&sm, &fx).unwrap();
    let public = test_key("test-master.pub");
    assert_eq!(std::fs::read(pki.join("salt.pem")).unwrap(), pem);
    assert_eq!(std::fs::read(pki.join("salt.pub")).unwrap(), public);
    assert_eq!(std::fs::read_link(pki.join("master.pem")).unwrap(), pki.join("salt.pem"), "Salt 3008's absolute link");
    assert_eq!(std::fs::read(pki.join("master.pub")).unwrap(), public);
    assert_eq!(std::fs::read(pki.join("cluster.pub")).unwrap(), public);
    for f in ["salt.pem", "salt.pub", "cluster.pem", "cluster.pub"] {
        assert_eq!(std::fs::metadata(pki.join(f)).unwrap().permissions().mode() & 0o777, 0o400, "{f}");
    }
    assert!(!views.missing_pairs(&sm).unwrap());
    // A wiped keys directory gets them back from the state machine.
    std::fs::remove_dir_all(&pki).unwrap();
    assert!(views.missing_pairs(&sm).unwrap());
    views.rebuild_keys(&sm, |_, _| {}).unwrap();
    assert_eq!(std::fs::read(pki.join("master.pem")).unwrap(), pem);
    // A pre-3008 tree's regular master.pem with the same key becomes the link; the mmap
    // view holds the pair in its master bank.
    std::fs::remove_file(pki.join("master.pem")).unwrap();
    std::fs::write(pki.join("master.pem"), &pem).unwrap();
    views.write_pairs(&sm).unwrap();
    assert!(std::fs::symlink_metadata(pki.join("master.pem")).unwrap().file_type().is_symlink());
    let geo = Geometry { size: 64, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 20 };
    let mpki = d.path().join("mpki");
    let mut mviews = Views::new(Box::new(MmapKeys::open(&mpki, geo).unwrap()), RootsMaterialiser::new(RootsDirs::default()));
    mviews.rebuild_keys(&sm, |_, _| {}).unwrap();
    assert_eq!(mviews.keys.get_master_key("salt.pem").unwrap().unwrap(), pem);
    assert_eq!(mviews.keys.get_master_key("cluster.pub").unwrap().unwrap(), public);
}

/// A view that fails reports one fault and is skipped for the rest of the batch; the
/// other view is written; `recover` brings the failed one back, removals included.
#[test]
fn a_failing_view_is_reported_once_and_recovered_from_the_state() {
    use crate::views::{Touched, ViewKind};
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let root = d.path().join("srv/salt");
    let mut dirs = RootsDirs::default();
    dirs.file.insert("base".into(), root.clone());
    let mut views = Views::new(Box::new(LocalfsKeys::open(&d.path().join("pki")).unwrap()), RootsMaterialiser::new(dirs));
    let mut recs = roots_records(RootsTree::File, "base", "old.sls", 0o644, b"old");
    let fx = sm.apply(&numbered(recs.clone(), 1)).unwrap();
    assert!(views.apply_each(&sm, &fx, &mut |_| false).is_empty());
    // The tree's directory becomes a file: every roots write fails, keys still go in.
    std::fs::remove_dir_all(&root).unwrap();
    std::fs::write(&root, b"in the way").unwrap();
    recs = roots_records(RootsTree::File, "base", "a.sls", 0o644, b"a");
    recs.extend(roots_records(RootsTree::File, "base", "b.sls", 0o644, b"b"));
    recs.push(Record::RootsTombstone(RootsTombstone { tree: RootsTree::File, saltenv: "base".into(), path: "old.sls".into() }));
    recs.push(key("k", KeyState::Pending, 5));
    let batch = numbered(recs, 10);
    let fx = sm.apply(&batch).unwrap();
    let faults = views.apply_each(&sm, &fx, &mut |_| false);
    assert_eq!(faults.iter().map(|f| f.view).collect::<Vec<_>>(), vec![ViewKind::Roots]);
    assert!(d.path().join("pki/minions_pre/k").is_file(), "the key view is written");
    // A dirty view is skipped.
    let fx = sm.apply(&numbered(vec![key("k2", KeyState::Pending, 6)], 20)).unwrap();
    assert!(views.apply_each(&sm, &fx, &mut |v| v == ViewKind::Keys).is_empty());
    assert!(!d.path().join("pki/minions_pre/k2").exists());
    // Recovery fails while the obstacle is there, then brings both views to the state.
    let mut touched = Touched::default();
    for (_, r) in &batch {
        touched.add(r);
    }
    assert!(views.recover(&sm, ViewKind::Roots, &touched).is_err());
    std::fs::remove_file(&root).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("old.sls"), b"old").unwrap();
    views.recover(&sm, ViewKind::Roots, &touched).unwrap();
    assert_eq!(std::fs::read(root.join("a.sls")).unwrap(), b"a");
    assert_eq!(std::fs::read(root.join("b.sls")).unwrap(), b"b");
    assert!(!root.join("old.sls").exists(), "the tombstone applied while the view was dirty is carried out");
    views.recover(&sm, ViewKind::Keys, &Touched::default()).unwrap();
    assert!(d.path().join("pki/minions_pre/k2").exists());
}

/// A checkpoint written before a column family existed (here: without `pillar`) opens
/// read-only, digests as if the family were empty, and becomes a running state
/// machine's database (a snapshot from an older member; the family is created).
#[test]
fn a_checkpoint_from_before_a_family_existed_opens_and_installs() {
    use crate::state::{ALL_CFS, CF_PILLAR};
    let d = tempfile::tempdir().unwrap();
    let old = d.path().join("old");
    {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let cfs: Vec<&str> = ALL_CFS.iter().copied().filter(|c| *c != CF_PILLAR).collect();
        let db = rocksdb::DB::open_cf(&opts, &old, cfs).unwrap();
        db.put_cf(db.cf_handle("keys").unwrap(), b"m1", b"x").unwrap();
        db.flush_cf(db.cf_handle("keys").unwrap()).unwrap();
    }
    let ro = StateMachine::open_read_only(&old).unwrap();
    let want = ro.digest().unwrap();
    assert_eq!(want.items, 1);
    drop(ro);
    let dst_path = d.path().join("dst");
    let dst = StateMachine::open(&dst_path).unwrap();
    dst.apply(&numbered(vec![key("gone", KeyState::Accepted, 1)], 1)).unwrap();
    dst.reopen_after(|| {
        std::fs::remove_dir_all(&dst_path).unwrap();
        std::fs::rename(&old, &dst_path).unwrap();
        Ok(())
    })
    .unwrap();
    assert!(dst.get_key("gone").unwrap().is_none());
    let got = dst.digest().unwrap();
    assert_eq!((got.items, got.sha256), (want.items, want.sha256));
}

#[test]
fn a_first_only_return_applies_only_where_no_return_is_stored() {
    use crate::format::JobReturn;
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let jid = "20261122000000000001";
    let ret = |id: &str, t: u64, first_only: bool| Record::JobReturn(JobReturn { jid: jid.into(), id: id.into(), load: vec![0xc3], time_ns: t, first_only });
    // Two first-only returns for one (jid, id) in one batch: the first wins, on every member alike.
    sm.apply(&numbered(vec![ret("a_master", 1, true), ret("a_master", 2, true)], 1)).unwrap();
    assert_eq!(sm.job_return(jid, "a_master").unwrap().map(|r| r.time_ns), Some(1));
    // One in a later batch changes nothing either.
    sm.apply(&numbered(vec![ret("a_master", 3, true)], 5)).unwrap();
    assert_eq!(sm.job_return(jid, "a_master").unwrap().map(|r| r.time_ns), Some(1));
    // A plain return before it in the same batch counts as stored.
    sm.apply(&numbered(vec![ret("b_master", 4, false), ret("b_master", 5, true)], 10)).unwrap();
    assert_eq!(sm.job_return(jid, "b_master").unwrap().map(|r| r.time_ns), Some(4));
    // Plain returns still replace earlier ones (a minion's repeated return).
    sm.apply(&numbered(vec![ret("m1", 6, false), ret("m1", 7, false)], 20)).unwrap();
    assert_eq!(sm.job_return(jid, "m1").unwrap().map(|r| r.time_ns), Some(7));
    // The flag survives encoding; a plain return's payload does not carry it.
    let plain = ret("m1", 1, false).encode().unwrap();
    assert!(!plain.windows(10).any(|w| w == b"first_only"));
    assert_eq!(Record::decode(&ret("m1", 1, true).encode().unwrap()).unwrap(), ret("m1", 1, true));
}
