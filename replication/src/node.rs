//! The node: one raft-rs `RawNode` driven by one thread, with group commit.
//!
//! Callers hand records to [`Node::propose`] from any thread and block until their
//! records are committed and applied. The driver thread loops:
//!
//! 1. wait for a request or the next tick; then take every request already queued (up
//!    to [`NodeConfig::max_batch`] records): this is the group;
//! 2. propose each record to raft (I/O-free);
//! 3. take raft's `Ready`: append its entries and hard state to the log in **one**
//!    raft-engine write with **one** fsync, send its messages (none with one voter);
//! 4. apply newly committed entries to the state machine and the views, in order;
//! 5. answer every caller whose last record is now applied;
//! 6. every second under load (or when idle), make the views durable and record the
//!    index they reflect; after a crash the entries touched since are resynced.
//!
//! So N callers arriving together cost one fsync, and nobody is answered before their
//! record is durable in the log of a majority (with one voter: this node's log).
//!
//! With peers ([`Node::start_peered`]) the same loop also steps the raft messages that
//! arrive in its [`Mailbox`] and hands the ones raft produces to an [`Outbox`] (the TCP
//! transport). Any node takes proposals: a follower's are forwarded by raft to the
//! leader. A proposal is recognised when it is applied by the context of its last entry
//! (this node's id and a sequence number), not by its index, since a leader change can
//! replace an uncommitted index with another node's entry; one that is not applied
//! within [`NodeConfig::propose_timeout`] is answered with [`NodeError::Timeout`] (every
//! record kind applies idempotently, so retrying is safe). A proposal made during an
//! election is held until a leader is known (or the same timeout passes).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, ConfState, Entry, EntryType, HardState, Message};
use raft::{Config as RaftConfig, RawNode, Storage};

use halite_storage::log::RaftLog;
use halite_storage::state::StateMachine;
use halite_storage::views::{Touched, Views};
use halite_storage::{Error as StorageError, Record};

use crate::transport::Outbox;

/// Errors a proposer can get.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("record refused: {0}")]
    Refused(String),
    #[error("no leader was elected in time; retry shortly")]
    NotLeader,
    #[error("not committed within {0:?} (a leader change or lost quorum); retry")]
    Timeout(Duration),
    #[error("the node has stopped: {0}")]
    Stopped(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
}

pub type Result<T, E = NodeError> = std::result::Result<T, E>;

/// How often views are made durable while proposals keep arriving.
pub const VIEWS_SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// Settings of a node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's raft id (non-zero).
    pub id: u64,
    /// Raft tick interval.
    pub tick: Duration,
    pub election_tick: usize,
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
    pub addrs: HashMap<u64, std::net::SocketAddr>,
    /// Called with every record once it is applied (on the driver thread: keep it short).
    pub tap: Option<Tap>,
    /// As leader, promote a learner to voter once it has caught up with the log.
    pub auto_promote: bool,
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
            tick: Duration::from_millis(100),
            election_tick: 10,
            heartbeat_tick: 3,
            max_batch: 8192,
            voters: Vec::new(),
            propose_timeout: Duration::from_secs(10),
            join: false,
            addrs: HashMap::new(),
            tap: None,
            auto_promote: true,
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

/// Where a proposal's outcome goes: a one-shot channel a thread can block on and a task
/// can await.
type Reply = tokio::sync::oneshot::Sender<Result<u64>>;

struct Proposal {
    data: Vec<Vec<u8>>,
    reply: Reply,
}

/// A membership change: `change` of `node`, whose transport address (for additions)
/// travels with it in the entry's context so every member, now or replaying later,
/// learns where the node listens.
struct MemberChange {
    change: ConfChangeType,
    node: u64,
    addr: Option<std::net::SocketAddr>,
    reply: Reply,
}

enum Msg {
    Propose(Proposal),
    Member(MemberChange),
    Raft(Box<Message>),
    Stop,
}

/// What a waiting proposal asks for.
enum Payload {
    Records(Vec<Vec<u8>>),
    Member { change: ConfChangeType, node: u64, addr: Option<std::net::SocketAddr> },
}

/// A proposal not yet applied.
struct Waiting {
    reply: Reply,
    at: Instant,
    payload: Payload,
    /// The term it was last handed to raft in (`None`: not yet).
    term: Option<u64>,
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
    /// Blocks until the records are committed and applied; returns the last one's index.
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
    leader: Arc<std::sync::atomic::AtomicU64>,
    id: u64,
    book: AddressBook,
}

/// Member id → transport address, as the log's membership entries name them: read from
/// the log once at start, then kept current by the driver as it applies changes.
type AddressBook = Arc<std::sync::RwLock<HashMap<u64, std::net::SocketAddr>>>;

/// Membership operations on a running node, usable from any thread.
#[derive(Clone)]
pub struct NodeHandle {
    tx: Sender<Msg>,
    log: RaftLog,
    leader: Arc<std::sync::atomic::AtomicU64>,
    id: u64,
    book: AddressBook,
}

