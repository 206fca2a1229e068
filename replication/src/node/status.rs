//! What a node reports about itself, readable cheaply from any thread ([`NodeStatus`]),
//! and when it is **ready**: caught up with what the cluster had committed.
//!
//! The driver thread publishes a [`Status`] at the end of every turn (at least once per
//! tick): role, term, leader, commit and apply indexes, the progress of every peer when
//! it leads, the views that are dirty. Readers take a copy under a read lock, or read the
//! ready flag alone (one atomic load, for the request path).
//!
//! ## Readiness
//!
//! A node is ready once it has applied everything the cluster had committed when it
//! (re)gained contact with a leader. It learns that index with raft's ReadIndex: it asks
//! (`read_index`, forwarded by a follower or learner to the leader), the leader answers
//! with its commit index once a quorum has confirmed it still leads, and the node waits
//! until its apply index reaches it. So:
//!
//! - a member restarted behind many writes, or a joiner replaying the log, is not ready
//!   until it has applied what was committed when it asked;
//! - a single-node master is its own leader: the answer is its own commit index, so it is
//!   ready once its log is applied;
//! - a member without a leader (cut off from a majority, or during an election) is not
//!   ready; when it finds a leader again it asks again and waits to catch up. So a
//!   member that was cut off while the others took writes is not ready again until it
//!   has applied them.
//!
//! An unanswered question (the message lost, the leader gone) is asked again after
//! [`ASK_AGAIN`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use raft::{ReadState, StateRole};

/// How long an unanswered ReadIndex waits before it is asked again.
pub const ASK_AGAIN: Duration = Duration::from_secs(1);

/// The request context of the readiness ReadIndex (no other ReadIndex is made).
const READY_CTX: &[u8] = b"halite-ready";

/// A node's raft role.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Role {
    #[default]
    Follower,
    PreCandidate,
    Candidate,
    Leader,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Follower => "follower",
            Role::PreCandidate => "precandidate",
            Role::Candidate => "candidate",
            Role::Leader => "leader",
        }
    }

    pub(in crate::node) fn of(r: StateRole) -> Role {
        match r {
            StateRole::Follower => Role::Follower,
            StateRole::PreCandidate => Role::PreCandidate,
            StateRole::Candidate => Role::Candidate,
            StateRole::Leader => Role::Leader,
        }
    }
}

/// How far a peer's log matches the leader's, as the leader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerProgress {
    pub id: u64,
    /// The highest index known to be in the peer's log.
    pub matched: u64,
    /// The next index the leader sends it.
    pub next: u64,
    /// A learner (receives the log, does not vote).
    pub learner: bool,
}

/// A node's state as last published by its driver thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub id: u64,
    pub role: Role,
    pub term: u64,
    /// The leader this node knows (`None` while there is none).
    pub leader: Option<u64>,
    /// The highest commit index this node knows of: its own, or what the leader said it
    /// had committed (readiness), whichever is higher.
    pub commit: u64,
    /// The index of the last entry applied to the state machine.
    pub applied: u64,
    /// The cluster's commit index this node must apply before it is ready (`None` until
    /// the leader has answered).
    pub catch_up_to: Option<u64>,
    /// Caught up with the cluster: see the module docs.
    pub ready: bool,
    /// Every other member's progress, when this node leads (empty otherwise).
    pub peers: Vec<PeerProgress>,
    /// Views that failed and wait to be recovered (`faults.rs`).
    pub dirty_views: Vec<&'static str>,
    /// The data directory's free bytes while they are under the reserve
    /// (`NodeConfig::min_free_bytes`), while a state machine that met a full disk
    /// waits for space, or while a log write that met one is tried again: writes are
    /// refused (`driver/space.rs`, `driver/state_full.rs`).
    pub disk_full: Option<u64>,
}

impl Status {
    /// Entries known committed and not yet applied here.
    pub fn lag(&self) -> u64 {
        self.commit.saturating_sub(self.applied)
    }
}

struct Shared {
    status: RwLock<Status>,
    ready: AtomicBool,
    proposals: AtomicU64,
    view_errors: AtomicU64,
    /// Free bytes of the data directory while under the reserve; `u64::MAX`: not full.
    disk_free: AtomicU64,
    /// A stop was asked: a write being retried on a full disk gives up.
    stopping: AtomicBool,
}

/// A node's status, shared between its driver thread (which publishes it) and any
/// reader. Cloning is cheap.
#[derive(Clone)]
pub struct NodeStatus(Arc<Shared>);

