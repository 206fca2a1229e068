//! Checking a login: the `file` eauth backend, as Salt's `salt.auth.file` reads it.
//!
//! `external_auth: {file: {^filename: PATH, ^filetype: text, ^hashtype: plaintext,
//! ^field_separator: ':', ^username_field: 1, ^password_field: 2, USER: [rules]}}`.
//! Each line of the file is split on the separator; the first line whose user field is
//! the user decides (a wrong password there fails the login, later lines are not read).
//! The password field is the password itself (`plaintext`) or its hex digest
//! (`sha1`, `sha224`, `sha256`, `sha384`, `sha512`, `md5`). `^filetype: htpasswd` and
//! `htdigest` (with `^realm`) files are Apache's, checked by [`super::htpasswd`].
//!
//! The file is read at each login (as Salt does), at most [`MAX_FILE`] bytes.

use serde_json::Value as J;
use sha2::Digest;

use super::{same, Denied};

/// Largest password file read.
pub const MAX_FILE: u64 = 16 << 20;

/// Checks `user`/`password` against the `file` backend's options (`^`-keys of its
/// `external_auth` entry).
pub fn check_file(backend: &J, user: &str, password: &str) -> Result<(), Denied> {
    let opt = |k: &str| backend.get(format!("^{k}"));
    let s = |k: &str, d: &str| opt(k).and_then(J::as_str).unwrap_or(d).to_string();
    let n = |k: &str, d: u64| opt(k).and_then(J::as_u64).unwrap_or(d);
    let Some(filename) = opt("filename").and_then(J::as_str) else {
        return Err(Denied::Config("external_auth:file:^filename is not set".into()));
    };
    let filetype = s("filetype", "text").to_lowercase();
    match filetype.as_str() {
        "text" => {}
        "htpasswd" | "htdigest" => {
            let text = read_bounded(filename).map_err(|e| Denied::Config(format!("external_auth:file:^filename {filename}: {e}")))?;
            if filetype == "htpasswd" {
                return super::htpasswd::check_htpasswd(&text, user, password);
            }
            let realm = opt("realm").and_then(J::as_str).ok_or_else(|| Denied::Config("external_auth:file:^realm must be set for an htdigest file".into()))?;
            return super::htpasswd::check_htdigest(&text, realm, user, password);
        }
        other => return Err(Denied::Config(format!("external_auth:file:^filetype {other} is not supported (text, htpasswd, htdigest are)"))),
    }
    let hashtype = s("hashtype", "plaintext").to_lowercase();
    let sep = s("field_separator", ":");
    let (uf, pf) = (n("username_field", 1), n("password_field", 2));
    if sep.is_empty() || uf == 0 || pf == 0 {
        return Err(Denied::Config("external_auth:file: the separator must not be empty and fields count from 1".into()));
    }
    let given = digest(&hashtype, password).ok_or_else(|| Denied::Config(format!("external_auth:file:^hashtype {hashtype} is not supported (plaintext, md5, sha1, sha224, sha256, sha384, sha512 are)")))?;
    let text = read_bounded(filename).map_err(|e| Denied::Config(format!("external_auth:file:^filename {filename}: {e}")))?;
    for line in text.lines() {
        let fields: Vec<&str> = line.trim().split(sep.as_str()).collect();
        let (Some(u), Some(p)) = (fields.get(uf as usize - 1), fields.get(pf as usize - 1)) else {
            return Err(Denied::Config(format!("external_auth:file: a line of {filename} has fewer fields than configured")));
        };
        if *u == user {
            let stored = if hashtype == "plaintext" { p.to_string() } else { p.to_lowercase() };
            return if same(stored.as_bytes(), given.as_bytes()) { Ok(()) } else { Err(Denied::Credentials) };
        }
    }
    Err(Denied::Credentials)
}

fn read_bounded(path: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = String::new();
    (&mut f).take(MAX_FILE + 1).read_to_string(&mut buf)?;
    if buf.len() as u64 > MAX_FILE {
        return Err(std::io::Error::other(format!("larger than {MAX_FILE} bytes")));
    }
    Ok(buf)
}

/// The password as the file would hold it.
fn digest(hashtype: &str, password: &str) -> Option<String> {
    let p = password.as_bytes();
    Some(match hashtype {
        "plaintext" => password.to_string(),
        "md5" => hex::encode(md5::Md5::digest(p)),
        "sha1" => hex::encode(sha1::Sha1::digest(p)),
        "sha224" => hex::encode(sha2::Sha224::digest(p)),
        "sha256" => hex::encode(sha2::Sha256::digest(p)),
        "sha384" => hex::encode(sha2::Sha384::digest(p)),
        "sha512" => hex::encode(sha2::Sha512::digest(p)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_files_plain_and_hashed() {
        let d = tempfile::tempdir().unwrap();
        let plain = d.path().join("users.txt");
        std::fs::write(&plain, "fred:s3cret\nbarney:pebbles\nfred:other\n").unwrap();
        let b = json!({"^filename": plain.to_str().unwrap(), "fred": [".*"]});
        assert_eq!(check_file(&b, "fred", "s3cret"), Ok(()));
        assert_eq!(check_file(&b, "barney", "pebbles"), Ok(()));
        // The first line for a user decides.
        assert_eq!(check_file(&b, "fred", "other"), Err(Denied::Credentials));
        assert_eq!(check_file(&b, "wilma", "s3cret"), Err(Denied::Credentials));
        assert_eq!(check_file(&b, "fred", ""), Err(Denied::Credentials));

        let hashed = d.path().join("legacy.txt");
        std::fs::write(&hashed, format!("1|fred|{}\n", hex::encode(sha2::Sha256::digest(b"s3cret")).to_uppercase())).unwrap();
        let b = json!({"^filename": hashed.to_str().unwrap(), "^hashtype": "sha256", "^field_separator": "|", "^username_field": 2, "^password_field": 3});
        assert_eq!(check_file(&b, "fred", "s3cret"), Ok(()));
        assert_eq!(check_file(&b, "fred", "S3cret"), Err(Denied::Credentials));
    }

    #[test]
    fn misconfiguration_is_named() {
        assert!(matches!(check_file(&json!({}), "u", "p"), Err(Denied::Config(_))));
        assert!(matches!(check_file(&json!({"^filename": "/nonexistent/x"}), "u", "p"), Err(Denied::Config(_))));
        assert!(matches!(check_file(&json!({"^filename": "/etc/hostname", "^filetype": "htdigest"}), "u", "p"), Err(Denied::Config(_))), "no realm");
        assert!(matches!(check_file(&json!({"^filename": "/etc/hostname", "^filetype": "ldif"}), "u", "p"), Err(Denied::Config(_))));
        assert!(matches!(check_file(&json!({"^filename": "/etc/hostname", "^hashtype": "whirlpool"}), "u", "p"), Err(Denied::Config(_))));
        assert!(matches!(check_file(&json!({"^filename": "/etc/hostname", "^username_field": 0}), "u", "p"), Err(Denied::Config(_))));
        let d = tempfile::tempdir().unwrap();
        let short = d.path().join("short");
        std::fs::write(&short, "onlyone\n").unwrap();
        assert!(matches!(check_file(&json!({"^filename": short.to_str().unwrap()}), "u", "p"), Err(Denied::Config(_))));
    }
}
