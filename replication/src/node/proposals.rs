//! Proposals waiting to be applied, from the moment the driver takes them until their
//! caller is answered.
//!
//! A proposal (one entry's records, or a membership change) gets this node's next
//! sequence number and waits under it, in order. Its entry carries, in its
//! [entry context](super::context), the proposal's identity: this node's id, this
//! process's **incarnation** (persisted, larger at every start: `RaftLog::
//! next_incarnation`) and the sequence number, so no two proposals ever share one, across
//! restarts too; plus the **settled mark**, the lowest sequence number still waiting
//! here (everything below is answered).
//!
//! A proposal is handed to raft ([`Proposals::submit`]) once a leader is known, and
//! again when:
//! - the term changed (raft drops a proposal made without a leader, and a new leader
//!   may have overwritten the entry);
//! - it was forwarded to the leader (this node follows) and is not applied after
//!   three election timeouts (the leader may have dropped it: a full queue, a
//!   membership change turned into an empty entry, a transfer).
//!
//! Several copies of one proposal may so reach the log; the state machine applies the
//! first and skips the others, on every member alike (`halite_storage::state`'s
//! `proposals`). A membership change is not handed to raft while another one is
//! pending (raft-rs would turn it into an empty entry and the change would be lost): it
//! waits here until the pending one applies.
//!
//! When an entry applies (`apply.rs`), the caller whose identity it carries, and only
//! that caller, is answered, with the outcome the state machine reports for that entry.
//! A proposal still waiting after `propose_timeout` is answered with
//! [`NodeError::NotLeader`] (never handed to raft) or [`NodeError::Timeout`] (it may
//! still apply later, once).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use raft::eraftpb::{ConfChange, ConfChangeType};
use raft::{RawNode, StateRole};

use halite_storage::context::{self, EntryContext, ProposalId};
use halite_storage::log::RaftLog;
use halite_storage::state::Outcome;

use super::{NodeError, Reply};

/// Most proposals waiting at once; more are refused with [`NodeError::Busy`] (the
/// daemon handles at most 1,024 requests at once, so this is only reached when the
/// cluster cannot commit at all).
pub(super) const MAX_WAITING: usize = 16_384;

/// What a waiting proposal asks for.
pub(super) enum Payload {
    /// One entry's data: the proposal's records (`halite_storage::entry`).
    Records(Vec<u8>),
    Member { change: ConfChangeType, node: u64, addr: Option<SocketAddr>, key: Option<[u8; 32]> },
}

/// A proposal not yet applied.
struct Waiting {
    reply: Reply,
    at: Instant,
    payload: Payload,
    /// The term it was last handed to raft in (`None`: not yet), when, and whether it
    /// went to another node (this one followed).
    term: Option<u64>,
    handed: Instant,
    forwarded: bool,
}

/// This node's proposals not yet applied, in sequence order.
pub(super) struct Proposals {
    /// This node's raft id (the proposer named in the entry contexts).
    me: u64,
    /// This process's incarnation.
    incarnation: u64,
    /// Sequence number of this node's last proposal in this incarnation.
    seq: u64,
    waiting: BTreeMap<u64, Waiting>,
    /// How long a proposal may wait to be applied.
    timeout: Duration,
    /// How long a forwarded proposal may go unapplied before it is handed over again.
    resubmit_after: Duration,
}

impl Proposals {
    pub(super) fn new(me: u64, incarnation: u64, timeout: Duration, resubmit_after: Duration) -> Self {
        Proposals { me, incarnation, seq: 0, waiting: BTreeMap::new(), timeout, resubmit_after }
    }

    /// Gives `payload` the next sequence number and queues it until it applies (or
    /// refuses it at once when too many are waiting).
    pub(super) fn enqueue(&mut self, payload: Payload, reply: Reply) {
        if self.waiting.len() >= MAX_WAITING {
            let _ = reply.send(Err(NodeError::Busy(MAX_WAITING)));
            return;
        }
        self.seq += 1;
        let now = Instant::now();
        self.waiting.insert(self.seq, Waiting { reply, at: now, payload, term: None, handed: now, forwarded: false });
    }

    /// The lowest sequence number still waiting (the next one when none is).
    pub(super) fn settled_below(&self) -> u64 {
        self.waiting.keys().next().copied().unwrap_or(self.seq + 1)
    }

    /// Whether a change of `node`'s membership is waiting.
    pub(super) fn member_change_waiting(&self, node: u64) -> bool {
        self.waiting.values().any(|w| matches!(w.payload, Payload::Member { node: n, .. } if n == node))
    }

