//! Exact proposal tracking, end to end over the sealed TCP transport: a learner's
//! proposals are forwarded to the leader through a fault-injecting outbox (duplicated,
//! dropped), and every caller hears success only for its own entry, applied once; a
//! restarted node proposes under a new incarnation; membership changes made while
//! another is pending, and the leader's promotion of a learner among them, all complete.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use raft::eraftpb::{Message, MessageType};

use halite_storage::context::ProposalId;
use halite_storage::format::{GrainsReport, Record};
use halite_storage::keys::mmap::MmapKeys;
use halite_storage::keys::Geometry;
use halite_storage::log::RaftLog;
use halite_storage::roots::{RootsDirs, RootsMaterialiser};
use halite_storage::views::Views;

use super::{mailbox, DataDir, Node, NodeConfig, NodeError, Tap};
use crate::testutil::{free_addr, wait_until};
use crate::transport::Outbox;
use crate::TcpTransport;

/// What the outbox does to the proposals a node forwards to its leader.
#[derive(Clone, Copy)]
enum Fault {
    None,
    /// Every forwarded proposal is sent twice.
    Duplicate,
    /// The first `n` forwarded proposals are lost.
    DropFirst(usize),
    /// Every forwarded proposal is lost.
    DropAll,
    /// Entries go to the other members over a link of this many bytes a second, one
    /// message after the other (a slow disk or network on the way to a follower);
    /// [`Link::cut`] then loses them all.
    Throttle(u64),
}

/// The TCP transport with a fault between the node and the wire.
struct Faulty {
    inner: Arc<TcpTransport>,
    fault: Fault,
    seen: AtomicUsize,
    link: Link,
}

/// The slow link of [`Fault::Throttle`]: a thread that hands each append on, in order,
/// once its entries' bytes have passed at the link's rate.
#[derive(Clone, Default)]
struct Link {
    tx: Option<Arc<Mutex<std::sync::mpsc::Sender<Message>>>>,
    cut: Arc<std::sync::atomic::AtomicBool>,
}

impl Link {
    fn new(inner: Arc<TcpTransport>, bytes_per_s: u64) -> Link {
        let (tx, rx) = std::sync::mpsc::channel::<Message>();
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let lost = cut.clone();
        std::thread::spawn(move || {
            for m in rx {
                let bytes: u64 = m.get_entries().iter().map(|e| e.data.len() as u64).sum();
                std::thread::sleep(Duration::from_micros(bytes * 1_000_000 / bytes_per_s.max(1)));
                if !lost.load(Ordering::SeqCst) {
                    inner.send(vec![m]);
                }
            }
        });
        Link { tx: Some(Arc::new(Mutex::new(tx))), cut }
    }

    /// From now on every entry sent over the link is lost.
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

impl Outbox for Faulty {
    fn send(&self, msgs: Vec<Message>) {
        let mut out = Vec::with_capacity(msgs.len());
        for m in msgs {
            // Every append (empty ones too: they must not overtake the entries).
            if let Some(tx) = self.link.tx.as_ref().filter(|_| m.get_msg_type() == MessageType::MsgAppend) {
                let _ = tx.lock().unwrap().send(m);
                continue;
            }
            if m.get_msg_type() != MessageType::MsgPropose {
                out.push(m);
                continue;
            }
            let n = self.seen.fetch_add(1, Ordering::SeqCst);
            match self.fault {
                Fault::None => out.push(m),
                Fault::Duplicate => {
                    out.push(m.clone());
                    out.push(m);
                }
                Fault::DropFirst(k) if n < k => {}
                Fault::DropFirst(_) => out.push(m),
                Fault::DropAll => {}
                Fault::Throttle(_) => out.push(m),
            }
        }
        self.inner.send(out);
    }

    fn set_peer(&self, id: u64, addr: Option<SocketAddr>) {
        self.inner.set_peer(id, addr);
    }

    fn set_member_keys(&self, book: std::collections::BTreeMap<u64, [u8; 32]>, members: std::collections::HashSet<u64>, me_member: bool) {
        self.inner.set_member_keys(book, members, me_member);
    }
}

struct Member {
    node: Node,
    transport: Arc<TcpTransport>,
    link: Link,
    /// Every record the node applied, by the tap: (index, grains id).
    applied: Arc<Mutex<Vec<(u64, String)>>>,
}

impl Member {
    fn stop(self) {
        self.node.stop();
        self.transport.shutdown();
    }

