//! The peer transport: raft messages between masters over TCP (`cluster_pool_port`).
//!
//! Every message travels in its own sealed frame:
//!
//! ```text
//! u32 BE  length of the rest (nonce + ciphertext + tag), at most MAX_FRAME
//! [12]    random nonce
//! [n]     AES-256-GCM ciphertext of:  u8 kind | u64 BE sender id | u64 BE recipient id | body
//!         (kind 1: a raft Message, protobuf; kind 2: a control message of the layer above;
//!         kind 3: a part of a snapshot transfer, `snapshot_transfer.rs`, on a connection
//!         of its own)
//! [16]    GCM tag; the additional data is the ASCII "halite-raft-v1"
//! ```
//!
//! The key is SHA-256 of `"halite-cluster-v1\0"` followed by `cluster_secret`, so only
//! masters configured with the same secret can read or forge each other's traffic. A
//! frame that does not open, names another recipient, or whose sender differs from the
//! message's `from` is dropped and logged; raft tolerates lost, repeated and reordered
//! messages, so the transport never retries: it sends, and drops what it cannot send
//! (raft resends). One thread per peer writes; one thread per inbound connection reads.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openssl::symm::{decrypt_aead, encrypt_aead, Cipher};
use protobuf::Message as _;
use raft::eraftpb::Message;
use sha2::{Digest, Sha256};

use halite_storage::snapshot::{Snapshot, SnapshotSource};

use crate::snapshot_transfer::{self, SnapshotInbox};

/// Largest frame accepted (raft sends at most 4 MiB of entries per message, but a single
/// record may be up to 64 MiB).
pub const MAX_FRAME: usize = 80 << 20;
/// Messages queued per peer before new ones are dropped.
const QUEUE: usize = 4096;
const AAD: &[u8] = b"halite-raft-v1";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// After a failed connect, messages to that peer are dropped for this long.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// The symmetric key derived from `cluster_secret`.
#[derive(Clone)]
pub struct ClusterKey([u8; 32]);

impl ClusterKey {
    pub fn from_secret(secret: &str) -> Self {
        let mut h = Sha256::new();
        h.update(b"halite-cluster-v1\0");
        h.update(secret.as_bytes());
        ClusterKey(h.finalize().into())
    }

    /// Seals one raft message from `from` to `to` into a frame (length prefix included).
    pub fn seal(&self, from: u64, to: u64, msg: &Message) -> Result<Vec<u8>, String> {
        let body = msg.write_to_bytes().map_err(|e| e.to_string())?;
        self.seal_kind(KIND_RAFT, from, to, &body)
    }

    fn seal_kind(&self, kind: u8, from: u64, to: u64, body: &[u8]) -> Result<Vec<u8>, String> {
        let mut plain = Vec::with_capacity(17 + body.len());
        plain.push(kind);
        plain.extend_from_slice(&from.to_be_bytes());
        plain.extend_from_slice(&to.to_be_bytes());
        plain.extend_from_slice(body);
        let mut nonce = [0u8; 12];
        openssl::rand::rand_bytes(&mut nonce).map_err(|e| e.to_string())?;
        let mut tag = [0u8; 16];
        let ct = encrypt_aead(Cipher::aes_256_gcm(), &self.0, Some(&nonce), AAD, &plain, &mut tag).map_err(|e| e.to_string())?;
        let len = 12 + ct.len() + 16;
        if len > MAX_FRAME {
            return Err(format!("a peer message of {len} bytes exceeds the {MAX_FRAME}-byte frame limit"));
        }
        let mut frame = Vec::with_capacity(4 + len);
        frame.extend_from_slice(&(len as u32).to_be_bytes());
        frame.extend_from_slice(&nonce);
        frame.extend_from_slice(&ct);
        frame.extend_from_slice(&tag);
        Ok(frame)
    }

