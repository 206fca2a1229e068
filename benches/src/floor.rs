//! `halite-bench floor`: what the machine itself allows for the master's traffic shape,
//! with no protocol, crypto or storage at all.
//!
//! The 8,000-minion goals (`test.ping` to 8,000 minions in 0.5 s, 50,000 returns
//! acknowledged a second) are stated for a two-core machine on which the simulated
//! minions run beside the master. Much of what the master spends is the kernel's
//! loopback TCP, and the same kernel work is on the minions' side. This benchmark
//! measures the floor under both figures: the same connections and the same message
//! sizes, served by a process that does nothing but frame bytes.
//!
//! Two processes, as with the master and `halite-swarm`:
//!
//! - the **server** (`halite-bench floor-serve`, a child of the client): a tokio runtime
//!   with two workers, as the master's. It listens on a publish port and a request port.
//!   Each publish connection has its own task fed by one broadcast channel (the master's
//!   fan-out ring); each request connection has a task that reads a frame and writes a
//!   reply (the master's request path, less everything the master does with it).
//! - the **client** (`halite-bench floor`): `N` "minions", each with a publish and a
//!   request connection and one task, as in the swarm.
//!
//! Shapes, each timed by the client:
//!
//! - **ping**: the client asks the server to publish one frame; every minion answers it
//!   with one request and waits for the reply. Timed from the ask to the last reply:
//!   the floor under `salt '*' test.ping` (which adds the CLI, crypto, the log).
//! - **blast**: the publish tells every minion to send `K` requests, one outstanding at
//!   a time, as `halite-swarm --blast K` does. Requests answered a second: the floor
//!   under the master's own rate of returns. (The time includes one fan-out, which the
//!   ping shape measures.)
//!
//! With `--work` each request is a real return whose whole work the server does on
//! the connection's task, one log thread committing (`crate::floor_work`): the leanest
//! master this benchmark can measure, against the floor at the same message sizes.
//!
//! One JSON line a shape on stdout, with the server's and the client's CPU-seconds in
//! the window (`/proc/<pid>/stat`, 10 ms ticks).
//!
//! Frames are a 4-byte big-endian length and the payload; the first payload byte says
//! what it is (below). Lengths are bounded before anything is allocated.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, Notify};

/// A request that is a return: answer it.
const RETURN: u8 = 0;
/// A request that asks the server to publish (the payload's second byte is the shape,
/// then the blast's `K` as a big-endian u32).
const PUBLISH: u8 = 1;
/// Shapes a publish carries.
const PING: u8 = 0;
const BLAST: u8 = 1;
/// No frame of this benchmark is longer.
const MAX_FRAME: usize = 1 << 20;

/// Message sizes, defaulting to those of a `test.ping` job on the master (the
/// encrypted publish, a minion's encrypted return, the master's encrypted answer).
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub publish: usize,
    pub request: usize,
    pub reply: usize,
}

/// The client's options.
pub struct Opts {
    pub conns: usize,
    pub rounds: usize,
    pub blast: u32,
    pub threads: usize,
    pub sizes: Sizes,
    /// Requests are real returns, each carrying a return's work (`crate::floor_work`).
    pub work: bool,
}

async fn read_frame(s: &mut (impl AsyncReadExt + Unpin), buf: &mut Vec<u8>) -> std::io::Result<()> {
    let len = s.read_u32().await? as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("frame of {len} bytes")));
    }
    buf.resize(len, 0);
    s.read_exact(buf).await?;
    Ok(())
}

/// A frame of `kind` then `payload`, ready to write.
fn frame_of(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(5 + payload.len());
    f.extend_from_slice(&(payload.len() as u32 + 1).to_be_bytes());
    f.push(kind);
    f.extend_from_slice(payload);
    f
}

/// A frame of `len` payload bytes (at least 1) starting with `head`, ready to write.
fn frame(head: &[u8], len: usize) -> Vec<u8> {
    let len = len.max(head.len()).max(1);
    let mut f = Vec::with_capacity(4 + len);
    f.extend_from_slice(&(len as u32).to_be_bytes());
    f.extend_from_slice(head);
    f.resize(4 + len, 0x5a);
    f
}

