//! The node: one raft-rs `RawNode` driven by one thread, with group commit.
//!
//! Callers hand records to [`Node::propose`] from any thread and block until their
//! records are committed and applied. The driver thread loops:
//!
//! 1. wait for a request or the next tick; then take every request already queued (up
//!    to [`NodeConfig::max_batch`] records): this is the group;
//! 2. propose the group's proposals to raft, several to an entry (I/O-free;
//!    `proposals.rs`);
//! 3. take raft's `Ready`: append its entries and hard state to the log in **one**
//!    raft-engine write with **one** fsync, send its messages (none with one voter);
//! 4. apply newly committed entries to the state machine and the views, in order;
//! 5. answer every caller whose own entry is now applied;
//! 6. every second under load (or when idle), make the views durable and record the
//!    index they reflect; after a crash the entries touched since are resynced.
//!
//! So N callers arriving together cost one fsync, and nobody is answered before their
//! record is durable in the log of a majority (with one voter: this node's log).
//!
//! With peers ([`Node::start_peered`]) the same loop also steps the raft messages that
//! arrive in its [`Mailbox`] and hands the ones raft produces to an [`Outbox`] (the TCP
//! transport). Any node takes proposals: a follower's are forwarded by raft to the
//! leader. A proposal (its records applied all-or-nothing) is an entry of its own or an
//! item of a group entry (`docs/formats.md` §1.1), named uniquely across restarts: this node's id, this process's
//! incarnation, a sequence number (`proposals.rs`). It is recognised when applied by
//! that identity, not by its index, since a leader change can replace an uncommitted
//! index with another node's entry. A proposal may be handed to raft again (a new term,
//! or a forward not applied after three election timeouts); the state machine applies
//! it at most once. One not applied within [`NodeConfig::propose_timeout`] is answered
//! with [`NodeError::Timeout`]: its outcome is unknown (it may still apply, once); an
//! entry of [`Node::propose_all`] gets that long after the previous one applied. A
//! proposal made during an election is held until a leader is known (or the same
//! timeout passes).
//!
//! ## Where each part lives
//!
//! | file | owns |
//! |------|------|
//! | `mod.rs` (this file) | the public face: [`Node`], [`NodeHandle`], [`NodeConfig`], [`NodeError`], [`Pending`], the [`Inbox`]/[`Mailbox`] channel, the [`Tap`] |
//! | `boot.rs` | opening a node: founding a new log, the start-up checks and view recovery, building the `RawNode`, starting the driver |
//! | `driver/mod.rs` | the driver thread: the loop, group commit, ticks, `Ready` handling, view sync cadence, stop |
//! | `driver/apply.rs` | committed entries → state machine and views, in log order, and the tap |
//! | `driver/faults.rs` | views that cannot be written: marked dirty, counted, recovered later with backoff; the node goes on |
//! | `driver/health.rs` | the end of each turn: readiness asked and checked, the status published |
//! | `driver/snapshots.rs` | a snapshot sent to a member behind the log's first index (through the transport, off the driver thread), and one received installed |
//! | `driver/compaction.rs` | compacting the log by the policy while the node runs (who may compact, retry after a failure) |
//! | `driver/member_keys.rs` | the member key book: keys of conf changes applied, this member recording its own |
//! | `proposals.rs` | proposals waiting to be applied: grouped into entries, submitted in the current term, expiry, answering them on apply |
//! | `membership.rs` | conf changes, the member address book, announcing this node, promoting learners |
//! | `context.rs` | the bytes of an entry's `context` (proposal identity, member address); re-exports `halite_storage::context` |
//! | `status.rs` | [`NodeStatus`]: role, indexes, peers' progress, readiness (caught up with the cluster's commit index, learned by ReadIndex) |
//!
//! The driver thread owns one `driver::Driver`, which holds its state in named parts
//! (the raft core, the views, the peers, the snapshots, the compaction policy's state,
//! the health), among them a `proposals::Proposals` and a `membership::Membership`;
//! those two know nothing of the driver (they are handed the `RawNode` when they need
//! it). Each file of `driver/` adds
//! one step's methods to the driver beside the state it keeps. So the imports of `node/`
//! point one way: `boot` → `driver` (and its steps) → `proposals`, `membership`,
//! `status` → `context`.

