//! The node's part of the members' record sets (`halite_storage::state`'s
//! `member_releases.rs`, the record in `record/member_release.rs`):
//!
//! - **recording its own**: a cluster member (one with a member key) whose recorded build
//!   is missing or another than its own (it was upgraded or downgraded) proposes a
//!   `member_release` record for itself once a leader is known, again after
//!   `propose_timeout` while it still differs;
//! - **the cluster's record set**: after every apply that may have changed what the
//!   members recorded or who the members are, the lowest record set of the group's
//!   voters and learners (one that recorded none counts as 1) is published to
//!   [`NodeHandle::cluster_record_set`](crate::NodeHandle::cluster_record_set): a joiner
//!   whose build reads less is refused (`join.rs`), and a release that adds a record kind
//!   writes it only once this reaches the kind's
//!   [`RecordKind::since`](halite_storage::format::RecordKind::since).

use std::sync::atomic::Ordering;
use std::time::Instant;

use halite_storage::format::{now_ns, MemberRelease, Record, RecordKind, RECORD_SET, RELEASE};
use halite_storage::state::lowest_record_set;

use super::Driver;
use crate::node::proposals::Payload;

/// The node's state about its own recorded build.
#[derive(Default)]
pub(in crate::node) struct OwnRelease {
    /// What the log holds for this node is this build.
    recorded: bool,
    /// When this node last proposed its build.
    proposed: Option<Instant>,
}

impl Driver {
    /// The cluster's record set and whether this node's build is recorded, from the
    /// applied state and the group (called when either may have changed).
    pub(super) fn publish_record_sets(&mut self) {
        let recorded = match self.core.sm.member_releases() {
            Ok(r) => r,
            Err(e) => return tracing::error!("members' record sets not readable: {e}"),
        };
        let lowest = lowest_record_set(&recorded, self.group());
        let before = self.peers.record_set.swap(lowest, Ordering::Relaxed);
        if before != lowest {
            tracing::info!(record_set = lowest, "the cluster's record set (its members' lowest)");
        }
        self.peers.own_release.recorded = recorded.get(&self.cfg.id).is_some_and(|r| r.record_set == RECORD_SET && r.release == RELEASE);
    }

    /// On a tick: proposes this node's build when the log does not hold it (see the
    /// module documentation).
    pub(super) fn record_own_release(&mut self) {
        if self.cfg.member_key.is_none() || self.peers.own_release.recorded || self.core.raw.raft.leader_id == raft::INVALID_ID {
            return;
        }
        if !self.group().contains(&self.cfg.id) {
            return;
        }
        if self.peers.own_release.proposed.is_some_and(|t| t.elapsed() < self.cfg.propose_timeout) {
            return;
        }
        debug_assert!(RecordKind::MemberRelease.since() <= 1, "every build can read a member_release");
        let rec = Record::MemberRelease(MemberRelease { id: self.cfg.id, record_set: RECORD_SET, release: RELEASE.to_string(), time_ns: now_ns() });
        match Record::encode_batch(&[rec]) {
            Ok(data) => {
                tracing::info!(member = self.cfg.id, record_set = RECORD_SET, release = RELEASE, "recording this member's build in the log");
                let (reply, _) = tokio::sync::oneshot::channel();
                self.proposals.enqueue(Payload::Records(data), reply, None);
                self.peers.own_release.proposed = Some(Instant::now());
            }
            Err(e) => tracing::error!("member release record not encoded: {e}"),
        }
    }
}
