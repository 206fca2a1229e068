//! The member key book: which Ed25519 public key speaks for each raft id of the
//! cluster, as the log decided it. The transport (`replication::transport::identity`)
//! binds ids to these keys; nothing else writes them.
//!
//! Kept in the `meta` column family under `member_key/` + the raft id (u64 BE), the
//! 32-byte key as value, so a snapshot (a RocksDB checkpoint) carries the whole book and a
//! member that joins after compaction knows every key. Two things write it, both at
//! apply, the same on every member:
//!
//! - a membership change that adds a member with its key in the entry context (the join
//!   path: `replication::join`), and a removal, which deletes the removed id's key
//!   ([`StateMachine::apply_member_change`]);
//! - a `member_key` record (kind 15), which a member proposes for itself once a leader
//!   exists and the book lacks its key (the founders, and logs from before the book).
//!
//! Both decide the same way: an id without a key gets it; the same key again changes
//! nothing; another key for an id that has one is refused and changes nothing ("member
//! key refused" in the log). A `member_key` record is also refused unless the entry's
//! proposer is the id it names (the transport checks that a forwarded proposal's
//! proposer is the member whose connection forwarded it), so a member records its own
//! key and no other. There is no rotation in place: a member changes its key by joining
//! again under a new raft id (a new incarnation: `replication::join`), whose join
//! removes the old id, and with it the old key. That removal is the authorisation.

use std::collections::BTreeMap;

use rocksdb::WriteBatch;

use super::apply::Overlay;
use super::{StateMachine, CF_META};
use crate::error::{Error, Result};
use crate::format::{MemberKey, MEMBER_KEY_LEN};

/// A member public key.
pub type PublicKey = [u8; MEMBER_KEY_LEN];

const PREFIX: &[u8] = b"member_key/";

fn book_key(id: u64) -> Vec<u8> {
    [PREFIX, &id.to_be_bytes()[..]].concat()
}

/// What a membership change does to the book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberKeyChange {
    /// A member added; its key when the change's context carries one.
    Added(Option<PublicKey>),
    /// A member removed: its key no longer speaks for it.
    Removed,
}

impl StateMachine {
    /// Every raft id's key, as applied.
    pub fn member_keys(&self) -> Result<BTreeMap<u64, PublicKey>> {
        let mut out = BTreeMap::new();
        for (k, v) in self.scan(CF_META, PREFIX)? {
            let (Ok(id), Ok(key)) = (<[u8; 8]>::try_from(&k[PREFIX.len()..]), PublicKey::try_from(v.as_slice())) else {
                return Err(Error::Invalid(format!("member key book entry {k:?} is malformed")));
            };
            out.insert(u64::from_be_bytes(id), key);
        }
        Ok(out)
    }

