//! Three-member benchmarks of the replication layer: real `Node`s in one process, each on
//! its own loopback address, talking over the sealed TCP transport, each with its own
//! raft log, RocksDB and mmap_key view on disk (so every commit is fsynced by two of
//! three logs). What they measure:
//!
//! - [`commit`]: committed and applied records per second on three members, proposers
//!   on the leader and on a follower (forwarded), with group commit.
//! - [`failover`]: the leader stopped abruptly (its driver and transport end; the peers
//!   see its sockets close and its heartbeats stop, as after `kill -9`) while a writer
//!   proposes through a follower; the time from the stop to the writer's next committed
//!   write, repeated.
//! - [`join`]: a member joining a compacted cluster: it receives the leader's snapshot in
//!   chunks over the transport (loopback), installs it and follows the tail; time and
//!   MB/s from the join to the joiner's applied index reaching the leader's.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use halite_replication::node::mailbox;
use halite_replication::{ClusterKey, DataDir, Node, NodeConfig, NodeError, TcpTransport};
use halite_storage::compaction::CompactionLimits;
use halite_storage::format::{KeySet, KeyState, Record, RootsTree};
use halite_storage::keys::mmap::MmapKeys;
use halite_storage::keys::Geometry;
use halite_storage::roots::{RootsDirs, RootsMaterialiser};
use halite_storage::views::Views;

/// A free port on `ip` (bound then released).
fn free_addr(ip: &str) -> SocketAddr {
    let l = TcpListener::bind((ip, 0)).expect("bind");
    l.local_addr().expect("addr")
}

/// A small record: a key delete (no view work beyond the index).
fn small(i: u64) -> Record {
    Record::KeySet(KeySet { id: format!("m{i}"), state: KeyState::Deleted, pub_key: Vec::new(), time_ns: i, expect: None, pending_below: None })
}

/// A pending key with a 450-byte public key.
fn key(i: u64) -> Record {
    Record::KeySet(KeySet { id: format!("minion-{i:08}"), state: KeyState::Pending, pub_key: crate::fake_pub(i).into_bytes(), time_ns: i, expect: None, pending_below: None })
}

fn views(dir: &Path) -> Views {
    let geo = Geometry { size: 1_000_000, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 30 };
    Views::new(Box::new(MmapKeys::open(&dir.join("pki"), geo).expect("view")), RootsMaterialiser::new(RootsDirs::default()))
}

/// One member: its node and its transport.
pub struct Member {
    pub node: Node,
    pub transport: Arc<TcpTransport>,
}

impl Member {
    /// Starts member `id` under `root/n<id>` on `listen`, knowing `peers`: a founding
    /// member of `voters`, or (`voters` empty) a joiner.
    fn start(root: &Path, id: u64, listen: SocketAddr, peers: HashMap<u64, SocketAddr>, voters: Vec<u64>, compaction: CompactionLimits) -> Member {
        let (inbox, mb) = mailbox();
        let mut addrs = peers.clone();
        addrs.insert(id, listen);
        let t = TcpTransport::start(id, listen, peers, ClusterKey::from_secret("bench secret"), Arc::new(move |m| inbox.deliver(m))).expect("transport");
        let dir = root.join(format!("n{id}"));
        let join = voters.is_empty();
        let cfg = NodeConfig { id, voters, join, addrs, compaction, ..Default::default() };
        let node = Node::start_peered(&DataDir::new(&dir.join("data")), views(&dir), cfg, t.clone(), mb).expect("node");
        Member { node, transport: t }
    }

    /// Ends the member abruptly: the driver stops where it is, the sockets close.
    fn crash(self) {
        self.node.stop();
        self.transport.shutdown();
    }
}

type Members = HashMap<u64, Arc<Member>>;

/// Three founding members on 127.0.0.1–3.
fn three(root: &Path) -> (HashMap<u64, SocketAddr>, Members) {
    let addrs: HashMap<u64, SocketAddr> = (1..=3).map(|i| (i, free_addr(&format!("127.0.0.{i}")))).collect();
    let members = (1..=3).map(|i| (i, Arc::new(start_founding(root, i, &addrs)))).collect();
    (addrs, members)
}

fn start_founding(root: &Path, id: u64, addrs: &HashMap<u64, SocketAddr>) -> Member {
    let peers = addrs.iter().filter(|(k, _)| **k != id).map(|(k, v)| (*k, *v)).collect();
    Member::start(root, id, addrs[&id], peers, vec![1, 2, 3], CompactionLimits::default())
}

fn crash_all(members: Members) {
    for (_, m) in members {
        if let Ok(m) = Arc::try_unwrap(m) {
            m.crash();
        }
    }
}