    /// Opens a frame body (without its length prefix): `(from, to, what)`.
    pub fn open(&self, body: &[u8]) -> Result<(u64, u64, Frame), String> {
        if body.len() < 12 + 17 + 16 {
            return Err("frame too short".into());
        }
        let (nonce, rest) = body.split_at(12);
        let (ct, tag) = rest.split_at(rest.len() - 16);
        let plain = decrypt_aead(Cipher::aes_256_gcm(), &self.0, Some(nonce), AAD, ct, tag).map_err(|_| "frame does not authenticate (wrong cluster_secret?)".to_string())?;
        let from = u64::from_be_bytes(plain[1..9].try_into().map_err(|_| "short frame")?);
        let to = u64::from_be_bytes(plain[9..17].try_into().map_err(|_| "short frame")?);
        let what = match plain[0] {
            KIND_RAFT => Frame::Raft(Box::new(Message::parse_from_bytes(&plain[17..]).map_err(|e| format!("raft message does not decode: {e}"))?)),
            KIND_CONTROL => Frame::Control(plain[17..].to_vec()),
            KIND_SNAPSHOT => Frame::Snapshot(plain[17..].to_vec()),
            k => return Err(format!("unknown frame kind {k}")),
        };
        Ok((from, to, what))
    }
}

const KIND_RAFT: u8 = 1;
const KIND_CONTROL: u8 = 2;
const KIND_SNAPSHOT: u8 = 3;
/// A snapshot transfer's writes may wait this long for the peer to read.
const SNAPSHOT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a frame carries: a raft message, or a control message (the join handshake),
/// whose bytes the layer above defines.
pub enum Frame {
    Raft(Box<Message>),
    Control(Vec<u8>),
    /// A part of a snapshot transfer (`snapshot_transfer.rs`).
    Snapshot(Vec<u8>),
}

/// Where control messages go: the sender's id and the bytes.
pub type ControlHandler = Arc<dyn Fn(u64, Vec<u8>) + Send + Sync>;

/// Where received snapshots go, once set.
type Snapshots = Arc<Mutex<Option<Arc<dyn SnapshotInbox>>>>;

/// Where received messages go (the node's inbox).
pub type Deliver = Arc<dyn Fn(Message) + Send + Sync>;

