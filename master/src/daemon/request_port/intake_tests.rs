//! The intake over real TCP connections: peers that send a request and close while every
//! permit is taken have their connections closed by the master, and once permits come
//! back their requests are dropped unhandled (their senders are gone) while a connected
//! peer's request starts; and a return queued behind a storm of sign-ins starts next but
//! one, by its class's share (in FIFO mode it starts last).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use zeromq::Socket;

use crate::metrics::ClassLabel;

use super::*;

/// A ZMTP 3.0 greeting with the NULL mechanism, as a client.
fn greeting() -> Vec<u8> {
    let mut g = vec![0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0];
    let mut mechanism = b"NULL".to_vec();
    mechanism.resize(20, 0);
    g.extend(mechanism);
    g.push(0);
    g.resize(64, 0);
    g
}

/// The `READY` command of a DEALER, then one message frame of `body`.
fn ready_and_request(body: &[u8]) -> Vec<u8> {
    let mut cmd = vec![5];
    cmd.extend(b"READY");
    cmd.push(11);
    cmd.extend(b"Socket-Type");
    cmd.extend(6u32.to_be_bytes());
    cmd.extend(b"DEALER");
    let mut out = vec![0x04, cmd.len() as u8];
    out.extend(cmd);
    out.extend([0x00, body.len() as u8]);
    out.extend(body);
    out
}

/// A peer that signs on, sends one request and closes its side cleanly (a FIN: every
/// byte the server sent has been read, so the close is not a reset).
fn request_and_close(port: u16, body: &[u8]) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.write_all(&greeting()).expect("greeting");
    let mut theirs = [0u8; 64];
    c.read_exact(&mut theirs).expect("the server's greeting");
    c.write_all(&ready_and_request(body)).expect("request");
    let mut header = [0u8; 2];
    c.read_exact(&mut header).expect("the server's READY header");
    let mut ready = vec![0u8; header[1] as usize];
    c.read_exact(&mut ready).expect("the server's READY");
    c.shutdown(Shutdown::Both).expect("close");
}

/// Server-side connections of the listener on `port` still open (established, or
/// closed by the peer and not yet by the server: `CLOSE_WAIT`), from /proc/net/tcp.
fn open_server_connections(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let local = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() > 3 && cols[1].ends_with(&local) && (cols[3] == "01" || cols[3] == "08")
        })
        .count()
}

/// Polls `cond` every 50 ms until it holds or `deadline` passes (a generous bound, not a
/// timing: the test asserts the condition, not how soon).
async fn eventually(deadline: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

#[test]
fn closed_connections_are_dropped_while_every_permit_is_taken() {
    const PEERS: usize = 200;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut sock = zeromq::RouterSocket::new();
        let ep = sock.bind("tcp://127.0.0.1:0").await.expect("bind");
        let zeromq::Endpoint::Tcp(_, port) = ep else { panic!("a TCP endpoint: {ep}") };
        let (send, recv) = sock.split();
        let present = move |m: &ZmqMessage| m.get(0).is_some_and(|id| send.has_peer(id));
        // Saturated: the only permit is held by the test.
        let in_flight = Arc::new(Semaphore::new(1));
        let held = in_flight.clone().acquire_owned().await.unwrap();
        let limits = Limits { in_flight, budget: Budget::new(1 << 20), fifo: false };
        let started = Arc::new(AtomicUsize::new(0));
        let count = started.clone();
        let start = move |msg: ZmqMessage, _opened: super::Opened, permit, charge| {
            let count = count.clone();
            async move {
                assert!(msg.get(1).is_some_and(|b| b.starts_with(b"request ")), "the request as sent: {msg:?}");
                count.fetch_add(1, Ordering::SeqCst);
                drop((permit, charge));
            }
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let intake = tokio::spawn(run(
            recv,
            limits,
            |_: &ZmqMessage| (Class::Other, None),
            start,
            async move {
                let _ = stop_rx.await;
            },
            present,
        ));

        let clients = tokio::task::spawn_blocking(move || {
            for i in 0..PEERS {
                request_and_close(port, format!("request {i}").as_bytes());
            }
        });
        clients.await.expect("the clients ran");

        // Every peer closed; the master notices and closes its side, though no request
        // can start.
        let closed = eventually(Duration::from_secs(60), || open_server_connections(port) == 0).await;
        assert!(closed, "{} connections still open on the master's side", open_server_connections(port));
        assert_eq!(started.load(Ordering::SeqCst), 0, "nothing started while the permit is held");

        // Once the permit comes back, every one of those requests is dropped unhandled:
        // its sender is gone. Each is counted.
        let gone_before = peer_gone_counted();
        drop(held);
        let dropped = eventually(Duration::from_secs(60), || peer_gone_counted() - gone_before >= PEERS as u64).await;
        assert!(dropped, "{} of {PEERS} requests of departed peers dropped", peer_gone_counted() - gone_before);
        assert_eq!(started.load(Ordering::SeqCst), 0, "no request of a departed peer started");

        // A peer that stays connected is served.
        let mut dealer = zeromq::DealerSocket::new();
        dealer.connect(&format!("tcp://127.0.0.1:{port}")).await.expect("connect");
        zeromq::SocketSend::send(&mut dealer, ZmqMessage::from("request live")).await.expect("send");
        let served = eventually(Duration::from_secs(60), || started.load(Ordering::SeqCst) == 1).await;
        assert!(served, "the connected peer's request started");
        let _ = stop_tx.send(());
        intake.await.expect("the intake ends when stopped");
    });
}

