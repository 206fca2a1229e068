//! Reusing the previous snapshot's sha256 (`hashes.rs`), on real RocksDB checkpoints:
//! a hash is taken over only for the very same file (hard link), a file replaced under
//! the same name is hashed again, and a file damaged in place is still refused by the
//! receiver.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use raft::eraftpb::ConfState;
use sha2::{Digest, Sha256};

use super::hashes::KnownHashes;
use super::*;
use crate::format::{KeySet, KeyState, Record, RootsTree};
use crate::state::{roots_records, StateMachine};

/// Pseudo-random bytes (RocksDB cannot compress them away).
fn noise(n: usize, mut x: u64) -> Vec<u8> {
    crate::noise_tests::noise(&mut x, n)
}

/// Applies a 2 MiB roots file `name` and a few keys after `sm`'s applied index.
fn grow(sm: &StateMachine, name: &str, seed: u64) {
    let mut i = sm.applied_index().unwrap();
    let mut batch = Vec::new();
    for r in roots_records(RootsTree::File, "base", name, 0o644, &noise(2 << 20, seed)) {
        i += 1;
        batch.push((i, r));
    }
    for k in 0..10 {
        i += 1;
        batch.push((i, Record::KeySet(KeySet::new(format!("{name}-{k}"), KeyState::Accepted, b"PUB".to_vec(), i))));
    }
    sm.apply(&batch).unwrap();
}

fn cs() -> ConfState {
    ConfState { voters: vec![1], ..Default::default() }
}

fn sha_of(p: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(p).unwrap()))
}

fn ssts(snap: &Snapshot) -> Vec<(String, PathBuf)> {
    snap.manifest()
        .files
        .iter()
        .enumerate()
        .filter(|(_, f)| f.path.ends_with(".sst"))
        .map(|(i, f)| (f.path.clone(), snap.file_path(i).unwrap()))
        .collect()
}

/// Flips one byte in the middle of `p`, in place (same inode).
fn damage_in_place(p: &Path) {
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(p).unwrap();
    let mid = f.metadata().unwrap().len() / 2;
    let mut b = [0u8];
    f.seek(SeekFrom::Start(mid)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(mid)).unwrap();
    f.write_all(&[b[0] ^ 0x55]).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn a_hash_is_reused_only_for_the_very_same_file() {
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("state")).unwrap();
    let store = SnapshotStore::open(&d.path().join("snapshots")).unwrap();
    grow(&sm, "one.bin", 1);
    let a = store.begin_build(&sm).unwrap().finish(1, &cs(), &[]).unwrap();
    let known = KnownHashes::of(a.manifest(), |i| a.file_path(i));
    let shared = ssts(&a);
    assert!(!shared.is_empty());
    assert_eq!(known.len(), shared.len());
    let (path, file) = &shared[0];
    let name = path.strip_prefix("state/").unwrap();

    // A hard link of the file (what a checkpoint of the same database holds) is the same file.
    let other = d.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::hard_link(file, other.join(name)).unwrap();
    let (sha, size) = known.reuse(name, &other.join(name)).unwrap();
    assert_eq!(sha, sha_of(file));
    assert_eq!(size, std::fs::metadata(file).unwrap().len());

    // The same name and the same bytes, but another inode: not reused.
    std::fs::remove_file(other.join(name)).unwrap();
    std::fs::copy(file, other.join(name)).unwrap();
    assert!(known.reuse(name, &other.join(name)).is_none());
    // A symlink to the file: not followed.
    std::fs::remove_file(other.join(name)).unwrap();
    std::os::unix::fs::symlink(file, other.join(name)).unwrap();
    assert!(known.reuse(name, &other.join(name)).is_none());
    // The same inode under another name: not reused.
    std::fs::hard_link(file, other.join("999999.sst")).unwrap();
    assert!(known.reuse("999999.sst", &other.join("999999.sst")).is_none());
    // The same inode grown since the manifest was written: the previous snapshot's
    // entry is dropped, nothing is reused.
    std::fs::OpenOptions::new().append(true).open(file).unwrap().write_all(b"x").unwrap();
    assert!(KnownHashes::of(a.manifest(), |i| a.file_path(i)).reuse(name, &other.join(name)).is_none());
}