/// Waits until every member names the same leader; returns it.
fn agreed_leader(members: &Members) -> u64 {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let l: Vec<Option<u64>> = members.values().map(|m| m.node.leader()).collect();
        if let Some(Some(x)) = l.first() {
            if l.iter().all(|y| *y == Some(*x)) && members.contains_key(x) {
                return *x;
            }
        }
        assert!(Instant::now() < end, "no leader agreed on within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Proposes until committed, waiting out leader changes; `None` after 30 s.
fn propose_retrying(node: &Node, recs: &[Record]) -> Option<u64> {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        match node.propose(recs) {
            Ok(i) => return Some(i),
            Err(NodeError::NotLeader | NodeError::Timeout(_)) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
            Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => return None,
        }
    }
}

/// Committed records per second on three members: `threads` proposers, alternately on
/// the leader and on a follower (forwarded to the leader), each proposing groups of
/// `group` small records until `total` are committed.
pub fn commit(total: u64, threads: u64, groups: &[u64]) {
    println!("| proposers (on leader + on follower) | group size | records | seconds | records/s |");
    println!("|---|---|---|---|---|");
    for &group in groups {
        let dir = tempfile::tempdir().expect("tmp");
        let (_, members) = three(dir.path());
        let leader = agreed_leader(&members);
        let follower = members.keys().copied().find(|i| *i != leader).expect("follower");
        let next = Arc::new(AtomicU64::new(0));
        let t = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let next = next.clone();
                let on = members[if k % 2 == 0 { &leader } else { &follower }].clone();
                std::thread::spawn(move || loop {
                    let start = next.fetch_add(group, Ordering::Relaxed);
                    if start >= total {
                        break;
                    }
                    let recs: Vec<Record> = (start..(start + group).min(total)).map(small).collect();
                    propose_retrying(&on.node, &recs).expect("commit");
                })
            })
            .collect();
        for h in handles {
            h.join().expect("proposer");
        }
        let s = t.elapsed().as_secs_f64();
        println!("| {threads} ({} + {}) | {group} | {total} | {s:.2} | {:.0} |", threads.div_ceil(2), threads / 2, total as f64 / s);
        crash_all(members);
    }
}

/// Leader failover: a writer proposes one record at a time through a follower; the
/// leader is stopped abruptly; the gap from the stop to the writer's next commit is the
/// failover time. The old leader is restarted from its disk between rounds.
pub fn failover(rounds: u64) {
    let dir = tempfile::tempdir().expect("tmp");
    let (addrs, mut members) = three(dir.path());
    let mut gaps = Vec::new();
    println!("| round | old leader | writer on | stop → next committed write (ms) | new leader |");
    println!("|---|---|---|---|---|");
    for round in 1..=rounds {
        let leader = agreed_leader(&members);
        let writer_on = members.keys().copied().find(|i| *i != leader).expect("follower");
        // The writer: a new one-record proposal every 5 ms, each on its own thread (so a
        // proposal stuck with the dead leader holds up nothing); (start, commit) times.
        let stop = Arc::new(AtomicBool::new(false));
        let commits: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
        let writer = {
            let (stop, commits, on) = (stop.clone(), commits.clone(), members[&writer_on].clone());
            std::thread::spawn(move || {
                let mut i = round << 32;
                let mut inflight = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let (commits, on) = (commits.clone(), on.clone());
                    inflight.push(std::thread::spawn(move || {
                        let start = Instant::now();
                        if on.node.propose(&[small(i)]).is_ok() {
                            commits.lock().expect("commits").push((start, Instant::now()));
                        }
                    }));
                    inflight.retain(|h| !h.is_finished());
                    std::thread::sleep(Duration::from_millis(5));
                }
                for h in inflight {
                    let _ = h.join();
                }
            })
        };
        std::thread::sleep(Duration::from_millis(500));
        let old = members.remove(&leader).expect("leader");
        let old = Arc::try_unwrap(old).ok().expect("the leader is held only here");
        let t0 = Instant::now();
        old.crash();
        let end = t0 + Duration::from_secs(30);
        // The first write proposed after the stop that is committed.
        let gap = loop {
            let next = commits.lock().expect("commits").iter().filter(|(s, _)| *s > t0).map(|(_, c)| *c).min();
            if let Some(t) = next {
                break t - t0;
            }
            assert!(Instant::now() < end, "no commit within 30 s of the leader's stop");
            std::thread::sleep(Duration::from_millis(1));
        };
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("writer");
        let new_leader = members[&writer_on].node.leader().unwrap_or(0);
        let ms = gap.as_secs_f64() * 1000.0;
        println!("| {round} | {leader} | {writer_on} | {ms:.0} | {new_leader} |");
        gaps.push(ms);
        // The old leader comes back from its own disk and catches up.
        members.insert(leader, Arc::new(start_founding(dir.path(), leader, &addrs)));
        std::thread::sleep(Duration::from_millis(1500));
    }
    gaps.sort_by(|a, b| a.total_cmp(b));
    println!("\nfailover over {rounds} rounds: median {:.0} ms, min {:.0} ms, max {:.0} ms", gaps[gaps.len() / 2], gaps[0], gaps[gaps.len() - 1]);
    crash_all(members);
}

