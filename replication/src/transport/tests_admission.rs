//! Admission by the applied key book, over real sockets: a peer that is no member may use
//! the join path (control messages) only; a member's connection is re-checked at every
//! raft frame, so a removed member's open connection is closed; a forwarded proposal must
//! name its forwarder as proposer; the book outranks a pin; a member with neither is
//! refused, and what a node held before it was a member is dropped once it is one.

use super::*;
use crate::testutil::wait_until;
use halite_storage::context::{self, EntryContext, ProposalId};
use raft::eraftpb::{Entry, MessageType};

/// Member 2 with the default limits, its raft and control messages (`tests.rs`).
fn member2() -> super::tests::Member2 {
    super::tests::member2(Limits::default())
}

/// A connection to `t` that completed the handshake as `me` with the process's key.
fn connect(t: &TcpTransport, me: u64) -> (TcpStream, Sealer) {
    let mut s = TcpStream::connect(t.local_addr()).unwrap();
    let sealer = handshake::initiate(&mut s, &ClusterKey::from_secret("s").into(), me, 2, Instant::now() + Duration::from_secs(10)).unwrap();
    (s, sealer)
}

fn raft(s: &mut TcpStream, sealer: &mut Sealer, m: Message) {
    let f = sealer.seal(KIND_RAFT, m.from, m.to, &m.write_to_bytes().unwrap()).unwrap();
    let _ = s.write_all(&f);
}

fn heartbeat(from: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgHeartbeat);
    (m.from, m.to, m.term) = (from, 2, 3);
    m
}

/// A forwarded proposal from `from` whose entry names `proposer`.
fn forward(from: u64, proposer: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgPropose);
    (m.from, m.to) = (from, 2);
    let mut e = Entry::default();
    e.context = context::encode(&EntryContext::proposal(ProposalId { proposer, incarnation: 1, seq: 1 }, 1, None)).into();
    m.mut_entries().push(e);
    m
}

fn process_key() -> [u8; identity::PUBLIC_LEN] {
    Credentials::from(ClusterKey::from_secret("s")).member.public()
}

#[test]
fn the_applied_book_decides_who_may_speak_and_how() {
    let (b, rx, crx) = member2();
    let timeout = Duration::from_secs(10);
    // Members 2 and 7; the book holds no key yet.
    b.peer_keys().set_applied(Default::default(), [2, 7].into(), true);

    // 8 is no member: its join-path control message is delivered, a raft message is
    // refused and closes the connection.
    let (mut s, mut sealer) = connect(&b, 8);
    let f = sealer.seal(KIND_CONTROL, 8, 2, b"{\"t\":\"join\"}").unwrap();
    s.write_all(&f).unwrap();
    assert_eq!(crx.recv_timeout(timeout).unwrap().0, 8);
    raft(&mut s, &mut sealer, heartbeat(8));
    wait_until("the non-member's raft frame refused", 10, || b.refused("not_a_member") == 1);
    assert!(rx.try_recv().is_err(), "nothing from a non-member reaches raft");

    // 7 is a member without a key in the book: admitted under the key pinned for it (this
    // process's, `From<ClusterKey>`). Its own forwarded proposal is delivered; one naming
    // another proposer is refused.
    let (mut s, mut sealer) = connect(&b, 7);
    raft(&mut s, &mut sealer, forward(7, 7));
    assert_eq!(rx.recv_timeout(timeout).unwrap().get_msg_type(), MessageType::MsgPropose);
    raft(&mut s, &mut sealer, forward(7, 9));
    wait_until("the forged proposer refused", 10, || b.refused("proposer_mismatch") == 1);
    assert!(rx.try_recv().is_err());

    // The book names another key for 7: the book outranks the pin, so the pinned key no
    // longer opens a session.
    b.peer_keys().set_applied([(7, [0x42; 32])].into(), [2, 7].into(), true);
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    let _ = handshake::initiate(&mut s, &ClusterKey::from_secret("s").into(), 7, 2, Instant::now() + timeout);
    wait_until("the key the book does not hold refused", 10, || b.refused("peer_key_mismatch") == 1);

    // With its key in the book, 7 speaks; once it is removed (the book and the group no
    // longer name it), its open connection is closed at the next raft frame.
    b.peer_keys().set_applied([(7, process_key())].into(), [2, 7].into(), true);
    let (mut s, mut sealer) = connect(&b, 7);
    raft(&mut s, &mut sealer, heartbeat(7));
    assert_eq!(rx.recv_timeout(timeout).unwrap().from, 7);
    b.peer_keys().set_applied(Default::default(), [2].into(), true);
    raft(&mut s, &mut sealer, heartbeat(7));
    wait_until("the removed member's frame refused", 10, || b.refused("not_a_member") == 2);
    assert!(rx.try_recv().is_err(), "nothing from a removed member reaches raft");
    b.shutdown();
}

/// This process's credentials with nothing pinned (so they accept a responder with a key
/// of its own).
fn unpinned() -> Credentials {
    let mut c: Credentials = ClusterKey::from_secret("s").into();
    c.peers = Arc::default();
    c
}

/// [`connect`] with [`unpinned`] credentials.
fn connect_unpinned(t: &TcpTransport, me: u64) -> (TcpStream, Sealer) {
    let mut s = TcpStream::connect(t.local_addr()).unwrap();
    let sealer = handshake::initiate(&mut s, &unpinned(), me, 2, Instant::now() + Duration::from_secs(10)).unwrap();
    (s, sealer)
}

