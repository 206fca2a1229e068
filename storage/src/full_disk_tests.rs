//! The state machine's RocksDB on a full disk: a flush that meets it is an error the
//! caller sees, never the end of the process. (Debian's RocksDB keeps its assertions:
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