mod boot;
pub mod context;
mod driver;
mod membership;
mod proposals;
pub mod status;
#[cfg(test)]
mod status_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_ahead;
#[cfg(test)]
mod tests_proposals;
#[cfg(test)]
mod tests_snapshots;
#[cfg(test)]
mod tests_member_keys;
#[cfg(test)]
mod tests_log_bytes;
#[cfg(test)]
mod tests_replay;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use raft::eraftpb::{ConfChangeType, Message};

use halite_storage::compaction::CompactionLimits;
use halite_storage::log::RaftLog;
use halite_storage::snapshot::SnapshotStore;
use halite_storage::state::StateMachine;
use halite_storage::entry::{MAX_BATCH_RECORDS, MAX_ENTRY_LEN};
use halite_storage::views::Views;
use halite_storage::{Error as StorageError, Record};

use crate::transport::Outbox;

pub use driver::VIEWS_SYNC_INTERVAL;
pub use status::{NodeStatus, PeerProgress, Role, Status};
use membership::{AddressBook, MemberChange};

/// Errors a proposer can get.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("record refused: {0}")]
    Refused(String),
    #[error("no leader was elected in time; retry shortly")]
    NotLeader,
    #[error("not applied within {0:?} (a leader change or lost quorum): the outcome is unknown, it may still apply once")]
    Timeout(Duration),
    #[error("{0} proposals are already waiting on this node; retry shortly")]
    Busy(usize),
    #[error("the node has stopped: {0}")]
    Stopped(String),
    /// The data directory's filesystem has less free space than the node keeps in
    /// reserve: nothing is written until space is freed.
    #[error("{}", disk_full_text(*free, *reserve))]
    DiskFull { free: u64, reserve: u64 },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
}

pub type Result<T, E = NodeError> = std::result::Result<T, E>;

fn disk_full_text(free: u64, reserve: u64) -> String {
    match reserve {
        0 => "the data directory's filesystem is full (no halite_min_free_bytes kept): writes are refused until space is freed".to_string(),
        _ => format!("the data directory's filesystem has {free} bytes free, under the {reserve} it keeps free (halite_min_free_bytes): writes are refused until space is freed"),
    }
}

/// Settings of a node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's raft id (non-zero).
    pub id: u64,
    /// Raft tick interval.
    pub tick: Duration,
    /// A follower's election timeout is drawn uniformly from
    /// `[election_tick, max_election_tick)` ticks after it last heard from a leader; a
    /// leader that has not heard from a majority for `election_tick` ticks steps down
    /// (check quorum). The master sets them from Salt's `cluster_election_min` and
    /// `cluster_election_max` (750 and 1500 ms by default, as Salt's).
    pub election_tick: usize,
    pub max_election_tick: usize,
    /// The leader's heartbeat interval, in ticks.
    pub heartbeat_tick: usize,
    /// Most records proposed in one group.
    pub max_batch: usize,
    /// The voters a new log starts with (all founding members, this node included);
    /// empty means this node alone.
    pub voters: Vec<u64>,
    /// How long a proposal may wait to be applied.
    pub propose_timeout: Duration,
    /// Joining an existing group: a new log starts with no membership at all and the
    /// node waits for the leader to replicate the log (which adds it as a learner).
    pub join: bool,
    /// Transport addresses of the founding voters (this node's own included), written
    /// into the log with the founding membership so joiners learn them by replay.
    pub addrs: HashMap<u64, SocketAddr>,
    /// Called with every record once it is applied (on the driver thread: keep it short).
    pub tap: Option<Tap>,
    /// As leader, promote a learner to voter once it has caught up with the log.
    pub auto_promote: bool,
    /// When the log is compacted (`compaction.rs`; the master's `cluster_max_log_size`
    /// and `halite_log_max_bytes`).
    pub compaction: CompactionLimits,
    /// This node's member public key (what its transport proves): recorded in the log's
    /// key book by the node itself when the book lacks it (`member_keys.rs`). `None`:
    /// never recorded (a node without an identity).
    pub member_key: Option<[u8; 32]>,
    /// Bytes kept free on the log's and the state machine's filesystems: under this,
    /// the node writes nothing (`driver/space.rs`). 0: no reserve.
    pub min_free_bytes: u64,
}