/// Sends raft messages to peers and receives theirs.
pub struct TcpTransport {
    id: u64,
    key: ClusterKey,
    peers: Mutex<HashMap<u64, SyncSender<Vec<u8>>>>,
    addrs: Mutex<HashMap<u64, SocketAddr>>,
    local: SocketAddr,
    stopped: Arc<AtomicBool>,
    control: Arc<Mutex<Option<ControlHandler>>>,
    snapshots: Snapshots,
    /// The accept loop; joined by [`TcpTransport::shutdown`] so the port is free after it.
    listening: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl TcpTransport {
    /// Binds `listen` and starts accepting peers' frames for node `id`, handing each
    /// message to `deliver`. `peers` maps the other nodes' ids to their addresses.
    pub fn start(id: u64, listen: SocketAddr, peers: HashMap<u64, SocketAddr>, key: ClusterKey, deliver: Deliver) -> std::io::Result<Arc<Self>> {
        let listener = TcpListener::bind(listen)?;
        let local = listener.local_addr()?;
        let k2 = key.clone();
        let stopped = Arc::new(AtomicBool::new(false));
        let stop2 = stopped.clone();
        let control: Arc<Mutex<Option<ControlHandler>>> = Arc::new(Mutex::new(None));
        let control2 = control.clone();
        let snapshots: Snapshots = Arc::new(Mutex::new(None));
        let snapshots2 = snapshots.clone();
        let listening = std::thread::Builder::new().name(format!("raft-listen-{id}")).spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    return;
                }
                match conn {
                    Ok(stream) => {
                        let (k, d, s, c, snaps) = (k2.clone(), deliver.clone(), stop2.clone(), control2.clone(), snapshots2.clone());
                        let _ = std::thread::Builder::new().name(format!("raft-in-{id}")).spawn(move || read_peer(id, stream, k, d, s, c, snaps));
                    }
                    Err(e) => tracing::warn!("raft listener: {e}"),
                }
            }
        })?;
        Ok(Arc::new(TcpTransport { id, key, peers: Mutex::new(HashMap::new()), addrs: Mutex::new(peers), local, stopped, control, snapshots, listening: Mutex::new(Some(listening)) }))
    }

    /// Where control messages received from now on go.
    pub fn on_control(&self, handler: ControlHandler) {
        *self.control.lock().unwrap_or_else(|p| p.into_inner()) = Some(handler);
    }

    /// Where snapshot transfers received from now on go (none are taken before).
    pub fn on_snapshot(&self, inbox: Arc<dyn SnapshotInbox>) {
        *self.snapshots.lock().unwrap_or_else(|p| p.into_inner()) = Some(inbox);
    }

    /// Sends snapshot `snap` and then `msg` (raft's `MsgSnapshot` naming it) to peer
    /// `msg.to`, on a connection and a thread of their own (`snapshot_transfer.rs`), so
    /// the caller never waits; `done` hears whether every byte was written (a peer that
    /// refuses a part closes the connection: that is an error here). Progress is logged.
    pub fn send_snapshot(&self, snap: Snapshot, msg: Message, done: Box<dyn FnOnce(Result<(), String>) + Send>) {
        let to = msg.to;
        let Some(addr) = self.addrs.lock().unwrap_or_else(|p| p.into_inner()).get(&to).copied() else {
            done(Err(format!("no address for peer {to}")));
            return;
        };
        let (key, me) = (self.key.clone(), self.id);
        let spawned = std::thread::Builder::new().name(format!("raft-snap-{me}-{to}")).spawn(move || {
            let started = Instant::now();
            let r = stream_snapshot(&key, me, to, addr, &snap, &msg);
            match &r {
                Ok(bytes) => tracing::info!(to, index = snap.index(), bytes, ms = started.elapsed().as_millis() as u64, "snapshot sent"),
                Err(e) => tracing::warn!(to, index = snap.index(), "snapshot transfer failed: {e}"),
            }
            done(r.map(|_| ()));
        });
        if let Err(e) = spawned {
            tracing::error!(to, "cannot start a snapshot transfer thread: {e}");
        }
    }

    /// Sends one control message to `addr` (a peer that may not be a member yet), on a
    /// connection of its own; failures are logged.
    pub fn send_control(&self, to: u64, addr: SocketAddr, body: &[u8]) {
        let frame = match self.key.seal_kind(KIND_CONTROL, self.id, to, body) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(to, "control message not sent: {e}");
                return;
            }
        };
        let _ = std::thread::Builder::new().name("raft-control".into()).spawn(move || {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).and_then(|mut s| s.write_all(&frame)) {
                Ok(()) => {}
                Err(e) => tracing::debug!(%addr, "control message not delivered: {e}"),
            }
        });
    }

    /// Stops listening (the port is free once this returns), drops outbound connections
    /// and stops delivering.
    pub fn shutdown(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).clear();
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
            let frame = match self.key.seal(self.id, to, &m) {
                Ok(f) => f,
                Err(e) => {
                    tracing::error!(to, "raft message not sent: {e}");
                    continue;
                }
            };
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            let tx = peers.entry(to).or_insert_with(|| {
                let (tx, rx) = mpsc::sync_channel(QUEUE);
                let me = self.id;
                let _ = std::thread::Builder::new().name(format!("raft-out-{me}-{to}")).spawn(move || write_peer(to, addr, rx));
                tx
            });
            match tx.try_send(frame) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => tracing::debug!(to, "raft queue to peer full; message dropped"),
                Err(TrySendError::Disconnected(_)) => {
                    peers.remove(&to);
                }
            }
        }
    }
}

