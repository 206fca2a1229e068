//! The transport over real sockets: what travels, and what a holder of captured bytes,
//! of the wrong secret, of a silent socket or of many sockets cannot do.

use super::*;
use crate::testutil::wait_until;
use raft::eraftpb::MessageType;
use std::sync::mpsc::Receiver as Rx;

fn msg(from: u64, to: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgHeartbeat);
    m.from = from;
    m.to = to;
    m.term = 7;
    m
}

fn any() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Member 2's transport, the raft messages and the control messages it got.
pub(super) type Member2 = (Arc<TcpTransport>, Rx<Message>, Rx<(u64, Vec<u8>)>);

/// Member 2 with `limits`.
pub(super) fn member2(limits: Limits) -> Member2 {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let t = TcpTransport::start_with(2, any(), HashMap::new(), ClusterKey::from_secret("s"), Arc::new(move |m| {
        let _ = tx.lock().unwrap().send(m);
    }), limits)
    .unwrap();
    let (ctx, crx) = mpsc::channel();
    let ctx = Mutex::new(ctx);
    t.on_control(Arc::new(move |from, body| {
        let _ = ctx.lock().unwrap().send((from, body));
    }));
    (t, rx, crx)
}

/// A raw connection to `t` that completed the handshake as member `me`.
fn signed_in(t: &TcpTransport, me: u64, secret: &str) -> (TcpStream, Sealer) {
    let mut s = TcpStream::connect(t.local_addr()).unwrap();
    let sealer = handshake::initiate(&mut s, &ClusterKey::from_secret(secret).into(), me, 2, Instant::now() + Duration::from_secs(10)).unwrap();
    (s, sealer)
}

/// Credentials with a member key of their own (not the process's) and `pinned` bound.
fn own_key(secret: &str, pinned: &[(u64, [u8; identity::PUBLIC_LEN])]) -> Credentials {
    let peers = Arc::new(PeerKeys::default());
    for (id, k) in pinned {
        peers.pin(*id, *k);
    }
    Credentials::new(ClusterKey::from_secret(secret), MemberKey::generate().unwrap(), peers)
}

/// The process's member key (what [`signed_in`] and `From<ClusterKey>` present).
fn process_key() -> [u8; identity::PUBLIC_LEN] {
    Credentials::from(ClusterKey::from_secret("s")).member.public()
}

/// True once `s` is closed by the other side (reads see EOF or a reset; whatever the
/// other side said before, such as its half of the handshake, is skipped).
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) => return !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    }
}

#[test]
fn messages_travel_between_two_transports_over_tcp() {
    let (b, rx, _) = member2(Limits::default());
    let a = TcpTransport::start(1, any(), [(2, b.local_addr())].into(), ClusterKey::from_secret("s"), Arc::new(|_| {})).unwrap();
    a.send(vec![msg(1, 2), msg(1, 2)]);
    let got = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!((got.from, got.to, got.term), (1, 2, 7));
    assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok());
    // A sender with another secret finds that member 2 does not prove the cluster key.
    let c = TcpTransport::start(3, any(), [(2, b.local_addr())].into(), ClusterKey::from_secret("wrong"), Arc::new(|_| {})).unwrap();
    wait_until("the wrong secret is refused at both ends", 10, || {
        c.send(vec![msg(3, 2)]);
        std::thread::sleep(Duration::from_millis(50));
        c.refused("bad_proof") > 0 && b.refused("bad_proof") > 0
    });
    assert!(rx.try_recv().is_err(), "nothing from the wrong secret is delivered");
    for t in [a, b, c] {
        t.shutdown();
    }
}