impl NodeHandle {
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The leader this node last knew of.
    pub fn leader(&self) -> Option<u64> {
        match self.leader.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            id => Some(id),
        }
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

    pub fn add_learner(&self, node: u64, addr: std::net::SocketAddr) -> Result<u64> {
        self.member_change(ConfChangeType::AddLearnerNode, node, Some(addr))
    }

    /// Every member address the log's membership entries name.
    pub fn addresses(&self) -> Vec<(u64, std::net::SocketAddr)> {
        self.book.read().unwrap_or_else(|p| p.into_inner()).iter().map(|(id, a)| (*id, *a)).collect()
    }

    pub fn add_voter(&self, node: u64, addr: Option<std::net::SocketAddr>) -> Result<u64> {
        self.member_change(ConfChangeType::AddNode, node, addr)
    }

    pub fn remove_member(&self, node: u64) -> Result<u64> {
        self.member_change(ConfChangeType::RemoveNode, node, None)
    }

    fn member_change(&self, change: ConfChangeType, node: u64, addr: Option<std::net::SocketAddr>) -> Result<u64> {
        if node == 0 {
            return Err(NodeError::Refused("node id 0 is not a valid raft id".into()));
        }
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.tx.send(Msg::Member(MemberChange { change, node, addr, reply })).map_err(|_| NodeError::Stopped("node thread is gone".into()))?;
        Pending { rx }.wait()
    }
}

impl Node {
    /// Opens the log and state machine under `data`, brings the views up to date and
    /// starts the driver thread. A new log is bootstrapped with this node as sole voter.
    pub fn start(data: &DataDir, views: Views, cfg: NodeConfig) -> Result<Node> {
        let log = RaftLog::open(&data.log())?;
        let sm = Arc::new(StateMachine::open(&data.state())?);
        Self::start_with(log, sm, views, cfg)
    }

    pub fn start_with(log: RaftLog, sm: Arc<StateMachine>, views: Views, cfg: NodeConfig) -> Result<Node> {
        let (_, mailbox) = mailbox();
        Self::start_inner(log, sm, views, cfg, None, mailbox)
    }

    /// Starts a node that talks to peers: messages arrive through `mailbox` (fed by the
    /// transport's [`Inbox`]) and leave through `outbox`.
    pub fn start_peered(data: &DataDir, views: Views, cfg: NodeConfig, outbox: Arc<dyn Outbox>, mailbox: Mailbox) -> Result<Node> {
        let log = RaftLog::open(&data.log())?;
        let sm = Arc::new(StateMachine::open(&data.state())?);
        Self::start_inner(log, sm, views, cfg, Some(outbox), mailbox)
    }

