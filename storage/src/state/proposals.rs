//! Which proposals the state machine has applied, so that each is applied at most once.
//!
//! A proposer may hand the same proposal to raft more than once (a follower forwards it
//! again when the leader changed or did not answer; see `replication/src/node/
//! proposals.rs`), so the log can hold several copies of one entry. Every entry names
//! its proposal in its [context](crate::context): proposer, incarnation, sequence
//! number, and the proposer's settled mark (its lowest sequence number still waiting).
//! Applying an entry first asks [`StateMachine::admit`]:
//!
//! - an incarnation older than the proposer's newest one seen: **stale** (that process
//!   is gone and nobody waits for the entry);
//! - a sequence number below the proposer's settled mark, or one already applied:
//!   **duplicate**;
//! - otherwise the entry applies, its sequence number is recorded and the settled mark
//!   moves up to the entry's (never down).
//!
//! The decision reads only the state machine at that log position, so every member
//! makes the same one. The column family stays small: applied sequence numbers below
//! the settled mark are deleted as the mark moves, and a new incarnation drops the old
//! one's. What remains per proposer is the proposals applied while an older one of its
//! was still waiting.
//!
//! Column family `proposals` (`docs/formats.md` §3):
//!
//! | key | value |
//! |-----|-------|
//! | u64 BE proposer | u64 BE incarnation, u64 BE settled mark |
//! | u64 BE proposer, u64 BE incarnation, u64 BE seq | empty: that proposal applied |

use std::collections::{HashMap, HashSet};

use rocksdb::WriteBatch;

use super::{StateMachine, CF_PROPOSALS};
use crate::context::ProposalId;
use crate::error::{Error, Result};

/// What became of an entry handed to [`StateMachine::apply_entries`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its records were applied (each as its own rules decide).
    Applied,
    /// Skipped: the same proposal was applied before (or is below its proposer's
    /// settled mark), or it reacts to an event another entry reacted to first
    /// (`crate::reaction`).
    Duplicate,
    /// Skipped: its proposer has since restarted (an older incarnation).
    Stale,
    /// Skipped: at or below the applied index (applied before).
    Past,
}

/// Above this many sequence numbers, settling deletes a key range instead of points.
const POINT_DELETES: u64 = 4096;

fn meta_key(proposer: u64) -> [u8; 8] {
    proposer.to_be_bytes()
}

fn seq_key(id: &ProposalId) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&id.proposer.to_be_bytes());
    k[8..16].copy_from_slice(&id.incarnation.to_be_bytes());
    k[16..].copy_from_slice(&id.seq.to_be_bytes());
    k
}

/// Proposal bookkeeping written earlier in the same apply batch.
#[derive(Default)]
pub(super) struct Tracker {
    /// Proposer → (incarnation, settled mark).
    meta: HashMap<u64, (u64, u64)>,
    applied: HashSet<ProposalId>,
}

impl StateMachine {
    /// The newest incarnation and settled mark recorded for `proposer`.
    pub fn proposer_mark(&self, proposer: u64) -> Result<Option<(u64, u64)>> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_PROPOSALS)?, meta_key(proposer))? {
            None => Ok(None),
            Some(v) if v.len() == 16 => {
                let (a, b) = v.split_at(8);
                Ok(Some((u64::from_be_bytes(a.try_into().unwrap_or([0; 8])), u64::from_be_bytes(b.try_into().unwrap_or([0; 8])))))
            }
            Some(_) => Err(Error::Invalid(format!("proposal mark of proposer {proposer} in the state machine is damaged"))),
        }
    }

    /// Whether the proposal `id` is recorded as applied (below the settled mark it may
    /// have been pruned: [`StateMachine::admit`] covers that).
    pub fn proposal_applied(&self, id: &ProposalId) -> Result<bool> {
        let db = self.db()?;
        let found = db.get_pinned_cf(db.cf(CF_PROPOSALS)?, seq_key(id))?.is_some();
        Ok(found)
    }

    /// Decides whether the entry of proposal `id` applies (see the module docs) and, if
    /// it does, records it in `b`.
    pub(super) fn admit(&self, id: &ProposalId, settled_below: u64, tr: &mut Tracker, b: &mut WriteBatch) -> Result<Outcome> {
        let db = self.db()?;
        let mark = match tr.meta.get(&id.proposer) {
            Some(m) => Some(*m),
            None => self.proposer_mark(id.proposer)?,
        };
        let cf = db.cf(CF_PROPOSALS)?;
        let (settled, fresh) = match mark {
            Some((inc, _)) if id.incarnation < inc => return Ok(Outcome::Stale),
            Some((inc, settled)) if id.incarnation == inc => {
                if id.seq < settled || tr.applied.contains(id) || self.proposal_applied(id)? {
                    return Ok(Outcome::Duplicate);
                }
                (settled, false)
            }
            other => {
                // A new incarnation: what the older ones left is of no more use.
                if let Some((old, _)) = other {
                    let from = seq_key(&ProposalId { proposer: id.proposer, incarnation: 0, seq: 0 });
                    let to = seq_key(&ProposalId { proposer: id.proposer, incarnation: id.incarnation, seq: 0 });
                    tracing::debug!(proposer = id.proposer, old, new = id.incarnation, "a proposer restarted");
                    b.delete_range_cf(cf, from, to);
                }
                (0, true)
            }
        };
        b.put_cf(cf, seq_key(id), []);
        tr.applied.insert(*id);
        // The entry's own mark is at most its seq (it was waiting when handed over).
        let new_settled = settled.max(settled_below.min(id.seq));
        // (A new incarnation has nothing recorded below its mark yet.)
        if new_settled > settled && !fresh {
            let at = |seq| seq_key(&ProposalId { seq, ..*id });
            if new_settled - settled <= POINT_DELETES {
                for s in settled..new_settled {
                    b.delete_cf(cf, at(s));
                }
            } else {
                b.delete_range_cf(cf, at(settled), at(new_settled));
            }
        }
        let mut v = [0u8; 16];
        v[..8].copy_from_slice(&id.incarnation.to_be_bytes());
        v[8..].copy_from_slice(&new_settled.to_be_bytes());
        b.put_cf(cf, meta_key(id.proposer), v);
        tr.meta.insert(id.proposer, (id.incarnation, new_settled));
        Ok(Outcome::Applied)
    }
}