#[test]
fn a_wrong_proof_fails_the_handshake_and_a_wrong_member_is_not_spoken_to() {
    let (b, rx, crx) = member2(Limits::default());
    // A hello, then a proof that is not derived from the cluster key.
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    let mut hello = [0u8; handshake::HELLO_LEN];
    hello[..4].copy_from_slice(b"HLP3");
    hello[11] = 1;
    s.write_all(&hello).unwrap();
    s.write_all(&[0u8; handshake::PROVE_LEN]).unwrap();
    wait_until("the bad proof is refused", 10, || b.refused("bad_proof") == 1);
    assert!(closed(&mut s));
    // A hello of another peer protocol: refused as such.
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    let mut other = hello;
    other[3] = b'4';
    s.write_all(&other).unwrap();
    wait_until("the other protocol is refused", 10, || b.refused("peer_version") == 1);
    assert!(closed(&mut s));
    // Not a hello at all.
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    s.write_all(&[b'G'; handshake::HELLO_LEN]).unwrap();
    wait_until("the bad hello is refused", 10, || b.refused("bad_hello") == 1);
    assert!(closed(&mut s));
    // The initiator checks who answers: member 2 is not member 5.
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    let r = handshake::initiate(&mut s, &ClusterKey::from_secret("s").into(), 1, 5, Instant::now() + Duration::from_secs(10));
    assert_eq!(r.err().map(|r| r.reason), Some("wrong_peer"));
    assert!(rx.try_recv().is_err() && crx.try_recv().is_err());
    b.shutdown();
}

/// Forwards one connection from its own port to `to`, recording what the client sent.
fn recording_proxy(to: SocketAddr) -> (SocketAddr, Rx<Vec<u8>>) {
    tampering_proxy(to, None)
}

/// [`recording_proxy`], flipping the lowest bit of the client's byte at `flip` on the way.
fn tampering_proxy(to: SocketAddr, flip: Option<usize>) -> (SocketAddr, Rx<Vec<u8>>) {
    let l = TcpListener::bind(any()).unwrap();
    let at = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut client, _) = l.accept().unwrap();
        let mut server = TcpStream::connect(to).unwrap();
        let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut s2, &mut c2);
            // The server closed: so does the client's side.
            let _ = c2.shutdown(std::net::Shutdown::Both);
        });
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match client.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let at = seen.len();
                    seen.extend_from_slice(&buf[..n]);
                    if let Some(f) = flip.filter(|f| (at..at + n).contains(f)) {
                        buf[f - at] ^= 1;
                    }
                    let _ = server.write_all(&buf[..n]);
                }
            }
        }
        let _ = server.shutdown(std::net::Shutdown::Both);
        let _ = tx.send(seen);
    });
    (at, rx)
}

#[test]
fn captured_bytes_replayed_on_a_new_connection_deliver_nothing() {
    let (b, _rx, crx) = member2(Limits::default());
    let a = TcpTransport::start(1, any(), HashMap::new(), ClusterKey::from_secret("s"), Arc::new(|_| {})).unwrap();
    let (proxy, captured) = recording_proxy(b.local_addr());
    a.send_control(2, proxy, b"join: member 1");
    assert_eq!(crx.recv_timeout(Duration::from_secs(10)).unwrap(), (1, b"join: member 1".to_vec()));
    let bytes = captured.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(bytes.len() > handshake::HELLO_LEN + handshake::PROVE_LEN, "the capture holds the handshake and the frame");
    // The whole capture again: the proof was for the other connection's nonces.
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    s.write_all(&bytes).unwrap();
    wait_until("the replayed handshake is refused", 10, || b.refused("bad_proof") == 1);
    assert!(closed(&mut s));
    // The captured frame after a handshake of its own: another key.
    let frame = &bytes[handshake::HELLO_LEN + handshake::PROVE_LEN..];
    let (mut s, _) = signed_in(&b, 1, "s");
    s.write_all(frame).unwrap();
    wait_until("the replayed frame is refused", 10, || b.refused("bad_tag") == 1);
    assert!(closed(&mut s));
    assert!(crx.try_recv().is_err(), "nothing replayed is delivered");
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_frame_sent_again_on_its_connection_is_refused() {
    let (b, rx, crx) = member2(Limits::default());
    let (mut s, mut sealer) = signed_in(&b, 1, "s");
    let f0 = sealer.seal(KIND_CONTROL, 1, 2, b"once").unwrap();
    s.write_all(&f0).unwrap();
    assert_eq!(crx.recv_timeout(Duration::from_secs(10)).unwrap(), (1, b"once".to_vec()));
    s.write_all(&f0).unwrap();
    wait_until("the frame sent again is refused", 10, || b.refused("replayed") == 1);
    assert!(closed(&mut s));
    assert!(crx.try_recv().is_err() && rx.try_recv().is_err(), "delivered once only");
    b.shutdown();
}

#[test]
fn a_connection_speaks_only_for_the_member_that_signed_in() {
    let (b, rx, crx) = member2(Limits::default());
    // Member 3 claims to be member 1 (the leader, say) in a control frame...
    let (mut s, mut sealer) = signed_in(&b, 3, "s");
    s.write_all(&sealer.seal(KIND_CONTROL, 1, 2, b"join").unwrap()).unwrap();
    wait_until("the claimed sender is refused", 10, || b.refused("sender_mismatch") == 1);
    assert!(closed(&mut s));
    // ... and in a raft message inside its own frame.
    let (mut s, mut sealer) = signed_in(&b, 3, "s");
    s.write_all(&sealer.seal(KIND_RAFT, 3, 2, &msg(1, 2).write_to_bytes().unwrap()).unwrap()).unwrap();
    wait_until("the raft message's sender is refused", 10, || b.refused("sender_mismatch") == 2);
    assert!(closed(&mut s));
    // Its own id passes.
    let (mut s, mut sealer) = signed_in(&b, 3, "s");
    s.write_all(&sealer.seal(KIND_RAFT, 3, 2, &msg(3, 2).write_to_bytes().unwrap()).unwrap()).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap().from, 3);
    assert!(crx.try_recv().is_err() && rx.try_recv().is_err());
    b.shutdown();
}

