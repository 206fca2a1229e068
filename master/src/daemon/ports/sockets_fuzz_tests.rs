//! Fuzzing of the ZMTP frame decoder behind the request port, on a real socket: the
//! request socket is built with the master's options ([`crate::daemon::sockets::request_options`]) and
//! bound on loopback; each case connects, sends a valid ZMTP 3.0 greeting and READY
//! (or not), then bytes a property test chose (random bytes, or frame headers with any
//! flags and any declared length up to `u64::MAX`, followed by a little of the body) and
//! hangs up. After each case a well-behaved DEALER still gets its message through.
//! What must hold: no panic and no abort (unbounded, a frame declaring a huge length makes
//! the codec reserve it: `memory allocation of 1099511693321 bytes failed`), and the
//! socket keeps serving.
//!
//! The default run is short (64 cases); the long run is `docs/benchmarks.md`, "Hostile-input bounds".

use std::sync::OnceLock;
use std::time::Duration;

use proptest::prelude::*;
use tokio::io::AsyncWriteExt;
use tokio::runtime::Runtime;
use zeromq::{Socket, SocketRecv, SocketSend};

use crate::config::MasterConfig;

/// Numbers the probes, so each case waits for its own.
static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

struct Fixture {
    rt: Runtime,
    addr: std::net::SocketAddr,
    /// The last frame of each message the router received.
    got: std::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let mut cfg = MasterConfig::under(std::path::Path::new("/nonexistent/halite-fuzz"));
        cfg.halite_max_request_bytes = 64 << 10;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let addr = rt.block_on(async move {
            let mut sock = zeromq::RouterSocket::with_options(crate::daemon::sockets::request_options(&cfg));
            let ep = sock.bind("tcp://127.0.0.1:0").await.unwrap();
            let addr: std::net::SocketAddr = ep.to_string().trim_start_matches("tcp://").parse().unwrap();
            tokio::spawn(async move {
                while let Ok(m) = sock.recv().await {
                    let body = m.into_vec().last().map(|b| b.to_vec()).unwrap_or_default();
                    if tx.send(body).is_err() {
                        return;
                    }
                }
            });
            addr
        });
        Fixture { rt, addr, got: std::sync::Mutex::new(rx) }
    })
}

/// ZMTP 3.0 greeting, NULL mechanism, as a client.
fn greeting() -> Vec<u8> {
    let mut g = vec![0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 0];
    let mut mech = b"NULL".to_vec();
    mech.resize(20, 0);
    g.extend_from_slice(&mech);
    g.push(0);
    g.extend_from_slice(&[0u8; 31]);
    g
}

/// The NULL mechanism's READY command for a DEALER.
fn ready() -> Vec<u8> {
    let mut body = vec![5];
    body.extend_from_slice(b"READY");
    body.push(11);
    body.extend_from_slice(b"Socket-Type");
    body.extend_from_slice(&6u32.to_be_bytes());
    body.extend_from_slice(b"DEALER");
    let mut f = vec![0x04, body.len() as u8];
    f.extend_from_slice(&body);
    f
}

/// What follows the handshake: frame headers with any flags and declared length, then
/// some bytes of body; or nothing but random bytes.
fn tail() -> impl Strategy<Value = Vec<u8>> {
    let frame = (any::<u8>(), any::<u64>(), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..64)).prop_map(|(flags, len, long, body)| {
        let mut f = vec![if long { flags | 0x02 } else { flags & !0x02 }];
        if long {
            f.extend_from_slice(&len.to_be_bytes());
        } else {
            f.push(len as u8);
        }
        f.extend_from_slice(&body);
        f
    });
    prop_oneof![
        proptest::collection::vec(frame, 1..4).prop_map(|fs| fs.concat()),
        proptest::collection::vec(any::<u8>(), 0..256),
    ]
}

/// A well-behaved DEALER's message gets through.
fn still_serves(f: &Fixture, n: u64) {
    let addr = f.addr;
    let body = format!("probe {n}").into_bytes();
    let sent = body.clone();
    f.rt.block_on(async move {
        let mut d = zeromq::DealerSocket::new();
        d.connect(&format!("tcp://{addr}")).await.unwrap();
        d.send(zeromq::ZmqMessage::from(sent)).await.unwrap();
        // Lets the send leave before the socket is dropped; its receipt below is the signal.
        tokio::time::sleep(Duration::from_millis(1)).await;
    });
    let mut rx = f.got.lock().unwrap();
    let got = f.rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), async { loop { match rx.recv().await { Some(b) if b == body => return true, Some(_) => continue, None => return false } } }).await });
    assert_eq!(got, Ok(true), "the socket no longer serves a well-behaved peer");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64), ..ProptestConfig::default() })]

    #[test]
    fn fuzz_zmtp_frames_after_the_handshake(handshake in 0u8..3, bytes in tail()) {
        let f = fixture();
        let addr = f.addr;
        f.rt.block_on(async move {
            let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else { return };
            let mut out = Vec::new();
            if handshake >= 1 {
                out.extend_from_slice(&greeting());
            }
            if handshake >= 2 {
                out.extend_from_slice(&ready());
            }
            out.extend_from_slice(&bytes);
            let _ = s.write_all(&out).await;
            let _ = s.flush().await;
            // Let the codec read it before the connection goes.
            tokio::time::sleep(Duration::from_millis(2)).await;
        });
        still_serves(f, N.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    }
}