#[test]
fn a_new_snapshot_reuses_shared_hashes_and_rehashes_a_replaced_file() {
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("state")).unwrap();
    let store = SnapshotStore::open(&d.path().join("snapshots")).unwrap();
    grow(&sm, "one.bin", 1);
    let a = store.begin_build(&sm).unwrap().finish(1, &cs(), &[]).unwrap();
    grow(&sm, "two.bin", 2);
    let build = store.begin_build(&sm).unwrap();
    // The second checkpoint shares the first one's SSTs (hard links) and has new ones.
    let before: Vec<String> = ssts(&a).into_iter().map(|(p, _)| p).collect();
    let largest = ssts(&a).into_iter().max_by_key(|(_, f)| std::fs::metadata(f).unwrap().len()).unwrap();
    let name = largest.0.strip_prefix("state/").unwrap().to_string();
    // Replace one shared SST in the new checkpoint by a copy with one byte changed (a
    // new inode under the same name): it must be hashed again, not taken over.
    let replaced = build.state_dir().join(&name);
    let tmp = build.state_dir().join("tmp");
    std::fs::copy(&replaced, &tmp).unwrap();
    damage_in_place(&tmp);
    std::fs::rename(&tmp, &replaced).unwrap();
    let b = build.finish(1, &cs(), &[]).unwrap();
    let after = b.manifest().files.iter().find(|f| f.path == largest.0).unwrap();
    assert_eq!(after.sha256, sha_of(&b.dir().join(&largest.0)), "a replaced file is hashed again");
    assert_ne!(after.sha256, a.manifest().files.iter().find(|f| f.path == largest.0).unwrap().sha256);
    // Every other hash is right too: shared ones taken over, new ones computed.
    b.verify(|_| {}).unwrap();
    assert!(b.manifest().files.iter().any(|f| f.path.ends_with(".sst") && !before.contains(&f.path)), "the second build has new SSTs");
}

#[test]
fn a_file_damaged_in_place_is_still_refused_by_the_receiver() {
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("state")).unwrap();
    let store = SnapshotStore::open(&d.path().join("snapshots")).unwrap();
    grow(&sm, "one.bin", 1);
    let a = store.begin_build(&sm).unwrap().finish(1, &cs(), &[]).unwrap();
    // The first snapshot's largest SST (a hard link of the live file) is damaged on disk
    // after it was hashed; the next snapshot links the same inode and takes over its hash.
    let (path, file) = ssts(&a).into_iter().max_by_key(|(_, f)| std::fs::metadata(f).unwrap().len()).unwrap();
    let good = sha_of(&file);
    damage_in_place(&file);
    grow(&sm, "two.bin", 2);
    let b = store.begin_build(&sm).unwrap().finish(1, &cs(), &[]).unwrap();
    assert_eq!(b.manifest().files.iter().find(|f| f.path == path).unwrap().sha256, good, "the hash of the bytes RocksDB wrote is taken over");
    assert!(b.verify(|_| {}).is_err(), "the damage is visible against the manifest");
    // Sent to a joiner: the receiver hashes what it gets and refuses the file.
    let rstore = SnapshotStore::open(&d.path().join("joiner")).unwrap();
    let mut src = SnapshotSource::new(&b);
    let mut rx = Receiver::begin(&rstore, &src.manifest_bytes(), ReceiveLimits::default()).unwrap();
    let mut refused = None;
    while let Some(c) = src.next_chunk().unwrap() {
        if let Err(e) = rx.accept(&c) {
            refused = Some(e);
            break;
        }
    }
    let e = refused.expect("the receiver must refuse the damaged file");
    assert!(e.to_string().contains(&path), "{e}");
    assert!(rstore.list().unwrap().is_empty());
}
