//! The peer transport: raft and control messages between masters over TCP
//! (`cluster_pool_port`).
//!
//! A connection carries frames one way, from the side that connected to the side that
//! accepted. It starts with a handshake ([`handshake`]): both sides send fresh nonces,
//! their member ids and their member public keys, derive this connection's keys with
//! HKDF-SHA256 from the cluster key (a hash of `cluster_secret`), prove to each other that
//! they hold it, and sign the transcript with their member keys; an id is bound to one
//! member key ([`identity`]: the key book of the applied state, [`Outbox::set_member_keys`]),
//! so a holder of the secret cannot speak as a member whose private key it lacks, and a
//! peer that is no member (a joiner) may send control messages only (the join path),
//! never raft messages or snapshots (`not_a_member`). A forwarded proposal must name
//! the member whose connection carries it as its proposer (`proposer_mismatch`). Every frame
//! after that ([`frame`]) is sealed under the connection's key with a counter as its
//! nonce; the receiver opens only the next counter, and only frames claiming the member
//! id that did the handshake. So a frame captured on the wire and sent again, on its
//! connection or on another, delivers nothing, and a connection speaks for one member.
//!
//! Bounds: at most [`Limits::max_unauthenticated`] accepted connections may be in their
//! handshake at once (more are closed on accept); a handshake must complete within
//! [`Limits::handshake`]; the handshake's messages have fixed sizes (no length is read
//! from an unauthenticated peer); after it, a declared frame length is checked against
//! [`MAX_FRAME`] before any of it is read, and the buffer grows only as bytes arrive.
//! Authenticated inbound connections are capped too: at most [`Limits::max_per_peer`]
//! per member id and [`Limits::max_authenticated`] in all (more are closed right after
//! their handshake, `too_many_connections`).
//! Writers send a keepalive frame when idle for [`Limits::keepalive`]; a reader closes a
//! connection silent for [`Limits::idle`].
//!
//! A snapshot (raft's `MsgSnapshot` to a member behind the leader's first index) travels
//! on a connection and a thread of its own, as frames of kind 4 carrying its manifest,
//! its chunks and then the raft message (`snapshot_transfer.rs`), so raft's frames to
//! the same peer never wait behind it.
//!
//! Raft tolerates lost, repeated and reordered messages, so the transport does not queue
//! for a peer it cannot reach: it sends, and drops what it cannot send (raft resends).
//! One thread per peer writes; one thread per inbound connection reads. Every refusal
//! closes the connection and is counted and logged ([`refusal`]).
//!
//! A connection whose peer is gone is not written into: the writer looks (without
//! waiting) whether the peer closed it before writing each frame, and reconnects if so; a frame whose write fails is sent once more on a new connection.
//! Followers send each other nothing in a stable term, so the first message after a
//! member restarted (a pre-vote answer, in an election) would otherwise go into the
//! dead member's socket and be lost, and the election would wait a whole timeout for
//! the next round (`write_peer`). [`TcpTransport::shutdown`] closes the inbound
//! connections too, as the end of the process does.

mod frame;
mod handshake;
mod inbound;
pub mod identity;
mod limits;
mod snapshot_send;
pub mod refusal;
#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_admission;
#[cfg(test)]
mod tests_restart;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::eraftpb::Message;
use sha2::{Digest, Sha256};

use frame::{Opener, Sealer, KIND_CONTROL, KIND_KEEPALIVE, KIND_RAFT, KIND_SNAPSHOT, MIN_BODY};
use identity::{Admission, MemberKey, PeerKeys, PUBLIC_LEN};
use limits::{Authenticated, Unauthenticated};
pub use limits::Limits;
pub use snapshot_send::{SnapshotDone, SnapshotSendError};
use refusal::{Refusals, Refused};

use halite_storage::snapshot::Snapshot;

use crate::snapshot_transfer::{self, SnapshotInbox};

/// Largest frame accepted (raft sends at most 4 MiB of entries per message, but a single
/// record may be up to 64 MiB).
pub const MAX_FRAME: usize = 80 << 20;
/// Messages queued per peer before new ones are dropped.
const QUEUE: usize = 4096;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// After a failed connect, messages to that peer are dropped for this long.
const RETRY_AFTER: Duration = Duration::from_millis(200);
/// How long a write may block before the connection is given up.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// A frame body is read in pieces of at most this many bytes, so memory follows the
/// bytes that arrived, not the length a peer declared.
const READ_PIECE: usize = 64 << 10;
/// A snapshot transfer's writes may wait this long for the peer to read.
const SNAPSHOT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The secret every member derives from `cluster_secret`: the input of each
/// connection's key derivation, never a key frames are sealed with.
#[derive(Clone)]
pub struct ClusterKey([u8; 32]);

