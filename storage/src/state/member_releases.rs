//! The members' record sets: which [`RECORD_SET`](crate::format::RECORD_SET) each
//! member's build reads and writes, as the log decided it (`member_release` records,
//! kind 21, `record/member_release.rs`).
//!
//! Kept in the `meta` column family under `member_release/` + the raft id (u64 BE), the
//! value a msgpack map `{record_set, release}`, so a snapshot carries it and a member
//! that joins after compaction knows every member's. Written at apply, the same on
//! every member: a `member_release` record applies only if its entry's proposer is the id
//! it names (a member records its own build, as with its key: `member_keys.rs`), and
//! replaces what that member recorded before; a removal from the group deletes it
//! ([`StateMachine::apply_member_change`]).

use std::collections::BTreeMap;

use rocksdb::WriteBatch;
use serde::{Deserialize, Serialize};

use super::{from_msgpack, to_msgpack, StateMachine, CF_META};
use crate::error::{Error, Result};
use crate::format::MemberRelease;

const PREFIX: &[u8] = b"member_release/";

pub(super) fn release_key(id: u64) -> Vec<u8> {
    [PREFIX, &id.to_be_bytes()[..]].concat()
}

/// What a member recorded of its build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedRelease {
    pub record_set: u32,
    pub release: String,
}

/// The cluster's record set: the lowest of `members`' recorded ones, a member that
/// recorded none counting as record set 1 (every build knows it).
pub fn lowest_record_set(recorded: &BTreeMap<u64, RecordedRelease>, members: impl IntoIterator<Item = u64>) -> u32 {
    members.into_iter().map(|id| recorded.get(&id).map_or(1, |r| r.record_set)).min().unwrap_or(1)
}

impl StateMachine {
    /// Every member's recorded build, by raft id.
    pub fn member_releases(&self) -> Result<BTreeMap<u64, RecordedRelease>> {
        let mut out = BTreeMap::new();
        for (k, v) in self.scan(CF_META, PREFIX)? {
            let Ok(id) = <[u8; 8]>::try_from(&k[PREFIX.len()..]) else {
                return Err(Error::Invalid(format!("member release entry {k:?} is malformed")));
            };
            out.insert(u64::from_be_bytes(id), from_msgpack("member_release", &v)?);
        }
        Ok(out)
    }

    /// Applies a `member_release` record of the entry at `index` proposed by `proposer`.
    pub(super) fn apply_member_release(&self, index: u64, proposer: Option<u64>, r: &MemberRelease, b: &mut WriteBatch) -> Result<()> {
        if proposer != Some(r.id) {
            tracing::warn!(index, member = r.id, ?proposer, "member release refused: a member records its own build only");
            return Ok(());
        }
        tracing::info!(index, member = r.id, record_set = r.record_set, release = %r.release, "member release recorded");
        let db = self.db()?;
        let v = RecordedRelease { record_set: r.record_set, release: r.release.clone() };
        b.put_cf(db.cf(CF_META)?, release_key(r.id), to_msgpack(&v)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::LogEntry;
    use crate::format::Record;
    use crate::state::member_keys::tests::by;
    use crate::state::MemberKeyChange;

    fn rec(id: u64, record_set: u32, release: &str) -> Record {
        Record::MemberRelease(MemberRelease { id, record_set, release: release.into(), time_ns: 1 })
    }

    #[test]
    fn a_member_records_its_own_build_and_a_later_one_replaces_it() {
        let d = tempfile::tempdir().unwrap();
        let sm = StateMachine::open(&d.path().join("sm")).unwrap();
        // Proposed by another member, or by no member: refused.
        sm.apply_entries(&[by(2, 1, vec![rec(1, 1, "halite 1")]), LogEntry::plain(2, vec![rec(1, 1, "halite 1")])]).unwrap();
        assert!(sm.member_releases().unwrap().is_empty());
        sm.apply_entries(&[by(1, 3, vec![rec(1, 1, "halite 1")]), by(2, 4, vec![rec(2, 1, "halite 1")])]).unwrap();
        // Member 1 upgraded: its new build replaces the old.
        sm.apply_entries(&[by(1, 5, vec![rec(1, 2, "halite 2")])]).unwrap();
        let got = sm.member_releases().unwrap();
        assert_eq!(got[&1], RecordedRelease { record_set: 2, release: "halite 2".into() });
        assert_eq!(got[&2].record_set, 1);
        // The cluster's record set is its members' lowest; one that recorded none counts as 1.
        assert_eq!(lowest_record_set(&got, [1, 2]), 1);
        assert_eq!(lowest_record_set(&got, [1]), 2);
        assert_eq!(lowest_record_set(&got, [1, 3]), 1);
        assert_eq!(lowest_record_set(&got, []), 1);
        // A removal from the group drops what the member recorded.
        sm.advance_applied(5).unwrap();
        sm.apply_member_change(6, 2, MemberKeyChange::Removed).unwrap();
        assert_eq!(sm.member_releases().unwrap().keys().copied().collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn a_member_release_record_round_trips_and_a_bad_one_is_refused() {
        let r = rec(5, 1, "halite 0.1.0");
        assert_eq!(Record::decode(&r.encode().unwrap()).unwrap(), r);
        let long = "x".repeat(crate::format::MAX_RELEASE_LEN + 1);
        for bad in [rec(0, 1, "a"), rec(5, 0, "a"), rec(5, 1, ""), rec(5, 1, "a\nb"), rec(5, 1, &long)] {
            assert!(bad.encode().is_err(), "{bad:?}");
        }
    }
}