#[test]
fn a_declared_length_past_the_bound_closes_the_connection() {
    let (b, rx, _) = member2(Limits::default());
    let (mut s, _) = signed_in(&b, 1, "s");
    s.write_all(&u32::MAX.to_be_bytes()).unwrap();
    wait_until("the huge frame is refused", 10, || b.refused("frame_too_large") == 1);
    assert!(closed(&mut s));
    let (mut s, _) = signed_in(&b, 1, "s");
    s.write_all(&((MAX_FRAME + 1) as u32).to_be_bytes()).unwrap();
    wait_until("the frame past MAX_FRAME is refused", 10, || b.refused("frame_too_large") == 2);
    assert!(closed(&mut s));
    assert!(rx.try_recv().is_err());
    b.shutdown();
}

#[test]
fn connections_past_the_unauthenticated_cap_are_closed() {
    let limits = Limits { max_unauthenticated: 3, handshake: Duration::from_secs(600), ..Limits::default() };
    let (b, _rx, crx) = member2(limits);
    let silent: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(b.local_addr()).unwrap()).collect();
    let mut fourth = TcpStream::connect(b.local_addr()).unwrap();
    wait_until("the fourth connection is refused", 10, || b.refused("too_many_unauthenticated") == 1);
    assert!(closed(&mut fourth));
    // Once the silent ones go, a member signs in again.
    drop(silent);
    wait_until("a member is served again", 10, || {
        let Ok(mut s) = TcpStream::connect(b.local_addr()) else { return false };
        let Ok(mut sealer) = handshake::initiate(&mut s, &ClusterKey::from_secret("s").into(), 1, 2, Instant::now() + Duration::from_secs(5)) else { return false };
        s.write_all(&sealer.seal(KIND_CONTROL, 1, 2, b"back").unwrap()).is_ok() && crx.recv_timeout(Duration::from_secs(5)).is_ok_and(|(_, b)| b == b"back")
    });
    b.shutdown();
}

#[test]
fn a_silent_or_slow_handshake_is_closed_after_the_timeout() {
    let limits = Limits { handshake: Duration::from_millis(300), ..Limits::default() };
    let (b, _rx, _) = member2(limits);
    let mut silent = TcpStream::connect(b.local_addr()).unwrap();
    assert!(closed(&mut silent));
    wait_until("the silent connection is counted", 10, || b.refused("handshake_timeout") == 1);
    // A byte at a time, each well within the timeout, still runs out of time in total.
    let mut slow = TcpStream::connect(b.local_addr()).unwrap();
    for _ in 0..handshake::HELLO_LEN {
        if slow.write_all(b"H").is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(closed(&mut slow));
    wait_until("the slow connection is counted", 10, || b.refused("handshake_timeout") == 2);
    b.shutdown();
}

#[test]
fn an_idle_writer_keeps_its_connection_and_a_silent_one_loses_it() {
    let limits = Limits { idle: Duration::from_millis(600), keepalive: Duration::from_millis(100), ..Limits::default() };
    let (b, rx, _) = member2(limits);
    let a = TcpTransport::start_with(1, any(), [(2, b.local_addr())].into(), ClusterKey::from_secret("s"), Arc::new(|_| {}), limits).unwrap();
    a.send(vec![msg(1, 2)]);
    assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok());
    // Idle for several idle timeouts: keepalives hold the connection, the next message
    // arrives on it (the idle time is the behaviour under test, not a wait for a signal).
    std::thread::sleep(Duration::from_millis(2000));
    a.send(vec![msg(1, 2)]);
    assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok());
    // A signed-in connection that says nothing is closed.
    let (mut s, _) = signed_in(&b, 1, "s");
    assert!(closed(&mut s));
    a.shutdown();
    b.shutdown();
}