    /// The key applied for raft id `id`, if any.
    pub fn member_key(&self, id: u64) -> Result<Option<PublicKey>> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_META)?, book_key(id))? {
            None => Ok(None),
            Some(v) => PublicKey::try_from(v.as_slice()).map(Some).map_err(|_| Error::Invalid(format!("member key of {id} is {} bytes", v.len()))),
        }
    }

    /// Applies the book's part of the membership change at log index `index` for member
    /// `id` (see the module documentation). A change at or below the applied index (a
    /// replay after a restart) was applied before and changes nothing.
    pub fn apply_member_change(&self, index: u64, id: u64, change: MemberKeyChange) -> Result<()> {
        let db = self.db()?;
        if index <= self.applied_index()? {
            return Ok(());
        }
        let mut b = WriteBatch::default();
        match change {
            MemberKeyChange::Added(None) => return Ok(()),
            MemberKeyChange::Added(Some(key)) => {
                if !self.decide(index, id, &key, None)? {
                    return Ok(());
                }
                b.put_cf(db.cf(CF_META)?, book_key(id), key);
            }
            MemberKeyChange::Removed => {
                if self.member_key(id)?.is_some() {
                    tracing::info!(index, member = id, "member key dropped: the member was removed");
                }
                b.delete_cf(db.cf(CF_META)?, book_key(id));
                b.delete_cf(db.cf(CF_META)?, super::member_releases::release_key(id));
            }
        }
        db.write_opt(b, &super::no_wal())?;
        Ok(())
    }

    /// Applies a `member_key` record of the entry at `index` proposed by `proposer`.
    pub(super) fn apply_member_key(&self, index: u64, proposer: Option<u64>, k: &MemberKey, b: &mut WriteBatch, ov: &mut Overlay) -> Result<()> {
        let db = self.db()?;
        let key: PublicKey = k.public.as_slice().try_into().map_err(|_| Error::Invalid("member key length".into()))?;
        if proposer != Some(k.id) {
            tracing::warn!(index, member = k.id, ?proposer, "member key refused: a member records its own key only");
            return Ok(());
        }
        if !self.decide(index, k.id, &key, ov.member_keys.get(&k.id))? {
            return Ok(());
        }
        b.put_cf(db.cf(CF_META)?, book_key(k.id), key);
        ov.member_keys.insert(k.id, key);
        Ok(())
    }

    /// Whether `key` is to be written for `id`: the book has none for it (`earlier`:
    /// what this batch wrote already, if anything). The same key again is no change;
    /// another key is refused.
    fn decide(&self, index: u64, id: u64, key: &PublicKey, earlier: Option<&PublicKey>) -> Result<bool> {
        let held = match earlier {
            Some(k) => Some(*k),
            None => self.member_key(id)?,
        };
        Ok(match held {
            None => {
                tracing::info!(index, member = id, "member key recorded");
                true
            }
            Some(h) if h == *key => false,
            Some(_) => {
                tracing::warn!(index, member = id, "member key refused: the member has another key (a member changes its key by joining again under a new id)");
                false
            }
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::context::ProposalId;
    use crate::entry::LogEntry;
    use crate::format::Record;

    fn rec(id: u64, key: PublicKey) -> Record {
        Record::MemberKey(MemberKey { id, public: key.to_vec(), time_ns: 1 })
    }

    /// An entry proposed by `proposer` (seq = index, one incarnation).
    pub(in crate::state) fn by(proposer: u64, index: u64, records: Vec<Record>) -> LogEntry {
        LogEntry { index, id: Some(ProposalId { proposer, incarnation: 1, seq: index }), settled_below: index, records }
    }

    #[test]
    fn a_key_is_set_once_by_its_own_member_and_another_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let sm = StateMachine::open(&d.path().join("sm")).unwrap();
        // Proposed by another member, or by no member: refused.
        sm.apply_entries(&[by(2, 1, vec![rec(1, [1; 32])]), LogEntry::plain(2, vec![rec(1, [1; 32])])]).unwrap();
        assert_eq!(sm.member_key(1).unwrap(), None);
        // By the member itself: recorded; the same key again changes nothing; another
        // key (in the same batch or later) is refused.
        sm.apply_entries(&[by(1, 3, vec![rec(1, [1; 32]), rec(1, [9; 32])]), by(1, 4, vec![rec(1, [1; 32])])]).unwrap();
        sm.apply_entries(&[by(1, 5, vec![rec(1, [7; 32])])]).unwrap();
        assert_eq!(sm.member_key(1).unwrap(), Some([1; 32]));
        // A membership change carrying another key for it is refused too.
        sm.apply_member_change(6, 1, MemberKeyChange::Added(Some([8; 32]))).unwrap();
        assert_eq!(sm.member_key(1).unwrap(), Some([1; 32]));
        // A join's key: recorded; a promotion without a key keeps it.
        sm.apply_member_change(7, 3, MemberKeyChange::Added(Some([3; 32]))).unwrap();
        sm.apply_member_change(8, 3, MemberKeyChange::Added(None)).unwrap();
        sm.advance_applied(8).unwrap();
        assert_eq!(sm.member_keys().unwrap().into_iter().collect::<Vec<_>>(), vec![(1, [1; 32]), (3, [3; 32])]);
        // A replayed change (at or below the applied index) changes nothing.
        sm.apply_member_change(8, 3, MemberKeyChange::Removed).unwrap();
        assert_eq!(sm.member_key(3).unwrap(), Some([3; 32]));
        // A removal drops the key; the id may then be given a key again (a new join).
        sm.apply_member_change(9, 3, MemberKeyChange::Removed).unwrap();
        assert_eq!(sm.member_key(3).unwrap(), None);
        sm.apply_member_change(10, 3, MemberKeyChange::Added(Some([4; 32]))).unwrap();
        assert_eq!(sm.member_key(3).unwrap(), Some([4; 32]));
    }

    #[test]
    fn a_member_key_record_round_trips_and_a_bad_one_is_refused() {
        let r = rec(5, [2; 32]);
        assert_eq!(Record::decode(&r.encode().unwrap()).unwrap(), r);
        for bad in [Record::MemberKey(MemberKey { id: 5, public: vec![1; 31], time_ns: 0 }), Record::MemberKey(MemberKey { id: 0, public: vec![1; 32], time_ns: 0 })] {
            assert!(bad.encode().is_err(), "{bad:?}");
        }
    }
}