impl ClusterKey {
    pub fn from_secret(secret: &str) -> Self {
        let mut h = Sha256::new();
        h.update(b"halite-cluster-v1\0");
        h.update(secret.as_bytes());
        ClusterKey(h.finalize().into())
    }

    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// What a member proves itself with: the cluster key, its own member key, and the keys
/// it knows its peers by.
#[derive(Clone)]
pub struct Credentials {
    pub secret: ClusterKey,
    pub member: Arc<MemberKey>,
    pub peers: Arc<PeerKeys>,
}

impl Credentials {
    pub fn new(secret: ClusterKey, member: MemberKey, peers: Arc<PeerKeys>) -> Self {
        Credentials { secret, member: Arc::new(member), peers }
    }
}

/// The cluster key with this process's ephemeral member key (made once, kept in memory
/// only), every peer pinned to that same key ([`PeerKeys::pin_all`]): for tests and
/// benches whose members all run in one process and keep no identity on disk. Every
/// transport of the process presents the same key, so that pin is each member's own key,
/// and one restarted in the same process (same id) is still the member its peers know. A
/// master uses [`Credentials::new`] with its own key from disk and its founders' pins.
impl From<ClusterKey> for Credentials {
    fn from(secret: ClusterKey) -> Self {
        static PROCESS_KEY: std::sync::OnceLock<Arc<MemberKey>> = std::sync::OnceLock::new();
        // Generating an Ed25519 key reads the system RNG; it does not fail in practice.
        let member = PROCESS_KEY.get_or_init(|| Arc::new(MemberKey::generate().unwrap_or_else(|e| panic!("cannot generate a member key: {e}")))).clone();
        let peers = Arc::new(PeerKeys::default());
        peers.pin_all(member.public());
        Credentials { secret, member, peers }
    }
}

/// Where control messages go: the sender's id (the member id its connection proved), the
/// member key that connection proved, and the bytes.
pub type KeyedControlHandler = Arc<dyn Fn(u64, &[u8; PUBLIC_LEN], Vec<u8>) + Send + Sync>;

/// Where received messages go (the node's inbox).
pub type Deliver = Arc<dyn Fn(Message) + Send + Sync>;

/// Where received snapshots go, once set.
type Snapshots = Arc<Mutex<Option<Arc<dyn SnapshotInbox>>>>;

/// What an accepted connection's reader needs.
#[derive(Clone)]
struct Inbound {
    me: u64,
    key: Credentials,
    deliver: Deliver,
    control: Arc<Mutex<Option<KeyedControlHandler>>>,
    snapshots: Snapshots,
    stopped: Arc<AtomicBool>,
    refusals: Arc<Refusals>,
    limits: Limits,
    /// Authenticated inbound connections, per member id.
    open: Arc<Mutex<HashMap<u64, usize>>>,
    /// Every inbound connection being read, closed by [`TcpTransport::shutdown`].
    live: inbound::Live,
}

/// Sends raft messages to peers and receives theirs.
pub struct TcpTransport {
    id: u64,
    key: Credentials,
    peers: Mutex<HashMap<u64, SyncSender<Vec<u8>>>>,
    addrs: Mutex<HashMap<u64, SocketAddr>>,
    /// Where to connect instead of a peer's own address ([`TcpTransport::dial_via`]).
    via: Mutex<HashMap<SocketAddr, SocketAddr>>,
    local: SocketAddr,
    stopped: Arc<AtomicBool>,
    control: Arc<Mutex<Option<KeyedControlHandler>>>,
    snapshots: Snapshots,
    refusals: Arc<Refusals>,
    limits: Limits,
    /// The accept loop; joined by [`TcpTransport::shutdown`] so the port is free after it.
    listening: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The inbound connections being read.
    live: inbound::Live,
}

impl TcpTransport {
    /// Binds `listen` and starts accepting peers' frames for node `id`, handing each
    /// message to `deliver`. `peers` maps the other nodes' ids to their addresses.
    pub fn start(id: u64, listen: SocketAddr, peers: HashMap<u64, SocketAddr>, key: impl Into<Credentials>, deliver: Deliver) -> std::io::Result<Arc<Self>> {
        Self::start_with(id, listen, peers, key, deliver, Limits::default())
    }