impl std::fmt::Debug for NodeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl NodeStatus {
    pub(super) fn new(id: u64) -> Self {
        NodeStatus(Arc::new(Shared {
            status: RwLock::new(Status { id, ..Default::default() }),
            ready: AtomicBool::new(false),
            proposals: AtomicU64::new(0),
            view_errors: AtomicU64::new(0),
            disk_free: AtomicU64::new(u64::MAX),
            stopping: AtomicBool::new(false),
        }))
    }

    /// A copy of the last published status.
    pub fn get(&self) -> Status {
        let mut s = self.0.status.read().unwrap_or_else(|p| p.into_inner()).clone();
        // Set at once by the driver, also while it retries a log write and publishes
        // nothing else.
        s.disk_full = self.disk_full();
        s
    }

    /// Whether the node is caught up (one atomic load).
    pub fn ready(&self) -> bool {
        self.0.ready.load(Ordering::Acquire)
    }

    /// Proposals handed to this node since it started.
    pub fn proposals(&self) -> u64 {
        self.0.proposals.load(Ordering::Relaxed)
    }

    /// View writes that failed since the node started.
    pub fn view_errors(&self) -> u64 {
        self.0.view_errors.load(Ordering::Relaxed)
    }

    /// The data directory's free bytes while they are under the reserve: writes are
    /// refused (one atomic load, for the proposal path).
    pub fn disk_full(&self) -> Option<u64> {
        Some(self.0.disk_free.load(Ordering::Acquire)).filter(|f| *f != u64::MAX)
    }

    pub(in crate::node) fn set_disk_full(&self, free: Option<u64>) {
        self.0.disk_free.store(free.map_or(u64::MAX, |f| f.min(u64::MAX - 1)), Ordering::Release);
    }

    pub(super) fn ask_stop(&self) {
        self.0.stopping.store(true, Ordering::Release);
    }

    pub(in crate::node) fn stop_asked(&self) -> bool {
        self.0.stopping.load(Ordering::Acquire)
    }

    pub(super) fn count_proposal(&self) {
        self.0.proposals.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn count_view_error(&self) {
        self.0.view_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(in crate::node) fn publish(&self, s: Status) {
        self.0.ready.store(s.ready, Ordering::Release);
        *self.0.status.write().unwrap_or_else(|p| p.into_inner()) = s;
    }
}

/// The driver's side of readiness: the commit index it waits for, and its question.
#[derive(Debug, Default)]
pub(in crate::node) struct Readiness {
    /// What the leader said it had committed.
    pub(in crate::node) target: Option<u64>,
    /// When the question was last asked (`None`: not asked since the leader was lost).
    asked_at: Option<Instant>,
    /// Caught up once since the leader was last lost.
    reached: bool,
}

impl Readiness {
    /// Takes the leader's answers out of a `Ready`.
    pub(in crate::node) fn answers(&mut self, states: &[ReadState]) {
        for s in states.iter().filter(|s| s.request_ctx == READY_CTX) {
            self.target = Some(self.target.map_or(s.index, |t| t.max(s.index)));
        }
    }

    /// One turn: forget everything without a leader, ask when there is one and no
    /// answer yet; returns whether the node is ready at `applied`.
    pub(in crate::node) fn turn(&mut self, raw: &mut raft::RawNode<halite_storage::log::RaftLog>, applied: u64) -> bool {
        if raw.raft.leader_id == raft::INVALID_ID {
            *self = Readiness::default();
            return false;
        }
        if self.target.is_none() && self.asked_at.is_none_or(|t| t.elapsed() >= ASK_AGAIN) {
            raw.read_index(READY_CTX.to_vec());
            self.asked_at = Some(Instant::now());
        }
        if self.target.is_some_and(|t| applied >= t) {
            if !self.reached {
                tracing::info!(id = raw.raft.id, applied, target = self.target, "caught up with the cluster: ready");
            }
            self.reached = true;
        }
        self.reached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_keep_the_highest_index_and_ignore_other_contexts() {
        let mut r = Readiness::default();
        r.answers(&[ReadState { index: 7, request_ctx: READY_CTX.to_vec() }, ReadState { index: 99, request_ctx: b"other".to_vec() }]);
        assert_eq!(r.target, Some(7));
        r.answers(&[ReadState { index: 5, request_ctx: READY_CTX.to_vec() }]);
        assert_eq!(r.target, Some(7));
        r.answers(&[ReadState { index: 9, request_ctx: READY_CTX.to_vec() }]);
        assert_eq!(r.target, Some(9));
    }

    #[test]
    fn lag_is_commit_minus_applied() {
        let s = Status { commit: 10, applied: 4, ..Default::default() };
        assert_eq!(s.lag(), 6);
        assert_eq!(Status { commit: 3, applied: 4, ..Default::default() }.lag(), 0);
    }
}
