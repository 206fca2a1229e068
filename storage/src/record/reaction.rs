//! The reaction record (kind 17): how a cluster reacts to an event exactly once.
//!
//! Every member whose `reactor` option matches an event proposes one entry that starts
//! with a [`Reaction`] naming the event (its [`Reaction::id`], the same on every member
//! that saw the event: derived from the member it was fired on, its tag, its `_stamp`
//! and its data) and carries, after it, the records its reactions make (a job
//! publish, key changes). The state machine applies the first such entry for an id and
//! skips every later one whole, on every member alike (the entry's outcome is then
//! `Duplicate`, so none of its records apply and nothing is published for it). Only the
//! member whose entry applied carries out what is left of the reactions (their events,
//! runners).
//!
//! The claim is kept in the `meta` family under `reaction NUL <id>` (value: the entry's
//! index, u64 big-endian, then the proposing member's name). An id starts with the
//! event's time as a 20-digit jid, so the job cache's expiry (`jobs_expired`) drops the
//! claims older than its cutoff with the same range.

use serde::{Deserialize, Serialize};

use super::Payload;
use crate::error::{Error, Result};

/// Length of a reaction id: a 20-digit time, then 64 hex digits of SHA-256.
pub const REACTION_ID_LEN: usize = 84;
/// Longest member name carried.
pub const MAX_MEMBER_LEN: usize = 255;
/// Longest event tag carried.
pub const MAX_TAG_LEN: usize = 1024;
/// Most bytes of rendered reactions (JSON) one record carries.
pub const MAX_REACTIONS_LEN: usize = 1 << 20;

/// Prefix of the claims in the `meta` family.
pub const CLAIM_PREFIX: &[u8] = b"reaction\0";

/// A claim on reacting to one event; the records after it in its entry are what the
/// reaction does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reaction {
    /// `YYYYMMDDhhmmssffffff` (the event's `_stamp`) then the hex SHA-256 of the event.
    pub id: String,
    /// The member that proposed it (the one that acts if it applies).
    pub member: String,
    /// The event's tag (for `halite-ctl dump` and the logs).
    pub tag: String,
    /// The rendered reactions, JSON (a list of `{"name", "fun", "args"}` maps).
    #[serde(with = "serde_bytes")]
    pub reactions: Vec<u8>,
    pub time_ns: u64,
}

impl Payload for Reaction {
    /// An id of 20 digits and 64 lowercase hex digits; a member name, a tag and
    /// reactions within their bounds.
    fn check(&self) -> Result<()> {
        let r = self;
        let id = r.id.as_bytes();
        if id.len() != REACTION_ID_LEN || !id[..20].iter().all(u8::is_ascii_digit) || !id[20..].iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)) {
            return Err(Error::Invalid(format!("reaction id {:?} is not 20 digits and 64 lowercase hex digits", r.id.escape_debug().to_string())));
        }
        if r.member.is_empty() || r.member.len() > MAX_MEMBER_LEN || r.tag.is_empty() || r.tag.len() > MAX_TAG_LEN {
            return Err(Error::Invalid(format!("reaction {}: member name of 1 to {MAX_MEMBER_LEN} bytes and tag of 1 to {MAX_TAG_LEN} bytes expected", r.id)));
        }
        if r.reactions.len() > MAX_REACTIONS_LEN {
            return Err(Error::Invalid(format!("reaction {}: {} bytes of reactions, more than {MAX_REACTIONS_LEN}", r.id, r.reactions.len())));
        }
        Ok(())
    }
}

/// The `meta` key of a claim.
pub fn claim_key(id: &str) -> Vec<u8> {
    let mut k = CLAIM_PREFIX.to_vec();
    k.extend_from_slice(id.as_bytes());
    k
}

/// Who claimed a reaction: the index of the entry that applied and its proposer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub index: u64,
    pub member: String,
}

impl Claim {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = self.index.to_be_bytes().to_vec();
        v.extend_from_slice(self.member.as_bytes());
        v
    }

    pub(crate) fn decode(v: &[u8]) -> Option<Claim> {
        let index = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
        Some(Claim { index, member: String::from_utf8(v[8..].to_vec()).ok()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Record;

    fn rec(id: &str) -> Record {
        Record::Reaction(Reaction { id: id.into(), member: "127.0.0.1".into(), tag: "salt/minion/m1/start".into(), reactions: b"[]".to_vec(), time_ns: 1 })
    }

    #[test]
    fn ids_are_checked_and_records_round_trip() {
        let good = format!("20261124003000123456{}", "ab".repeat(32));
        let r = rec(&good);
        assert_eq!(Record::decode(&r.encode().unwrap()).unwrap(), r);
        for bad in [String::new(), "x".repeat(84), format!("2026112400300012345x{}", "ab".repeat(32)), format!("20261124003000123456{}", "AB".repeat(32)), format!("{good}0")] {
            assert!(rec(&bad).encode().is_err(), "{bad}");
        }
        let c = Claim { index: 7, member: "m".into() };
        assert_eq!(Claim::decode(&c.encode()), Some(c));
        assert_eq!(Claim::decode(b"short"), None);
    }

    /// Two members react to the same event, in one batch and in two: the first entry
    /// applies with its job, the second changes nothing (not even its job), and the
    /// job cache's expiry drops the claim with the jobs of its time.
    #[test]
    fn the_first_reaction_to_an_event_applies_and_later_ones_are_skipped_whole() {
        use crate::entry::LogEntry;
        use crate::format::{JobPublished, JobsExpired};
        use crate::state::{Outcome, StateMachine};
        let job = |jid: &str| Record::JobPublished(JobPublished { jid: jid.into(), load: vec![0x80], minions: vec!["m1".into()], time_ns: 1, started_by: None, joins: false });
        let claim = |id: &str, member: &str| Record::Reaction(Reaction { id: id.into(), member: member.into(), tag: "t".into(), reactions: b"[]".to_vec(), time_ns: 1 });
        let (a, b) = (format!("20261124003000000001{}", "a".repeat(64)), format!("20261124003000000002{}", "b".repeat(64)));
        for together in [true, false] {
            let d = tempfile::tempdir().unwrap();
            let sm = StateMachine::open(&d.path().join("s")).unwrap();
            let log = vec![
                LogEntry::plain(1, vec![claim(&a, "one"), job("20261124003000000010")]),
                LogEntry::plain(2, vec![claim(&a, "two"), job("20261124003000000011")]),
                LogEntry::plain(3, vec![claim(&b, "two"), job("20261124003000000012")]),
            ];
            let outcomes: Vec<Outcome> = if together { sm.apply_entries(&log).unwrap().outcomes } else { log.iter().flat_map(|e| sm.apply_entries(std::slice::from_ref(e)).unwrap().outcomes).collect() };
            assert_eq!(outcomes, [Outcome::Applied, Outcome::Duplicate, Outcome::Applied]);
            let jids: Vec<String> = sm.jobs().unwrap().into_iter().map(|j| j.jid).collect();
            assert_eq!(jids, ["20261124003000000010", "20261124003000000012"]);
            assert_eq!(sm.reaction(&a).unwrap(), Some(Claim { index: 1, member: "one".into() }));
            assert_eq!(sm.reaction(&b).unwrap(), Some(Claim { index: 3, member: "two".into() }));
            sm.apply_entries(&[LogEntry::plain(4, vec![Record::JobsExpired(JobsExpired { before_jid: "20261124003000000002".into(), time_ns: 2 })])]).unwrap();
            assert_eq!(sm.reaction(&a).unwrap(), None);
            assert!(sm.reaction(&b).unwrap().is_some());
        }
    }
}