    /// [`TcpTransport::start`] with other bounds.
    pub(crate) fn start_with(id: u64, listen: SocketAddr, peers: HashMap<u64, SocketAddr>, key: impl Into<Credentials>, deliver: Deliver, limits: Limits) -> std::io::Result<Arc<Self>> {
        let key: Credentials = key.into();
        let listener = TcpListener::bind(listen)?;
        let local = listener.local_addr()?;
        let stopped = Arc::new(AtomicBool::new(false));
        let control: Arc<Mutex<Option<KeyedControlHandler>>> = Arc::new(Mutex::new(None));
        let refusals = Arc::new(Refusals::default());
        let snapshots: Snapshots = Arc::new(Mutex::new(None));
        let live = inbound::Live::default();
        let inbound = Inbound { me: id, key: key.clone(), deliver, control: control.clone(), snapshots: snapshots.clone(), stopped: stopped.clone(), refusals: refusals.clone(), limits, open: Arc::default(), live: live.clone() };
        let listening = std::thread::Builder::new().name(format!("raft-listen-{id}")).spawn(move || inbound::accept(listener, inbound))?;
        Ok(Arc::new(TcpTransport { id, key, peers: Mutex::new(HashMap::new()), addrs: Mutex::new(peers), via: Mutex::new(HashMap::new()), local, stopped, control, snapshots, refusals, limits, listening: Mutex::new(Some(listening)), live }))
    }

    /// How many connections or frames this transport refused for `reason` (a word such
    /// as `bad_proof`, `replayed`, `sender_mismatch`, `too_many_unauthenticated`,
    /// `handshake_timeout`, `frame_too_large`, `bad_signature`, `peer_key_mismatch`,
    /// `peer_key_unknown`, `too_many_connections`, `not_a_member`, `proposer_mismatch`,
    /// `bad_control`, `control_id_mismatch`, `join_key_mismatch`).
    pub fn refused(&self, reason: &str) -> u64 {
        self.refusals.count(reason)
    }

    /// Counts and logs (rate-limited, like every refusal on the cluster port) a message
    /// the layer above refused from member `from` (the join handshake: a control message
    /// that does not parse or names another id or key than its connection proved).
    pub fn refuse_message(&self, from: u64, r: Refused) {
        self.refusals.refuse(&format!("member {from}"), &r);
    }

    /// Connect to `to` whenever a peer's address is `from` (a peer reached through a
    /// forwarder or a NAT, the master's `halite_cluster_dial`): the peer keeps its
    /// address as its identity in the address book; only where this transport opens its
    /// connections changes. Applies to connections opened after the call.
    pub fn dial_via(&self, routes: HashMap<SocketAddr, SocketAddr>) {
        *self.via.lock().unwrap_or_else(|p| p.into_inner()) = routes;
    }

    /// Where to connect to reach a peer whose address is `addr`.
    fn route(&self, addr: SocketAddr) -> SocketAddr {
        self.via.lock().unwrap_or_else(|p| p.into_inner()).get(&addr).copied().unwrap_or(addr)
    }

    /// Where control messages received from now on go (the tests' handlers, which do not
    /// look at the sender's key).
    #[cfg(test)]
    pub(crate) fn on_control(&self, handler: Arc<dyn Fn(u64, Vec<u8>) + Send + Sync>) {
        self.on_control_keyed(Arc::new(move |from, _, body| handler(from, body)));
    }

    /// Where control messages received from now on go, with the sender's member key.
    pub fn on_control_keyed(&self, handler: KeyedControlHandler) {
        *self.control.lock().unwrap_or_else(|p| p.into_inner()) = Some(handler);
    }

    /// This member's own public key (what its handshakes prove).
    pub fn member_public(&self) -> [u8; PUBLIC_LEN] {
        self.key.member.public()
    }

    /// The keys this transport knows its peers by.
    #[cfg(test)]
    pub(crate) fn peer_keys(&self) -> &Arc<PeerKeys> {
        &self.key.peers
    }