/// What a [`Tap`] calls: the log index and the record.
pub type TapFn = dyn Fn(u64, &Record) + Send + Sync;

/// A function shown every applied record with its log index.
#[derive(Clone)]
pub struct Tap(pub Arc<TapFn>);

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tap")
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            id: 1,
            tick: Duration::from_millis(50),
            election_tick: 15,
            max_election_tick: 30,
            heartbeat_tick: 2,
            max_batch: 8192,
            voters: Vec::new(),
            propose_timeout: Duration::from_secs(10),
            join: false,
            addrs: HashMap::new(),
            tap: None,
            auto_promote: true,
            compaction: CompactionLimits::default(),
            member_key: None,
            min_free_bytes: 0,
        }
    }
}

/// Where a node keeps its files under one data directory.
pub struct DataDir {
    pub root: PathBuf,
}

impl DataDir {
    pub fn new(root: &Path) -> Self {
        DataDir { root: root.to_path_buf() }
    }
    pub fn log(&self) -> PathBuf {
        self.root.join("log")
    }
    pub fn state(&self) -> PathBuf {
        self.root.join("state")
    }
    pub fn snapshots(&self) -> PathBuf {
        self.root.join("snapshots")
    }
}

/// Opens the log, repairs what a crash during a snapshot build, transfer or install
/// left ([`halite_storage::snapshot::recover_at_start`]: a state machine behind the
/// log's snapshot gets the snapshot installed), then opens the state machine. Start-up
/// thus reads the snapshot and the log's tail, never the compacted history. The log
/// writes files of the size `limits` give ([`CompactionLimits::file_bytes`]).
pub fn open_storage(data: &DataDir, limits: &CompactionLimits) -> Result<(RaftLog, Arc<StateMachine>)> {
    let log = RaftLog::open_with(&data.log(), limits.file_bytes())?;
    let store = halite_storage::snapshot::SnapshotStore::open(&data.snapshots())?;
    halite_storage::snapshot::recover_at_start(&store, &log, &data.state())?;
    let sm = Arc::new(StateMachine::open(&data.state())?);
    Ok((log, sm))
}

/// Where a proposal's outcome goes: a one-shot channel a thread can block on and a task
/// can await.
type Reply = tokio::sync::oneshot::Sender<Result<u64>>;

/// One proposal: its entry's data (records already encoded, `halite_storage::entry`),
/// how many records that is, and who to answer.
struct Proposal {
    data: Vec<u8>,
    records: usize,
    reply: Reply,
    /// The [`Node::propose_all`] call it is part of, if any (`proposals.rs`).
    pipeline: Option<u64>,
}

/// Numbers the pipelines of [`Node::propose_all`] (unique within the process).
static PIPELINES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// What the driver thread receives: from the public face (proposals, membership
/// changes, stop) and from the transport (raft messages), on one channel.
enum Msg {
    Propose(Proposal),
    Member(MemberChange),
    Raft(Box<Message>),
    /// A snapshot transfer to this peer ended (`snapshots.rs`): whether it was sent.
    SnapshotSent(u64, bool),
    /// A snapshot built for a compaction off the driver thread (`compaction.rs`).
    Compacted(Box<driver::compaction::Built>),
    Stop,
}

/// Hands raft messages received from peers to a node.
#[derive(Clone)]
pub struct Inbox(Sender<Msg>);

impl Inbox {
    pub fn deliver(&self, m: Message) {
        let _ = self.0.send(Msg::Raft(Box::new(m)));
    }
}

/// The receiving end of a node's inbox, given to [`Node::start_peered`].
pub struct Mailbox(Sender<Msg>, Receiver<Msg>);

