//! The node's part of the member key book (which key speaks for each raft id,
//! `halite_storage::state`'s `member_keys.rs`; the transport's side is
//! `transport::identity`):
//!
//! - **applying**: a membership change that adds a member writes the key its context
//!   carries (the join path), a removal deletes the removed id's key, in log order with
//!   the records (`apply.rs`);
//! - **publishing**: at start, after every apply that changed the book or the group, and
//!   after a snapshot is installed, the book, the group's members and whether this node
//!   is one of them go to the transport ([`Outbox::set_member_keys`]);
//! - **recording its own**: a member whose key the book lacks (a founder, a member of a
//!   log older than the book) proposes a `member_key` record for itself once a leader is
//!   known, again after `propose_timeout` while it is still missing. If the book holds
//!   another key for this node's id, nothing can change it (the state machine refuses):
//!   that is logged as an error once; its peers refuse this node until it joins again
//!   under a new id with its new key.
//!
//! [`Outbox::set_member_keys`]: crate::transport::Outbox::set_member_keys

use std::collections::HashSet;
use std::time::Instant;

use raft::eraftpb::{ConfChange, ConfChangeType, Entry};
use protobuf::Message as _;

use halite_storage::context;
use halite_storage::format::{now_ns, MemberKey, Record};
use halite_storage::state::MemberKeyChange;

use super::Driver;
use crate::node::proposals::Payload;
use crate::node::Result;

/// What the book says of this node's own key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Own {
    /// Not looked at yet, or no key configured.
    #[default]
    Unknown,
    /// The book holds no key for this node: one is to be proposed.
    Missing,
    Recorded,
    /// The book holds another key for this node's id.
    Other,
}

/// The node's state about its own key.
#[derive(Default)]
pub(in crate::node) struct OwnKey {
    pub(super) state: Own,
    /// When this node last proposed its key.
    proposed: Option<Instant>,
}

impl Driver {
    /// The book's part of an applied membership change (entry `e`).
    pub(super) fn apply_member_key_change(&mut self, e: &Entry) -> Result<()> {
        let Ok(cc) = ConfChange::parse_from_bytes(&e.data) else { return Ok(()) };
        let change = match cc.get_change_type() {
            ConfChangeType::RemoveNode => MemberKeyChange::Removed,
            _ => MemberKeyChange::Added(context::decode(&e.context).ok().flatten().and_then(|c| c.key)),
        };
        self.core.sm.apply_member_change(e.index, cc.node_id, change)?;
        self.peers.keys_dirty = true;
        Ok(())
    }

    /// Hands the applied book and group to the transport, when they may have changed.
    pub(super) fn publish_member_keys(&mut self) {
        if !self.peers.keys_dirty {
            return;
        }
        self.peers.keys_dirty = false;
        self.publish_record_sets();
        let book = match self.core.sm.member_keys() {
            Ok(b) => b,
            Err(e) => {
                tracing::error!("member key book not readable, not published: {e}");
                return;
            }
        };
        let members: HashSet<u64> = self.group().into_iter().collect();
        let me_member = members.contains(&self.cfg.id);
        if let Some(own) = self.cfg.member_key {
            let state = match book.get(&self.cfg.id) {
                None => Own::Missing,
                Some(k) if *k == own => Own::Recorded,
                Some(_) => Own::Other,
            };
            if state == Own::Other && self.peers.own_key.state != Own::Other {
                tracing::error!(member = self.cfg.id, "the log holds another member key for this member's id than its own (member.pem replaced?): its peers refuse it; restore the key, or join again on an empty data directory (a new id)");
            }
            self.peers.own_key.state = state;
        }
        if let Some(o) = &self.peers.outbox {
            o.set_member_keys(book, members, me_member);
        }
    }

    /// The group's voters and learners, as raft holds them.
    pub(super) fn group(&self) -> Vec<u64> {
        let conf = self.core.raw.raft.prs().conf();
        conf.voters().ids().iter().chain(conf.learners().iter().copied()).collect()
    }

    /// On a tick: proposes this node's own key when the book lacks it (see the module
    /// documentation).
    pub(super) fn record_own_key(&mut self) {
        let Some(own) = self.cfg.member_key else { return };
        if self.peers.own_key.state != Own::Missing || self.core.raw.raft.leader_id == raft::INVALID_ID {
            return;
        }
        let conf = self.core.raw.raft.prs().conf();
        if !conf.voters().contains(self.cfg.id) && !conf.learners().contains(&self.cfg.id) {
            return;
        }
        if self.peers.own_key.proposed.is_some_and(|t| t.elapsed() < self.cfg.propose_timeout) {
            return;
        }
        let rec = Record::MemberKey(MemberKey { id: self.cfg.id, public: own.to_vec(), time_ns: now_ns() });
        match Record::encode_batch(&[rec]) {
            Ok(data) => {
                tracing::info!(member = self.cfg.id, "recording this member's key in the log");
                let (reply, _) = tokio::sync::oneshot::channel();
                self.proposals.enqueue(Payload::Records(data), reply, None);
                self.peers.own_key.proposed = Some(Instant::now());
            }
            Err(e) => tracing::error!("member key record not encoded: {e}"),
        }
    }
}
