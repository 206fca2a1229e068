//! Apache-style password files for the `file` eauth backend (`^filetype: htpasswd` or
//! `htdigest`), checked as Salt checks them with passlib's `HtpasswdFile` and
//! `HtdigestFile`.
//!
//! An htpasswd line is `USER:HASH`; the hashes verified are the ones Apache's
//! `htpasswd` writes: bcrypt (`$2y$`, `$2b$`, `$2a$`, `-B`), Apache's MD5-crypt
//! (`$apr1$`, `-m`, the default) and `{SHA}` (base64 of SHA-1, `-s`). Other schemes
//! (DES crypt, `$5$`/`$6$` SHA-crypt, plain text) are refused with a clear reason.
//! An htdigest line is `USER:REALM:MD5(USER:REALM:PASSWORD)` in hex; `^realm` chooses the
//! realm. Blank lines and lines starting with `#` are skipped; the first line for a user
//! (and realm) decides.

use base64::Engine;
use md5::{Digest as _, Md5};

use super::{same, Denied};

/// Checks an htpasswd file's `text` for `user`/`password`.
pub fn check_htpasswd(text: &str, user: &str, password: &str) -> Result<(), Denied> {
    for line in records(text) {
        let mut f = line.split(':');
        let (Some(u), Some(hash)) = (f.next(), f.next()) else { continue };
        if u == user {
            return verify(hash, password);
        }
    }
    Err(Denied::Credentials)
}

/// Checks an htdigest file's `text` for `user`/`password` in `realm`.
pub fn check_htdigest(text: &str, realm: &str, user: &str, password: &str) -> Result<(), Denied> {
    for line in records(text) {
        let mut f = line.split(':');
        let (Some(u), Some(r), Some(hash)) = (f.next(), f.next(), f.next()) else { continue };
        if u == user && r == realm {
            let given = hex::encode(Md5::digest(format!("{user}:{realm}:{password}").as_bytes()));
            return if same(given.as_bytes(), hash.to_ascii_lowercase().as_bytes()) { Ok(()) } else { Err(Denied::Credentials) };
        }
    }
    Err(Denied::Credentials)
}

