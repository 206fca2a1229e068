//! Proposals waiting to be applied, from the moment the driver takes them until their
//! caller is answered.
//!
//! A proposal (one caller's records, or a membership change) gets this node's next
//! sequence number and waits under it, in order. Record proposals handed to raft at the
//! same time share an entry (a group, `halite_storage::entry`: under load a job's
//! returns take about one entry per hundred), each item with its sequence number. An
//! entry carries, in its [entry context](super::context), the proposal's identity (a
//! group's first): this node's id, this
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
//!   membership change turned into an empty entry, a transfer); for an entry of a
//!   pipeline, three election timeouts in which the pipeline applied nothing.
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
//! still apply later, once). A proposal of a **pipeline** (one caller's entries in
//! order, several in flight: `Node::propose_all`) waits at most `propose_timeout` after
//! the pipeline last made progress (an entry of it applied, or its own proposal): a
//! bulk write that moves at the cluster's pace is not cut by a bound made for one
//! entry, and one that stops moving fails as any other.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use raft::eraftpb::{ConfChange, ConfChangeType};
use raft::{RawNode, StateRole};

use halite_storage::context::{self, EntryContext, ProposalId};
use halite_storage::entry;
use halite_storage::format::RecordKind;
use halite_storage::log::RaftLog;
use halite_storage::state::Outcome;
use halite_storage::Record;

use super::{NodeError, Reply};

/// Most proposals waiting at once; more are refused with [`NodeError::Busy`] (the
/// daemon handles at most 1,024 requests at once, so this is only reached when the
/// cluster cannot commit at all).
pub(super) const MAX_WAITING: usize = 16_384;

/// Most record proposals handed to raft in one entry.
pub(super) const GROUP_MAX_PROPOSALS: usize = 4096;
/// Most bytes of proposals' data in one entry (a proposal larger than this is an entry
/// of its own): 1 MiB keeps an entry, and the raft message that carries it to a
/// follower, small next to the transport's frame limit.
pub(super) const GROUP_MAX_BYTES: usize = 1 << 20;

/// What a waiting proposal asks for.
pub(super) enum Payload {
    /// One entry's data: the proposal's records (`halite_storage::entry`).
    Records(Vec<u8>),
    Member { change: ConfChangeType, node: u64, addr: Option<SocketAddr>, key: Option<[u8; 32]> },
}

/// A due proposal, as [`Proposals::submit`] hands it over.
enum Due {
    /// Records: their data's length.
    Records(usize),
    Member(ConfChangeType, u64, Option<SocketAddr>, Option<[u8; 32]>),
}

/// A proposal not yet applied.
struct Waiting {
    reply: Reply,
    /// When its wait began: its proposal, or the last progress of its pipeline.
    at: Instant,
    /// The pipeline it belongs to, if any (see the module docs).
    pipeline: Option<u64>,
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
    /// refuses it at once when too many are waiting); `pipeline` names the pipeline it
    /// belongs to (see the module docs).
    pub(super) fn enqueue(&mut self, payload: Payload, reply: Reply, pipeline: Option<u64>) {
        if self.waiting.len() >= MAX_WAITING {
            let _ = reply.send(Err(NodeError::Busy(MAX_WAITING)));
            return;
        }
        self.seq += 1;
        let now = Instant::now();
        self.waiting.insert(self.seq, Waiting { reply, at: now, pipeline, payload, term: None, handed: now, forwarded: false });
    }

    /// The lowest sequence number still waiting (the next one when none is).
    pub(super) fn settled_below(&self) -> u64 {
        self.waiting.keys().next().copied().unwrap_or(self.seq + 1)
    }

    /// Whether a change of `node`'s membership is waiting.
    pub(super) fn member_change_waiting(&self, node: u64) -> bool {
        self.waiting.values().any(|w| matches!(w.payload, Payload::Member { node: n, .. } if n == node))
    }

