//! The member-release record (kind 21): which record set a cluster member's build
//! reads and writes, recorded by the member itself; applied in `state/member_releases.rs`.
//!
//! A cluster can only use a record kind once every member knows it: a member that meets
//! a committed record it cannot read stops applying (`format::decode`'s "written by a
//! newer release"). So each member records its build's [`RECORD_SET`](crate::format::RECORD_SET)
//! in the log, the members' lowest is the cluster's (`NodeHandle::cluster_record_set` in
//! the replication crate), a kind newer than that is not written
//! ([`RecordKind::since`](crate::format::RecordKind::since)), and a member whose build
//! is older than the cluster's record set is refused at its join.

use serde::{Deserialize, Serialize};

use super::Payload;
use crate::error::{Error, Result};

/// This build's release, as a `member_release` record names it.
pub const RELEASE: &str = concat!("halite ", env!("CARGO_PKG_VERSION"));

/// The longest `release` string a record carries.
pub const MAX_RELEASE_LEN: usize = 128;

/// A cluster member's build: its raft id, the record set it reads and writes, and its
/// release as a person reads it (`halite 0.1.0`). Decided at apply: recorded only by an
/// entry that member proposed; a later record of the same member replaces the earlier
/// one (the member was upgraded, or downgraded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRelease {
    pub id: u64,
    pub record_set: u32,
    pub release: String,
    pub time_ns: u64,
}

impl Payload for MemberRelease {
    /// A non-zero raft id and record set; a release of 1 to [`MAX_RELEASE_LEN`] printable
    /// ASCII bytes.
    fn check(&self) -> Result<()> {
        if self.id == 0 || self.record_set == 0 {
            return Err(Error::Invalid(format!("member release for raft id {} with record set {} (both are non-zero)", self.id, self.record_set)));
        }
        if self.release.is_empty() || self.release.len() > MAX_RELEASE_LEN || !self.release.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(Error::Invalid(format!("member release of raft id {}: the release is 1 to {MAX_RELEASE_LEN} printable ASCII bytes", self.id)));
        }
        Ok(())
    }
}