/// A member joining a compacted founder holding `keys` keys and `roots_mib` MiB of roots:
/// the snapshot goes over the transport on loopback. Prints the time from the learner's
/// addition to its applied index reaching the founder's, and the snapshot's MB/s.
pub fn join(keys: u64, roots_mib: u64) {
    let dir = tempfile::tempdir().expect("tmp");
    let a1 = free_addr("127.0.0.1");
    // One compaction, right after the state is loaded (the entries that load it, plus
    // a few), so that the joiner needs the snapshot for all of it.
    let loading = keys.div_ceil(4096) + roots_mib.div_ceil(16);
    let limits = CompactionLimits { max_entries: Some(loading + 8), max_bytes: None, min_entries: 4 };
    let n1 = Member::start(dir.path(), 1, a1, HashMap::new(), vec![1], limits);
    let t = Instant::now();
    let mut i = 0;
    while i < keys {
        let g: Vec<Record> = (i..(i + 4096).min(keys)).map(key).collect();
        n1.node.propose(&g).expect("propose keys");
        i += 4096;
    }
    for f in 0..roots_mib.div_ceil(16) {
        let content = crate::noise(16 << 20, f + 1);
        let recs = halite_storage::state::roots_records(RootsTree::File, "base", &format!("blob/{f:04}.bin"), 0o644, &content);
        n1.node.propose(&recs).expect("propose roots");
    }
    eprintln!("founder: {keys} keys and {roots_mib} MiB of roots committed in {:.1} s", t.elapsed().as_secs_f64());
    // A few more entries, until the policy has compacted through everything loaded.
    let loaded = n1.node.state().applied_index().expect("applied");
    let end = Instant::now() + Duration::from_secs(300);
    let mut j = 0;
    while n1.node.log().snapshot_meta().map(|m| m.index).unwrap_or(0) < loaded {
        n1.node.propose(&[small(j)]).expect("propose");
        j += 1;
        assert!(Instant::now() < end, "the founder did not compact");
        std::thread::sleep(Duration::from_millis(20));
    }
    let target = n1.node.state().applied_index().expect("applied");
    let bytes = dir_bytes(&dir.path().join("n1/data/snapshots"));
    eprintln!("founder compacted: first log index {}, snapshot store {:.0} MiB", n1.node.log().first_entry_index().unwrap_or(0), bytes as f64 / 1048576.0);
    let a2 = free_addr("127.0.0.2");
    let n2 = Member::start(dir.path(), 2, a2, [(1, a1)].into(), vec![], CompactionLimits::default());
    let t = Instant::now();
    let cpu = cpu_seconds();
    n1.node.add_learner(2, a2).expect("add learner");
    let end = Instant::now() + Duration::from_secs(600);
    let mut installed = None;
    while n2.node.state().applied_index().unwrap_or(0) < target {
        assert!(Instant::now() < end, "the joiner did not catch up in 600 s");
        if installed.is_none() && n2.node.log().snapshot_meta().map(|m| m.index).unwrap_or(0) > 0 {
            installed = Some(t.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    eprintln!("joiner: snapshot in its log after {:.2} s, caught up after {s:.2} s", installed.unwrap_or(s));
    let d1 = n1.node.state().digest().expect("digest");
    let d2 = n2.node.state().digest().expect("digest");
    assert_eq!((d1.items, d1.sha256), (d2.items, d2.sha256), "joiner's state differs from the founder's");
    println!("| state | snapshot bytes | join → caught up (s) | MB/s | CPU s (both members) |");
    println!("|---|---|---|---|---|");
    println!("| {keys} keys + {roots_mib} MiB roots | {:.0} MiB | {s:.2} | {:.0} | {cpu:.2} |", bytes as f64 / 1048576.0, bytes as f64 / 1e6 / s);
    n2.crash();
    n1.crash();
}

/// User and system CPU seconds this process has used (`/proc/self/stat`, fields 14 and
/// 15, in clock ticks of 1/100 s): the work a run did, whatever else loads the machine.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Bytes of every file under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            n += if p.is_dir() { dir_bytes(&p) } else { e.metadata().map(|m| m.len()).unwrap_or(0) };
        }
    }
    n
}