    fn start_inner(log: RaftLog, sm: Arc<StateMachine>, mut views: Views, cfg: NodeConfig, outbox: Option<Arc<dyn Outbox>>, mailbox: Mailbox) -> Result<Node> {
        if log.is_new()? && cfg.join {
            tracing::info!(id = cfg.id, "new log: joining; waiting for the leader to replicate the group's log");
        } else if log.is_new()? {
            let mut voters = if cfg.voters.is_empty() { vec![cfg.id] } else { cfg.voters.clone() };
            if !voters.contains(&cfg.id) {
                voters.push(cfg.id);
            }
            voters.sort_unstable();
            voters.dedup();
            // The founding membership goes into the log itself, as committed
            // "add voter" entries at term 1 (identical on every founder), not only into
            // the persisted conf state: a node that joins later replays the log from
            // index 1 and must learn every voter, and where it listens, from it.
            let entries: Vec<Entry> = voters
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let mut cc = ConfChange::default();
                    cc.set_change_type(ConfChangeType::AddNode);
                    cc.node_id = *v;
                    let mut e = Entry::default();
                    e.set_entry_type(EntryType::EntryConfChange);
                    e.term = 1;
                    e.index = i as u64 + 1;
                    e.data = cc.write_to_bytes().unwrap_or_default().into();
                    let mut ctx = vec![0u8; 16];
                    if let Some(a) = cfg.addrs.get(v) {
                        ctx.extend_from_slice(a.to_string().as_bytes());
                    }
                    e.context = ctx.into();
                    e
                })
                .collect();
            let hs = HardState { term: 1, commit: entries.len() as u64, ..Default::default() };
            let cs = ConfState { voters: voters.clone(), ..Default::default() };
            log.append(&entries, Some(&hs), Some(&cs), true)?;
            tracing::info!(id = cfg.id, ?voters, "new log: bootstrapped with its founding voters");
        }
        log.check_all()?;
        let applied = sm.applied_index()?;
        let last = Storage::last_index(&log)?;
        if applied > last {
            return Err(StorageError::CorruptLog(format!(
                "the state machine has applied index {applied} but the log ends at {last}: committed records are missing from the log. Run `halite-ctl verify`"
            ))
            .into());
        }
        let views_at = sm.views_index()?;
        if views_at < applied {
            // The views missed the end of what was applied (a crash between apply and
            // the views' periodic sync): bring the touched entries up to date from the
            // state machine, or rebuild everything if the log no longer has those records.
            let first = log.first_entry_index().unwrap_or(1);
            if views_at + 1 >= first {
                let mut touched = Touched::default();
                log.for_each_record(views_at + 1, Some(applied + 1), |_, r| {
                    touched.add(&r?);
                    Ok(())
                })?;
                tracing::warn!(views_at, applied, entries = touched.len(), "views behind the state machine: resyncing the entries touched since");
                views.resync(&sm, &touched)?;
            } else {
                tracing::warn!(views_at, applied, "views behind the state machine and the log is compacted: rebuilding them");
                views.rebuild_keys(&sm, |_, _| {})?;
                views.roots.rebuild(&sm)?;
            }
            sm.set_views_index(applied)?;
        }
        // Views pointed at new, empty places (a shared filesystem left for local
        // directories, a wiped cache) are rebuilt from the state machine: the log, not
        // the files, is the truth, so moving the files is never needed.
        if sm.count("keys")? > 0 && views.keys.entries()?.0.is_empty() {
            tracing::warn!(driver = views.keys.driver(), "the key view is empty but the state machine holds keys: rebuilding it");
            views.rebuild_keys(&sm, |_, _| {})?;
        }
        if views.missing_pairs(&sm)? {
            tracing::warn!(driver = views.keys.driver(), "the key view lacks a key pair the state machine holds: writing it");
            views.write_pairs(&sm)?;
        }
        if views.roots.missing_any(&sm)? {
            tracing::warn!("roots files the state machine holds are missing from their directories: rewriting them");
            views.roots.rebuild(&sm)?;
        }
        let logger = slog::Logger::root(crate::logging::TracingDrain, slog::o!());
        let rc = RaftConfig {
            id: cfg.id,
            election_tick: cfg.election_tick,
            heartbeat_tick: cfg.heartbeat_tick,
            applied,
            max_size_per_msg: 4 << 20,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        rc.validate()?;
        let raw = RawNode::new(&rc, log.clone(), &logger)?;
        let solo = log.conf_state()?.voters == vec![cfg.id];
        let book: HashMap<u64, std::net::SocketAddr> = address_book(&log)?;
        if let Some(o) = &outbox {
            for (id, addr) in &book {
                o.set_peer(*id, Some(*addr));
            }
        }
        // A log made before membership entries existed (or a founder whose address was
        // not known) does not name this node's address: announce it once when leader.
        let announce = cfg.addrs.get(&cfg.id).copied().filter(|_| !book.contains_key(&cfg.id));
        let book: AddressBook = Arc::new(std::sync::RwLock::new(book));
        let book2 = book.clone();
        let Mailbox(tx, rx) = mailbox;
        let my_id = cfg.id;
        let sm2 = sm.clone();
        let log2 = log.clone();
        let leader = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let leader2 = leader.clone();
        let thread = std::thread::Builder::new()
            .name(format!("raft-node-{}", cfg.id))
            .spawn(move || {
                let mut d = Driver {
                    raw,
                    log,
                    sm: sm2,
                    views,
                    cfg,
                    outbox,
                    seq: 0,
                    waiting: HashMap::new(),
                    views_dirty_to: None,
                    views_synced_at: Instant::now(),
                    leader: leader2,
                    announce,
                    pending_announce: None,
                    solo,
                    promoting: Default::default(),
                    book: book2,
                };
                if let Err(e) = d.run(rx) {
                    tracing::error!("raft node stopped: {e}");
                    d.fail_all(&e.to_string());
                }
            })
            .map_err(|e| NodeError::Stopped(format!("cannot start the node thread: {e}")))?;
        Ok(Node { tx, thread: Some(thread), sm, log: log2, leader, id: my_id, book })
    }

    /// Adds `node` (listening at `addr`) as a learner: it receives the log but does not
    /// vote. Returns once the change is applied on this node.
    pub fn add_learner(&self, node: u64, addr: std::net::SocketAddr) -> Result<u64> {
        self.handle().add_learner(node, addr)
    }

    /// Makes `node` a voter (a learner is promoted; `addr` may update its address).
    pub fn add_voter(&self, node: u64, addr: Option<std::net::SocketAddr>) -> Result<u64> {
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

    /// The leader this node last knew of (`None` while there is none).
    pub fn leader(&self) -> Option<u64> {
        self.handle().leader()
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
        NodeHandle { tx: self.tx.clone(), log: self.log.clone(), leader: self.leader.clone(), id: self.id, book: self.book.clone() }
    }

    /// Proposes records and waits until all are committed and applied. Returns the log
    /// index of the last one. Records are validated and encoded before anything is sent.
    pub fn propose(&self, records: &[Record]) -> Result<u64> {
        self.propose_async(records)?.wait()
    }

    /// Proposes records without waiting: the returned [`Pending`] answers once they are
    /// committed and applied. A caller with much to write keeps several groups in flight.
    pub fn propose_async(&self, records: &[Record]) -> Result<Pending> {
        let data = records.iter().map(|r| r.encode().map_err(|e| NodeError::Refused(e.to_string()))).collect::<Result<Vec<_>>>()?;
        let (reply, rx) = tokio::sync::oneshot::channel();
        if data.is_empty() {
            let _ = reply.send(self.sm.applied_index().map_err(Into::into));
            return Ok(Pending { rx });
        }
        self.tx.send(Msg::Propose(Proposal { data, reply })).map_err(|_| NodeError::Stopped("node thread is gone".into()))?;
        Ok(Pending { rx })
    }

    /// Stops the driver thread after the group in progress.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
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

struct Driver {
    raw: RawNode<RaftLog>,
    log: RaftLog,
    sm: Arc<StateMachine>,
    views: Views,
    cfg: NodeConfig,
    outbox: Option<Arc<dyn Outbox>>,
    /// Sequence number of this node's last proposal (carried in its entries' context).
    seq: u64,
    /// Proposals not yet applied, by sequence number.
    waiting: HashMap<u64, Waiting>,
    leader: Arc<std::sync::atomic::AtomicU64>,
    /// This node's address, to be written into the log once it leads (see start).
    announce: Option<std::net::SocketAddr>,
    pending_announce: Option<MemberChange>,
    /// Learners a promotion was proposed for.
    promoting: std::collections::HashSet<u64>,
    book: AddressBook,
    /// The only voter: campaign as soon as raft allows (once committed membership
    /// entries are applied) instead of waiting for an election timeout.
    solo: bool,
    /// Highest index applied to the views but not yet synced, and when they last were.
    views_dirty_to: Option<u64>,
    views_synced_at: Instant,
}

impl Driver {
    fn run(&mut self, rx: Receiver<Msg>) -> Result<()> {
        let mut next_tick = Instant::now() + self.cfg.tick;
        self.on_ready()?;
        self.campaign_if_solo()?;
        loop {
            let timeout = next_tick.saturating_duration_since(Instant::now());
            let first = match rx.recv_timeout(timeout) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => {
                    // Idle: make the views durable now.
                    self.sync_views(true)?;
                    None
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.sync_views(true)?;
                    return Ok(());
                }
            };
            let mut group = Vec::new();
            let mut members = Vec::new();
            let mut stop = false;
            let mut n = 0;
            let raw = &mut self.raw;
            let mut push = |m: Msg, group: &mut Vec<Proposal>, members: &mut Vec<MemberChange>, stop: &mut bool, n: &mut usize| match m {
                Msg::Propose(p) => {
                    *n += p.data.len();
                    group.push(p);
                }
                Msg::Member(c) => members.push(c),
                Msg::Raft(m) => {
                    if let Err(e) = raw.step(*m) {
                        tracing::debug!("raft message not stepped: {e}");
                    }
                }
                Msg::Stop => *stop = true,
            };
            if let Some(m) = first {
                push(m, &mut group, &mut members, &mut stop, &mut n);
                while n < self.cfg.max_batch && !stop {
                    match rx.try_recv() {
                        Ok(m) => push(m, &mut group, &mut members, &mut stop, &mut n),
                        Err(_) => break,
                    }
                }
            }
            for p in group {
                self.propose(p);
            }
            for c in members.into_iter().chain(self.pending_announce.take()) {
                self.propose_member(c);
            }
            self.submit_waiting();
            if Instant::now() >= next_tick {
                self.raw.tick();
                next_tick = Instant::now() + self.cfg.tick;
                self.expire_waiting();
                self.promote_caught_up();
            }
            self.on_ready()?;
            self.campaign_if_solo()?;
            self.submit_waiting();
            self.on_ready()?;
            self.sync_views(false)?;
            if stop {
                self.sync_views(true)?;
                self.fail_all("the node is stopping");
                return Ok(());
            }
        }
    }

    fn propose(&mut self, p: Proposal) {
        self.seq += 1;
        self.waiting.insert(self.seq, Waiting { reply: p.reply, at: Instant::now(), payload: Payload::Records(p.data), term: None });
    }

    fn propose_member(&mut self, c: MemberChange) {
        self.seq += 1;
        let payload = Payload::Member { change: c.change, node: c.node, addr: c.addr };
        self.waiting.insert(self.seq, Waiting { reply: c.reply, at: Instant::now(), payload, term: None });
    }

    /// Hands raft every waiting proposal not yet submitted in the current term: new
    /// ones, ones that arrived during an election, and ones a follower forwarded to a
    /// leader that has since been replaced (raft does not resend forwarded proposals).
    /// A proposal submitted twice may be applied twice, which every record kind and
    /// membership change tolerates; its waiter is answered by the first.
    fn submit_waiting(&mut self) {
        if self.raw.raft.leader_id == raft::INVALID_ID {
            return;
        }
        let term = self.raw.raft.term;
        let due: Vec<u64> = self.waiting.iter().filter(|(_, w)| w.term != Some(term)).map(|(k, _)| *k).collect();
        for seq in due {
            let Some(w) = self.waiting.get(&seq) else { continue };
            let mut ctx = Vec::with_capacity(48);
            ctx.extend_from_slice(&self.cfg.id.to_be_bytes());
            ctx.extend_from_slice(&seq.to_be_bytes());
            let r = match &w.payload {
                Payload::Records(data) => {
                    let n = data.len();
                    data.iter().enumerate().try_for_each(|(i, d)| {
                        let context = if i + 1 == n { ctx.clone() } else { Vec::new() };
                        self.raw.propose(context, d.clone())
                    })
                }
                Payload::Member { change, node, addr } => {
                    if let Some(a) = addr {
                        ctx.extend_from_slice(a.to_string().as_bytes());
                    }
                    let mut cc = ConfChange::default();
                    cc.set_change_type(*change);
                    cc.node_id = *node;
                    self.raw.propose_conf_change(ctx, cc)
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

    fn campaign_if_solo(&mut self) -> Result<()> {
        if self.solo && self.raw.raft.state != raft::StateRole::Leader {
            self.solo = self.raw.raft.prs().conf().voters().ids().iter().eq([self.cfg.id]);
            if self.solo {
                self.raw.campaign()?;
                self.on_ready()?;
            }
        }
        Ok(())
    }

    /// As leader: proposes a voter change for each learner whose log matches the
    /// committed index (it has caught up), once per learner.
    fn promote_caught_up(&mut self) {
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

    /// Answers proposals that were not applied in time.
    fn expire_waiting(&mut self) {
        let limit = self.cfg.propose_timeout;
        let late: Vec<u64> = self.waiting.iter().filter(|(_, w)| w.at.elapsed() > limit).map(|(k, _)| *k).collect();
        for k in late {
            if let Some(w) = self.waiting.remove(&k) {
                let err = if w.term.is_none() { NodeError::NotLeader } else { NodeError::Timeout(limit) };
                let _ = w.reply.send(Err(err));
            }
        }
    }

    fn send(&self, msgs: Vec<Message>) {
        if msgs.is_empty() {
            return;
        }
        match &self.outbox {
            Some(o) => o.send(msgs),
            None => tracing::debug!(n = msgs.len(), "dropping raft messages (no peers)"),
        }
    }

    fn on_ready(&mut self) -> Result<()> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut rd = self.raw.ready();
        if let Some(ss) = rd.ss() {
            let leader = if ss.leader_id == raft::INVALID_ID { 0 } else { ss.leader_id };
            self.leader.store(leader, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(id = self.cfg.id, leader, role = ?ss.raft_state, "raft role changed");
            if ss.raft_state == raft::StateRole::Leader {
                if let Some(addr) = self.announce.take() {
                    let (reply, _) = tokio::sync::oneshot::channel();
                    self.pending_announce = Some(MemberChange { change: ConfChangeType::AddNode, node: self.cfg.id, addr: Some(addr), reply });
                }
            }
        }
        self.send(rd.take_messages());
        if !rd.snapshot().is_empty() {
            // Logs are not compacted yet, so a peer always catches up from entries.
            return Err(NodeError::Stopped("received a snapshot; snapshot transfer is not supported yet".into()));
        }
        self.apply(rd.take_committed_entries())?;
        self.log.append(rd.entries(), rd.hs(), None, rd.must_sync())?;
        self.send(rd.take_persisted_messages());
        let mut light = self.raw.advance(rd);
        if let Some(commit) = light.commit_index() {
            let mut hs = self.log.hard_state()?;
            hs.commit = commit;
            self.log.append(&[], Some(&hs), None, false)?;
        }
        self.send(light.take_messages());
        self.apply(light.take_committed_entries())?;
        self.raw.advance_apply();
        Ok(())
    }

    fn apply(&mut self, entries: Vec<Entry>) -> Result<()> {
        let Some(last) = entries.last().map(|e| e.index) else { return Ok(()) };
        let mut batch = Vec::with_capacity(entries.len());
        let mut ours = Vec::new();
        for e in entries {
            if e.context.len() >= 16 && e.context[..8] == self.cfg.id.to_be_bytes() {
                let mut seq = [0u8; 8];
                seq.copy_from_slice(&e.context[8..16]);
                ours.push((u64::from_be_bytes(seq), e.index));
            }
            match e.get_entry_type() {
                EntryType::EntryNormal if e.data.is_empty() => {}
                EntryType::EntryNormal => {
                    let rec = Record::decode(&e.data).map_err(|err| {
                        StorageError::CorruptLog(format!("committed entry {} does not decode: {err}. Run `halite-ctl verify`", e.index))
                    })?;
                    batch.push((e.index, rec));
                }
                EntryType::EntryConfChange => {
                    // Records before the change are applied first, in log order.
                    self.apply_records(std::mem::take(&mut batch))?;
                    self.apply_member_change(&e)?;
                }
                EntryType::EntryConfChangeV2 => {
                    tracing::warn!(index = e.index, "joint-consensus conf change entries are not proposed by Halite; ignored");
                }
            }
        }
        self.apply_records(batch)?;
        self.sm.advance_applied(last)?;
        self.views_dirty_to = Some(last);
        for (seq, index) in ours {
            if let Some(w) = self.waiting.remove(&seq) {
                let _ = w.reply.send(Ok(index));
            }
        }
        Ok(())
    }

    /// Applies records to the state machine and the views, then shows them to the tap.
    fn apply_records(&mut self, batch: Vec<(u64, Record)>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let fx = self.sm.apply(&batch)?;
        self.views.apply(&self.sm, &fx)?;
        if let Some(Tap(tap)) = &self.cfg.tap {
            for (index, rec) in &batch {
                tap(*index, rec);
            }
        }
        Ok(())
    }

    /// Applies a committed membership change: raft's view of the group, the persisted
    /// conf state, and the transport's address book.
    fn apply_member_change(&mut self, e: &Entry) -> Result<()> {
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

    /// Makes the views durable and records the index they reflect, at most every
    /// [`VIEWS_SYNC_INTERVAL`] under load (views are rebuilt from the state machine, so
    /// their durability never holds up an answer), or now with `force`.
    fn sync_views(&mut self, force: bool) -> Result<()> {
        let Some(to) = self.views_dirty_to else { return Ok(()) };
        if !force && self.views_synced_at.elapsed() < VIEWS_SYNC_INTERVAL {
            return Ok(());
        }
        self.views.sync()?;
        self.sm.set_views_index(to)?;
        self.views_dirty_to = None;
        self.views_synced_at = Instant::now();
        Ok(())
    }

    fn fail_all(&mut self, why: &str) {
        for (_, w) in std::mem::take(&mut self.waiting) {
            let _ = w.reply.send(Err(NodeError::Stopped(why.to_string())));
        }
    }
}

/// The transport address a membership-change entry carries after its 16-byte proposal
/// context.
fn entry_addr(e: &Entry) -> Option<std::net::SocketAddr> {
    let text = std::str::from_utf8(e.context.get(16..)?).ok()?;
    text.parse().ok()
}

/// Every member address the log's membership changes name, last one winning, removed
/// members dropped (read at start so a restarted node can reach its peers unaided).
fn address_book(log: &RaftLog) -> Result<HashMap<u64, std::net::SocketAddr>> {
    let mut book: HashMap<u64, Option<std::net::SocketAddr>> = HashMap::new();
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

#[cfg(test)]
mod tests {
    use super::*;
    use halite_storage::format::{KeySet, KeyState};
    use halite_storage::keys::{mmap::MmapKeys, BankState, Geometry, KeyView};
    use halite_storage::roots::{RootsDirs, RootsMaterialiser};

    fn geo() -> Geometry {
        Geometry { size: 4096, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 20 }
    }

    fn views(pki: &Path) -> Views {
        Views::new(Box::new(MmapKeys::open(pki, geo()).unwrap()), RootsMaterialiser::new(RootsDirs::default()))
    }

    fn key(id: &str, state: KeyState) -> Record {
        Record::KeySet(KeySet { id: id.into(), state, pub_key: format!("PUB-{id}").into_bytes(), time_ns: 1 })
    }

    #[test]
    fn propose_commit_apply_and_restart() {
        let dir = tempfile::tempdir().unwrap();
        let data = DataDir::new(&dir.path().join("data"));
        let pki = dir.path().join("pki");
        let node = Arc::new(Node::start(&data, views(&pki), NodeConfig::default()).unwrap());
        // Concurrent proposers: all answered, all applied.
        let mut handles = Vec::new();
        for t in 0..8 {
            let node = node.clone();
            handles.push(std::thread::spawn(move || {
                for i in 0..50 {
                    node.propose(&[key(&format!("m{t}-{i}"), KeyState::Pending)]).unwrap();
                }
            }));
        }
        for h in handles {
            h.join().unwrap();
        }
        let idx = node.propose(&[key("m0-0", KeyState::Accepted), key("m0-1", KeyState::Deleted)]).unwrap();
        assert_eq!(node.state().applied_index().unwrap(), idx);
        assert_eq!(node.state().count("keys").unwrap(), 399);
        // A bad record is refused before anything is proposed.
        assert!(matches!(node.propose(&[key("../x", KeyState::Pending)]), Err(NodeError::Refused(_))));
        drop(node);
        // The view reflects the state; a restart finds everything.
        let v = MmapKeys::open(&pki, geo()).unwrap();
        assert_eq!(v.get_key("m0-0").unwrap().unwrap().state, BankState::Accepted);
        assert!(v.get_key("m0-1").unwrap().is_none());
        assert_eq!(v.list().unwrap().minions_pre.len(), 398);
        let node = Node::start(&data, views(&pki), NodeConfig::default()).unwrap();
        assert_eq!(node.state().applied_index().unwrap(), idx);
        let idx2 = node.propose(&[key("after-restart", KeyState::Pending)]).unwrap();
        assert!(idx2 > idx);
        assert_eq!(node.state().count("keys").unwrap(), 400);
    }

    #[test]
    fn views_behind_are_resynced_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let data = DataDir::new(&dir.path().join("data"));
        let pki = dir.path().join("pki");
        let node = Node::start(&data, views(&pki), NodeConfig::default()).unwrap();
        node.propose(&[key("a", KeyState::Accepted), key("b", KeyState::Rejected)]).unwrap();
        drop(node);
        // As if the process died before the views were synced.
        StateMachine::open(&data.state()).unwrap().set_views_index(0).unwrap();
        // Lose the view entirely.
        for f in std::fs::read_dir(&pki).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
        let node = Node::start(&data, views(&pki), NodeConfig::default()).unwrap();
        drop(node);
        let v = MmapKeys::open(&pki, geo()).unwrap();
        assert_eq!(v.list().unwrap().minions, vec!["a".to_string()]);
        assert_eq!(v.list().unwrap().minions_rejected, vec!["b".to_string()]);
    }

    /// A founding member of a three-node group on 127.0.0.`id` with the sealed transport.
    fn member(root: &Path, id: u64, addrs: &HashMap<u64, std::net::SocketAddr>, secret: &str) -> (Node, Arc<crate::TcpTransport>) {
        let (inbox, mb) = mailbox();
        let peers = addrs.iter().filter(|(k, _)| **k != id).map(|(k, v)| (*k, *v)).collect();
        let t = crate::TcpTransport::start(id, addrs[&id], peers, crate::ClusterKey::from_secret(secret), Arc::new(move |m| inbox.deliver(m))).unwrap();
        let dir = root.join(format!("n{id}"));
        let cfg = NodeConfig { id, voters: vec![1, 2, 3], addrs: addrs.clone(), ..Default::default() };
        let node = Node::start_peered(&DataDir::new(&dir.join("data")), views(&dir.join("pki")), cfg, t.clone(), mb).unwrap();
        (node, t)
    }

    fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("timed out waiting for {what}");
    }

    /// Proposes on `node`, retrying while no leader is known or the leader changes.
    fn propose_retrying(node: &Node, recs: &[Record]) -> u64 {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            match node.propose(recs) {
                Ok(i) => return i,
                Err(NodeError::NotLeader | NodeError::Timeout(_)) if Instant::now() < end => std::thread::sleep(Duration::from_millis(100)),
                Err(e) => panic!("proposal failed: {e}"),
            }
        }
    }

    #[test]
    fn three_nodes_over_tcp_elect_replicate_fail_over_and_catch_up() {
        let dir = tempfile::tempdir().unwrap();
        let addrs: HashMap<u64, std::net::SocketAddr> = (1..=3u64)
            .map(|i| {
                let ip = format!("127.0.0.{i}");
                let port = std::net::TcpListener::bind((ip.as_str(), 0)).unwrap().local_addr().unwrap().port();
                (i, format!("{ip}:{port}").parse().unwrap())
            })
            .collect();
        let mut nodes: HashMap<u64, (Node, Arc<crate::TcpTransport>)> = (1..=3).map(|i| (i, member(dir.path(), i, &addrs, "shared secret"))).collect();
        // One leader, known to all.
        let mut leader = 0;
        wait_until("a leader all three agree on", 20, || {
            let l: Vec<Option<u64>> = (1..=3).map(|i| nodes[&i].0.leader()).collect();
            leader = l[0].unwrap_or(0);
            leader != 0 && l.iter().all(|x| *x == Some(leader))
        });
        // A follower's proposal is forwarded, committed by the majority, applied by all.
        let follower = (1..=3).find(|i| *i != leader).unwrap();
        propose_retrying(&nodes[&follower].0, &[key("a", KeyState::Pending)]);
        wait_until("the record on every node", 10, || (1..=3).all(|i| nodes[&i].0.state().get_key("a").unwrap().is_some()));
        // The leader goes away: the other two elect a new one and keep committing.
        let (old, t) = nodes.remove(&leader).unwrap();
        old.stop();
        t.shutdown();
        let rest: Vec<u64> = nodes.keys().copied().collect();
        wait_until("a new leader", 20, || nodes[&rest[0]].0.leader().is_some_and(|l| l != leader));
        propose_retrying(&nodes[&rest[1]].0, &[key("b", KeyState::Accepted)]);
        wait_until("b on the two live nodes", 10, || rest.iter().all(|i| nodes[i].0.state().get_key("b").unwrap().is_some()));
        // The old leader comes back from its own disk and catches up from the log.
        std::thread::sleep(Duration::from_millis(300));
        let back = member(dir.path(), leader, &addrs, "shared secret");
        wait_until("the restarted node to catch up", 20, || back.0.state().get_key("b").unwrap().is_some());
        assert_eq!(back.0.state().get_key("a").unwrap().unwrap().state, BankState::Pending);
        // Every node applied the same records at the same indexes.
        let applied: Vec<u64> = rest.iter().map(|i| nodes[i].0.state().applied_index().unwrap()).collect();
        wait_until("equal applied indexes", 10, || back.0.state().applied_index().unwrap() == applied[0]);
        for (_, (n, t)) in nodes {
            n.stop();
            t.shutdown();
        }
        back.0.stop();
        back.1.shutdown();
    }

    /// A node with the sealed transport; `voters` empty and `join` for a joiner.
    fn node_at(root: &Path, id: u64, listen: std::net::SocketAddr, peers: HashMap<u64, std::net::SocketAddr>, voters: Vec<u64>, join: bool) -> (Node, Arc<crate::TcpTransport>) {
        let (inbox, mb) = mailbox();
        let t = crate::TcpTransport::start(id, listen, peers, crate::ClusterKey::from_secret("s"), Arc::new(move |m| inbox.deliver(m))).unwrap();
        let dir = root.join(format!("n{id}"));
        let cfg = NodeConfig { id, voters, join, addrs: [(id, listen)].into(), auto_promote: false, ..Default::default() };
        let node = Node::start_peered(&DataDir::new(&dir.join("data")), views(&dir.join("pki")), cfg, t.clone(), mb).unwrap();
        (node, t)
    }

    fn free_addr(ip: &str) -> std::net::SocketAddr {
        std::net::TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap()
    }

    #[test]
    fn joiners_catch_up_as_learners_are_promoted_and_survive_the_founder() {
        let dir = tempfile::tempdir().unwrap();
        let a1 = free_addr("127.0.0.1");
        let (n1, t1) = node_at(dir.path(), 1, a1, HashMap::new(), vec![1], false);
        propose_retrying(&n1, &[key("before-join", KeyState::Accepted)]);
        // Node 2 starts empty, knowing only the founder; the founder adds it as a learner
        // (its address travels in the log) and it catches up from the log.
        let a2 = free_addr("127.0.0.2");
        let (n2, t2) = node_at(dir.path(), 2, a2, [(1, a1)].into(), vec![], true);
        n1.add_learner(2, a2).unwrap();
        wait_until("the learner to catch up", 20, || n2.state().get_key("before-join").unwrap().is_some());
        assert_eq!(n1.membership().unwrap().2, vec![2], "2 is a learner");
        n1.add_voter(2, None).unwrap();
        assert_eq!(n1.membership().unwrap().1, vec![1, 2]);
        // A third joins the same way; a proposal on the new voter is forwarded and applied.
        let a3 = free_addr("127.0.0.3");
        let (n3, t3) = node_at(dir.path(), 3, a3, [(1, a1)].into(), vec![], true);
        n2.add_learner(3, a3).unwrap();
        n1.add_voter(3, None).unwrap();
        propose_retrying(&n2, &[key("after-join", KeyState::Pending)]);
        wait_until("the third node to have everything", 20, || n3.state().get_key("after-join").unwrap().is_some());
        wait_until("everyone to see three voters", 20, || n3.membership().unwrap().1 == vec![1, 2, 3]);
        // The founder goes away; 2 and 3 (which learned each other's address from the log)
        // elect a leader and commit.
        n1.stop();
        t1.shutdown();
        propose_retrying(&n3, &[key("without-founder", KeyState::Pending)]);
        wait_until("both survivors to apply", 20, || [&n2, &n3].iter().all(|n| n.state().get_key("without-founder").unwrap().is_some()));
        // Node 3 goes down; node 1 comes back from its disk knowing no peer (its log's
        // address book is enough) and with node 2 makes a quorum again.
        n3.stop();
        t3.shutdown();
        std::thread::sleep(Duration::from_millis(300));
        let (n1, t1) = node_at(dir.path(), 1, a1, HashMap::new(), vec![1], false);
        propose_retrying(&n2, &[key("while-3-was-down", KeyState::Pending)]);
        // Node 3 restarts the same way and catches up.
        let (n3, t3) = node_at(dir.path(), 3, a3, HashMap::new(), vec![], true);
        wait_until("the restarted node to catch up", 30, || n3.state().get_key("while-3-was-down").unwrap().is_some());
        assert_eq!(n3.membership().unwrap().1, vec![1, 2, 3]);
        for (n, t) in [(n1, t1), (n2, t2), (n3, t3)] {
            n.stop();
            t.shutdown();
        }
    }
}
