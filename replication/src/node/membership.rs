//! Membership: who is in the group, and where each member listens.
//!
//! Membership changes (`AddNode`, `AddLearnerNode`, `RemoveNode`) are raft conf-change
//! entries, proposed and answered like records (`proposals.rs`) and applied in log order
//! with them. An addition carries the member's transport address in its
//! [entry context](super::context), so the log itself is the cluster's **address book**:
//! it is read from the log once at start ([`address_book`]), kept current as changes apply
//! ([`Membership::apply`]), shared with [`NodeHandle::addresses`] and fed to
//! the transport.
//!
//! Two changes the leader makes by itself:
//! - **announce**: a node whose own address the log does not name (a log founded before
//!   addresses were recorded) proposes an `AddNode` for itself with its address the first
//!   time it leads;
//! - **promote**: with `auto_promote`, a learner whose log has caught up with the
//!   committed index is proposed as a voter, unless a change of its membership is
//!   already waiting. A promotion that is lost (dropped with a leader, expired while
//!   another change was pending) is so proposed again on a later tick: a learner never
//!   stays "promoting" for good. (A change is not handed to raft while another is
//!   pending, see `proposals.rs`.)
//!
//! [`NodeHandle::addresses`]: super::NodeHandle::addresses

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, Entry, EntryType};
use raft::RawNode;

use halite_storage::log::RaftLog;
use halite_storage::Error as StorageError;

use super::context;
use super::proposals::Payload;
use super::{Reply, Result};
use crate::transport::Outbox;

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
    /// For an addition by the join path, the member key the joiner proved (the entry's
    /// context carries it; `member_keys.rs`).
    pub(super) key: Option<[u8; 32]>,
    pub(super) reply: Reply,
}

impl MemberChange {
    /// What the proposal of this change carries, and who hears its outcome.
    pub(super) fn into_proposal(self) -> (Payload, Reply) {
        (Payload::Member { change: self.change, node: self.node, addr: self.addr, key: self.key }, self.reply)
    }

    /// A change the leader makes by itself (nobody waits for its outcome).
    fn unasked(change: ConfChangeType, node: u64, addr: Option<SocketAddr>) -> Self {
        let (reply, _) = tokio::sync::oneshot::channel();
        MemberChange { change, node, addr, key: None, reply }
    }
}

/// The transport address a membership-change entry carries in its context, if any (a
/// malformed context names none).
fn entry_addr(e: &Entry) -> Option<SocketAddr> {
    context::decode(&e.context).ok().flatten()?.addr
}

/// Every member address the log's membership changes name, last one winning, removed
/// members dropped (read at start so a restarted node can reach its peers unaided). A
/// compacted log keeps the membership entries of its compacted part
/// ([`RaftLog::retained_members`]); they are read first.
pub(super) fn address_book(log: &RaftLog) -> Result<HashMap<u64, SocketAddr>> {
    let mut book: HashMap<u64, Option<SocketAddr>> = HashMap::new();
    let mut note = |e: &Entry| {
        if e.get_entry_type() != EntryType::EntryConfChange {
            return;
        }
        let Ok(cc) = ConfChange::parse_from_bytes(&e.data) else { return };
        match (cc.get_change_type(), entry_addr(e)) {
            (ConfChangeType::RemoveNode, _) => {
                book.insert(cc.node_id, None);
            }
            (_, Some(a)) => {
                book.insert(cc.node_id, Some(a));
            }
            _ => {}
        }
    };
    for e in log.retained_members()? {
        note(&e);
    }
    if let (Some(first), Some(last)) = (log.first_entry_index(), log.last_entry_index()) {
        let mut at = first;
        while at <= last {
            let hi = (at + 4096).min(last + 1);
            for e in log.read_entries(at, hi, None)? {
                note(&e);
            }
            at = hi;
        }
    }
    Ok(book.into_iter().filter_map(|(id, a)| Some((id, a?))).collect())
}

/// The driver's membership state.
pub(super) struct Membership {
    me: u64,
    auto_promote: bool,
    /// This node's address, to be written into the log once it leads (see `boot.rs`).
    announce: Option<SocketAddr>,
    /// The announcing change, proposed with the next group.
    pending_announce: Option<MemberChange>,
    pub(super) book: AddressBook,
}

impl Membership {
    pub(super) fn new(me: u64, auto_promote: bool, announce: Option<SocketAddr>, book: AddressBook) -> Self {
        Membership { me, auto_promote, announce, pending_announce: None, book }
    }

    /// On becoming leader: if this node's address is still to be announced, queue the
    /// `AddNode` that writes it into the log (proposed with the next group).
    pub(super) fn announce_when_leading(&mut self) {
        if let Some(addr) = self.announce.take() {
            self.pending_announce = Some(MemberChange::unasked(ConfChangeType::AddNode, self.me, Some(addr)));
        }
    }

    /// The announcing change, once, when there is one.
    pub(super) fn take_announce(&mut self) -> Option<MemberChange> {
        self.pending_announce.take()
    }

    /// As leader: a voter change for each learner whose log matches the committed index
    /// (it has caught up) and for which no membership change is `waiting` already.
    pub(super) fn promotions(&mut self, raw: &RawNode<RaftLog>, waiting: impl Fn(u64) -> bool) -> Vec<MemberChange> {
        if !self.auto_promote || raw.raft.state != raft::StateRole::Leader {
            return Vec::new();
        }
        let committed = raw.raft.raft_log.committed;
        let learners: Vec<u64> = raw.raft.prs().conf().learners().iter().copied().collect();
        let mut out = Vec::new();
        for id in learners {
            let caught_up = raw.raft.prs().get(id).is_some_and(|p| p.matched >= committed);
            if caught_up && !waiting(id) {
                tracing::info!(node = id, committed, "learner caught up: promoting it to voter");
                out.push(MemberChange::unasked(ConfChangeType::AddNode, id, None));
            }
        }
        out
    }

    /// Applies a committed membership change: raft's view of the group, the persisted
    /// conf state, and the address book (ours and the transport's).
    pub(super) fn apply(&mut self, raw: &mut RawNode<RaftLog>, log: &RaftLog, outbox: Option<&Arc<dyn Outbox>>, e: &Entry) -> Result<()> {
        let cc = ConfChange::parse_from_bytes(&e.data).map_err(|err| StorageError::CorruptLog(format!("conf change entry {} does not decode: {err}", e.index)))?;
        match raw.apply_conf_change(&cc) {
            Ok(cs) => {
                log.append(&[], None, Some(&cs), true)?;
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
        if let Some(o) = outbox {
            o.set_peer(cc.node_id, addr);
        }
        Ok(())
    }
}