fn records(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// Verifies one htpasswd hash.
fn verify(hash: &str, password: &str) -> Result<(), Denied> {
    let ok = if hash.starts_with("$2y$") || hash.starts_with("$2b$") || hash.starts_with("$2a$") {
        // A malformed hash (or an absurd cost) is a configuration fault, not a login.
        let cost: u32 = hash.get(4..6).and_then(|c| c.parse().ok()).unwrap_or(0);
        if !(4..=17).contains(&cost) {
            return Err(Denied::Config(format!("htpasswd: a bcrypt cost of {cost} is outside 4 to 17")));
        }
        bcrypt::verify(password, hash).map_err(|e| Denied::Config(format!("htpasswd: a bcrypt hash Halite cannot read: {e}")))?
    } else if let Some(rest) = hash.strip_prefix("$apr1$") {
        let salt = rest.split('$').next().unwrap_or("");
        same(apr1(password.as_bytes(), salt.as_bytes()).as_bytes(), hash.as_bytes())
    } else if let Some(b64) = hash.strip_prefix("{SHA}") {
        let given = base64::engine::general_purpose::STANDARD.encode(sha1::Sha1::digest(password.as_bytes()));
        same(given.as_bytes(), b64.as_bytes())
    } else {
        return Err(Denied::Config("htpasswd: only bcrypt ($2y$), $apr1$ and {SHA} hashes are supported by Halite (htpasswd -B, -m or -s)".into()));
    };
    if ok {
        Ok(())
    } else {
        Err(Denied::Credentials)
    }
}

/// Apache's MD5-crypt (`$apr1$SALT$HASH`, PHK's FreeBSD MD5-crypt with Apache's magic).
pub fn apr1(pw: &[u8], salt: &[u8]) -> String {
    const MAGIC: &[u8] = b"$apr1$";
    let salt = &salt[..salt.len().min(8)];
    let alt = Md5::new().chain_update(pw).chain_update(salt).chain_update(pw).finalize();
    let mut ctx = Md5::new().chain_update(pw).chain_update(MAGIC).chain_update(salt);
    let mut left = pw.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    let mut i = pw.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&pw[..1]);
        }
        i >>= 1;
    }
    let mut fin = ctx.finalize();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round & 1 == 1 {
            c.update(pw);
        } else {
            c.update(fin);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(pw);
        }
        if round & 1 == 1 {
            c.update(fin);
        } else {
            c.update(pw);
        }
        fin = c.finalize();
    }
    const CHARS: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(40);
    out.push_str("$apr1$");
    out.push_str(&String::from_utf8_lossy(salt));
    out.push('$');
    let mut put = |mut v: u32, n: usize| {
        for _ in 0..n {
            out.push(CHARS[(v & 0x3f) as usize] as char);
            v >>= 6;
        }
    };
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        put((fin[a] as u32) << 16 | (fin[b] as u32) << 8 | fin[c] as u32, 4);
    }
    put(fin[11] as u32, 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by Apache's `htpasswd` 2.4 (`-B -C 5`, `-m`, `-s`), with a comment line.
    const FILE: &str = "# made by htpasswd\nbob:$2y$05$UwAcFQIFjkqFkqPws3aKJ.GLALqbm/l8MSc8xXLioP74dMw4CrDzu\namy:$apr1$LpC92ioe$6A/mlTIk2NCqv4gd1aBmA.\nsam:{SHA}KvPXpIScDQubdcQXyPXUdUCmoqA=\n\nbob:$apr1$LpC92ioe$6A/mlTIk2NCqv4gd1aBmA.\n";

    #[test]
    fn hashes_written_by_apache_htpasswd_verify() {
        assert_eq!(check_htpasswd(FILE, "bob", "hunter2 b"), Ok(()));
        assert_eq!(check_htpasswd(FILE, "bob", "hunter2"), Err(Denied::Credentials));
        assert_eq!(check_htpasswd(FILE, "amy", "apr pass"), Ok(()));
        assert_eq!(check_htpasswd(FILE, "amy", "apr pas"), Err(Denied::Credentials));
        assert_eq!(check_htpasswd(FILE, "sam", "sha pass"), Ok(()));
        assert_eq!(check_htpasswd(FILE, "sam", "sha pass "), Err(Denied::Credentials));
        // The first line for bob decides: the second's password is not his.
        assert_eq!(check_htpasswd(FILE, "bob", "apr pass"), Err(Denied::Credentials));
        assert_eq!(check_htpasswd(FILE, "nobody", "x"), Err(Denied::Credentials));
    }

    #[test]
    fn apr1_matches_openssl() {
        // `openssl passwd -apr1 -salt xyz12345 'open sesame'`
        assert_eq!(apr1(b"open sesame", b"xyz12345"), "$apr1$xyz12345$IRHH8OJyyj7CB7e9dl2ss0");
    }

    #[test]
    fn other_schemes_and_bad_hashes_are_named() {
        assert!(matches!(check_htpasswd("u:$6$salt$abc\n", "u", "p"), Err(Denied::Config(_))));
        assert!(matches!(check_htpasswd("u:plain\n", "u", "p"), Err(Denied::Config(_))));
        assert!(matches!(check_htpasswd("u:$2y$31$UwAcFQIFjkqFkqPws3aKJ.GLALqbm/l8MSc8xXLioP74dMw4CrDzu\n", "u", "p"), Err(Denied::Config(_))));
        assert!(matches!(check_htpasswd("u:$2y$05$short\n", "u", "p"), Err(Denied::Config(_))));
    }

    #[test]
    fn htdigest_lines() {
        // Written by Apache's `htdigest -c f Halite dee` with the password "digest me".
        let line = "dee:Halite:9c5a9751ba212833b7d1a9094273c60e\n";
        assert_eq!(check_htdigest(line, "Halite", "dee", "digest me"), Ok(()));
        assert_eq!(check_htdigest(line, "Halite", "dee", "digest"), Err(Denied::Credentials));
        assert_eq!(check_htdigest(line, "Other", "dee", "digest me"), Err(Denied::Credentials));
    }
}
