//! The state machine's RocksDB on a full disk: a flush that meets it is an error the
//! caller sees, never the end of the process; once space is freed the database is
//! opened again in place and the log applied to it from its own applied index. (Debian's RocksDB keeps its assertions:
//! RocksDB's own log, `LOG` in the state directory, written through a file writer that
//! aborts the process when written again after a write failed; so it is given fatal
//! lines only, `state/options.rs`.) Needs root to mount a small tmpfs; without it the
//! test says it was skipped, and fails under CI.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::format::{KeySet, KeyState};
use crate::state::StateMachine;
use crate::Record;

/// A tmpfs of `mib` MiB mounted over `at`, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, mib: u64) -> Option<Tmpfs> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "mounting a tmpfs needs root under CI");
            eprintln!("SKIPPED full_disk: mounting a tmpfs needs root");
            return None;
        }
        std::fs::create_dir_all(at).unwrap();
        let ok = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"]).arg(at).status().unwrap().success();
        assert!(ok, "mount -t tmpfs over {}", at.display());
        Some(Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn key(id: String, len: usize) -> Record {
    Record::KeySet(KeySet { id, state: KeyState::Pending, pub_key: vec![b'k'; len], time_ns: 1, expect: None, pending_below: None })
}

/// Writes a file until the filesystem of `at` has no byte left.
fn fill(at: &Path) {
    let mut f = std::fs::File::create(at).unwrap();
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    while f.write_all(&block[..1]).is_ok() {}
}

#[test]
fn a_flush_on_a_full_disk_is_an_error_not_an_abort() {
    let d = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&d.path().join("disk"), 16) else { return };
    let sm = StateMachine::open(&disk.0.join("state")).unwrap();
    for i in 1..=20u64 {
        sm.apply(&[(i, key(format!("before{i}"), 3000))]).unwrap();
    }
    sm.flush().unwrap();
    // Every byte taken.
    let mut f = std::fs::File::create(disk.0.join("filler")).unwrap();
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    while f.write_all(&block[..1]).is_ok() {}
    drop(f);
    sm.apply(&[(21, key("during".into(), 100))]).unwrap();
    let e = sm.flush().expect_err("a flush on a full disk");
    assert!(e.to_string().contains("No space left on device"), "{e}");
    // What was flushed before is read back; the process goes on.
    assert!(sm.applied_index().unwrap() >= 20);
    drop(sm);
    std::fs::remove_file(disk.0.join("filler")).unwrap();
    let sm = StateMachine::open_read_only(&disk.0.join("state")).unwrap();
    assert_eq!(sm.applied_index().unwrap(), 20, "the last flush that succeeded");
}

