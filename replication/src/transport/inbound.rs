//! The receiving side of the peer transport: the accept loop (a bound on connections in
//! their handshake, one thread each), the handshake, then every frame read, opened and
//! admitted (the sender still a member with the key the applied state names, forwarded
//! proposals naming their forwarder) before it is delivered. Split from `mod.rs`, which
//! keeps the transport's handle and its sending side.

use super::*;

/// The accept loop: bounds the connections in their handshake, one thread each.
pub(super) fn accept(listener: TcpListener, inbound: Inbound) {
    let unauthenticated = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if inbound.stopped.load(Ordering::SeqCst) {
            return;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors, accept fails at once until some are freed: pause
                // rather than spin.
                tracing::warn!("raft listener: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        let source = stream.peer_addr().map(|a| a.ip().to_string()).unwrap_or_default();
        if unauthenticated.load(Ordering::SeqCst) >= inbound.limits.max_unauthenticated {
            let limit = inbound.limits.max_unauthenticated;
            inbound.refusals.refuse(&source, &Refused::new("too_many_unauthenticated", format!("{limit} connections are already in their handshake; closed")));
            continue;
        }
        unauthenticated.fetch_add(1, Ordering::SeqCst);
        let pending = Unauthenticated(unauthenticated.clone());
        let inb = inbound.clone();
        // If the thread cannot start, the closure (and `pending`) is dropped with it.
        let _ = std::thread::Builder::new().name(format!("raft-in-{}", inbound.me)).spawn(move || read_peer(stream, source, pending, inb));
    }
}

/// The inbound connections being read, so that [`TcpTransport::shutdown`] can close
/// them: a reader blocked on a connection would otherwise keep it open (and take the
/// next frame its peer sends, for a transport that delivers nothing any more) until
/// that frame or the idle timeout wakes it.
#[derive(Clone, Default)]
pub(super) struct Live(Arc<Mutex<LiveConns>>);

#[derive(Default)]
pub(super) struct LiveConns {
    next: u64,
    conns: HashMap<u64, TcpStream>,
    closed: bool,
}

/// A connection's place in [`Live`], given up when its reader ends.
struct LiveGuard(Live, u64);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0 .0.lock().unwrap_or_else(|p| p.into_inner()).conns.remove(&self.1);
    }
}

impl Live {
    /// Registers `stream` (a handle to it); `None` once the transport is shut down (the
    /// caller closes it) or when no handle can be made.
    fn register(&self, stream: &TcpStream) -> Option<LiveGuard> {
        let mut l = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if l.closed {
            return None;
        }
        let handle = stream.try_clone().ok()?;
        l.next += 1;
        let id = l.next;
        l.conns.insert(id, handle);
        Some(LiveGuard(self.clone(), id))
    }