    /// Hands raft every waiting proposal that is due (see the module docs): record
    /// proposals in groups of up to [`GROUP_MAX_PROPOSALS`] and [`GROUP_MAX_BYTES`],
    /// each group one entry (`halite_storage::entry`'s group layout; a group of one is
    /// a plain entry), membership changes one by one.
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
        let mut group: Vec<u64> = Vec::new();
        let mut group_bytes = 0;
        for seq in due {
            // What it is, copied out of the map (handing proposals over changes the map).
            let due = match self.waiting.get(&seq).map(|w| &w.payload) {
                None => continue,
                Some(Payload::Records(data)) => Due::Records(data.len()),
                Some(Payload::Member { change, node, addr, key }) => Due::Member(*change, *node, *addr, *key),
            };
            match due {
                Due::Records(len) => {
                    if !group.is_empty() && (group.len() >= GROUP_MAX_PROPOSALS || group_bytes + len > GROUP_MAX_BYTES) {
                        let full = std::mem::take(&mut group);
                        self.hand_records(raw, full, settled_below, term, leading);
                        group_bytes = 0;
                    }
                    group_bytes += len;
                    group.push(seq);
                }
                // raft-rs turns a change proposed while another is pending into an empty
                // entry: wait for the pending one to apply.
                Due::Member(..) if leading && raw.raft.has_pending_conf() => continue,
                Due::Member(change, node, addr, key) => {
                    // The records before it go first, in order.
                    let before = std::mem::take(&mut group);
                    self.hand_records(raw, before, settled_below, term, leading);
                    group_bytes = 0;
                    let mut cc = ConfChange::default();
                    cc.set_change_type(change);
                    cc.node_id = node;
                    let id = ProposalId { proposer: self.me, incarnation: self.incarnation, seq };
                    let r = raw.propose_conf_change(context::encode(&EntryContext::proposal(id, settled_below, addr).with_key(key)), cc);
                    self.handed(&[seq], r, term, leading);
                }
            }
        }
        self.hand_records(raw, group, settled_below, term, leading);
    }

    /// Proposes the record proposals `seqs` (waiting, in order) as one entry.
    fn hand_records(&mut self, raw: &mut RawNode<RaftLog>, seqs: Vec<u64>, settled_below: u64, term: u64, leading: bool) {
        let Some(&first) = seqs.first() else { return };
        let id = ProposalId { proposer: self.me, incarnation: self.incarnation, seq: first };
        let data = {
            let items: Vec<(u64, &[u8])> = seqs
                .iter()
                .filter_map(|seq| match self.waiting.get(seq).map(|w| &w.payload) {
                    Some(Payload::Records(d)) => Some((*seq, d.as_slice())),
                    _ => None,
                })
                .collect();
            match items.as_slice() {
                [] => return,
                [(_, one)] => Ok(one.to_vec()),
                many => entry::encode_group(many),
            }
        };
        match data {
            // The context names the first proposal; a group's items name the others.
            Ok(data) => {
                let r = raw.propose(context::encode(&EntryContext::proposal(id, settled_below, None)), data);
                self.handed(&seqs, r, term, leading);
            }
            // Not within the group bounds above; should it happen, one entry each.
            Err(e) => {
                tracing::error!("a group of {} proposals could not be encoded ({e}); handed over one by one", seqs.len());
                for seq in seqs {
                    self.hand_records(raw, vec![seq], settled_below, term, leading);
                }
            }
        }
    }

    /// Notes what raft made of the proposals `seqs`, handed to it as one entry.
    fn handed(&mut self, seqs: &[u64], r: raft::Result<()>, term: u64, leading: bool) {
        match r {
            Ok(()) => {
                for seq in seqs {
                    if let Some(w) = self.waiting.get_mut(seq) {
                        if w.term.is_some() {
                            tracing::debug!(seq, term, "proposal handed to raft again");
                        }
                        w.term = Some(term);
                        w.handed = Instant::now();
                        w.forwarded = !leading;
                    }
                }
            }
            // No leader after all (it stepped down): try again at the next change.
            Err(raft::Error::ProposalDropped) => {}
            Err(e) => {
                let why = e.to_string();
                let mut e = Some(e);
                for seq in seqs {
                    if let Some(w) = self.waiting.remove(seq) {
                        // raft's error to the first, its text to the others of a group.
                        let err = e.take().map_or_else(|| NodeError::Refused(format!("raft: {why}")), NodeError::Raft);
                        let _ = w.reply.send(Err(err));
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
        if let Some(p) = w.pipeline {
            // The pipeline moved: the wait of its later entries starts again, and so
            // does the wait before a forward is handed over again (they are behind it,
            // not lost).
            let now = Instant::now();
            for o in self.waiting.values_mut().filter(|o| o.pipeline == Some(p)) {
                o.at = now;
                o.handed = now;
            }
        }
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

/// The first kind among `records` that a cluster of record set `cluster` does not write
/// yet (some member's build may not read it: `RecordKind::since`).
pub(super) fn unwritable(records: &[Record], cluster: u32) -> Option<RecordKind> {
    records.iter().map(Record::kind).find(|k| k.since() > cluster)
}