/// `halite_refused_total{port="request",reason="peer_gone"}` so far (only this test
/// module makes that reason).
fn peer_gone_counted() -> u64 {
    crate::metrics::metrics().refused.get_or_create(&crate::metrics::RefusedLabels { port: "request".into(), reason: "peer_gone".into() }).get()
}

#[test]
fn a_waiting_request_holds_its_own_bytes_only() {
    // A frame read into a large buffer shares it; the waiting copy does not. The routing
    // identity (the socket's own) is kept, not copied.
    let big = Bytes::from(vec![1u8; 65_536]);
    let id = Bytes::from(b"id".to_vec());
    let msg = ZmqMessage::try_from(vec![id.clone(), big.slice(0..100)]).unwrap();
    let c = compact(msg);
    assert_eq!(c.len(), 2);
    assert_eq!(c.get(1).unwrap().as_ref(), &[1u8; 100][..]);
    assert_eq!(c.get(0).unwrap().as_ref(), b"id");
    assert_eq!(c.get(0).unwrap().as_ptr(), id.as_ptr(), "the identity is the socket's own, not a copy");
    let (copy, shared) = (c.get(1).unwrap().as_ptr() as usize, big.as_ptr() as usize);
    assert!(copy < shared || copy >= shared + big.len(), "the copy is not inside the read buffer");
}

/// `halite_request_waiting{class}` now (only this test queues sign-ins and returns in
/// this test binary's intakes).
fn waiting(class: Class) -> i64 {
    crate::metrics::metrics().request_waiting.get_or_create(&ClassLabel { class: class.as_str() }).get()
}

#[test]
fn a_return_queued_behind_a_storm_of_sign_ins_starts_among_the_first() {
    const SIGN_INS: usize = 50;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut sock = zeromq::RouterSocket::new();
        let ep = sock.bind("tcp://127.0.0.1:0").await.expect("bind");
        let (send, recv) = sock.split();
        let present = move |m: &ZmqMessage| m.get(0).is_some_and(|id| send.has_peer(id));
        // One permit, held by the test while the requests queue up.
        let in_flight = Arc::new(Semaphore::new(1));
        let held = in_flight.clone().acquire_owned().await.unwrap();
        let limits = Limits { in_flight, budget: Budget::new(1 << 20), fifo: false };
        let classify = |m: &ZmqMessage| {
            let class = match m.get(1).map(|b| b.as_ref()) {
                Some(b) if b.starts_with(b"sign-in") => Class::SignIn,
                Some(b) if b.starts_with(b"return") => Class::Return,
                _ => Class::Other,
            };
            (class, None)
        };
        let order = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen = order.clone();
        let start = move |msg: ZmqMessage, _opened: super::Opened, permit: Permit, charge| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(String::from_utf8_lossy(msg.get(1).map(|b| b.as_ref()).unwrap_or_default()).into_owned());
                drop((permit, charge));
            }
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let intake = tokio::spawn(run(recv, limits, classify, start, async move {
            let _ = stop_rx.await;
        }, present));
        // Each peer stays connected (its request is not dropped as gone).
        let mut peers = Vec::new();
        for i in 0..=SIGN_INS {
            let mut dealer = zeromq::DealerSocket::new();
            dealer.connect(&ep.to_string()).await.expect("connect");
            let body = if i < SIGN_INS { format!("sign-in {i}") } else { "return".to_string() };
            zeromq::SocketSend::send(&mut dealer, ZmqMessage::from(body)).await.expect("send");
            peers.push(dealer);
        }
        let queued = eventually(Duration::from_secs(60), || waiting(Class::SignIn) == SIGN_INS as i64 && waiting(Class::Return) == 1).await;
        assert!(queued, "every request waits: {} sign-ins, {} returns", waiting(Class::SignIn), waiting(Class::Return));
        drop(held);
        let all = eventually(Duration::from_secs(60), || order.lock().unwrap().len() == SIGN_INS + 1).await;
        let order = order.lock().unwrap().clone();
        assert!(all, "{} of {} started", order.len(), SIGN_INS + 1);
        let at = order.iter().position(|b| b == "return").expect("the return started");
        assert!(at <= 1, "the return waits for at most one sign-in, not the {SIGN_INS} queued before it: it started at position {}", at + 1);
        let _ = stop_tx.send(());
        intake.await.expect("the intake ends when stopped");
        drop(peers);
    });
}