    /// How many times the node applied a record for `id`.
    fn applied_count(&self, id: &str) -> usize {
        self.applied.lock().unwrap().iter().filter(|(_, g)| g == id).count()
    }
}

struct Opts {
    voters: Vec<u64>,
    join: bool,
    auto_promote: bool,
    fault: Fault,
    timeout: Duration,
}

impl Default for Opts {
    fn default() -> Self {
        Opts { voters: vec![], join: false, auto_promote: false, fault: Fault::None, timeout: Duration::from_secs(20) }
    }
}

fn start(root: &Path, id: u64, listen: SocketAddr, peers: HashMap<u64, SocketAddr>, o: Opts) -> Member {
    let (inbox, mb) = mailbox();
    let t = TcpTransport::start(id, listen, peers, crate::ClusterKey::from_secret("s"), Arc::new(move |m| inbox.deliver(m))).unwrap();
    let applied = Arc::new(Mutex::new(Vec::new()));
    let seen = applied.clone();
    let tap = Tap(Arc::new(move |index: u64, r: &Record| {
        if let Record::GrainsReport(g) = r {
            seen.lock().unwrap().push((index, g.id.clone()));
        }
    }));
    let dir = root.join(format!("n{id}"));
    let cfg = NodeConfig { id, voters: o.voters, join: o.join, addrs: [(id, listen)].into(), auto_promote: o.auto_promote, propose_timeout: o.timeout, tap: Some(tap), ..Default::default() };
    let geo = Geometry { size: 4096, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 20 };
    let views = Views::new(Box::new(MmapKeys::open(&dir.join("pki"), geo).unwrap()), RootsMaterialiser::new(RootsDirs::default()));
    let link = match o.fault {
        Fault::Throttle(rate) => Link::new(t.clone(), rate),
        _ => Link::default(),
    };
    let outbox: Arc<dyn Outbox> = Arc::new(Faulty { inner: t.clone(), fault: o.fault, seen: AtomicUsize::new(0), link: link.clone() });
    let node = Node::start_peered(&DataDir::new(&dir.join("data")), views, cfg, outbox, mb).unwrap();
    Member { node, transport: t, link, applied }
}

fn grains(id: &str) -> Record {
    Record::GrainsReport(GrainsReport { id: id.into(), grains: vec![0x80], time_ns: 1 })
}

/// A founder (node 1, sole voter) and a learner (node 2) whose forwards go through
/// `fault`, the learner following the founder.
fn pair(root: &Path, fault: Fault, timeout: Duration) -> (Member, Member) {
    let a1 = free_addr("127.0.0.1");
    let n1 = start(root, 1, a1, HashMap::new(), Opts { voters: vec![1], ..Default::default() });
    let a2 = free_addr("127.0.0.2");
    let n2 = start(root, 2, a2, [(1, a1)].into(), Opts { join: true, fault, timeout, ..Default::default() });
    n1.node.add_learner(2, a2).unwrap();
    wait_until("the learner to follow the founder", 20, || n2.node.leader() == Some(1));
    (n1, n2)
}

/// The entries of the log in `dir` that carry the proposals of node `proposer`.
fn copies_in_log(dir: &Path, proposer: u64) -> Vec<ProposalId> {
    let log = RaftLog::open(&dir.join("n1/data/log")).unwrap();
    let mut out = Vec::new();
    log.for_each_entry(1, None, |_, e| {
        out.extend(e.unwrap().id.filter(|id| id.proposer == proposer));
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn a_proposal_delivered_twice_is_applied_once_on_every_member() {
    let dir = tempfile::tempdir().unwrap();
    let (n1, n2) = pair(dir.path(), Fault::Duplicate, Duration::from_secs(20));
    // Several records: one entry, applied all-or-nothing, once.
    n2.node.propose(&[grains("twice-a"), grains("twice-b")]).unwrap();
    n1.node.propose(&[grains("after")]).unwrap();
    wait_until("the learner to apply what follows", 20, || n2.applied_count("after") == 1);
    for m in [&n1, &n2] {
        assert_eq!((m.applied_count("twice-a"), m.applied_count("twice-b")), (1, 1));
    }
    n1.stop();
    n2.stop();
    let ids = copies_in_log(dir.path(), 2);
    assert_eq!(ids.len(), 2, "the log holds both copies: {ids:?}");
    assert_eq!(ids[0], ids[1]);
}

#[test]
fn a_forward_the_leader_never_got_is_resubmitted_and_answered_once() {
    let dir = tempfile::tempdir().unwrap();
    let (n1, n2) = pair(dir.path(), Fault::DropFirst(1), Duration::from_secs(30));
    // The first forward is lost; the learner hands it over again after three election
    // timeouts, and only that copy answers the caller.
    let index = n2.node.propose(&[grains("lost-once-a"), grains("lost-once-b")]).unwrap();
    wait_until("the leader's entry at the answered index to hold the caller's records", 20, || n1.applied.lock().unwrap().iter().filter(|(i, _)| *i == index).count() == 2);
    wait_until("the learner to apply it", 20, || n2.applied_count("lost-once-b") == 1);
    assert_eq!(n1.applied_count("lost-once-a"), 1);
    n1.stop();
    n2.stop();
    assert_eq!(copies_in_log(dir.path(), 2).len(), 1);
}

#[test]
fn a_caller_is_never_answered_with_success_for_an_entry_that_is_not_its_own() {
    let dir = tempfile::tempdir().unwrap();
    // No forward ever arrives, and the timeout comes before any resubmission.
    let (n1, n2) = pair(dir.path(), Fault::DropAll, Duration::from_secs(2));
    let lost = n2.node.propose_async(&[grains("never")]).unwrap();
    // Meanwhile other entries apply on the learner; none of them answers it.
    for i in 0..5 {
        n1.node.propose(&[grains(&format!("other-{i}"))]).unwrap();
    }
    wait_until("the learner to apply the others", 20, || n2.applied_count("other-4") == 1);
    match lost.wait() {
        Err(NodeError::Timeout(_)) => {}
        other => panic!("a proposal that never reached the log was answered {other:?}"),
    }
    assert_eq!(n1.applied_count("never") + n2.applied_count("never"), 0);
    n1.stop();
    n2.stop();
}

#[test]
fn a_restarted_node_proposes_under_a_new_incarnation() {
    let dir = tempfile::tempdir().unwrap();
    let a1 = free_addr("127.0.0.1");
    let n1 = start(dir.path(), 1, a1, HashMap::new(), Opts { voters: vec![1], ..Default::default() });
    let first = n1.node.incarnation();
    n1.node.propose(&[grains("one")]).unwrap();
    assert_eq!(n1.node.state().proposer_mark(1).unwrap().map(|m| m.0), Some(first));
    n1.stop();
    // (A new port: the old one may be taken by a parallel test by now; a lone voter
    // needs no peer to find it.)
    let n1 = start(dir.path(), 1, free_addr("127.0.0.1"), HashMap::new(), Opts { voters: vec![1], ..Default::default() });
    let second = n1.node.incarnation();
    assert!(second > first, "{second} after {first}");
    // Its first proposal has sequence number 1 again, and is neither taken for the
    // earlier incarnation's nor skipped.
    n1.node.propose(&[grains("two")]).unwrap();
    assert_eq!(n1.applied_count("two"), 1);
    assert_eq!(n1.node.state().proposer_mark(1).unwrap().map(|m| m.0), Some(second));
    n1.stop();
    let mut ids = copies_in_log(dir.path(), 1);
    ids.dedup_by_key(|id| id.incarnation);
    assert_eq!(ids.iter().map(|id| (id.incarnation, id.seq)).collect::<Vec<_>>(), vec![(first, 1), (second, 1)]);
}

#[test]
fn membership_changes_made_while_another_is_pending_all_complete_and_the_promotion_too() {
    let dir = tempfile::tempdir().unwrap();
    let a1 = free_addr("127.0.0.1");
    let n1 = start(dir.path(), 1, a1, HashMap::new(), Opts { voters: vec![1], auto_promote: true, ..Default::default() });
    let a2 = free_addr("127.0.0.2");
    let n2 = start(dir.path(), 2, a2, [(1, a1)].into(), Opts { join: true, ..Default::default() });
    // Several changes at once: raft-rs takes one at a time (a second proposed while one
    // is pending becomes an empty entry); each must still apply and be answered, and
    // the leader's own promotion of node 2, once it has caught up, must not be lost
    // among them. Nodes 10..=13 are learners that never answer (nothing listens).
    let handle = n1.node.handle();
    let mut threads = vec![std::thread::spawn({
        let h = handle.clone();
        move || h.add_learner(2, a2)
    })];
    for id in 10..=13u64 {
        let h = handle.clone();
        let addr = free_addr("127.0.0.4");
        threads.push(std::thread::spawn(move || h.add_learner(id, addr)));
    }
    for t in threads {
        t.join().unwrap().unwrap();
    }
    wait_until("node 2 to be promoted", 30, || n1.node.membership().unwrap().1 == vec![1, 2]);
    assert_eq!(n1.node.membership().unwrap().2, vec![10, 11, 12, 13]);
    // And a write needs both voters now.
    n1.node.propose(&[grains("two-voters")]).unwrap();
    wait_until("node 2 to apply it", 20, || n2.applied_count("two-voters") == 1);
    n1.stop();
    n2.stop();
}

#[test]
fn a_group_larger_than_one_entry_is_refused_whole_or_cut_by_propose_all() {
    use halite_storage::format::RootsTree;
    let dir = tempfile::tempdir().unwrap();
    let n1 = start(dir.path(), 1, free_addr("127.0.0.1"), HashMap::new(), Opts { voters: vec![1], ..Default::default() });
    // A 66 MiB roots file: 66 chunks of 1 MiB, more than one entry holds.
    let content: Vec<u8> = (0..66u32 << 20).map(|i| (i % 251) as u8).collect();
    let chunks = halite_storage::state::roots_records(RootsTree::File, "base", "big.bin", 0o644, &content);
    assert!(matches!(n1.node.propose(&chunks), Err(NodeError::Refused(_))), "one proposal is one entry, and this one does not fit");
    assert!(n1.node.state().roots_file(RootsTree::File, "base", "big.bin").unwrap().is_none());
    let mut seen = 0;
    n1.node.propose_all(&[chunks], 2, &mut |done, _| seen = done).unwrap();
    assert_eq!(seen, 66);
    let (meta, data) = n1.node.state().roots_file(RootsTree::File, "base", "big.bin").unwrap().unwrap();
    assert_eq!((meta.chunks, data == content), (66, true));
    n1.stop();
    let log = RaftLog::open(&dir.path().join("n1/data/log")).unwrap();
    let mut sizes = Vec::new();
    log.for_each_entry(1, None, |_, e| {
        sizes.push(e.unwrap().records.len());
        Ok(())
    })
    .unwrap();
    assert_eq!(sizes.iter().sum::<usize>(), 66);
    assert!(sizes.len() >= 2, "{sizes:?}");
}

/// Proposals made at once share entries (groups), and each is still its own: applied
/// once on every member though its forwards are duplicated, and its caller answered
/// with the index of the entry that holds its records.
#[test]
fn concurrent_proposals_share_entries_and_each_is_applied_and_answered_once() {
    let dir = tempfile::tempdir().unwrap();
    let (n1, n2) = pair(dir.path(), Fault::Duplicate, Duration::from_secs(30));
    let n = 400;
    let mut pending = Vec::new();
    for i in 0..n {
        // Half from the learner (forwarded, each forward sent twice), half from the leader.
        let (m, who) = if i % 2 == 0 { (&n2, "l") } else { (&n1, "f") };
        let id = format!("g-{who}-{i}");
        pending.push((id.clone(), m.node.propose_async(&[grains(&id)]).unwrap()));
    }
    let answered: Vec<(String, u64)> = pending.into_iter().map(|(id, p)| (id, p.wait().unwrap())).collect();
    wait_until("the learner to apply every proposal", 30, || answered.iter().all(|(id, _)| n2.applied_count(id) == 1));
    for m in [&n1, &n2] {
        let applied = m.applied.lock().unwrap().clone();
        for (id, index) in &answered {
            let at: Vec<u64> = applied.iter().filter(|(_, g)| g == id).map(|(i, _)| *i).collect();
            assert_eq!(at, vec![*index], "{id}: applied once, in the entry its caller was told");
        }
    }
    let entries: std::collections::BTreeSet<u64> = answered.iter().map(|(_, i)| *i).collect();
    assert!(entries.len() < n, "{n} proposals made at once took {} entries: none was grouped", entries.len());
    n1.stop();
    n2.stop();
    // In the log, every proposal of the learner's is there under its own identity (some
    // twice: the duplicated forwards), and its sequence numbers are 1..=n/2.
    let mut seqs: Vec<u64> = copies_in_log(dir.path(), 2).into_iter().map(|id| id.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs, (1..=n as u64 / 2).collect::<Vec<_>>());
}

/// A bulk write (`propose_all`, as `cluster.sync_roots` makes) to two voters, the
/// follower behind a link that takes 0.4 s an entry: with eight entries in flight the
/// last of them waits over three seconds, past a two-second bound counted from its
/// proposal, yet entries apply every 0.4–1.2 s. Each entry is given the bound after the
/// one before it applied, so the whole write applies; once the link loses everything,
/// the next write fails within the bound.
#[test]
fn a_bulk_write_slower_than_the_proposal_bound_applies_while_it_progresses() {
    use halite_storage::format::RootsTree;
    let dir = tempfile::tempdir().unwrap();
    let bound = Duration::from_secs(2);
    let a1 = free_addr("127.0.0.1");
    // 1 MiB entries at 2.5 MiB/s.
    let n1 = start(dir.path(), 1, a1, HashMap::new(), Opts { voters: vec![1], auto_promote: true, fault: Fault::Throttle(5 << 19), timeout: bound, ..Default::default() });
    let a2 = free_addr("127.0.0.2");
    let n2 = start(dir.path(), 2, a2, [(1, a1)].into(), Opts { join: true, timeout: bound, ..Default::default() });
    n1.node.add_learner(2, a2).unwrap();
    wait_until("node 2 to be a voter", 30, || n1.node.membership().unwrap().1 == vec![1, 2]);
    let content: Vec<u8> = (0..16u32 << 20).map(|i| (i % 241) as u8).collect();
    let chunks = halite_storage::state::roots_records(RootsTree::File, "base", "bulk.bin", 0o644, &content);
    let groups: Vec<Vec<Record>> = chunks.iter().map(|c| vec![c.clone()]).collect();
    let started = std::time::Instant::now();
    let mut seen = 0;
    n1.node.propose_all(&groups, 8, &mut |done, _| seen = done).expect("a write that keeps moving applies");
    assert!(started.elapsed() > bound, "the write took {:?}: the link did not hold it back past the bound", started.elapsed());
    assert_eq!(seen, 16);
    let (_, data) = n1.node.state().roots_file(RootsTree::File, "base", "bulk.bin").unwrap().unwrap();
    assert!(data == content);
    wait_until("the follower to hold the file", 30, || n2.node.state().roots_file(RootsTree::File, "base", "bulk.bin").ok().flatten().is_some());
    // Nothing moves any more: the bound holds.
    n1.link.cut();
    let more = halite_storage::state::roots_records(RootsTree::File, "base", "stuck.bin", 0o644, &content[..2 << 20]);
    let stuck: Vec<Vec<Record>> = more.iter().map(|c| vec![c.clone()]).collect();
    match n1.node.propose_all(&stuck, 8, &mut |_, _| {}) {
        Err(NodeError::Timeout(_)) => {}
        other => panic!("a write that cannot commit was answered {other:?}"),
    }
    n1.stop();
    n2.stop();
}

/// A cluster member does not write a record kind its cluster's record set does not
/// have yet (a member's build may not read it: docs/operations.md, "Upgrading a
/// cluster"); every kind this build knows is in its own record set.
#[test]
fn a_record_kind_newer_than_the_clusters_record_set_is_not_written() {
    use halite_storage::format::{RecordKind, RECORD_SET};
    let recs = [Record::GrainsReport(GrainsReport { id: "m1".into(), grains: vec![0x80], time_ns: 1 })];
    assert_eq!(super::proposals::unwritable(&recs, RECORD_SET), None);
    assert_eq!(super::proposals::unwritable(&recs, 0), Some(RecordKind::GrainsReport));
    assert!(RecordKind::ALL.iter().all(|k| (1..=RECORD_SET).contains(&k.since())));
}
