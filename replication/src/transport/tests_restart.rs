//! A peer that stops or restarts: its connections close with it, and the first message
//! sent to it afterwards reaches its new incarnation (an election among followers that
//! never spoke to the restarted member depends on that first message).

use super::*;
use raft::eraftpb::MessageType;
use std::sync::mpsc::Receiver as Rx;

fn msg(term: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgRequestPreVoteResponse);
    (m.from, m.to, m.term) = (1, 2, term);
    m
}

/// Member 2's transport on `addr`, and what it delivers.
fn member2_at(addr: SocketAddr) -> (Arc<TcpTransport>, Rx<Message>) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let t = TcpTransport::start(2, addr, HashMap::new(), ClusterKey::from_secret("s"), Arc::new(move |m| {
        let _ = tx.lock().unwrap().send(m);
    }))
    .unwrap();
    (t, rx)
}

#[test]
fn the_first_message_after_a_peer_restarted_reaches_the_new_incarnation() {
    let (b, rx) = member2_at("127.0.0.1:0".parse().unwrap());
    let addr = b.local_addr();
    let a = TcpTransport::start(1, "127.0.0.1:0".parse().unwrap(), [(2, addr)].into(), ClusterKey::from_secret("s"), Arc::new(|_| {})).unwrap();
    a.send(vec![msg(1)]);
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap().term, 1);
    // Member 2 stops and comes back at the same address; member 1's connection is the
    // old incarnation's. One message, sent once, must arrive.
    b.shutdown();
    let (b2, rx2) = member2_at(addr);
    a.send(vec![msg(2)]);
    let got = rx2.recv_timeout(Duration::from_secs(10)).expect("the first message after the restart is delivered");
    assert_eq!(got.term, 2);
    assert!(rx.try_recv().is_err(), "nothing went to the stopped incarnation");
    a.shutdown();
    b2.shutdown();
}

#[test]
fn a_stopped_transport_closes_its_inbound_connections() {
    let (b, rx) = member2_at("127.0.0.1:0".parse().unwrap());
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    let mut sealer = handshake::initiate(&mut s, &ClusterKey::from_secret("s").into(), 1, 2, Instant::now() + Duration::from_secs(10)).unwrap();
    s.write_all(&sealer.seal(KIND_RAFT, 1, 2, &msg(3).write_to_bytes().unwrap()).unwrap()).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap().term, 3, "the connection is being read");
    b.shutdown();
    // The peer sees the close (end of stream or reset), without sending anything.
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = [0u8; 64];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => {}
            Err(e) => break !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    };
    assert!(closed, "the connection was left open after shutdown");
}
