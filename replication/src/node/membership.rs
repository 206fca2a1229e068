//! Membership: who is in the group, and where each member listens.
//!
//! Membership changes (`AddNode`, `AddLearnerNode`, `RemoveNode`) are raft conf-change
//! entries, proposed and answered like records (`proposals.rs`) and applied in log order
//! with them. An addition carries the member's transport address in its
//! [entry context](super::context), so the log itself is the cluster's **address book**:
//! it is read from the log once at start ([`address_book`]), kept current as changes apply
//! ([`Driver::apply_member_change`]), shared with [`NodeHandle::addresses`] and fed to
//! the transport.
//!
//! Two changes the leader makes by itself:
//! - **announce**: a node whose own address the log does not name (a log founded before
//!   addresses were recorded) proposes an `AddNode` for itself with its address the first
//!   time it leads;
//! - **promote**: with `auto_promote`, a learner whose log has caught up with the
//!   committed index is proposed as a voter, once per learner.
//!
//! [`NodeHandle::addresses`]: super::NodeHandle::addresses

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, Entry, EntryType};

use halite_storage::log::RaftLog;
use halite_storage::Error as StorageError;

use super::context;
use super::driver::Driver;
use super::proposals::Payload;
use super::{Reply, Result};

/// Member id → transport address, as the log's membership entries name them: read from
/// the log once at start, then kept current by the driver as it applies changes.
pub(super) type AddressBook = Arc<RwLock<HashMap<u64, SocketAddr>>>;

/// A membership change: `change` of `node`, whose transport address (for additions)
/// travels with it in the entry's context so every member, now or replaying later,
/// learns where the node listens.
pub(super) struct MemberChange {
    pub(super) change: ConfChangeType,
    pub(super) node: u64,
    pub(super) addr: Option<SocketAddr>,
    pub(super) reply: Reply,
}

/// The transport address a membership-change entry carries in its context, if any (a
/// malformed context names none).
fn entry_addr(e: &Entry) -> Option<SocketAddr> {
    context::decode(&e.context).ok().flatten()?.addr
}

/// Every member address the log's membership changes name, last one winning, removed
/// members dropped (read at start so a restarted node can reach its peers unaided).
pub(super) fn address_book(log: &RaftLog) -> Result<HashMap<u64, SocketAddr>> {
    let mut book: HashMap<u64, Option<SocketAddr>> = HashMap::new();
    let (Some(first), Some(last)) = (log.first_entry_index(), log.last_entry_index()) else { return Ok(HashMap::new()) };
    let mut at = first;
    while at <= last {
        let hi = (at + 4096).min(last + 1);
        for e in log.read_entries(at, hi, None)? {
            if e.get_entry_type() != EntryType::EntryConfChange {
                continue;
            }
            let Ok(cc) = ConfChange::parse_from_bytes(&e.data) else { continue };
            match (cc.get_change_type(), entry_addr(&e)) {
                (ConfChangeType::RemoveNode, _) => {
                    book.insert(cc.node_id, None);
                }
                (_, Some(a)) => {
                    book.insert(cc.node_id, Some(a));
                }
                _ => {}
            }
        }
        at = hi;
    }
    Ok(book.into_iter().filter_map(|(id, a)| Some((id, a?))).collect())
}

impl Driver {
    /// Queues a membership change until it applies.
    pub(super) fn propose_member(&mut self, c: MemberChange) {
        let payload = Payload::Member { change: c.change, node: c.node, addr: c.addr };
        self.enqueue(payload, c.reply);
    }

    /// On becoming leader: if this node's address is still to be announced, queue the
    /// `AddNode` that writes it into the log (proposed with the next group).
    pub(super) fn announce_when_leading(&mut self) {
        if let Some(addr) = self.announce.take() {
            let (reply, _) = tokio::sync::oneshot::channel();
            self.pending_announce = Some(MemberChange { change: ConfChangeType::AddNode, node: self.cfg.id, addr: Some(addr), reply });
        }
    }

    /// As leader: proposes a voter change for each learner whose log matches the
    /// committed index (it has caught up), once per learner.
    pub(super) fn promote_caught_up(&mut self) {
        if !self.cfg.auto_promote || self.raw.raft.state != raft::StateRole::Leader {
            return;
        }
        let committed = self.raw.raft.raft_log.committed;
        let learners: Vec<u64> = self.raw.raft.prs().conf().learners().iter().copied().collect();
        self.promoting.retain(|id| learners.contains(id));
        for id in learners {
            let caught_up = self.raw.raft.prs().get(id).is_some_and(|p| p.matched >= committed);
            if caught_up && self.promoting.insert(id) {
                tracing::info!(node = id, committed, "learner caught up: promoting it to voter");
                let (reply, _) = tokio::sync::oneshot::channel();
                self.propose_member(MemberChange { change: ConfChangeType::AddNode, node: id, addr: None, reply });
            }
        }
    }

    /// Applies a committed membership change: raft's view of the group, the persisted
    /// conf state, and the address book (ours and the transport's).
    pub(super) fn apply_member_change(&mut self, e: &Entry) -> Result<()> {
        let cc = ConfChange::parse_from_bytes(&e.data).map_err(|err| StorageError::CorruptLog(format!("conf change entry {} does not decode: {err}", e.index)))?;
        match self.raw.apply_conf_change(&cc) {
            Ok(cs) => {
                self.log.append(&[], None, Some(&cs), true)?;
                tracing::info!(index = e.index, change = ?cc.get_change_type(), node = cc.node_id, voters = ?cs.voters, learners = ?cs.learners, "membership changed");
            }
            // Re-applying a change already in effect (after a restart) is refused by raft
            // as a no-op; the persisted conf state already has it.
            Err(err) => tracing::warn!(index = e.index, node = cc.node_id, "membership change not applied: {err}"),
        }
        let addr = match cc.get_change_type() {
            ConfChangeType::RemoveNode => None,
            _ => match entry_addr(e) {
                Some(a) => Some(a),
                None => return Ok(()),
            },
        };
        {
            let mut book = self.book.write().unwrap_or_else(|p| p.into_inner());
            match addr {
                Some(a) => book.insert(cc.node_id, a),
                None => book.remove(&cc.node_id),
            };
        }
        if let Some(o) = &self.outbox {
            o.set_peer(cc.node_id, addr);
        }
        Ok(())
    }
}
