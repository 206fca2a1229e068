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
//!   moves up to the entry's (never down), then on past every sequence number applied
//!   right above it (a seq below the mark is a duplicate either way, so moving the mark
//!   over applied ones changes no decision; it only means they need no key).
//!
//! The decision reads only the state machine at that log position, so every member
//! makes the same one. The column family stays small: applied sequence numbers below
//! the settled mark are deleted as the mark moves, and a new incarnation drops the old
//! one's. What remains per proposer is the proposals applied while an older one of its
//! was still waiting.
//!
//! **Cost.** An apply batch holds about a hundred proposals of one proposer under load
//! (a group entry, `crate::entry`). Its bookkeeping is written once, at the end of the
//! batch ([`Progress`]): the keys still above the mark, point deletes for the stored
//! ones now below it, the mark; a proposal's key put and deleted within the batch is
//! never written. Proposals apply in the order they were made, so the mark moves over
//! every one of them and none is written at all: one put a proposer a batch. (A mark
//! that did not move over applied seqs would put each proposal still awaited when its
//! batch was made and, a batch later, delete it: two more memtable inserts a return.)
//! And the check "applied before?" reads the database only for a
//! proposal at or below the highest one of its incarnation stored ([`AppliedHighs`]),
//! which under load is none: the proposals arrive in order. Measured with `halite-bench
//! apply --returns` (`docs/benchmarks.md`, "Returns"): 77-102k returns/s when each
//! entry writes its own bookkeeping and reads the database, 273-357k/s this way.
//!
//! Column family `proposals` (`docs/formats.md` §3):
//!
//! | key | value |
//! |-----|-------|
//! | u64 BE proposer | u64 BE incarnation, u64 BE settled mark |
//! | u64 BE proposer, u64 BE incarnation, u64 BE seq | empty: that proposal applied |

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use rocksdb::{Direction, IteratorMode, WriteBatch};

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

/// One proposer's bookkeeping in an apply batch: what is stored before the batch and
/// what the batch has decided so far. Written once, at the end of the batch
/// ([`StateMachine::record_proposals`]): the sequence numbers still above the settled
/// mark, the point deletes of those stored below it, and the mark. The state written
/// is the same as if every entry had written its own bookkeeping in turn (a proposal's
/// key put and then deleted within the batch is simply never written), so a member
/// that applies the log in other batches holds the same family.
struct Progress {
    /// A mark is stored (or was noted in this batch) for the proposer.
    known: bool,
    incarnation: u64,
    /// The settled mark stored before the batch (0 for an incarnation new in it).
    settled_before: u64,
    settled: u64,
    /// An incarnation begun in this batch: nothing of it is stored yet.
    fresh: bool,
    /// Sequence numbers applied in this batch.
    applied: BTreeSet<u64>,
}

/// Proposal bookkeeping of one apply batch (see [`Progress`]).
#[derive(Default)]
pub(super) struct Tracker {
    proposers: HashMap<u64, Progress>,
}

/// For each proposer, its incarnation and the highest sequence number of that
/// incarnation with a key in the family (`None`: it has none), as far as this state
/// machine has applied: a proposal above it cannot have been applied, so its check
/// needs no read of the database. Derived from the stored state (looked up once per
/// proposer, then kept up by every batch written), dropped when the state is replaced
/// or a write fails. A bound, not the exact value: keys pruned since leave it above
/// what remains, which only means a read.
#[derive(Default)]
pub(super) struct AppliedHighs {
    highs: Mutex<HashMap<u64, (u64, Option<u64>)>>,
}

/// Proposers whose high is kept (a cluster has a handful; past this the map is emptied
/// and refills as proposals are checked, so no log can make it grow without bound).
const MAX_HIGHS: usize = 1024;