/// RocksDB's flush of the memtables meets a full disk: that write and every later one
/// fail, saying the disk is full, and what is held is still read. Once space is freed the
/// database is opened again in place without a flush: it holds what its last successful
/// flush held, with the applied index of that flush; the log applied again from there
/// (before any other thread reads) brings back every entry applied before, each once,
/// and writes succeed. The state is
/// the one a state machine that never met a full disk has after the same log.
#[test]
fn a_state_machine_that_met_a_full_disk_is_opened_again_in_place_once_freed() {
    let d = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&d.path().join("disk"), 16) else { return };
    let sm = StateMachine::open(&disk.0.join("state")).unwrap();
    // The log: every entry that applied, by index.
    let mut log: Vec<(u64, Record)> = Vec::new();
    for i in 1..=20u64 {
        let e = (i, key(format!("k{i}"), 3000));
        sm.apply(std::slice::from_ref(&e)).unwrap();
        log.push(e);
    }
    sm.flush().unwrap();
    fill(&disk.0.join("filler"));
    // Entries of 64 KiB go to the memtables until their flush (at 4 MiB) meets the full disk.
    let mut failed = None;
    for i in 21..=400u64 {
        let e = (i, key(format!("k{i}"), 64 << 10));
        match sm.apply(std::slice::from_ref(&e)) {
            Ok(_) => log.push(e),
            Err(err) => {
                failed = Some((i, err));
                break;
            }
        }
    }
    let (next, err) = failed.expect("a write fails once the memtables cannot be flushed");
    assert!(err.is_no_space(), "{err}");
    let again = sm.apply(&[(next, key(format!("k{next}"), 10))]).expect_err("RocksDB refuses writes until opened again");
    assert!(again.is_no_space(), "{again}");
    assert_eq!(sm.applied_index().unwrap(), next - 1);
    assert!(sm.get_key(&format!("k{}", next - 1)).unwrap().is_some(), "what is held is read");

    std::fs::remove_file(disk.0.join("filler")).unwrap();
    // Another thread reading all along never sees the state without the entries it saw.
    let done = std::sync::atomic::AtomicBool::new(false);
    let from = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut reads = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(sm.applied_index().unwrap(), next - 1, "a reader during the reopen");
                reads += 1;
            }
            reads
        });
        let from = sm
            .reopen_unflushed(|| -> crate::Result<u64> {
                let from = sm.applied_index()? + 1;
                let tail: Vec<(u64, Record)> = log.iter().filter(|(i, _)| *i >= from).cloned().collect();
                sm.apply(&tail)?;
                Ok(from)
            })
            .unwrap();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        from
    });
    assert!((21..next).contains(&from), "the memtables the failed flush held were dropped and applied again from {from} (flushed: 20, failed at {next})");
    assert_eq!(sm.applied_index().unwrap(), next - 1);
    assert_eq!(sm.count_keys(crate::keys::BankState::Pending).unwrap(), next - 1);
    assert_eq!(sm.pending_keys(), next - 1);
    assert!(sm.get_key(&format!("k{next}")).unwrap().is_none());
    // Writes succeed again and reach the disk.
    let e = (next, key(format!("k{next}"), 10));
    sm.apply(std::slice::from_ref(&e)).unwrap();
    log.push(e);
    sm.flush().unwrap();
    let digest = sm.digest().unwrap();
    drop(sm);
    let sm = StateMachine::open_read_only(&disk.0.join("state")).unwrap();
    assert_eq!(sm.applied_index().unwrap(), next);
    assert_eq!(sm.digest().unwrap(), digest);
    // The same log applied where the disk never filled.
    let whole = StateMachine::open(&d.path().join("whole")).unwrap();
    whole.apply(&log).unwrap();
    assert_eq!(whole.digest().unwrap(), digest, "the state of the log, each entry applied once");
}

/// A running member installs a snapshot received from the leader into a state machine
/// whose filesystem is full (the snapshot store on another, as after its transfer): the
/// install fails saying the disk is full, and the old state is still served. Once space
/// is freed the same install is run again and the state is exactly the snapshot's.
#[test]
fn a_snapshot_install_that_met_a_full_disk_is_run_again_once_freed() {
    let d = tempfile::tempdir().unwrap();
    let src = StateMachine::open(&d.path().join("src")).unwrap();
    let recs: Vec<(u64, Record)> = (1..=200u64).map(|i| (i, key(format!("new{i}"), 3000))).collect();
    src.apply(&recs).unwrap();
    let store = crate::snapshot::SnapshotStore::open(&d.path().join("snapshots")).unwrap();
    let voters = raft::eraftpb::ConfState { voters: vec![1], ..Default::default() };
    let snap = store.begin_build(&src).unwrap().finish(1, &voters, &[]).unwrap();
    let want = src.digest().unwrap();
    drop(src);

    let Some(disk) = Tmpfs::mount(&d.path().join("disk"), 16) else { return };
    let sm = StateMachine::open(&disk.0.join("state")).unwrap();
    sm.apply(&[(1, key("old".into(), 100))]).unwrap();
    sm.flush().unwrap();
    fill(&disk.0.join("filler"));
    let e = crate::snapshot::install_state(&snap, &sm).expect_err("an install on a full disk");
    assert!(e.is_no_space(), "{e}");
    assert!(sm.get_key("old").unwrap().is_some(), "the old state is served");
    assert!(sm.get_key("new1").unwrap().is_none());

    std::fs::remove_file(disk.0.join("filler")).unwrap();
    crate::snapshot::install_state(&snap, &sm).unwrap();
    let got = sm.digest().unwrap();
    assert_eq!((got.items, got.sha256, got.applied_index), (want.items, want.sha256, want.applied_index));
    assert!(sm.get_key("old").unwrap().is_none());
    for ext in ["installing", "replaced"] {
        assert!(!disk.0.join("state").with_extension(ext).exists(), "{ext} left behind");
    }
}
