//! Free space on the filesystem of a directory, as an unprivileged writer sees it.
//!
//! The node keeps a reserve free on its data directory's filesystem
//! (`halite_min_free_bytes`): the log and the state machine are kept from meeting a
//! full disk mid-write (RocksDB refuses every write after one met it, until opened
//! again), so writes stop while the free space is under the reserve
//! (`halite_replication`'s driver, `docs/operations.md` "A full disk").

use std::path::Path;

/// Bytes an unprivileged process may still write on the filesystem holding `path`
/// (`statvfs`: available blocks times the fragment size).
pub fn available(path: &Path) -> std::io::Result<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: `c` is a valid NUL-terminated path and `s` a valid, writable statvfs.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
}

/// Whether an I/O error says the filesystem is full (or the user's quota spent).
pub fn is_no_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) || matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_has_some_space_and_a_missing_one_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        assert!(available(d.path()).unwrap() > 0);
        assert!(available(&d.path().join("missing")).is_err());
        assert!(is_no_space(&std::io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(!is_no_space(&std::io::Error::from_raw_os_error(libc::EIO)));
        // As raft-engine makes it.
        assert!(is_no_space(&std::io::Error::new(std::io::ErrorKind::StorageFull, "nospace")));
    }
}