    /// Where snapshot transfers received from now on go (none are taken before).
    pub fn on_snapshot(&self, inbox: Arc<dyn SnapshotInbox>) {
        *self.snapshots.lock().unwrap_or_else(|p| p.into_inner()) = Some(inbox);
    }

    /// Sends snapshot `snap` and then `msg` (raft's `MsgSnapshot` naming it) to peer
    /// `msg.to`, on a connection and a thread of their own (`snapshot_transfer.rs`), so
    /// the caller never waits; `done` hears whether every byte was written (a peer that
    /// refuses a part closes the connection: that is an error here). Progress is logged.
    pub fn send_snapshot(&self, snap: Snapshot, msg: Message, done: SnapshotDone) {
        let to = msg.to;
        let Some(addr) = self.addrs.lock().unwrap_or_else(|p| p.into_inner()).get(&to).copied() else {
            done(Err(SnapshotSendError::NoAddress(to)));
            return;
        };
        let addr = self.route(addr);
        let (key, me, limits, refusals) = (self.key.clone(), self.id, self.limits, self.refusals.clone());
        // `done` is answered exactly once: by the transfer, or here if its thread cannot
        // start (the driver would otherwise wait for a transfer that never runs).
        let done = std::sync::Arc::new(std::sync::Mutex::new(Some(done)));
        let answer = done.clone();
        let spawned = std::thread::Builder::new().name(format!("raft-snap-{me}-{to}")).spawn(move || {
            let started = Instant::now();
            let r = snapshot_send::stream_snapshot(&key, me, to, addr, limits, &snap, &msg);
            match &r {
                Ok(bytes) => tracing::info!(to, index = snap.index(), bytes, ms = started.elapsed().as_millis() as u64, "snapshot sent"),
                Err(e) => {
                    tracing::warn!(to, index = snap.index(), "snapshot transfer failed: {}", e.detail);
                    // Counted like every refusal on the cluster port (a handshake
                    // refusal keeps its own reason).
                    refusals.refuse(&addr.to_string(), e);
                }
            }
            if let Some(done) = answer.lock().unwrap_or_else(|p| p.into_inner()).take() {
                done(r.map(|_| ()).map_err(SnapshotSendError::from));
            }
        });
        if let Err(e) = spawned {
            tracing::error!(to, "cannot start a snapshot transfer thread: {e}");
            if let Some(done) = done.lock().unwrap_or_else(|p| p.into_inner()).take() {
                done(Err(SnapshotSendError::NoThread(e.to_string())));
            }
        }
    }

    /// Sends one control message to `addr` (a peer that may not be a member yet), on a
    /// connection of its own; failures are logged.
    pub fn send_control(&self, to: u64, addr: SocketAddr, body: &[u8]) {
        if 8 + 17 + body.len() + 16 > MAX_FRAME {
            tracing::error!(to, len = body.len(), "control message larger than the frame limit not sent");
            return;
        }
        let addr = self.route(addr);
        let (me, key, body, refusals, limits) = (self.id, self.key.clone(), body.to_vec(), self.refusals.clone(), self.limits);
        let _ = std::thread::Builder::new().name("raft-control".into()).spawn(move || {
            let sent = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| Refused::new("io", e)).and_then(|mut s| {
                let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
                let mut sealer = handshake::initiate(&mut s, &key, me, to, Instant::now() + limits.handshake)?;
                let frame = sealer.seal(KIND_CONTROL, me, to, &body).map_err(|e| Refused::new("io", e))?;
                s.write_all(&frame).map_err(|e| Refused::new("io", e))
            });
            if let Err(r) = sent {
                refusals.refuse(&addr.to_string(), &r);
                tracing::debug!(%addr, "control message not delivered: {}", r.detail);
            }
        });
    }