/// Figures for `docs/benchmarks.md`, not a check:
/// `cargo test -p halite-replication --release --lib transport::tests::measure -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement; run it by name with --ignored --nocapture"]
fn measure_handshakes_and_frames() {
    let (b, rx, _) = member2(Limits::default());
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        drop(signed_in(&b, 1, "s"));
    }
    let hs = t.elapsed();
    let frames = 200_000;
    let (mut s, mut sealer) = signed_in(&b, 1, "s");
    let body = msg(1, 2).write_to_bytes().unwrap();
    let t = Instant::now();
    let writer = std::thread::spawn(move || {
        for _ in 0..frames {
            s.write_all(&sealer.seal(KIND_RAFT, 1, 2, &body).unwrap()).unwrap();
        }
        s
    });
    for _ in 0..frames {
        rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }
    let fr = t.elapsed();
    drop(writer.join());
    println!("{n} handshakes in {hs:?} ({:.0}/s); {frames} heartbeat frames delivered in {fr:?} ({:.0}/s)", n as f64 / hs.as_secs_f64(), frames as f64 / fr.as_secs_f64());
    b.shutdown();
}

#[test]
fn a_secret_holder_without_the_member_key_cannot_speak_as_that_member() {
    let (b, rx, crx) = member2(Limits::default());
    // Member 1 signs in with its key (the one pinned for it).
    let (mut s, mut sealer) = signed_in(&b, 1, "s");
    s.write_all(&sealer.seal(KIND_CONTROL, 1, 2, b"real").unwrap()).unwrap();
    assert_eq!(crx.recv_timeout(Duration::from_secs(10)).unwrap(), (1, b"real".to_vec()));
    // Another process holds the cluster secret and claims member 1 with its own key.
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    let impostor = own_key("s", &[]);
    let mut sealer = handshake::initiate(&mut s, &impostor, 1, 2, Instant::now() + Duration::from_secs(10)).expect("member 2 itself proves the secret");
    let _ = s.write_all(&sealer.seal(KIND_CONTROL, 1, 2, b"forged").unwrap());
    wait_until("the impostor is refused", 10, || b.refused("peer_key_mismatch") == 1);
    assert!(closed(&mut s));
    // Through a whole transport too (raft messages claiming member 1).
    let t = TcpTransport::start(1, any(), [(2, b.local_addr())].into(), own_key("s", &[]), Arc::new(|_| {})).unwrap();
    wait_until("the impostor transport is refused", 10, || {
        t.send(vec![msg(1, 2)]);
        std::thread::sleep(Duration::from_millis(50));
        b.refused("peer_key_mismatch") >= 2
    });
    t.shutdown();
    assert!(rx.try_recv().is_err() && crx.try_recv().is_err(), "nothing of the impostor's is delivered");
    // The real member 1 still is.
    let (mut s, mut sealer) = signed_in(&b, 1, "s");
    s.write_all(&sealer.seal(KIND_CONTROL, 1, 2, b"still").unwrap()).unwrap();
    assert_eq!(crx.recv_timeout(Duration::from_secs(10)).unwrap(), (1, b"still".to_vec()));
    b.shutdown();
}

