//! [`SmallDisk`]: a small ext4 filesystem in a file, loop-mounted over a directory, that
//! a test fills to the last byte and frees again. Needs root (mount); [`SmallDisk::cannot`]
//! says why a host cannot.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::*;

/// A loop-mounted ext4 filesystem of a few MiB; unmounted (and its image and mount
/// point removed) when dropped, also when the test panics.
pub struct SmallDisk {
    pub at: PathBuf,
    image: PathBuf,
    filler: PathBuf,
}

impl SmallDisk {
    /// Why this host cannot mount one, if it cannot.
    pub fn cannot() -> Option<String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Some("mounting a filesystem needs root".into());
        }
        ["/usr/sbin/mkfs.ext4", "/usr/bin/mount", "/usr/bin/umount"].iter().find(|p| !Path::new(p).exists()).map(|p| format!("{p} is not installed"))
    }

    /// Makes an ext4 filesystem of `mib` MiB in `image` and mounts it over `at` (created).
    /// Reserved blocks are 0, so root fills it as any user would. A host without loop
    /// devices gets a tmpfs of the same size instead (said on stderr): as full a disk,
    /// though not file-backed.
    pub fn mount(image: &Path, at: &Path, mib: u64) -> SmallDisk {
        std::fs::create_dir_all(at).expect("mount point");
        let f = std::fs::File::create(image).expect("image");
        f.set_len(mib << 20).expect("image size");
        drop(f);
        run_ok(Command::new("/usr/sbin/mkfs.ext4").args(["-q", "-F", "-m", "0"]).arg(image), Duration::from_secs(60));
        let looped = run(Command::new("/usr/bin/mount").args(["-o", "loop"]).arg(image).arg(at), Duration::from_secs(60));
        if !looped.status.success() {
            eprintln!("no loop mount here ({}): a tmpfs of {mib} MiB instead", String::from_utf8_lossy(&looped.stderr).trim());
            run_ok(Command::new("/usr/bin/mount").args(["-t", "tmpfs", "-o", &format!("size={mib}m")]).arg("tmpfs").arg(at), Duration::from_secs(60));
        }
        SmallDisk { at: at.to_path_buf(), image: image.to_path_buf(), filler: at.join("filler") }
    }

    /// Writes a file until the filesystem has no byte left (a write fails with ENOSPC).
    /// Returns the bytes written.
    pub fn fill(&self) -> u64 {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&self.filler).expect("filler");
        let block = vec![0x5a_u8; 64 << 10];
        let mut n = 0u64;
        // Whole blocks, then single bytes for the last partial block.
        for chunk in [block.len(), 4096, 1] {
            loop {
                match f.write_all(&block[..chunk]).and_then(|_| f.sync_data()) {
                    Ok(()) => n += chunk as u64,
                    Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                    Err(e) => panic!("filling {}: {e}", self.at.display()),
                }
            }
        }
        n
    }

    /// Gives `bytes` of the filler back (it is cut shorter): a little space is free.
    pub fn free_some(&self, bytes: u64) {
        let f = std::fs::OpenOptions::new().write(true).open(&self.filler).expect("filler");
        let len = f.metadata().expect("filler's size").len();
        f.set_len(len.saturating_sub(bytes)).expect("cutting the filler");
    }

    /// Removes the filler: the space is free again.
    pub fn free(&self) {
        std::fs::remove_file(&self.filler).expect("remove the filler");
    }

    /// Free bytes, as `statvfs` says.
    pub fn available(&self) -> u64 {
        let c = std::ffi::CString::new(self.at.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: `c` is a valid NUL-terminated path and `s` a valid out pointer.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0, "statvfs");
        s.f_bavail as u64 * s.f_frsize as u64
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let o = Command::new("/usr/bin/umount").arg(&self.at).output();
        if !o.is_ok_and(|o| o.status.success()) {
            // Still held by a process being killed: detach it now, freed once unused.
            let _ = Command::new("/usr/bin/umount").arg("-l").arg(&self.at).output();
        }
        let _ = std::fs::remove_file(&self.image);
        // The mount point, and its folder if that is left empty (a test's root whose
        // removal stopped at the mounted folder).
        let _ = std::fs::remove_dir(&self.at);
        if let Some(parent) = self.at.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}