/// A node's message channel, made before the node so the transport can deliver to it.
pub fn mailbox() -> (Inbox, Mailbox) {
    let (tx, rx) = mpsc::channel();
    (Inbox(tx.clone()), Mailbox(tx, rx))
}

/// A proposal in flight.
pub struct Pending {
    rx: tokio::sync::oneshot::Receiver<Result<u64>>,
}

impl Pending {
    /// Blocks until the proposal's entry is committed and applied; returns its index.
    /// (Not from inside an async task: use [`Pending::committed`] there.)
    pub fn wait(self) -> Result<u64> {
        self.rx.blocking_recv().map_err(|_| NodeError::Stopped("node thread dropped the request".into()))?
    }

    /// [`Pending::wait`] for async callers: no thread is held while the group commits.
    pub async fn committed(self) -> Result<u64> {
        self.rx.await.map_err(|_| NodeError::Stopped("node thread dropped the request".into()))?
    }
}

/// A running node. Dropping it stops the driver thread after the current group.
pub struct Node {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
    sm: Arc<StateMachine>,
    log: RaftLog,
    /// The leader this node last knew (0: none).
    leader: Arc<AtomicU64>,
    /// The cluster's record set (`driver/member_releases.rs`), and whether proposals
    /// are held to it (a cluster member: one with a member key).
    record_set: Arc<AtomicU32>,
    gated: bool,
    id: u64,
    book: AddressBook,
    incarnation: u64,
    status: NodeStatus,
    /// `NodeConfig::min_free_bytes`, for the error of a refused proposal.
    min_free_bytes: u64,
    /// The index of the last entry the log held when the node started (0: none).
    last_at_start: u64,
}

/// Membership operations on a running node, usable from any thread.
#[derive(Clone)]
pub struct NodeHandle {
    tx: Sender<Msg>,
    log: RaftLog,
    leader: Arc<AtomicU64>,
    record_set: Arc<AtomicU32>,
    id: u64,
    book: AddressBook,
}

impl NodeHandle {
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The leader this node last knew of.
    pub fn leader(&self) -> Option<u64> {
        match self.leader.load(Ordering::Relaxed) {
            0 => None,
            id => Some(id),
        }
    }

    /// The cluster's record set: the lowest `format::RECORD_SET` its members recorded
    /// (a member that recorded none counts as 1), as last applied
    /// (`driver/member_releases.rs`).
    pub fn cluster_record_set(&self) -> u32 {
        self.record_set.load(Ordering::Relaxed)
    }

    /// The raft term and the (sorted) voters and learners, as last persisted.
    pub fn membership(&self) -> Result<(u64, Vec<u64>, Vec<u64>)> {
        let hs = self.log.hard_state()?;
        let cs = self.log.conf_state()?;
        let (mut voters, mut learners) = (cs.voters, cs.learners);
        voters.sort_unstable();
        learners.sort_unstable();
        Ok((hs.term, voters, learners))
    }

    pub fn add_learner(&self, node: u64, addr: SocketAddr) -> Result<u64> {
        self.member_change(ConfChangeType::AddLearnerNode, node, Some(addr), None)
    }

    /// Adds `node` as a learner with the member key it proved (the join path): the
    /// change's entry carries the key, and once it applies only that key speaks for
    /// `node` on every member.
    pub fn add_learner_keyed(&self, node: u64, addr: SocketAddr, key: [u8; 32]) -> Result<u64> {
        self.member_change(ConfChangeType::AddLearnerNode, node, Some(addr), Some(key))
    }

    /// Every member address the log's membership entries name.
    pub fn addresses(&self) -> Vec<(u64, SocketAddr)> {
        self.book.read().unwrap_or_else(|p| p.into_inner()).iter().map(|(id, a)| (*id, *a)).collect()
    }

    #[cfg(test)]
    pub(crate) fn add_voter(&self, node: u64, addr: Option<SocketAddr>) -> Result<u64> {
        self.member_change(ConfChangeType::AddNode, node, addr, None)
    }