    /// Opens a connection to every peer whose address this transport knows, for the
    /// handshake alone, so that both sides check each other's member key now rather than
    /// at their first raft message (two followers may never exchange one), and a peer
    /// whose key is refused shows in the logs at once. Failures are counted and logged
    /// like any refusal; nothing is retried (a later connection checks as well).
    pub fn introduce(&self) {
        let addrs: Vec<(u64, SocketAddr)> = self.addrs.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(id, a)| (*id, *a)).collect();
        for (id, addr) in addrs {
            self.introduce_to(id, addr);
        }
    }

    /// [`TcpTransport::introduce`] to one peer, on a thread of its own.
    fn introduce_to(&self, to: u64, addr: SocketAddr) {
        if addr == self.local {
            // An earlier incarnation of this member, at its own address.
            return;
        }
        let addr = self.route(addr);
        let (me, key, refusals, limits) = (self.id, self.key.clone(), self.refusals.clone(), self.limits);
        let _ = std::thread::Builder::new().name("raft-introduce".into()).spawn(move || {
            let done = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| Refused::new("io", e)).and_then(|mut s| {
                let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
                handshake::initiate(&mut s, &key, me, to, Instant::now() + limits.handshake).map(|_| ())
            });
            if let Err(r) = done {
                refusals.refuse(&addr.to_string(), &r);
            }
        });
    }

    /// Stops listening (the port is free once this returns), drops outbound connections,
    /// closes inbound ones (their peers see the close at once, as after the end of the
    /// process) and stops delivering.
    pub fn shutdown(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.live.close_all();
        // Wake the accept loop so it sees the flag and drops the listener, and wait for
        // it: a node restarted in the same process binds the same address next.
        let woken = TcpStream::connect_timeout(&self.local, CONNECT_TIMEOUT).is_ok();
        let handle = self.listening.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let (true, Some(h)) = (woken, handle) {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Sends messages (each to its `to`); never blocks on the network.
    pub fn send(&self, msgs: Vec<Message>) {
        for m in msgs {
            let to = m.to;
            let Some(addr) = self.addrs.lock().unwrap_or_else(|p| p.into_inner()).get(&to).copied() else {
                tracing::debug!(to, "raft message for an unknown peer dropped");
                continue;
            };
            let body = match m.write_to_bytes() {
                Ok(b) if 8 + 17 + b.len() + 16 <= MAX_FRAME => b,
                Ok(b) => {
                    tracing::error!(to, len = b.len(), "raft message larger than the frame limit not sent");
                    continue;
                }
                Err(e) => {
                    tracing::error!(to, "raft message not sent: {e}");
                    continue;
                }
            };
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            let tx = peers.entry(to).or_insert_with(|| {
                let (tx, rx) = mpsc::sync_channel(QUEUE);
                let out = Outbound { me: self.id, to, addr: self.route(addr), key: self.key.clone(), refusals: self.refusals.clone(), limits: self.limits };
                let me = self.id;
                let _ = std::thread::Builder::new().name(format!("raft-out-{me}-{to}")).spawn(move || write_peer(out, rx));
                tx
            });
            match tx.try_send(body) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => tracing::debug!(to, "raft queue to peer full; message dropped"),
                Err(TrySendError::Disconnected(_)) => {
                    peers.remove(&to);
                }
            }
        }
    }
}

/// What one outbound connection's writer needs.
struct Outbound {
    me: u64,
    to: u64,
    addr: SocketAddr,
    key: Credentials,
    refusals: Arc<Refusals>,
    limits: Limits,
}

impl Outbound {
    fn connect(&self) -> Result<(TcpStream, Sealer), Refused> {
        let mut s = TcpStream::connect_timeout(&self.addr, CONNECT_TIMEOUT).map_err(|e| Refused::new("io", e))?;
        let _ = s.set_nodelay(true);
        let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
        let sealer = handshake::initiate(&mut s, &self.key, self.me, self.to, Instant::now() + self.limits.handshake)?;
        Ok((s, sealer))
    }
}

