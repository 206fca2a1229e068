//! Checking a salt-api login against an `external_auth` backend, as Salt's `salt.auth`
//! modules do. One backend per file:
//!
//! - [`file`]: `external_auth: {file: {^filename, ...}}`, a text file of users and
//!   plain or hex-digest passwords, or Apache's [`htpasswd`] and htdigest files;
//! - [`pam`]: Linux-PAM (`auth.pam.service`).
//!
//! A backend answers `Ok(())` or why the login failed ([`Denied`]); the client only ever
//! hears 401, the reason goes to the log.

pub mod file;
pub mod htpasswd;
pub mod pam;

/// Why a login failed (the client only ever hears 401; the reason goes to the log).
#[derive(Debug, PartialEq, Eq)]
pub enum Denied {
    /// Wrong user or password.
    Credentials,
    /// The backend is not configured or not supported; the text says what to fix.
    Config(String),
}

/// Compares without stopping at the first difference.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
