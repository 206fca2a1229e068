//! The end of every driver turn: the node's health, published for every reader
//! ([`NodeStatus`], `status.rs`): readiness asked and checked, dirty views recovered
//! when due (`faults.rs`), and the status (role, indexes, peers' progress) published.

use raft::StateRole;

use super::Driver;
use crate::node::status::{NodeStatus, PeerProgress, Readiness, Role, Status};

/// What the driver thread keeps for [`NodeStatus`]: the shared status it publishes, its
/// side of readiness, and the views that failed
/// ([`super::faults`]).
pub(in crate::node) struct Health {
    pub(in crate::node) status: NodeStatus,
    pub(in crate::node) readiness: Readiness,
    pub(in crate::node) faults: super::faults::ViewFaults,
}

impl Driver {
    /// End of a driver turn: readiness, dirty views due for recovery, and the status
    /// every reader sees.
    pub(super) fn end_turn(&mut self) {
        self.recover_views();
        let applied = self.core.raw.raft.raft_log.applied;
        let ready = self.health.readiness.turn(&mut self.core.raw, applied);
        // Holding for want of space, a member of a group falls behind it: not ready. A
        // lone master's state stays current.
        let cut_off = self.space.held().is_some() && self.core.raw.raft.prs().conf().voters().ids().len() > 1;
        let ready = ready && !cut_off;
        let r = &self.core.raw.raft;
        let leader = (r.leader_id != raft::INVALID_ID).then_some(r.leader_id);
        let peers = if r.state == StateRole::Leader {
            let learners = r.prs().conf().learners().clone();
            let mut v: Vec<PeerProgress> =
                r.prs().iter().filter(|(id, _)| **id != r.id).map(|(id, p)| PeerProgress { id: *id, matched: p.matched, next: p.next_idx, learner: learners.contains(id) }).collect();
            v.sort_by_key(|p| p.id);
            v
        } else {
            Vec::new()
        };
        let target = self.health.readiness.target;
        let status = Status {
            id: r.id,
            role: Role::of(r.state),
            term: r.term,
            leader,
            commit: r.raft_log.committed.max(target.unwrap_or(0)),
            applied,
            catch_up_to: target,
            ready,
            peers,
            dirty_views: self.health.faults.dirty(),
            disk_full: self.space.held(),
        };
        self.health.status.publish(status);
    }
}
