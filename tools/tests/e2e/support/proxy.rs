//! A fault-injecting TCP forwarder, for network partitions between cluster members
//! without touching the host's network: a [`Proxy`] listens on an address of the test's
//! own and forwards each connection to a target. [`Proxy::cut`] breaks every forwarded
//! connection and blackholes new ones (accepted, read and discarded, never forwarded, as
//! a dropped link looks to the connecting side: its handshake times out); [`Proxy::heal`]
//! closes the blackholed connections and forwards again. [`Proxy::slow`] holds every
//! chunk it forwards for a delay (a slow link) until the next heal.
//!
//! Members reach their peers through proxies with the master's `halite_cluster_dial`
//! (member name → `host:port` to connect to instead), so a member's identity and listen
//! address stay its own while every byte between two members passes a proxy.
//! [`Mesh`] puts one proxy on every directed pair of members.

use std::collections::HashMap;
use std::io::Read;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;

struct State {
    target: SocketAddr,
    cut: AtomicBool,
    stop: AtomicBool,
    /// Milliseconds each forwarded chunk is held before it is written on (0: none).
    delay_ms: AtomicU64,
    /// Both ends of every forwarded connection (shut down by a cut).
    forwarded: Mutex<Vec<TcpStream>>,
    /// Connections accepted during a cut (closed by a heal).
    held: Mutex<Vec<TcpStream>>,
}

impl State {
    fn close_all(list: &Mutex<Vec<TcpStream>>) {
        for s in list.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// One forwarder: `listen` → `target`, cut or healed on demand; stopped when dropped.
pub struct Proxy {
    pub listen: SocketAddr,
    state: Arc<State>,
}

impl Proxy {
    /// Listens on `ip` at a port free there and forwards to `target`.
    pub fn start(ip: &str, target: SocketAddr) -> Proxy {
        let port = port_free_on(&[ip]);
        let listener = TcpListener::bind((ip, port)).unwrap_or_else(|e| panic!("proxy bind {ip}:{port}: {e}"));
        let listen = listener.local_addr().expect("proxy address");
        let state = Arc::new(State { target, cut: AtomicBool::new(false), stop: AtomicBool::new(false), delay_ms: AtomicU64::new(0), forwarded: Mutex::new(Vec::new()), held: Mutex::new(Vec::new()) });
        let s = state.clone();
        std::thread::spawn(move || accept(listener, s));
        Proxy { listen, state }
    }

    /// Breaks the forwarded connections and blackholes new ones until [`Proxy::heal`].
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        State::close_all(&self.state.forwarded);
    }

    /// Forwards again, at full speed: connections held during the cut are closed (their
    /// side retries).
    pub fn heal(&self) {
        self.state.delay_ms.store(0, Ordering::SeqCst);
        self.state.cut.store(false, Ordering::SeqCst);
        State::close_all(&self.state.held);
    }

    /// Holds each chunk it forwards, either way, for `ms` milliseconds until the next
    /// heal (a slow link: bytes arrive late and in order, none is lost).
    pub fn slow(&self, ms: u64) {
        self.state.delay_ms.store(ms, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.listen, Duration::from_secs(1));
        State::close_all(&self.state.forwarded);
        State::close_all(&self.state.held);
    }
}

fn accept(listener: TcpListener, state: Arc<State>) {
    for conn in listener.incoming() {
        if state.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        if state.cut.load(Ordering::SeqCst) {
            blackhole(conn, &state);
            continue;
        }
        let Ok(up) = TcpStream::connect_timeout(&state.target, Duration::from_secs(1)) else {
            continue; // the target is down: the connecting side sees its connection close
        };
        let (Ok(c2), Ok(u2)) = (conn.try_clone(), up.try_clone()) else { continue };
        {
            let mut f = state.forwarded.lock().unwrap_or_else(|e| e.into_inner());
            // Forget connections that ended (both ends shut down by their pumps).
            f.retain(|s| s.peer_addr().is_ok());
            f.extend([c2, u2]);
        }
        // A cut between the check above and the registration must still break it.
        if state.cut.load(Ordering::SeqCst) {
            let _ = conn.shutdown(Shutdown::Both);
            let _ = up.shutdown(Shutdown::Both);
            continue;
        }
        pump(conn.try_clone(), up.try_clone(), state.clone());
        pump(Ok(up), Ok(conn), state.clone());
    }
}

/// Copies `from` to `to` on a thread of its own, each chunk held for the link's delay;
/// when either side ends, both are shut.
fn pump(from: std::io::Result<TcpStream>, to: std::io::Result<TcpStream>, state: Arc<State>) {
    let (Ok(mut from), Ok(mut to)) = (from, to) else { return };
    std::thread::spawn(move || {
        use std::io::Write;
        let mut buf = [0u8; 64 << 10];
        while let Ok(n @ 1..) = from.read(&mut buf) {
            let ms = state.delay_ms.load(Ordering::SeqCst);
            if ms > 0 {
                // The link's latency itself, not a wait for a signal.
                std::thread::sleep(Duration::from_millis(ms));
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}

/// Keeps `conn` open, reading and discarding what arrives, until a heal closes it.
fn blackhole(conn: TcpStream, state: &Arc<State>) {
    let Ok(mut reader) = conn.try_clone() else { return };
    state.held.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 << 10];
        while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
    });
}

/// A proxy on every directed pair of `n` members: member `i` reaches member `j` through
/// `proxies[(i, j)]`, which listens on `j`'s address.
pub struct Mesh {
    proxies: HashMap<(usize, usize), Proxy>,
}

impl Mesh {
    /// Proxies to each of `ips` on the cluster's `pool` port, and the
    /// `halite_cluster_dial` config lines of each member.
    pub fn new(ips: &[String], pool: u16) -> (Mesh, Vec<String>) {
        let mut proxies = HashMap::new();
        let mut confs = Vec::new();
        for (i, _) in ips.iter().enumerate() {
            let mut conf = String::from("halite_cluster_dial:\n");
            for (j, to) in ips.iter().enumerate().filter(|(j, _)| *j != i) {
                let target: SocketAddr = format!("{to}:{pool}").parse().expect("member address");
                let p = Proxy::start(to, target);
                conf.push_str(&format!("  {to}: \"{}\"\n", p.listen));
                proxies.insert((i, j), p);
            }
            confs.push(conf);
        }
        (Mesh { proxies }, confs)
    }

    /// Cuts member `i` off from every other member, both ways.
    pub fn isolate(&self, i: usize) {
        for ((a, b), p) in &self.proxies {
            if *a == i || *b == i {
                p.cut();
            }
        }
    }

    /// Cuts the connections member `from` opens to member `to` (one way: `to`'s own
    /// connections to `from` still pass).
    pub fn cut_link(&self, from: usize, to: usize) {
        if let Some(p) = self.proxies.get(&(from, to)) {
            p.cut();
        }
    }

    /// Cuts members `a` and `b` off from each other, both ways (others reach both).
    pub fn cut_pair(&self, a: usize, b: usize) {
        self.cut_link(a, b);
        self.cut_link(b, a);
    }

    /// Slows every link to and from member `i` by `ms` milliseconds per chunk.
    pub fn slow(&self, i: usize, ms: u64) {
        for ((a, b), p) in &self.proxies {
            if *a == i || *b == i {
                p.slow(ms);
            }
        }
    }

    /// Heals every link (cut or slow).
    pub fn heal_all(&self) {
        for p in self.proxies.values() {
            p.heal();
        }
    }
}