#[test]
fn keys_pinned_in_advance_bind_on_both_sides() {
    // Member 2 knows member 1's key before anyone connects: a first comer with another
    // key under id 1 is refused; member 1's own key passes.
    let real = own_key("s", &[]);
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let b = TcpTransport::start(2, any(), HashMap::new(), own_key("s", &[(1, real.member.public())]), Arc::new(move |m| {
        let _ = tx.lock().unwrap().send(m);
    }))
    .unwrap();
    let first = TcpTransport::start(1, any(), [(2, b.local_addr())].into(), own_key("s", &[]), Arc::new(|_| {})).unwrap();
    wait_until("the unpinned key is refused", 10, || {
        first.send(vec![msg(1, 2)]);
        std::thread::sleep(Duration::from_millis(50));
        b.refused("peer_key_mismatch") >= 1
    });
    first.shutdown();
    assert!(rx.try_recv().is_err());
    let a = TcpTransport::start(1, any(), [(2, b.local_addr())].into(), real.clone(), Arc::new(|_| {})).unwrap();
    a.send(vec![msg(1, 2)]);
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap().from, 1);
    // The initiator checks the responder the same way: a connecting side that has
    // member 2 bound to another key refuses it.
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    let wrong = own_key("s", &[(2, process_key())]);
    let r = handshake::initiate(&mut s, &wrong, 5, 2, Instant::now() + Duration::from_secs(10));
    assert_eq!(r.err().map(|r| r.reason), Some("peer_key_mismatch"));
    // Member 1 bound member 2 to the key member 2 presented.
    assert_eq!(real.peers.bound(2), Some(b.key.member.public()));
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_signature_that_does_not_match_the_transcript_fails_the_handshake() {
    // Member 2 before it is a member, nothing pinned: a handshake would hold a key for
    // the id it names.
    let b = TcpTransport::start(2, any(), HashMap::new(), own_key("s", &[]), Arc::new(|_| {})).unwrap();
    let (ctx, crx) = mpsc::channel();
    let ctx = Mutex::new(ctx);
    b.on_control(Arc::new(move |from, body| {
        let _ = ctx.lock().unwrap().send((from, body));
    }));
    // A bit of the initiator's signature flipped on the way: its proof is right, its
    // signature is not.
    let (proxy, _) = tampering_proxy(b.local_addr(), Some(handshake::HELLO_LEN + handshake::PROOF_LEN + 5));
    let mut s = TcpStream::connect(proxy).unwrap();
    let _ = handshake::initiate(&mut s, &own_key("s", &[]), 4, 2, Instant::now() + Duration::from_secs(10));
    wait_until("the bad signature is refused", 10, || b.refused("bad_signature") == 1);
    assert!(closed(&mut s));
    // Nothing was held for member 4 by it: another key signs in afterwards.
    assert_eq!(b.peer_keys().bound(4), None);
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    let mut sealer = handshake::initiate(&mut s, &own_key("s", &[]), 4, 2, Instant::now() + Duration::from_secs(10)).unwrap();
    s.write_all(&sealer.seal(KIND_CONTROL, 4, 2, b"ok").unwrap()).unwrap();
    assert_eq!(crx.recv_timeout(Duration::from_secs(10)).unwrap(), (4, b"ok".to_vec()));
    b.shutdown();
}

#[test]
fn authenticated_connections_are_capped_per_member_and_in_all() {
    let limits = Limits { max_per_peer: 2, max_authenticated: 3, ..Limits::default() };
    let (b, _rx, crx) = member2(limits);
    let open = |me: u64| {
        let (mut s, mut sealer) = signed_in(&b, me, "s");
        let _ = s.write_all(&sealer.seal(KIND_CONTROL, me, 2, b"hi").unwrap());
        s
    };
    let mut held = vec![open(1), open(1)];
    for _ in 0..2 {
        assert_eq!(crx.recv_timeout(Duration::from_secs(10)).unwrap().0, 1);
    }
    // A third of member 1: past the per-member cap.
    let mut third = open(1);
    wait_until("member 1's third connection is refused", 10, || b.refused("too_many_connections") == 1);
    assert!(closed(&mut third));
    // Member 3's first fits; member 4's would be the fourth in all.
    held.push(open(3));
    assert_eq!(crx.recv_timeout(Duration::from_secs(10)).unwrap().0, 3);
    let mut fourth = open(4);
    wait_until("the fourth connection in all is refused", 10, || b.refused("too_many_connections") == 2);
    assert!(closed(&mut fourth));
    assert!(crx.try_recv().is_err(), "nothing from the refused connections is delivered");
    // Closing one frees its place.
    drop(held.remove(0));
    wait_until("member 4 is served once a place is free", 10, || {
        let _s = open(4);
        crx.recv_timeout(Duration::from_millis(500)).is_ok_and(|(from, _)| from == 4)
    });
    b.shutdown();
}
