//! The eauth token record (kind 18): salt-api's login tokens, shared by a cluster.
//!
//! `salt-api` mints a random token at `/login`, hands it to the client and proposes an
//! [`EauthToken`] with [`TokenOp::Create`] carrying only the SHA-256 of the token (64
//! lowercase hex digits), the user, the eauth backend, the user's permissions (the
//! `external_auth` rules summed at login, JSON) and the validity window. A member that
//! applies it keeps it in the `meta` family under `eauth_token NUL <hash>`; any member can
//! then check a token a client shows by hashing it and reading that key, so a token
//! made through one member works through every other. [`TokenOp::Revoke`] (`/logout`)
//! deletes the key on every member alike.
//!
//! Decided at apply: a create whose hash is already held changes nothing (the first one
//! committed wins; the proposer learns whether its own was the one by reading the user
//! back), a revoke of an unknown hash changes nothing. Expiry is read by the member that
//! checks the token against its clock (`expire_ns`); the job cache's expiry
//! (`jobs_expired`, proposed now and then by the leader) also drops every token that had
//! expired at the record's `time_ns`, so tokens do not pile up.
//!
//! Neither the state, a snapshot nor a backup holds a token itself: only its hash, which
//! cannot be shown to salt-api in its place.

use serde::{Deserialize, Serialize};

use super::Payload;
use crate::error::{Error, Result};

/// Prefix of the tokens in the `meta` family.
pub const TOKEN_PREFIX: &[u8] = b"eauth_token\0";
/// Length of a token hash: hex SHA-256.
pub const HASH_LEN: usize = 64;
/// Longest user name carried.
pub const MAX_USER_LEN: usize = 255;
/// Longest eauth backend name carried.
pub const MAX_EAUTH_LEN: usize = 64;
/// Most bytes of permissions (JSON) one token carries.
pub const MAX_PERMS_LEN: usize = 256 << 10;

/// What a token record does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenOp {
    Create,
    Revoke,
}

/// One token's creation or revocation. A revoke carries the hash only (the other
/// fields empty or zero).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EauthToken {
    pub op: TokenOp,
    /// Hex SHA-256 of the token the client holds.
    pub hash: String,
    pub user: String,
    pub eauth: String,
    /// The user's `external_auth` rules, JSON (a list, as Salt's `perms`).
    #[serde(with = "serde_bytes")]
    pub perms: Vec<u8>,
    /// When it was made and until when it is valid (Unix ns).
    pub start_ns: u64,
    pub expire_ns: u64,
    pub time_ns: u64,
}

impl Payload for EauthToken {
    /// A hash of 64 lowercase hex digits; for a create, a user, an eauth name and
    /// permissions within their bounds and an expiry after the start.
    fn check(&self) -> Result<()> {
        let t = self;
        let h = t.hash.as_bytes();
        if h.len() != HASH_LEN || !h.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)) {
            return Err(Error::Invalid("eauth token: the hash is not 64 lowercase hex digits".into()));
        }
        if t.op == TokenOp::Create {
            if t.user.is_empty() || t.user.len() > MAX_USER_LEN || t.user.contains('\0') {
                return Err(Error::Invalid(format!("eauth token: a user name of 1 to {MAX_USER_LEN} bytes expected")));
            }
            if t.eauth.is_empty() || t.eauth.len() > MAX_EAUTH_LEN || !t.eauth.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(Error::Invalid(format!("eauth token: an eauth name of 1 to {MAX_EAUTH_LEN} word characters expected")));
            }
            if t.perms.len() > MAX_PERMS_LEN {
                return Err(Error::Invalid(format!("eauth token: {} bytes of permissions, more than {MAX_PERMS_LEN}", t.perms.len())));
            }
            if t.expire_ns <= t.start_ns {
                return Err(Error::Invalid("eauth token: it expires before it starts".into()));
            }
        }
        Ok(())
    }
}

/// The `meta` key of a token.
pub fn token_key(hash: &str) -> Vec<u8> {
    let mut k = TOKEN_PREFIX.to_vec();
    k.extend_from_slice(hash.as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::LogEntry;
    use crate::format::{JobsExpired, Record};
    use crate::state::StateMachine;

    fn create(hash: &str, user: &str, expire_ns: u64) -> Record {
        Record::EauthToken(EauthToken { op: TokenOp::Create, hash: hash.into(), user: user.into(), eauth: "file".into(), perms: br#"[".*"]"#.to_vec(), start_ns: 1, expire_ns, time_ns: 1 })
    }

    fn revoke(hash: &str) -> Record {
        Record::EauthToken(EauthToken { op: TokenOp::Revoke, hash: hash.into(), user: String::new(), eauth: String::new(), perms: Vec::new(), start_ns: 0, expire_ns: 0, time_ns: 2 })
    }

    #[test]
    fn records_are_checked_and_round_trip() {
        let good = create(&"ab".repeat(32), "fred", 10);
        assert_eq!(Record::decode(&good.encode().unwrap()).unwrap(), good);
        assert!(revoke(&"0".repeat(64)).encode().is_ok());
        for bad in [create("", "u", 10), create(&"AB".repeat(32), "u", 10), create(&"a".repeat(65), "u", 10), create(&"a".repeat(64), "", 10), create(&"a".repeat(64), "u", 1), revoke("xyz")] {
            assert!(bad.encode().is_err(), "{bad:?}");
        }
        let mut t = EauthToken { op: TokenOp::Create, hash: "a".repeat(64), user: "u".into(), eauth: "../x".into(), perms: vec![], start_ns: 1, expire_ns: 2, time_ns: 0 };
        assert!(t.check().is_err());
        t.eauth = "pam".into();
        t.perms = vec![b' '; MAX_PERMS_LEN + 1];
        assert!(t.check().is_err());
    }

    /// The first create of a hash wins (in one batch and in two), a revoke deletes it,
    /// and the job cache's expiry drops the tokens expired before its cutoff.
    #[test]
    fn the_first_create_wins_revoke_deletes_and_expiry_drops() {
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        for together in [true, false] {
            let d = tempfile::tempdir().unwrap();
            let sm = StateMachine::open(&d.path().join("s")).unwrap();
            let log = vec![LogEntry::plain(1, vec![create(&a, "first", 2_000_000_000_000_000_000)]), LogEntry::plain(2, vec![create(&a, "second", 2_000_000_000_000_000_000), create(&b, "bob", 1_700_000_000_000_000_000)])];
            if together {
                sm.apply_entries(&log).unwrap();
            } else {
                log.iter().for_each(|e| drop(sm.apply_entries(std::slice::from_ref(e)).unwrap()));
            }
            assert_eq!(sm.eauth_token(&a).unwrap().unwrap().user, "first");
            assert_eq!(sm.eauth_token(&b).unwrap().unwrap().user, "bob");
            sm.apply_entries(&[LogEntry::plain(3, vec![revoke(&a), revoke(&"c".repeat(64))])]).unwrap();
            assert_eq!(sm.eauth_token(&a).unwrap(), None);
            // Expiry at 2024-01-01: bob's token (expired late 2023) goes, nothing else does.
            sm.apply_entries(&[LogEntry::plain(4, vec![create(&a, "again", 2_000_000_000_000_000_000), Record::JobsExpired(JobsExpired { before_jid: "20240101000000000000".into(), time_ns: 1_704_067_200_000_000_000 })])]).unwrap();
            assert_eq!(sm.eauth_token(&b).unwrap(), None);
            assert_eq!(sm.eauth_token(&a).unwrap().unwrap().user, "again");
        }
    }
}