    pub fn remove_member(&self, node: u64) -> Result<u64> {
        self.member_change(ConfChangeType::RemoveNode, node, None, None)
    }

    fn member_change(&self, change: ConfChangeType, node: u64, addr: Option<SocketAddr>, key: Option<[u8; 32]>) -> Result<u64> {
        if node == 0 {
            return Err(NodeError::Refused("node id 0 is not a valid raft id".into()));
        }
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.tx.send(Msg::Member(MemberChange { change, node, addr, key, reply })).map_err(|_| NodeError::Stopped("node thread is gone".into()))?;
        Pending { rx }.wait()
    }
}

impl Node {
    /// Opens the log and state machine under `data`, brings the views up to date and
    /// starts the driver thread. A new log is bootstrapped with this node as sole voter.
    pub fn start(data: &DataDir, views: Views, cfg: NodeConfig) -> Result<Node> {
        let (log, sm) = open_storage(data, &cfg.compaction)?;
        let (_, mailbox) = mailbox();
        boot::start(log, sm, views, cfg, None, mailbox, Some(SnapshotStore::open(&data.snapshots())?))
    }

    /// Starts a node that talks to peers: messages arrive through `mailbox` (fed by the
    /// transport's [`Inbox`]) and leave through `outbox`.
    pub fn start_peered(data: &DataDir, views: Views, cfg: NodeConfig, outbox: Arc<dyn Outbox>, mailbox: Mailbox) -> Result<Node> {
        let (log, sm) = open_storage(data, &cfg.compaction)?;
        boot::start(log, sm, views, cfg, Some(outbox), mailbox, Some(SnapshotStore::open(&data.snapshots())?))
    }

    /// Adds `node` (listening at `addr`) as a learner: it receives the log but does not
    /// vote. Returns once the change is applied on this node.
    pub fn add_learner(&self, node: u64, addr: SocketAddr) -> Result<u64> {
        self.handle().add_learner(node, addr)
    }

    /// [`Node::add_learner`] with the member key `node` proved
    /// ([`NodeHandle::add_learner_keyed`]).
    pub fn add_learner_keyed(&self, node: u64, addr: SocketAddr, key: [u8; 32]) -> Result<u64> {
        self.handle().add_learner_keyed(node, addr, key)
    }

    /// Makes `node` a voter (a learner is promoted; `addr` may update its address).
    #[cfg(test)]
    pub(crate) fn add_voter(&self, node: u64, addr: Option<SocketAddr>) -> Result<u64> {
        self.handle().add_voter(node, addr)
    }

    /// Removes `node` from the group.
    pub fn remove_member(&self, node: u64) -> Result<u64> {
        self.handle().remove_member(node)
    }

    /// This node's raft id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// This process's incarnation: part of every proposal's identity, larger at every
    /// start of the node (persisted in the log's directory).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The leader this node last knew of (`None` while there is none).
    pub fn leader(&self) -> Option<u64> {
        self.handle().leader()
    }

    /// The index of the last entry this node's log held when it started (0 for a new
    /// log): entries up to it were this process's to replay, not new to the group.
    pub fn last_index_at_start(&self) -> u64 {
        self.last_at_start
    }

    /// The node's status (role, indexes, readiness, dirty views), readable from any
    /// thread: see [`status`].
    pub fn status(&self) -> &NodeStatus {
        &self.status
    }

    /// The node's raft log, for reading (first index, snapshot metadata, sizes).
    pub fn log(&self) -> &RaftLog {
        &self.log
    }

    /// The state machine, for reads.
    pub fn state(&self) -> &Arc<StateMachine> {
        &self.sm
    }

    /// The raft term and the voters and learners of the group, as last persisted.
    pub fn membership(&self) -> Result<(u64, Vec<u64>, Vec<u64>)> {
        self.handle().membership()
    }

    /// A cloneable handle for membership work from other threads (the join handshake).
    pub fn handle(&self) -> NodeHandle {
        NodeHandle { tx: self.tx.clone(), log: self.log.clone(), leader: self.leader.clone(), record_set: self.record_set.clone(), id: self.id, book: self.book.clone() }
    }