    /// Hands raft every waiting proposal that is due (see the module docs).
    pub(super) fn submit(&mut self, raw: &mut RawNode<RaftLog>) {
        if raw.raft.leader_id == raft::INVALID_ID {
            return;
        }
        let term = raw.raft.term;
        let leading = raw.raft.state == StateRole::Leader;
        let settled_below = self.settled_below();
        let resubmit_after = self.resubmit_after;
        let due: Vec<u64> = self.waiting.iter().filter(|(_, w)| w.term != Some(term) || (w.forwarded && w.handed.elapsed() >= resubmit_after)).map(|(k, _)| *k).collect();
        if !due.is_empty() {
            tracing::debug!(id = self.me, n = due.len(), leader = raw.raft.leader_id, term, "proposals handed to raft");
        }
        for seq in due {
            let Some(w) = self.waiting.get(&seq) else { continue };
            let id = ProposalId { proposer: self.me, incarnation: self.incarnation, seq };
            let r = match &w.payload {
                Payload::Records(data) => raw.propose(context::encode(&EntryContext::proposal(id, settled_below, None)), data.clone()),
                // raft-rs turns a change proposed while another is pending into an empty
                // entry: wait for the pending one to apply.
                Payload::Member { .. } if leading && raw.raft.has_pending_conf() => continue,
                Payload::Member { change, node, addr, key } => {
                    let mut cc = ConfChange::default();
                    cc.set_change_type(*change);
                    cc.node_id = *node;
                    raw.propose_conf_change(context::encode(&EntryContext::proposal(id, settled_below, *addr).with_key(*key)), cc)
                }
            };
            match r {
                Ok(()) => {
                    if let Some(w) = self.waiting.get_mut(&seq) {
                        if w.term.is_some() {
                            tracing::debug!(seq, term, "proposal handed to raft again");
                        }
                        w.term = Some(term);
                        w.handed = Instant::now();
                        w.forwarded = !leading;
                    }
                }
                // No leader after all (it stepped down): try again at the next change.
                Err(raft::Error::ProposalDropped) => {}
                Err(e) => {
                    if let Some(w) = self.waiting.remove(&seq) {
                        let _ = w.reply.send(Err(e.into()));
                    }
                }
            }
        }
    }

    /// Answers proposals that were not applied in time.
    pub(super) fn expire(&mut self) {
        let limit = self.timeout;
        let late: Vec<u64> = self.waiting.iter().filter(|(_, w)| w.at.elapsed() > limit).map(|(k, _)| *k).collect();
        for k in late {
            if let Some(w) = self.waiting.remove(&k) {
                let err = if w.term.is_none() { NodeError::NotLeader } else { NodeError::Timeout(limit) };
                let _ = w.reply.send(Err(err));
            }
        }
    }

    /// The sequence number of this node's proposal that `id` names, if it is one of
    /// this process's (an earlier incarnation's callers are gone).
    pub(super) fn ours(&self, id: Option<&ProposalId>) -> Option<u64> {
        id.filter(|id| id.proposer == self.me && id.incarnation == self.incarnation).map(|id| id.seq)
    }

    /// The sequence number a membership-change entry's context names, if ours.
    pub(super) fn ours_by_context(&self, index: u64, ctx: &[u8]) -> Option<u64> {
        match context::decode(ctx) {
            Ok(c) => self.ours(c.and_then(|c| c.id()).as_ref()),
            Err(err) => {
                tracing::warn!(index, "entry context not understood: {err}");
                None
            }
        }
    }

    /// Answers the proposal `seq`, whose entry at `index` just applied with `outcome`
    /// (nothing if nobody waits for it: a copy, or it expired).
    pub(super) fn answer(&mut self, seq: u64, index: u64, outcome: Outcome) {
        let Some(w) = self.waiting.remove(&seq) else { return };
        let r = match outcome {
            // A copy skipped as a duplicate means the proposal applied, once.
            Outcome::Applied | Outcome::Duplicate => Ok(index),
            Outcome::Stale => Err(NodeError::Refused(format!(
                "the log holds proposals of a newer incarnation of this node than this process's ({}); restart it",
                self.incarnation
            ))),
            Outcome::Past => Err(NodeError::Refused(format!("entry {index} was applied before this proposal was made"))),
        };
        let _ = w.reply.send(r);
    }

    /// Answers every waiting proposal with an error: the node is stopping or failed.
    pub(super) fn fail_all(&mut self, why: &str) {
        for (_, w) in std::mem::take(&mut self.waiting) {
            let _ = w.reply.send(Err(NodeError::Stopped(why.to_string())));
        }
    }
}