/// One outbound connection: connect and handshake lazily, write frames (a keepalive
/// when idle), reconnect on error.
///
/// The peer never writes on this connection after the handshake, so a connection that
/// became readable was closed by its peer (it stopped, or restarted and this is its
/// former incarnation's socket). A frame written there would be lost: the first write
/// after a close still succeeds locally, the peer answers it with a reset, and only the
/// write after that fails. So before each frame the writer looks (without waiting,
/// three system calls) whether the connection was closed, and reconnects if so; and a frame whose write fails is sealed again and written once on
/// a new connection.
fn write_peer(out: Outbound, rx: Receiver<Vec<u8>>) {
    let (to, addr) = (out.to, out.addr);
    let mut conn: Option<(TcpStream, Sealer)> = None;
    let mut down_until: Option<Instant> = None;
    loop {
        let (kind, body) = match rx.recv_timeout(out.limits.keepalive) {
            Ok(body) => (KIND_RAFT, body),
            Err(RecvTimeoutError::Timeout) if conn.is_some() => (KIND_KEEPALIVE, Vec::new()),
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if down_until.is_some_and(|t| Instant::now() < t) {
            continue;
        }
        if conn.as_ref().is_some_and(|(s, _)| closed_by_peer(s)) {
            tracing::info!(to, %addr, "raft peer closed the connection; reconnecting");
            conn = None;
        }
        // At most two attempts: the connection as it is, then a new one.
        for attempt in 0..2 {
            if conn.is_none() {
                match out.connect() {
                    Ok(c) => {
                        tracing::info!(to, %addr, "connected to raft peer");
                        conn = Some(c);
                        down_until = None;
                    }
                    Err(r) => {
                        out.refusals.refuse(&addr.to_string(), &r);
                        tracing::debug!(to, %addr, "raft peer unreachable: {}", r.detail);
                        down_until = Some(Instant::now() + RETRY_AFTER);
                        break;
                    }
                }
            }
            let Some((s, sealer)) = conn.as_mut() else { break };
            let written = sealer.seal(kind, out.me, to, &body).map_err(std::io::Error::other).and_then(|f| s.write_all(&f));
            match written {
                Ok(()) => break,
                Err(e) => {
                    tracing::info!(to, %addr, attempt, "raft peer connection lost: {e}");
                    conn = None;
                }
            }
        }
    }
}

/// Whether the peer closed `s` (an end of stream or an error is waiting to be read);
/// never waits. A connection whose state cannot be read is taken as open (a write will
/// tell).
fn closed_by_peer(s: &TcpStream) -> bool {
    if s.set_nonblocking(true).is_err() {
        return false;
    }
    let mut b = [0u8; 1];
    let closed = match s.peek(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::Interrupted,
    };
    if s.set_nonblocking(false).is_err() {
        return true;
    }
    closed
}

/// What the node's driver sends its outgoing raft messages through.
pub trait Outbox: Send + Sync {
    fn send(&self, msgs: Vec<Message>);
    /// Learns (or forgets, with `None`) where peer `id` listens; membership changes in
    /// the log carry the addresses.
    fn set_peer(&self, id: u64, addr: Option<SocketAddr>);
    /// Sends a snapshot and then `msg` (its `MsgSnapshot`) to `msg.to` without blocking
    /// the caller; `done` hears how it ended. Without this, a snapshot cannot be sent.
    fn send_snapshot(&self, _snap: Snapshot, msg: Message, done: SnapshotDone) {
        done(Err(SnapshotSendError::Unsupported(msg.to)))
    }
    /// Where snapshots received from peers go (none are taken before).
    fn take_snapshots(&self, _inbox: Arc<dyn SnapshotInbox>) {}
    /// The applied key book (raft id → member key), the group's voters and learners,
    /// and whether this node is one of them: who may speak as whom
    /// ([`identity`]). Called at start and whenever one of them changes.
    fn set_member_keys(&self, _book: std::collections::BTreeMap<u64, [u8; PUBLIC_LEN]>, _members: std::collections::HashSet<u64>, _me_member: bool) {}
}

impl Outbox for TcpTransport {
    fn send(&self, msgs: Vec<Message>) {
        TcpTransport::send(self, msgs)
    }

    fn send_snapshot(&self, snap: Snapshot, msg: Message, done: SnapshotDone) {
        TcpTransport::send_snapshot(self, snap, msg, done)
    }

    fn take_snapshots(&self, inbox: Arc<dyn SnapshotInbox>) {
        self.on_snapshot(inbox)
    }

    fn set_member_keys(&self, book: std::collections::BTreeMap<u64, [u8; PUBLIC_LEN]>, members: std::collections::HashSet<u64>, me_member: bool) {
        self.key.peers.set_applied(book, members, me_member)
    }

    fn set_peer(&self, id: u64, addr: Option<SocketAddr>) {
        if id == self.id {
            return;
        }
        let mut addrs = self.addrs.lock().unwrap_or_else(|p| p.into_inner());
        let changed = match addr {
            Some(a) => addrs.insert(id, a) != Some(a),
            None => addrs.remove(&id).is_some(),
        };
        if changed {
            // A new address gets a new connection.
            self.peers.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            tracing::info!(peer = id, ?addr, "raft peer address");
            if let Some(a) = addr {
                self.introduce_to(id, a);
            }
        }
    }
}