    /// Proposes records as one entry and waits until it is committed and applied
    /// (all of them, or none if this proposal's entry was a copy of one applied
    /// before, which is then this one's outcome). Returns the entry's log index.
    /// Records are validated and encoded before anything is sent.
    pub fn propose(&self, records: &[Record]) -> Result<u64> {
        self.propose_async(records)?.wait()
    }

    /// Proposes records as one entry without waiting: the returned [`Pending`] answers
    /// once it is committed and applied. A caller with much to write keeps several
    /// proposals in flight. Records that do not fit one entry (more than
    /// `MAX_ENTRY_LEN` bytes) are refused: cut them with [`Record::fit_groups`].
    pub fn propose_async(&self, records: &[Record]) -> Result<Pending> {
        self.propose_in(records, None)
    }

    /// [`Node::propose_async`] as part of `pipeline`.
    fn propose_in(&self, records: &[Record], pipeline: Option<u64>) -> Result<Pending> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        if records.is_empty() {
            let _ = reply.send(self.sm.applied_index().map_err(Into::into));
            return Ok(Pending { rx });
        }
        if let Some(free) = self.status.disk_full() {
            return Err(NodeError::DiskFull { free, reserve: self.min_free_bytes });
        }
        if self.gated {
            let cluster = self.record_set.load(Ordering::Relaxed);
            if let Some(kind) = proposals::unwritable(records, cluster) {
                return Err(NodeError::Refused(format!(
                    "a {} record needs every cluster member at record set {} and the cluster's is {cluster}: upgrade every member first (docs/operations.md, \"Upgrading a cluster\")",
                    kind.name(),
                    kind.since()
                )));
            }
        }
        let data = Record::encode_batch(records).map_err(|e| NodeError::Refused(e.to_string()))?;
        self.tx.send(Msg::Propose(Proposal { data, records: records.len(), reply, pipeline })).map_err(|_| NodeError::Stopped("node thread is gone".into()))?;
        self.status.count_proposal();
        Ok(Pending { rx })
    }

    /// Proposes `groups` in order, each one entry (a group too large for one entry is
    /// cut with [`Record::fit_groups`] into several, in order), keeping up to
    /// `in_flight` of them waiting at once so the driver never idles for the caller;
    /// `progress(done, total)` counts records as their entries apply. Each entry may wait
    /// [`NodeConfig::propose_timeout`] after the one before it applied (a pipeline,
    /// `proposals.rs`), so a write of gigabytes moves at the cluster's pace, and one that
    /// stops moving for that long fails. Stops at the first
    /// failure (entries already handed over may still apply, each at most once). Returns
    /// the index of the last entry (0 when there is nothing to propose).
    pub fn propose_all(&self, groups: &[Vec<Record>], in_flight: usize, progress: &mut dyn FnMut(u64, u64)) -> Result<u64> {
        let total: u64 = groups.iter().map(|g| g.len() as u64).sum();
        let mut waiting = std::collections::VecDeque::new();
        let (mut done, mut last) = (0u64, 0u64);
        let pipeline = Some(PIPELINES.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        for g in groups {
            let parts = if g.len() > 1 { Record::fit_ranges(g, MAX_BATCH_RECORDS, MAX_ENTRY_LEN).map_err(|e| NodeError::Refused(e.to_string()))? } else { std::iter::once(0..g.len()).collect() };
            for part in parts {
                let part = &g[part];
                waiting.push_back((self.propose_in(part, pipeline)?, part.len() as u64));
                while waiting.len() >= in_flight.max(1) {
                    let Some((p, n)) = waiting.pop_front() else { break };
                    last = p.wait()?;
                    done += n;
                    progress(done, total);
                }
            }
        }
        for (p, n) in waiting {
            last = p.wait()?;
            done += n;
            progress(done, total);
        }
        Ok(last)
    }

    /// Stops the driver thread after the group in progress.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.status.ask_stop();
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.shutdown();
    }
}