/// One outbound connection: connect lazily, write frames, reconnect on error.
fn write_peer(to: u64, addr: SocketAddr, rx: Receiver<Vec<u8>>) {
    let mut conn: Option<TcpStream> = None;
    let mut down_until: Option<Instant> = None;
    for frame in rx {
        if down_until.is_some_and(|t| Instant::now() < t) {
            continue;
        }
        if conn.is_none() {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
                    tracing::info!(to, %addr, "connected to raft peer");
                    conn = Some(s);
                    down_until = None;
                }
                Err(e) => {
                    tracing::debug!(to, %addr, "raft peer unreachable: {e}");
                    down_until = Some(Instant::now() + RETRY_AFTER);
                    continue;
                }
            }
        }
        if let Some(s) = conn.as_mut() {
            if let Err(e) = s.write_all(&frame) {
                tracing::info!(to, %addr, "raft peer connection lost: {e}");
                conn = None;
            }
        }
    }
}

/// Writes one snapshot transfer to `addr`: begin, chunks, end. Returns the file bytes
/// sent.
fn stream_snapshot(key: &ClusterKey, me: u64, to: u64, addr: SocketAddr, snap: &Snapshot, msg: &Message) -> Result<u64, String> {
    let mut s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| format!("connecting to {addr}: {e}"))?;
    let _ = s.set_nodelay(true);
    s.set_write_timeout(Some(SNAPSHOT_WRITE_TIMEOUT)).map_err(|e| e.to_string())?;
    let mut transfer = [0u8; 8];
    openssl::rand::rand_bytes(&mut transfer).map_err(|e| e.to_string())?;
    let transfer = u64::from_be_bytes(transfer);
    let mut write = |part: u8, payload: &[u8]| -> Result<(), String> {
        let frame = key.seal_kind(KIND_SNAPSHOT, me, to, &snapshot_transfer::encode_part(part, transfer, payload))?;
        s.write_all(&frame).map_err(|e| format!("writing to {addr}: {e}"))
    };
    let mut src = SnapshotSource::new(snap);
    tracing::info!(to, index = snap.index(), bytes = src.total_bytes(), "snapshot transfer begins");
    write(snapshot_transfer::PART_BEGIN, &src.manifest_bytes())?;
    let (total, mut logged) = (src.total_bytes(), 0u64);
    while let Some(chunk) = src.next_chunk().map_err(|e| e.to_string())? {
        write(snapshot_transfer::PART_CHUNK, &chunk)?;
        if src.sent_bytes() >= logged + (total / 10).clamp(1, 256 << 20) {
            logged = src.sent_bytes();
            tracing::info!(to, bytes = logged, total, "snapshot sent {}%", logged * 100 / total.max(1));
        }
    }
    write(snapshot_transfer::PART_END, &msg.write_to_bytes().map_err(|e| e.to_string())?)?;
    Ok(src.sent_bytes())
}

/// One inbound connection: read frames until EOF or a bad frame.
fn read_peer(me: u64, mut stream: TcpStream, key: ClusterKey, deliver: Deliver, stopped: Arc<AtomicBool>, control: Arc<Mutex<Option<ControlHandler>>>, snapshots: Snapshots) {
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let mut incoming = snapshot_transfer::Incoming::default();
    let mut len = [0u8; 4];
    loop {
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        if stream.read_exact(&mut len).is_err() {
            return;
        }
        let n = u32::from_be_bytes(len) as usize;
        if n > MAX_FRAME {
            tracing::warn!(%peer, n, "raft frame larger than the limit; closing the connection");
            return;
        }
        let mut body = vec![0u8; n];
        if stream.read_exact(&mut body).is_err() {
            return;
        }
        match key.open(&body) {
            Ok((from, to, Frame::Raft(msg))) if to == me && msg.to == me && msg.from == from => deliver(*msg),
            Ok((from, to, Frame::Raft(msg))) => {
                tracing::warn!(%peer, from, to, msg_from = msg.from, msg_to = msg.to, "raft frame with mismatched ids dropped");
            }
            Ok((from, to, Frame::Control(body))) if to == me => {
                let handler = control.lock().unwrap_or_else(|p| p.into_inner()).clone();
                match handler {
                    Some(h) => h(from, body),
                    None => tracing::debug!(from, "control message with no handler dropped"),
                }
            }
            Ok((from, to, Frame::Control(_))) => tracing::warn!(%peer, from, to, "control frame for another node dropped"),
            Ok((from, to, Frame::Snapshot(body))) if to == me => {
                let Some(inbox) = snapshots.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
                    tracing::warn!(%peer, from, "snapshot transfer refused: this node takes no snapshots; closing the connection");
                    return;
                };
                if let Err(e) = incoming.part(from, &body, inbox.as_ref()) {
                    tracing::warn!(%peer, from, "snapshot transfer refused: {e}; closing the connection");
                    return;
                }
            }
            Ok((from, to, Frame::Snapshot(_))) => {
                tracing::warn!(%peer, from, to, "snapshot frame for another node dropped; closing the connection");
                return;
            }
            Err(e) => {
                tracing::warn!(%peer, "raft frame refused: {e}; closing the connection");
                return;
            }
        }
    }
}

