//! A BSD `flock(LOCK_EX)` taken with a bound on the wait.
//!
//! Views on a shared filesystem are written by several processes: the members of a
//! cluster and Salt's own tools (`salt-key`, `pki.migrate_to_mmap`). Salt 3008.5 takes an
//! exclusive `flock` on `P.lock` around each change of an MmapCache, and Halite takes the
//! same lock for each group of changes it writes (on a shared filesystem one applied
//! batch, released before the apply returns; otherwise until the views are next made
//! durable, at most about a second under load). A writer never waits for ever: the node's raft thread is the
//! caller, and a lock held elsewhere (a stuck process, a rebuild on another member) must
//! not stop it. Past [`LOCK_WAIT`] the attempt fails with an error of kind
//! `WouldBlock`; the view is then marked dirty and written again later
//! (`replication/src/node/driver/faults.rs`).
//!
//! The lock is released when the [`Flock`] is dropped (closing the descriptor would
//! release it too: BSD locks belong to the open file description).

use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The longest a writer waits for a lock: below raft's election timeout (1 s by default),
/// so a member waiting for another one's write is never taken for dead.
pub const LOCK_WAIT: Duration = Duration::from_millis(500);

/// A held exclusive lock on one lock file.
#[derive(Debug)]
pub struct Flock {
    file: File,
    path: PathBuf,
}

impl Flock {
    /// Takes `flock(LOCK_EX)` on `path` (created if missing, never truncated), waiting at
    /// most `bound`. Past it: an `Io` error of kind `WouldBlock` naming the file.
    pub fn acquire(path: &Path, bound: Duration) -> Result<Flock> {
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        let deadline = Instant::now() + bound;
        let mut pause = Duration::from_millis(1);
        loop {
            if try_flock(&file, libc::LOCK_EX | libc::LOCK_NB).map_err(|e| Error::io(format!("flock {}", path.display()), e))? {
                return Ok(Flock { file, path: path.to_path_buf() });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::io(
                    format!("flock {}: held by another writer for more than {} ms", path.display(), bound.as_millis()),
                    std::io::Error::from(std::io::ErrorKind::WouldBlock),
                ));
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Flock {
    fn drop(&mut self) {
        unlock(&self.file);
    }
}

/// `flock(op)` on `file`: true when taken, false when held elsewhere (`LOCK_NB`) or
/// interrupted (the caller asks again).
pub(crate) fn try_flock(file: &File, op: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: flock on a valid descriptor the caller owns.
    if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(false),
        _ => Err(err),
    }
}

/// Releases `file`'s lock (closing the descriptor would release it too).
pub(crate) fn unlock(file: &File) {
    // SAFETY: unlocking a descriptor the caller owns.
    unsafe {
        libc::flock(file.as_raw_fd(), libc::LOCK_UN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_waits_for_the_first_and_gives_up_past_the_bound() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.lock");
        let held = Flock::acquire(&p, LOCK_WAIT).unwrap();
        // Another open file description: flock excludes it even within one process.
        let e = Flock::acquire(&p, Duration::from_millis(30)).unwrap_err();
        match e {
            Error::Io { source, .. } => assert_eq!(source.kind(), std::io::ErrorKind::WouldBlock),
            other => panic!("unexpected {other}"),
        }
        drop(held);
        Flock::acquire(&p, Duration::from_millis(30)).expect("free once released");
    }
}