    /// Closes every registered connection (both directions), and any registered later.
    pub(super) fn close_all(&self) {
        let mut l = self.0.lock().unwrap_or_else(|p| p.into_inner());
        l.closed = true;
        for (_, s) in l.conns.drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// One inbound connection: the handshake, then frames until EOF, silence or a refusal.
fn read_peer(mut stream: TcpStream, source: String, pending: Unauthenticated, inb: Inbound) {
    let Some(_live) = inb.live.register(&stream) else {
        let _ = stream.shutdown(std::net::Shutdown::Both);
        return;
    };
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let (peer, mut opener) = match handshake::respond(&mut stream, &inb.key, inb.me, Instant::now() + inb.limits.handshake) {
        Ok(x) => x,
        Err(r) => return inb.refusals.refuse(&source, &r),
    };
    drop(pending);
    let _counted = match Authenticated::admit(&inb.open, peer.id, &inb.limits) {
        Ok(c) => c,
        Err(r) => return inb.refusals.refuse(&source, &r),
    };
    if let Err(r) = stream.set_read_timeout(Some(inb.limits.idle)) {
        return inb.refusals.refuse(&source, &Refused::new("io", r));
    }
    let mut incoming = snapshot_transfer::Incoming::default();
    loop {
        if inb.stopped.load(Ordering::SeqCst) {
            return;
        }
        if let Err(r) = read_frame(&mut stream, &mut opener, &peer, &inb, &mut incoming) {
            return inb.refusals.refuse(&source, &r);
        }
    }
}

fn io_refusal(e: std::io::Error) -> Refused {
    match e.kind() {
        ErrorKind::UnexpectedEof => Refused::closed(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut => Refused::new("io", "idle connection closed"),
        _ => Refused::new("io", e),
    }
}

/// Reads, opens, checks and hands on one frame of an authenticated connection from
/// `peer` (a snapshot part to the connection's transfer, `incoming`).
fn read_frame(stream: &mut TcpStream, opener: &mut Opener, who: &handshake::Peer, inb: &Inbound, incoming: &mut snapshot_transfer::Incoming) -> Result<(), Refused> {
    let peer = who.id;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).map_err(io_refusal)?;
    let n = u32::from_be_bytes(len) as usize;
    if !(MIN_BODY..=MAX_FRAME).contains(&n) {
        return Err(Refused::new("frame_too_large", format!("a frame of {n} bytes is outside {MIN_BODY}..={MAX_FRAME}")));
    }
    // The buffer grows with the bytes that arrived (each piece at most as large as what
    // is already there, and at least READ_PIECE), never to a length only declared.
    let mut body = Vec::new();
    while body.len() < n {
        let have = body.len();
        let want = (n - have).min(have.max(READ_PIECE));
        body.resize(have + want, 0);
        stream.read_exact(&mut body[have..]).map_err(io_refusal)?;
    }
    let f = opener.open(&body)?;
    if f.from != peer {
        return Err(Refused::new("sender_mismatch", format!("a frame claims member {} on member {peer}'s connection", f.from)));
    }
    if f.to != inb.me {
        return Err(Refused::new("wrong_recipient", format!("a frame for member {} reached member {}", f.to, inb.me)));
    }
    if matches!(f.kind, KIND_RAFT | KIND_SNAPSHOT) {
        member_now(who, inb)?;
    }
    match f.kind {
        KIND_RAFT => {
            let msg = Message::parse_from_bytes(f.body()).map_err(|e| Refused::new("bad_frame", format!("raft message does not decode: {e}")))?;
            if msg.from != peer || msg.to != inb.me {
                return Err(Refused::new("sender_mismatch", format!("a raft message from {} to {} on member {peer}'s connection", msg.from, msg.to)));
            }
            if msg.get_msg_type() == raft::eraftpb::MessageType::MsgPropose {
                proposed_by(&msg, peer)?;
            }
            (inb.deliver)(msg);
        }
        KIND_CONTROL => {
            let handler = inb.control.lock().unwrap_or_else(|p| p.into_inner()).clone();
            match handler {
                Some(h) => h(peer, &who.key, f.into_body()),
                None => tracing::debug!(from = peer, "control message with no handler dropped"),
            }
        }
        KIND_KEEPALIVE => {}
        KIND_SNAPSHOT => {
            let Some(inbox) = inb.snapshots.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
                return Err(Refused::new("snapshot_refused", "this node takes no snapshots"));
            };
            incoming.part(peer, f.body(), inbox.as_ref()).map_err(|e| Refused::new("snapshot_refused", format!("snapshot transfer refused: {e}")))?;
        }
        k => return Err(Refused::new("bad_frame", format!("unknown frame kind {k}"))),
    }
    Ok(())
}

/// Whether `who` is still admitted as a member (the applied key book and group may
/// have changed since its handshake: a removed member's connection closes here).
fn member_now(who: &handshake::Peer, inb: &Inbound) -> Result<(), Refused> {
    let now = if who.admission == Admission::Member { inb.key.peers.admits(who.id, &who.key)? } else { Admission::Joining };
    match now {
        Admission::Member => Ok(()),
        Admission::Joining => Err(Refused::new("not_a_member", format!("member {} is not in the cluster's applied membership: only the join path (control messages) is open to it", who.id))),
    }
}

/// Checks that every entry of a proposal forwarded by `peer` names `peer` as its
/// proposer (the state machine trusts the proposer a context names: a member records its
/// own key only, `halite_storage::state`'s `member_keys.rs`).
fn proposed_by(msg: &Message, peer: u64) -> Result<(), Refused> {
    for e in msg.get_entries() {
        match halite_storage::context::decode(&e.context) {
            Ok(None) => {}
            Ok(Some(c)) if c.proposer == peer => {}
            Ok(Some(c)) => return Err(Refused::new("proposer_mismatch", format!("member {peer} forwards a proposal of member {}", c.proposer))),
            Err(err) => return Err(Refused::new("bad_frame", format!("a forwarded proposal's context does not decode: {err}"))),
        }
    }
    Ok(())
}

