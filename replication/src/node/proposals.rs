//! Proposals waiting to be applied, from the moment the driver takes them until their
//! caller is answered.
//!
//! A proposal (records, or a membership change) gets this node's next sequence number
//! and waits in [`Proposals`] under it. It is handed to raft
//! ([`Proposals::submit`]) once a leader is known, and again in every later term
//! until it applies: raft drops a proposal made while there is no leader, and a follower
//! that forwarded one to a leader since replaced never learns its fate. The last entry of
//! the proposal carries this node's id and the sequence number in its
//! [entry context](super::context); when an entry with such a context is applied
//! (`apply.rs`), [`Proposals::answer`] answers its waiter with the entry's index.
//! A proposal still waiting after `propose_timeout` is answered with
//! [`NodeError::NotLeader`] (never handed to raft) or [`NodeError::Timeout`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use raft::eraftpb::{ConfChange, ConfChangeType, Entry};
use raft::RawNode;

use halite_storage::log::RaftLog;

use super::context::{self, EntryContext};
use super::{NodeError, Reply};

/// What a waiting proposal asks for.
pub(super) enum Payload {
    Records(Vec<Vec<u8>>),
    Member { change: ConfChangeType, node: u64, addr: Option<SocketAddr> },
}

/// A proposal not yet applied.
struct Waiting {
    reply: Reply,
    at: Instant,
    payload: Payload,
    /// The term it was last handed to raft in (`None`: not yet).
    term: Option<u64>,
}

/// This node's proposals not yet applied, by sequence number.
pub(super) struct Proposals {
    /// This node's raft id (the proposer named in the entry contexts).
    me: u64,
    /// Sequence number of this node's last proposal.
    seq: u64,
    waiting: HashMap<u64, Waiting>,
    /// How long a proposal may wait to be applied.
    timeout: Duration,
}

impl Proposals {
    pub(super) fn new(me: u64, timeout: Duration) -> Self {
        Proposals { me, seq: 0, waiting: HashMap::new(), timeout }
    }

    /// Gives `payload` the next sequence number and queues it until it applies.
    pub(super) fn enqueue(&mut self, payload: Payload, reply: Reply) {
        self.seq += 1;
        self.waiting.insert(self.seq, Waiting { reply, at: Instant::now(), payload, term: None });
    }

    /// Hands raft every waiting proposal not yet submitted in the current term: new
    /// ones, ones that arrived during an election, and ones a follower forwarded to a
    /// leader that has since been replaced (raft does not resend forwarded proposals).
    /// A proposal submitted twice may be applied twice, which every record kind and
    /// membership change tolerates; its waiter is answered by the first.
    pub(super) fn submit(&mut self, raw: &mut RawNode<RaftLog>) {
        if raw.raft.leader_id == raft::INVALID_ID {
            return;
        }
        let term = raw.raft.term;
        let due: Vec<u64> = self.waiting.iter().filter(|(_, w)| w.term != Some(term)).map(|(k, _)| *k).collect();
        for seq in due {
            let Some(w) = self.waiting.get(&seq) else { continue };
            let mut ctx = EntryContext { proposer: self.me, seq, addr: None };
            let r = match &w.payload {
                Payload::Records(data) => {
                    let n = data.len();
                    let last = context::encode(&ctx);
                    data.iter().enumerate().try_for_each(|(i, d)| {
                        let context = if i + 1 == n { last.clone() } else { Vec::new() };
                        raw.propose(context, d.clone())
                    })
                }
                Payload::Member { change, node, addr } => {
                    ctx.addr = *addr;
                    let mut cc = ConfChange::default();
                    cc.set_change_type(*change);
                    cc.node_id = *node;
                    raw.propose_conf_change(context::encode(&ctx), cc)
                }
            };
            match r {
                Ok(()) => {
                    if let Some(w) = self.waiting.get_mut(&seq) {
                        w.term = Some(term);
                    }
                }
                // No leader after all (it stepped down): try again at the next change.
                Err(raft::Error::ProposalDropped) => {}
                Err(e) => {
                    // Entries submitted before the failure may still commit; the caller
                    // learns the request failed and may retry (records are idempotent).
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

    /// The sequence number of this node's proposal that `e` ends, if it ends one.
    pub(super) fn ours(&self, e: &Entry) -> Option<u64> {
        match context::decode(&e.context) {
            Ok(Some(c)) if c.proposer == self.me => Some(c.seq),
            Ok(_) => None,
            Err(err) => {
                tracing::warn!(index = e.index, "entry context not understood: {err}");
                None
            }
        }
    }

    /// Answers the proposals whose last entries were just applied: `(seq, index)`.
    pub(super) fn answer(&mut self, ours: Vec<(u64, u64)>) {
        for (seq, index) in ours {
            if let Some(w) = self.waiting.remove(&seq) {
                let _ = w.reply.send(Ok(index));
            }
        }
    }

    /// Answers every waiting proposal with an error: the node is stopping or failed.
    pub(super) fn fail_all(&mut self, why: &str) {
        for (_, w) in std::mem::take(&mut self.waiting) {
            let _ = w.reply.send(Err(NodeError::Stopped(why.to_string())));
        }
    }
}