/// The server: binds both ports on 127.0.0.1, prints `ports PUB REQ` and serves until
/// its stdin closes (its parent, the client, is gone). With `work`, returns carry a
/// return's work, committed to a log in a temporary directory.
pub fn serve(threads: usize, sizes: Sizes, work: bool) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads.max(1)).enable_all().build()?;
    let dir = tempfile::tempdir()?;
    let log = if work { Some(crate::floor_work::Log::start(dir.path())?) } else { None };
    let served = rt.block_on(async {
        let pubs = TcpListener::bind("127.0.0.1:0").await?;
        let reqs = TcpListener::bind("127.0.0.1:0").await?;
        println!("ports {} {}", pubs.local_addr()?.port(), reqs.local_addr()?.port());
        tokio::spawn(serve_on(pubs, reqs, sizes, log.clone()));
        // Serve until the parent closes our stdin.
        let _ = tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink())).await;
        Ok(())
    });
    if let Some(log) = &log {
        log.stop();
    }
    served
}

/// Accepts and serves both ports (on the current runtime) until the listeners fail.
async fn serve_on(pubs: TcpListener, reqs: TcpListener, sizes: Sizes, log: Option<crate::floor_work::Log>) {
    let (tx, _) = broadcast::channel::<Arc<Vec<u8>>>(16);
    let fanout = tx.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = pubs.accept().await {
            let _ = s.set_nodelay(true);
            let mut rx = fanout.subscribe();
            tokio::spawn(async move {
                let mut s = s;
                while let Ok(f) = rx.recv().await {
                    if s.write_all(&f).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let reply = Arc::new(frame(&[RETURN], sizes.reply));
    while let Ok((s, _)) = reqs.accept().await {
        let _ = s.set_nodelay(true);
        let (tx, reply, log) = (tx.clone(), reply.clone(), log.clone());
        tokio::spawn(async move {
            let mut s = s;
            let mut buf = Vec::new();
            let mut minion = None;
            while read_frame(&mut s, &mut buf).await.is_ok() {
                if buf[0] == PUBLISH && buf.len() >= 6 {
                    let _ = tx.send(Arc::new(frame(&buf[1..6], sizes.publish)));
                }
                if buf[0] == crate::floor_work::HELLO {
                    match crate::floor_work::Minion::hello(&buf[1..]) {
                        Ok(m) => minion = Some(m),
                        Err(_) => break,
                    }
                }
                let written = match (buf[0], &minion, &log) {
                    (RETURN, Some(m), Some(log)) => match m.answer(&buf[1..], log).await {
                        Ok(r) => s.write_all(&frame_of(RETURN, &r)).await,
                        Err(_) => break,
                    },
                    _ => s.write_all(&reply).await,
                };
                if written.is_err() {
                    break;
                }
            }
        });
    }
}

/// `utime + stime` of a process in seconds (`/proc/<pid>/stat`, fields after the comm).
fn cpu_seconds(pid: &str) -> f64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    let Some(end) = text.rfind(')') else { return 0.0 };
    let f: Vec<&str> = text[end + 1..].split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (tick(11) + tick(12)) as f64 / 100.0
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The client: starts the server, connects the minions, runs the shapes, prints a JSON
/// line for each.
pub fn run(o: Opts) -> std::io::Result<()> {
    let exe = std::env::current_exe()?;
    let s = o.sizes;
    let mut child = Command::new(exe)
        .args(["floor-serve", "--threads", &o.threads.to_string()])
        .args(o.work.then_some("--work"))
        .args(["--publish-bytes", &s.publish.to_string(), "--request-bytes", &s.request.to_string(), "--reply-bytes", &s.reply.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let server = child.id().to_string();
    let mut line = String::new();
    BufReader::new(child.stdout.take().ok_or_else(|| std::io::Error::other("no stdout"))?).read_line(&mut line)?;
    let ports: Vec<u16> = line.split_whitespace().skip(1).filter_map(|p| p.parse().ok()).collect();
    let [pub_port, req_port] = ports[..] else { return Err(std::io::Error::other(format!("server said {line:?}"))) };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(o.threads.max(1)).enable_all().build()?;
    let out = rt.block_on(client(&o, pub_port, req_port, &server));
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    for shape in out? {
        println!("{}", shape.json(o.sizes, o.work));
    }
    Ok(())
}

/// Counts answered requests; wakes the driver when `target` is reached.
struct Done {
    count: AtomicUsize,
    target: AtomicUsize,
    notify: Notify,
}

impl Done {
    fn add(&self, n: usize) {
        let now = self.count.fetch_add(n, Ordering::AcqRel) + n;
        if now >= self.target.load(Ordering::Acquire) {
            self.notify.notify_one();
        }
    }

    async fn until(&self, target: usize) {
        self.target.store(target, Ordering::Release);
        while self.count.load(Ordering::Acquire) < target {
            let n = self.notify.notified();
            if self.count.load(Ordering::Acquire) >= target {
                break;
            }
            n.await;
        }
    }
}

/// One minion: answer each publish with one request (ping) or `K` (blast).
async fn minion(mut sub: TcpStream, mut req: TcpStream, request: Arc<Vec<u8>>, done: Arc<Done>) {
    let (mut pbuf, mut rbuf) = (Vec::new(), Vec::new());
    while read_frame(&mut sub, &mut pbuf).await.is_ok() {
        let n = match pbuf.get(..5) {
            Some([BLAST, a, b, c, d]) => u32::from_be_bytes([*a, *b, *c, *d]).max(1),
            _ => 1,
        };
        for _ in 0..n {
            if req.write_all(&request).await.is_err() || read_frame(&mut req, &mut rbuf).await.is_err() {
                return;
            }
        }
        done.add(n as usize);
    }
}

async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// One shape's result.
#[derive(Debug)]
pub struct Shape {
    pub name: &'static str,
    pub conns: usize,
    pub per_minion: u32,
    pub seconds: Vec<f64>,
    pub server_cpu_s: f64,
    pub client_cpu_s: f64,
}

impl Shape {
    fn json(&self, sizes: Sizes, work: bool) -> String {
        let m = median(&mut self.seconds.clone());
        let per = (self.conns * self.per_minion as usize) as f64;
        format!(
            "{{\"floor\":\"{}\",\"work\":{work},\"conns\":{},\"per_minion\":{},\"rounds\":{},\"seconds\":{:?},\"median_s\":{m:.4},\"requests_per_s\":{:.0},\"server_cpu_s\":{:.2},\"client_cpu_s\":{:.2},\"server_cpu_us_per_request\":{:.1},\"sizes\":{{\"publish\":{},\"request\":{},\"reply\":{}}}}}",
            self.name,
            self.conns,
            self.per_minion,
            self.seconds.len(),
            self.seconds,
            per / m.max(1e-9),
            self.server_cpu_s,
            self.client_cpu_s,
            self.server_cpu_s * 1e6 / per,
            sizes.publish,
            sizes.request,
            sizes.reply
        )
    }
}

/// Connects `o.conns` minions to the server's ports and runs the shapes; `server` is
/// the server's pid (its CPU is read from `/proc`).
async fn client(o: &Opts, pub_port: u16, req_port: u16, server: &str) -> std::io::Result<Vec<Shape>> {
    let pub_addr: SocketAddr = ([127, 0, 0, 1], pub_port).into();
    let req_addr: SocketAddr = ([127, 0, 0, 1], req_port).into();
    let done = Arc::new(Done { count: AtomicUsize::new(0), target: AtomicUsize::new(usize::MAX), notify: Notify::new() });
    let plain = Arc::new(frame(&[RETURN], o.sizes.request));
    for i in 0..o.conns {
        let (sub, mut req) = (connect(pub_addr).await?, connect(req_addr).await?);
        let request = if o.work {
            // A minion of its own: its id and session key sent once, its return as
            // salt-minion sends it.
            let (id, session) = (format!("floor-{i:05}"), halite_master::wire::crypto::Crypticle::generate());
            req.write_all(&frame_of(crate::floor_work::HELLO, &crate::floor_work::Minion::hello_payload(&id, &session))).await?;
            read_frame(&mut req, &mut Vec::new()).await?;
            let body = crate::return_body(&session, &id, "20261129000000000001", &format!("{i:032x}"), "test.ping", rmpv::Value::Boolean(true));
            Arc::new(frame_of(RETURN, &body))
        } else {
            plain.clone()
        };
        tokio::spawn(minion(sub, req, request, done.clone()));
    }
    let mut control = connect(req_addr).await?;
    // Every subscription accepted by the server before the first publish.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shape = |kind: u8, k: u32| {
        let mut head = vec![PUBLISH, kind];
        head.extend_from_slice(&k.to_be_bytes());
        frame(&head, 6)
    };
    let (mut rbuf, mut answered, mut out) = (Vec::new(), 0usize, Vec::new());
    let me = std::process::id().to_string();
    for (name, kind, k, rounds) in [("ping", PING, 1u32, o.rounds), ("blast", BLAST, o.blast, if o.blast > 0 { o.rounds } else { 0 })] {
        let (mut seconds, mut scpu, mut ccpu) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (s0, c0) = (cpu_seconds(server), cpu_seconds(&me));
            let t = Instant::now();
            control.write_all(&shape(kind, k)).await?;
            read_frame(&mut control, &mut rbuf).await?;
            answered += o.conns * k as usize;
            done.until(answered).await;
            seconds.push(t.elapsed().as_secs_f64());
            scpu.push(cpu_seconds(server) - s0);
            ccpu.push(cpu_seconds(&me) - c0);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if rounds > 0 {
            out.push(Shape { name, conns: o.conns, per_minion: k, seconds, server_cpu_s: median(&mut scpu), client_cpu_s: median(&mut ccpu) });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZES: Sizes = Sizes { publish: 260, request: 320, reply: 120 };

    /// Both shapes complete with every minion's every request answered (the driver
    /// waits for exactly that count), on a server in this process.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn both_shapes_count_every_answer() {
        let pubs = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let reqs = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ports = (pubs.local_addr().unwrap().port(), reqs.local_addr().unwrap().port());
        tokio::spawn(serve_on(pubs, reqs, SIZES, None));
        let o = Opts { conns: 40, rounds: 2, blast: 3, threads: 2, sizes: SIZES, work: false };
        let shapes = tokio::time::timeout(Duration::from_secs(60), client(&o, ports.0, ports.1, "self")).await.unwrap().unwrap();
        let got: Vec<(&str, u32, usize)> = shapes.iter().map(|s| (s.name, s.per_minion, s.seconds.len())).collect();
        assert_eq!(got, vec![("ping", 1, 2), ("blast", 3, 2)]);
        assert!(shapes[1].json(SIZES, false).contains("\"requests_per_s\":"));
    }

    /// With the work, every return is opened, committed to the log and applied before
    /// its sealed reply goes out: both shapes complete (each minion's every reply
    /// counted), and the log thread applied exactly that many records.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn with_the_work_every_return_is_applied_and_answered() {
        let dir = tempfile::tempdir().unwrap();
        let log = crate::floor_work::Log::start(dir.path()).unwrap();
        let pubs = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let reqs = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ports = (pubs.local_addr().unwrap().port(), reqs.local_addr().unwrap().port());
        tokio::spawn(serve_on(pubs, reqs, SIZES, Some(log.clone())));
        let o = Opts { conns: 20, rounds: 2, blast: 3, threads: 2, sizes: SIZES, work: true };
        let shapes = tokio::time::timeout(Duration::from_secs(60), client(&o, ports.0, ports.1, "self")).await.unwrap().unwrap();
        let got: Vec<(&str, u32, usize)> = shapes.iter().map(|s| (s.name, s.per_minion, s.seconds.len())).collect();
        assert_eq!(got, vec![("ping", 1, 2), ("blast", 3, 2)]);
        assert_eq!(log.applied(), 20 * (1 + 3) * 2, "every return of every round applied");
        log.stop();
    }

    /// A frame declaring more than the bound is refused before anything is allocated.
    #[tokio::test]
    async fn an_oversized_frame_is_refused() {
        let declared = ((MAX_FRAME + 1) as u32).to_be_bytes();
        let mut buf = Vec::new();
        let err = read_frame(&mut &declared[..], &mut buf).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(buf.capacity() == 0);
    }
}
