//! Minion id and path validation: the one place that decides which names may become a
//! record, a file name or a key in a view.
//!
//! Salt's `valid_id` refuses an id containing `/`, `\` or NUL, and any id whose path under
//! the pki dir would not sit directly in that dir (which rejects `""`, `.` and `..`).
//! Halite applies the same rule at the record layer, plus two limits of its own: the id is
//! UTF-8 (every record field is a msgpack str) and at most [`MAX_ID_LEN`] bytes, the
//! longest file name Linux allows, so that an accepted id can always be written by the
//! `localfs_key` view.

use crate::error::{Error, Result};

/// The longest minion id accepted, in bytes (NAME_MAX on Linux).
pub const MAX_ID_LEN: usize = 255;

/// Checks a minion id. Returns it unchanged when it is valid.
pub fn validate_minion_id(id: &str) -> Result<&str> {
    let bad = |why: &str| Err(Error::InvalidId { id: id.escape_debug().to_string(), why: why.to_string() });
    if id.is_empty() {
        return bad("it is empty");
    }
    if id.len() > MAX_ID_LEN {
        return bad("it is longer than 255 bytes");
    }
    if id == "." || id == ".." {
        return bad("it names a directory, not a file");
    }
    if id.contains(['/', '\\', '\0']) {
        return bad("it contains a path separator or NUL");
    }
    Ok(id)
}

/// Checks a minion id given as raw bytes (from a file name or a peer): it must be UTF-8
/// and pass [`validate_minion_id`].
pub fn validate_minion_id_bytes(id: &[u8]) -> Result<&str> {
    match std::str::from_utf8(id) {
        Ok(s) => validate_minion_id(s),
        Err(_) => Err(Error::InvalidId {
            id: String::from_utf8_lossy(id).escape_debug().to_string(),
            why: "it is not UTF-8".to_string(),
        }),
    }
}

/// Checks a saltenv name: same rules as a minion id (it becomes a directory name).
pub fn validate_saltenv(env: &str) -> Result<&str> {
    validate_minion_id(env).map_err(|e| match e {
        Error::InvalidId { id, why } => Error::InvalidPath { path: id, why: format!("saltenv refused: {why}") },
        other => other,
    })
}

/// Checks a path relative to a roots tree: `/`-separated, no empty, `.` or `..`
/// component, not absolute, no NUL or backslash, at most 4096 bytes.
pub fn validate_relative_path(path: &str) -> Result<&str> {
    let bad = |why: &str| Err(Error::InvalidPath { path: path.escape_debug().to_string(), why: why.to_string() });
    if path.is_empty() {
        return bad("it is empty");
    }
    if path.len() > 4096 {
        return bad("it is longer than 4096 bytes");
    }
    if path.starts_with('/') {
        return bad("it is absolute");
    }
    if path.contains(['\0', '\\']) {
        return bad("it contains NUL or a backslash");
    }
    for comp in path.split('/') {
        if comp.is_empty() || comp == "." || comp == ".." {
            return bad("it has an empty, `.` or `..` component");
        }
        if comp.len() > MAX_ID_LEN {
            return bad("a component is longer than 255 bytes");
        }
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salt_refused_ids_are_refused() {
        for id in ["", ".", "..", "a/b", "../../etc/passwd", "foo/bar/..", "bad\\id", "bad\0id", "/abs"] {
            assert!(validate_minion_id(id).is_err(), "{id:?} must be refused");
        }
        assert!(validate_minion_id(&"a".repeat(256)).is_err());
        assert!(validate_minion_id_bytes(b"\xff\xfe").is_err());
    }

    #[test]
    fn salt_accepted_ids_are_accepted() {
        for id in ["web01", ".hidden", "Mixed_Case-01", "web01.example.com", "a..b", "ü-minion"] {
            assert_eq!(validate_minion_id(id).unwrap(), id);
        }
        assert!(validate_minion_id(&"a".repeat(255)).is_ok());
    }

    #[test]
    fn relative_paths() {
        for p in ["top.sls", "a/b/c.sls", ".hidden/x"] {
            assert!(validate_relative_path(p).is_ok(), "{p}");
        }
        for p in ["", "/etc/passwd", "../x", "a/../b", "a//b", "a/./b", "a/", "a\0b"] {
            assert!(validate_relative_path(p).is_err(), "{p:?}");
        }
    }
}
