//! The data directory's owner lock: one exclusive BSD `flock` on
//! `<halite_data_dir>/halite.lock`, held by whoever opens the log and the state machine.
//!
//! `salt-master` takes it before it opens anything in the directory and keeps it for its
//! whole life; an offline tool (`halite-ctl`, `salt-key --offline`, `salt-run --offline`)
//! takes it without waiting and refuses when it is held. The holder writes
//! `PID ROLE\n` into the file once it holds the lock (`docs/formats.md`), so whoever
//! finds it held can say who holds it. The kernel releases the lock when the holder's
//! descriptor closes (its exit included): a crash leaves no stale lock, only stale
//! text, which is never trusted without the lock being held.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "halite.lock";

/// The role `salt-master` writes into the lock file.
pub const MASTER_ROLE: &str = "salt-master";

/// Who holds the lock, as the holder wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// `salt-master`, or the tool and what it does (`halite-ctl dump`).
    pub role: String,
}

impl Holder {
    /// Whether the holder is a master (running or starting).
    pub fn is_master(&self) -> bool {
        self.role == MASTER_ROLE
    }

    /// Reads `PID ROLE` (`None`: empty, or not that shape: the holder has not written it
    /// yet, or something else did).
    pub fn parse(text: &str) -> Option<Holder> {
        let line = text.lines().next()?;
        let (pid, role) = line.split_once(' ')?;
        let pid = pid.parse().ok().filter(|p| *p > 0)?;
        let role: String = role.chars().filter(|c| !c.is_control()).take(200).collect();
        (!role.is_empty()).then_some(Holder { pid, role })
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_master() {
            write!(f, "the master (pid {})", self.pid)
        } else {
            write!(f, "{} (pid {})", self.role, self.pid)
        }
    }
}

/// A held owner lock on a data directory; released when dropped.
#[derive(Debug)]
pub struct DirLock {
    file: File,
    path: PathBuf,
}

/// What [`DirLock::try_acquire`] found.
#[derive(Debug)]
pub enum Attempt {
    Held(DirLock),
    /// Another open file description holds it; who, if the holder has said.
    Busy(Option<Holder>),
}

impl DirLock {
    /// The lock file of data directory `dir`.
    pub fn path_in(dir: &Path) -> PathBuf {
        dir.join(LOCK_FILE)
    }

    /// Takes the lock on `dir` (created 0700 if missing) without waiting.
    pub fn try_acquire(dir: &Path, role: &str) -> Result<Attempt> {
        let file = open(dir)?;
        if crate::flock::try_flock(&file, libc::LOCK_EX | libc::LOCK_NB).map_err(|e| Error::io(format!("flock {}", Self::path_in(dir).display()), e))? {
            return Ok(Attempt::Held(DirLock::holding(file, dir, role)?));
        }
        Ok(Attempt::Busy(holder(dir)))
    }

    /// Takes the lock on `dir`, waiting for as long as another process holds it.
    pub fn acquire(dir: &Path, role: &str) -> Result<DirLock> {
        let file = open(dir)?;
        while !crate::flock::try_flock(&file, libc::LOCK_EX).map_err(|e| Error::io(format!("flock {}", Self::path_in(dir).display()), e))? {}
        DirLock::holding(file, dir, role)
    }

    fn holding(mut file: File, dir: &Path, role: &str) -> Result<DirLock> {
        let path = Self::path_in(dir);
        let line = format!("{} {}\n", std::process::id(), role.replace(['\n', '\r'], " "));
        file.set_len(0)
            .and_then(|_| file.rewind())
            .and_then(|_| file.write_all(line.as_bytes()))
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        Ok(DirLock { file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether no process holds the lock on `dir` (true too when `dir` or its lock file
    /// does not exist), read without writing anything: the file is opened read-only and
    /// never created, and no holder line is written (a master starting later would read
    /// one as another master's). The answer comes from a shared `flock` taken without
    /// waiting and released at once; in that instant a master starting on `dir` finds it
    /// busy, so a caller asks before it starts one, not while.
    pub fn is_free(dir: &Path) -> Result<bool> {
        let path = Self::path_in(dir);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
        };
        let free = crate::flock::try_flock(&file, libc::LOCK_SH | libc::LOCK_NB).map_err(|e| Error::io(format!("flock {}", path.display()), e))?;
        if free {
            crate::flock::unlock(&file);
        }
        Ok(free)
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        crate::flock::unlock(&self.file);
    }
}

/// Who the lock file of `dir` names (it may be stale when the lock is free).
pub fn holder(dir: &Path) -> Option<Holder> {
    let mut text = String::new();
    File::open(DirLock::path_in(dir)).ok()?.take(4096).read_to_string(&mut text).ok()?;
    Holder::parse(&text)
}

fn open(dir: &Path) -> Result<File> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let path = DirLock::path_in(dir);
    OpenOptions::new().create(true).truncate(false).read(true).write(true).mode(0o600).custom_flags(libc::O_CLOEXEC).open(&path).map_err(|e| Error::io(format!("opening {}", path.display()), e))
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_refused_and_told_who_holds_it() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("data");
        let Attempt::Held(held) = DirLock::try_acquire(&dir, "halite-ctl dump").unwrap() else { panic!("free") };
        assert_eq!(std::fs::read_to_string(held.path()).unwrap(), format!("{} halite-ctl dump\n", std::process::id()));
        // Another open file description: flock excludes it even within one process.
        match DirLock::try_acquire(&dir, MASTER_ROLE).unwrap() {
            Attempt::Busy(Some(h)) => {
                assert_eq!(h, Holder { pid: std::process::id(), role: "halite-ctl dump".into() });
                assert_eq!(h.to_string(), format!("halite-ctl dump (pid {})", std::process::id()));
            }
            other => panic!("{other:?}"),
        }
        drop(held);
        let Attempt::Held(m) = DirLock::try_acquire(&dir, MASTER_ROLE).unwrap() else { panic!("free once released") };
        let h = holder(&dir).unwrap();
        assert!(h.is_master());
        assert_eq!(h.to_string(), format!("the master (pid {})", std::process::id()));
        drop(m);
    }

    #[test]
    fn the_probe_sees_a_held_lock_and_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("data");
        // No directory, then a directory with no lock file: free, and nothing created.
        assert!(DirLock::is_free(&dir).unwrap());
        std::fs::create_dir(&dir).unwrap();
        assert!(DirLock::is_free(&dir).unwrap());
        assert!(!DirLock::path_in(&dir).exists());
        let Attempt::Held(held) = DirLock::try_acquire(&dir, MASTER_ROLE).unwrap() else { panic!("free") };
        let line = std::fs::read_to_string(held.path()).unwrap();
        assert!(!DirLock::is_free(&dir).unwrap());
        assert_eq!(std::fs::read_to_string(held.path()).unwrap(), line, "the probe wrote into the lock file");
        drop(held);
        assert!(DirLock::is_free(&dir).unwrap());
        assert_eq!(std::fs::read_to_string(DirLock::path_in(&dir)).unwrap(), line);
        // Probing left it free for a taker.
        assert!(matches!(DirLock::try_acquire(&dir, "halite-ctl dump").unwrap(), Attempt::Held(_)));
    }

    #[test]
    fn what_is_not_pid_and_role_names_nobody() {
        for t in ["", "\n", "x salt-master\n", "0 salt-master\n", "12\n", "12 \n"] {
            assert_eq!(Holder::parse(t), None, "{t:?}");
        }
        assert_eq!(Holder::parse("12 salt-key --offline\n"), Some(Holder { pid: 12, role: "salt-key --offline".into() }));
    }
}