impl AppliedHighs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (u64, Option<u64>)>> {
        let mut highs = self.highs.lock().unwrap_or_else(|p| p.into_inner());
        if highs.len() > MAX_HIGHS {
            highs.clear();
        }
        highs
    }

    pub(super) fn forget_all(&self) {
        self.lock().clear();
    }
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

    /// The highest sequence number of `proposer`'s `incarnation` with a key stored
    /// (one reverse seek).
    fn highest_stored(&self, proposer: u64, incarnation: u64) -> Result<Option<u64>> {
        let db = self.db()?;
        let from = seq_key(&ProposalId { proposer, incarnation, seq: u64::MAX });
        let mut it = db.iterator_cf(db.cf(CF_PROPOSALS)?, IteratorMode::From(&from, Direction::Reverse));
        match it.next() {
            Some(item) => {
                let (k, _) = item?;
                let same = k.len() == 24 && k[..8] == proposer.to_be_bytes() && k[8..16] == incarnation.to_be_bytes();
                Ok(same.then(|| u64::from_be_bytes(k[16..24].try_into().unwrap_or([0; 8]))))
            }
            None => Ok(None),
        }
    }

    /// [`StateMachine::proposal_applied`], without reading the database when the
    /// proposal is above every stored one of its incarnation ([`AppliedHighs`]).
    fn proposal_stored(&self, id: &ProposalId) -> Result<bool> {
        let known = self.highs.lock().get(&id.proposer).filter(|(inc, _)| *inc == id.incarnation).map(|(_, h)| *h);
        let high = match known {
            Some(h) => h,
            None => {
                let h = self.highest_stored(id.proposer, id.incarnation)?;
                self.highs.lock().insert(id.proposer, (id.incarnation, h));
                h
            }
        };
        match high {
            Some(h) if id.seq <= h => self.proposal_applied(id),
            _ => Ok(false),
        }
    }

    /// Decides whether the entry of proposal `id` applies (see the module docs) and, if
    /// it does, notes it in `tr` (written by [`StateMachine::record_proposals`]).
    pub(super) fn admit(&self, id: &ProposalId, settled_below: u64, tr: &mut Tracker, b: &mut WriteBatch) -> Result<Outcome> {
        let p = match tr.proposers.entry(id.proposer) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let mark = self.proposer_mark(id.proposer)?;
                let (incarnation, settled) = mark.unwrap_or((0, 0));
                v.insert(Progress { known: mark.is_some(), incarnation, settled_before: settled, settled, fresh: false, applied: BTreeSet::new() })
            }
        };
        let known = p.known;
        if known && id.incarnation < p.incarnation {
            return Ok(Outcome::Stale);
        }
        if known && id.incarnation == p.incarnation {
            if id.seq < p.settled || p.applied.contains(&id.seq) || (!p.fresh && self.proposal_stored(id)?) {
                return Ok(Outcome::Duplicate);
            }
        } else {
            // A new incarnation: what the older ones left is of no more use (stored, or
            // noted earlier in this batch and not yet written).
            if known {
                let db = self.db()?;
                let from = seq_key(&ProposalId { proposer: id.proposer, incarnation: 0, seq: 0 });
                let to = seq_key(&ProposalId { proposer: id.proposer, incarnation: id.incarnation, seq: 0 });
                tracing::debug!(proposer = id.proposer, old = p.incarnation, new = id.incarnation, "a proposer restarted");
                b.delete_range_cf(db.cf(CF_PROPOSALS)?, from, to);
            }
            *p = Progress { known: true, incarnation: id.incarnation, settled_before: 0, settled: 0, fresh: true, applied: BTreeSet::new() };
        }
        p.applied.insert(id.seq);
        // The entry's own mark is at most its seq (it was waiting when handed over).
        p.settled = p.settled.max(settled_below.min(id.seq));
        Ok(Outcome::Applied)
    }

    /// Moves each proposer's mark of the batch past the sequence numbers applied right
    /// above it, in this batch or stored by an earlier one (a read each of those, none
    /// above the highest stored: [`AppliedHighs`]). Every seq below the mark is a
    /// duplicate and every applied one is too, so no decision changes; what is stored is
    /// the mark and the applied seqs above the first gap, whatever the batches were.
    pub(super) fn settle_marks(&self, tr: &mut Tracker) -> Result<()> {
        for (&proposer, p) in tr.proposers.iter_mut() {
            if !p.known {
                continue;
            }
            loop {
                for &seq in p.applied.range(p.settled..) {
                    if seq != p.settled || seq == u64::MAX {
                        break;
                    }
                    p.settled = seq + 1;
                }
                let here = ProposalId { proposer, incarnation: p.incarnation, seq: p.settled };
                if p.fresh || p.settled == u64::MAX || !self.proposal_stored(&here)? {
                    break;
                }
                p.settled += 1;
            }
        }
        Ok(())
    }

    /// Writes the batch's proposal bookkeeping into `b` (see [`Progress`]), after
    /// [`StateMachine::settle_marks`].
    pub(super) fn record_proposals(&self, tr: &Tracker, b: &mut WriteBatch) -> Result<()> {
        let db = self.db()?;
        let cf = db.cf(CF_PROPOSALS)?;
        for (&proposer, p) in &tr.proposers {
            if p.applied.is_empty() && !p.fresh {
                continue;
            }
            let at = |seq| seq_key(&ProposalId { proposer, incarnation: p.incarnation, seq });
            for &seq in p.applied.range(p.settled..) {
                b.put_cf(cf, at(seq), []);
            }
            // Stored ones now below the mark: a point delete each (none for those
            // applied in this batch: never written), or one range.
            if !p.fresh && p.settled > p.settled_before {
                if p.settled - p.settled_before <= POINT_DELETES {
                    for seq in (p.settled_before..p.settled).filter(|s| !p.applied.contains(s)) {
                        b.delete_cf(cf, at(seq));
                    }
                } else {
                    b.delete_range_cf(cf, at(p.settled_before), at(p.settled));
                }
            }
            let mut v = [0u8; 16];
            v[..8].copy_from_slice(&p.incarnation.to_be_bytes());
            v[8..].copy_from_slice(&p.settled.to_be_bytes());
            b.put_cf(cf, meta_key(proposer), v);
        }
        Ok(())
    }

    /// After the batch of `tr` was written: the highest stored sequence numbers move up
    /// (see [`AppliedHighs`]). After a failed write, forgets them all.
    pub(super) fn proposals_written(&self, tr: &Tracker, written: bool) {
        let mut highs = self.highs.lock();
        if !written {
            highs.clear();
            return;
        }
        for (&proposer, p) in &tr.proposers {
            let put = p.applied.range(p.settled..).next_back().copied();
            match highs.get_mut(&proposer) {
                Some((inc, high)) if *inc == p.incarnation && !p.fresh => *high = (*high).max(put),
                Some(_) | None if p.fresh => {
                    highs.insert(proposer, (p.incarnation, put));
                }
                // Not looked up yet: the first check of it will.
                _ => {
                    highs.remove(&proposer);
                }
            }
        }
    }
}