/// Member 2 with a key of its own and nothing pinned (`require_pins`: pins required),
/// the raft messages it is given.
fn unpinned_member2(require_pins: bool) -> (Arc<PeerKeys>, Arc<TcpTransport>, mpsc::Receiver<Message>) {
    let peers = Arc::new(PeerKeys::default());
    if require_pins {
        peers.require_pins();
    }
    let creds = Credentials::new(ClusterKey::from_secret("s"), MemberKey::generate().unwrap(), peers.clone());
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let b = TcpTransport::start(2, "127.0.0.1:0".parse().unwrap(), HashMap::new(), creds, Arc::new(move |m| {
        let _ = tx.lock().unwrap().send(m);
    }))
    .unwrap();
    (peers, b, rx)
}

#[test]
fn a_founder_with_no_key_in_the_book_is_held_to_the_first_key_that_proves_the_secret() {
    // Member 2, nothing pinned, pins not required (the default): founders 2 and 7, the
    // book holds no key yet.
    let (peers, b, rx) = unpinned_member2(false);
    let _held = connect_unpinned(&b, 5);
    wait_until("5 held before the membership", 10, || peers.bound(5) == Some(process_key()));
    peers.set_applied(Default::default(), [2, 7].into(), true);
    assert_eq!(peers.bound(5), None, "5 is no member: what was held for it is dropped");

    // 7's first handshake is admitted and its key held; its raft frames are delivered.
    let (mut s, mut sealer) = connect_unpinned(&b, 7);
    raft(&mut s, &mut sealer, heartbeat(7));
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap().from, 7);
    assert_eq!(peers.bound(7), Some(process_key()));
    // Another key under 7 is refused while the first is held.
    let other = Credentials::new(ClusterKey::from_secret("s"), MemberKey::generate().unwrap(), Arc::default());
    let mut s2 = TcpStream::connect(b.local_addr()).unwrap();
    let _ = handshake::initiate(&mut s2, &other, 7, 2, Instant::now() + Duration::from_secs(10));
    wait_until("a second key under 7 refused", 10, || b.refused("peer_key_mismatch") == 1);
    // A new applied state that still lacks 7's key keeps what is held.
    peers.set_applied(Default::default(), [2, 7].into(), true);
    assert_eq!(peers.bound(7), Some(process_key()));

    // The book decides once it names 7: here another key than the one held (the log
    // outranks a first contact), so the held key's open connection is closed at its next
    // raft frame and the book's key is the one admitted.
    peers.set_applied([(7, other.member.public())].into(), [2, 7].into(), true);
    raft(&mut s, &mut sealer, heartbeat(7));
    wait_until("the held key's connection refused", 10, || b.refused("peer_key_mismatch") == 2);
    let mut s3 = TcpStream::connect(b.local_addr()).unwrap();
    let mut sealer3 = handshake::initiate(&mut s3, &other, 7, 2, Instant::now() + Duration::from_secs(10)).unwrap();
    raft(&mut s3, &mut sealer3, heartbeat(7));
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap().from, 7);
    assert!(rx.try_recv().is_err());
    b.shutdown();
}

#[test]
fn with_pins_required_a_member_with_no_key_in_the_book_and_none_pinned_is_never_bound_by_a_first_handshake() {
    // Member 2 with a key of its own and nothing pinned (a founder whose founding
    // configuration lacks member 7's key), pins required.
    let (peers, b, rx) = unpinned_member2(true);
    // Before it is a member (before its node starts), a peer under 5 is held in memory
    // only: its key speaks for 5 until this node is a member.
    let _held = connect_unpinned(&b, 5);
    wait_until("5 held", 10, || peers.bound(5) == Some(process_key()));

    // A member now, of a group of 2 and 7 (and 5): every key held before is dropped, and
    // 7, a member the book holds no key for and nothing is pinned for, is refused at
    // every handshake, the first included, with whatever key.
    peers.set_applied(Default::default(), [2, 5, 7].into(), true);
    assert_eq!(peers.bound(5), None, "nothing held from before the membership");
    for _ in 0..2 {
        let mut s = TcpStream::connect(b.local_addr()).unwrap();
        let _ = handshake::initiate(&mut s, &unpinned(), 7, 2, Instant::now() + Duration::from_secs(10));
    }
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    let other = Credentials::new(ClusterKey::from_secret("s"), MemberKey::generate().unwrap(), Arc::default());
    let _ = handshake::initiate(&mut s, &other, 7, 2, Instant::now() + Duration::from_secs(10));
    wait_until("every handshake under 7 refused", 10, || b.refused("peer_key_unknown") == 3);
    assert_eq!(peers.bound(7), None, "no handshake bound 7");
    // So was 5 (held before): its next handshake is refused the same way.
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    let _ = handshake::initiate(&mut s, &unpinned(), 5, 2, Instant::now() + Duration::from_secs(10));
    wait_until("5 refused once a member", 10, || b.refused("peer_key_unknown") == 4);

    // Once pinned (the operator provisioned its key), 7 is admitted under that key only.
    peers.pin(7, process_key());
    let (mut s, mut sealer) = connect_unpinned(&b, 7);
    raft(&mut s, &mut sealer, heartbeat(7));
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap().from, 7);
    b.shutdown();
}