/// What the node's driver sends its outgoing raft messages through.
pub trait Outbox: Send + Sync {
    fn send(&self, msgs: Vec<Message>);
    /// Learns (or forgets, with `None`) where peer `id` listens; membership changes in
    /// the log carry the addresses.
    fn set_peer(&self, id: u64, addr: Option<SocketAddr>);
    /// Sends a snapshot and then `msg` (its `MsgSnapshot`) to `msg.to` without blocking
    /// the caller; `done` hears how it ended. Without this, a snapshot cannot be sent.
    fn send_snapshot(&self, _snap: Snapshot, msg: Message, done: Box<dyn FnOnce(Result<(), String>) + Send>) {
        done(Err(format!("this transport cannot send a snapshot to {}", msg.to)))
    }
    /// Where snapshots received from peers go (none are taken before).
    fn take_snapshots(&self, _inbox: Arc<dyn SnapshotInbox>) {}
}

impl Outbox for TcpTransport {
    fn send(&self, msgs: Vec<Message>) {
        TcpTransport::send(self, msgs)
    }

    fn send_snapshot(&self, snap: Snapshot, msg: Message, done: Box<dyn FnOnce(Result<(), String>) + Send>) {
        TcpTransport::send_snapshot(self, snap, msg, done)
    }

    fn take_snapshots(&self, inbox: Arc<dyn SnapshotInbox>) {
        self.on_snapshot(inbox)
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::MessageType;

    fn msg(from: u64, to: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = from;
        m.to = to;
        m.term = 7;
        m
    }

    #[test]
    fn frames_seal_and_open_only_with_the_same_secret() {
        let k = ClusterKey::from_secret("s3cret");
        let f = k.seal(1, 2, &msg(1, 2)).unwrap();
        let (from, to, m) = k.open(&f[4..]).unwrap();
        let Frame::Raft(m) = m else { panic!("a raft frame") };
        assert_eq!((from, to, m.term), (1, 2, 7));
        assert!(ClusterKey::from_secret("other").open(&f[4..]).is_err());
        let mut flipped = f.clone();
        let last = flipped.len() - 20;
        flipped[last] ^= 1;
        assert!(k.open(&flipped[4..]).is_err(), "a flipped bit fails the tag");
        assert!(k.open(&[0u8; 10]).is_err());
    }

    #[test]
    fn messages_travel_between_two_transports_over_tcp() {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let key = ClusterKey::from_secret("s");
        let b = TcpTransport::start(2, "127.0.0.1:0".parse().unwrap(), HashMap::new(), key.clone(), Arc::new(move |m| {
            let _ = tx.lock().unwrap().send(m);
        }))
        .unwrap();
        let a = TcpTransport::start(1, "127.0.0.1:0".parse().unwrap(), [(2, b.local_addr())].into(), key, Arc::new(|_| {})).unwrap();
        a.send(vec![msg(1, 2), msg(1, 2)]);
        let got = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!((got.from, got.to, got.term), (1, 2, 7));
        assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok());
        // A sender with another secret is refused.
        let c = TcpTransport::start(3, "127.0.0.1:0".parse().unwrap(), [(2, b.local_addr())].into(), ClusterKey::from_secret("wrong"), Arc::new(|_| {})).unwrap();
        c.send(vec![msg(3, 2)]);
        assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
    }
}
