//! The node end to end, in-process: proposals committed and applied by one node and
//! across a restart, views recovered at start, and groups of three over the sealed TCP
//! transport on 127.0.0.1/.2/.3 (election, forwarding, failover, catch-up, joining
//! learners, promotion, restart from the log's address book).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_storage::format::{KeySet, KeyState};
use halite_storage::keys::{mmap::MmapKeys, BankState, Geometry, KeyView};
use halite_storage::roots::{RootsDirs, RootsMaterialiser};
use halite_storage::state::StateMachine;
use halite_storage::views::Views;
use halite_storage::Record;

use super::{mailbox, DataDir, Node, NodeConfig, NodeError};
use crate::testutil::{free_addr, wait_until};

fn geo() -> Geometry {
    Geometry { size: 4096, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 20 }
}

fn views(pki: &Path) -> Views {
    Views::new(Box::new(MmapKeys::open(pki, geo()).unwrap()), RootsMaterialiser::new(RootsDirs::default()))
}

fn key(id: &str, state: KeyState) -> Record {
    Record::KeySet(KeySet { id: id.into(), state, pub_key: format!("PUB-{id}").into_bytes(), time_ns: 1, expect: None, pending_below: None })
}

#[test]
fn propose_commit_apply_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataDir::new(&dir.path().join("data"));
    let pki = dir.path().join("pki");
    let node = Arc::new(Node::start(&data, views(&pki), NodeConfig::default()).unwrap());
    // Concurrent proposers: all answered, all applied.
    let mut handles = Vec::new();
    for t in 0..8 {
        let node = node.clone();
        handles.push(std::thread::spawn(move || {
            for i in 0..50 {
                node.propose(&[key(&format!("m{t}-{i}"), KeyState::Pending)]).unwrap();
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    let idx = node.propose(&[key("m0-0", KeyState::Accepted), key("m0-1", KeyState::Deleted)]).unwrap();
    assert_eq!(node.state().applied_index().unwrap(), idx);
    assert_eq!(node.state().count("keys").unwrap(), 399);
    // A bad record is refused before anything is proposed.
    assert!(matches!(node.propose(&[key("../x", KeyState::Pending)]), Err(NodeError::Refused(_))));
    drop(node);
    // The view reflects the state; a restart finds everything.
    let v = MmapKeys::open(&pki, geo()).unwrap();
    assert_eq!(v.get_key("m0-0").unwrap().unwrap().state, BankState::Accepted);
    assert!(v.get_key("m0-1").unwrap().is_none());
    assert_eq!(v.list().unwrap().minions_pre.len(), 398);
    let node = Node::start(&data, views(&pki), NodeConfig::default()).unwrap();
    assert_eq!(node.state().applied_index().unwrap(), idx);
    let idx2 = node.propose(&[key("after-restart", KeyState::Pending)]).unwrap();
    assert!(idx2 > idx);
    assert_eq!(node.state().count("keys").unwrap(), 400);
}

#[test]
fn a_node_knows_where_its_log_ended_when_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataDir::new(&dir.path().join("data"));
    let pki = dir.path().join("pki");
    let node = Node::start(&data, views(&pki), NodeConfig::default()).unwrap();
    let founded = node.last_index_at_start();
    let idx = node.propose(&[key("k1", KeyState::Pending)]).unwrap();
    assert!(idx > founded, "{idx} {founded}");
    assert_eq!(node.last_index_at_start(), founded, "what the log held at start, not its end");
    drop(node);
    let node = Node::start(&data, views(&pki), NodeConfig::default()).unwrap();
    assert_eq!(node.last_index_at_start(), node.log().last_entry_index().unwrap());
    assert!(node.last_index_at_start() >= idx);
}

#[test]
fn views_behind_are_resynced_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataDir::new(&dir.path().join("data"));
    let pki = dir.path().join("pki");
    let node = Node::start(&data, views(&pki), NodeConfig::default()).unwrap();
    node.propose(&[key("a", KeyState::Accepted), key("b", KeyState::Rejected)]).unwrap();
    drop(node);
    // As if the process died before the views were synced.
    StateMachine::open(&data.state()).unwrap().set_views_index(0).unwrap();
    // Lose the view entirely.
    for f in std::fs::read_dir(&pki).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let node = Node::start(&data, views(&pki), NodeConfig::default()).unwrap();
    drop(node);
    let v = MmapKeys::open(&pki, geo()).unwrap();
    assert_eq!(v.list().unwrap().minions, vec!["a".to_string()]);
    assert_eq!(v.list().unwrap().minions_rejected, vec!["b".to_string()]);
}

/// A founding member of a three-node group on 127.0.0.`id` with the sealed transport.
fn member(root: &Path, id: u64, addrs: &HashMap<u64, std::net::SocketAddr>, secret: &str) -> (Node, Arc<crate::TcpTransport>) {
    let (inbox, mb) = mailbox();
    let peers = addrs.iter().filter(|(k, _)| **k != id).map(|(k, v)| (*k, *v)).collect();
    let t = crate::TcpTransport::start(id, addrs[&id], peers, crate::ClusterKey::from_secret(secret), Arc::new(move |m| inbox.deliver(m))).unwrap();
    let dir = root.join(format!("n{id}"));
    let cfg = NodeConfig { id, voters: vec![1, 2, 3], addrs: addrs.clone(), ..Default::default() };
    let node = Node::start_peered(&DataDir::new(&dir.join("data")), views(&dir.join("pki")), cfg, t.clone(), mb).unwrap();
    (node, t)
}


/// Proposes on `node`, retrying while no leader is known or the leader changes.
fn propose_retrying(node: &Node, recs: &[Record]) -> u64 {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        match node.propose(recs) {
            Ok(i) => return i,
            Err(NodeError::NotLeader | NodeError::Timeout(_)) if Instant::now() < end => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("proposal failed: {e}"),
        }
    }
}

#[test]
fn three_nodes_over_tcp_elect_replicate_fail_over_and_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = crate::testutil::member_addrs(3);
    let mut nodes: HashMap<u64, (Node, Arc<crate::TcpTransport>)> = (1..=3).map(|i| (i, member(dir.path(), i, &addrs, "shared secret"))).collect();
    // One leader, known to all.
    let mut leader = 0;
    wait_until("a leader all three agree on", 20, || {
        let l: Vec<Option<u64>> = (1..=3).map(|i| nodes[&i].0.leader()).collect();
        leader = l[0].unwrap_or(0);
        leader != 0 && l.iter().all(|x| *x == Some(leader))
    });
    // A follower's proposal is forwarded, committed by the majority, applied by all.
    let follower = (1..=3).find(|i| *i != leader).unwrap();
    propose_retrying(&nodes[&follower].0, &[key("a", KeyState::Pending)]);
    wait_until("the record on every node", 10, || (1..=3).all(|i| nodes[&i].0.state().get_key("a").unwrap().is_some()));
    // The leader goes away: the other two elect a new one and keep committing.
    let (old, t) = nodes.remove(&leader).unwrap();
    old.stop();
    t.shutdown();
    let rest: Vec<u64> = nodes.keys().copied().collect();
    wait_until("a new leader", 20, || nodes[&rest[0]].0.leader().is_some_and(|l| l != leader));
    propose_retrying(&nodes[&rest[1]].0, &[key("b", KeyState::Accepted)]);
    wait_until("b on the two live nodes", 10, || rest.iter().all(|i| nodes[i].0.state().get_key("b").unwrap().is_some()));
    // The old leader comes back from its own disk and catches up from the log.
    std::thread::sleep(Duration::from_millis(300));
    let back = member(dir.path(), leader, &addrs, "shared secret");
    wait_until("the restarted node to catch up", 20, || back.0.state().get_key("b").unwrap().is_some());
    assert_eq!(back.0.state().get_key("a").unwrap().unwrap().state, BankState::Pending);
    // Every node applied the same records at the same indexes.
    let applied: Vec<u64> = rest.iter().map(|i| nodes[i].0.state().applied_index().unwrap()).collect();
    wait_until("equal applied indexes", 10, || back.0.state().applied_index().unwrap() == applied[0]);
    for (_, (n, t)) in nodes {
        n.stop();
        t.shutdown();
    }
    back.0.stop();
    back.1.shutdown();
}

/// A node with the sealed transport; `voters` empty and `join` for a joiner.
fn node_at(root: &Path, id: u64, listen: std::net::SocketAddr, peers: HashMap<u64, std::net::SocketAddr>, voters: Vec<u64>, join: bool) -> (Node, Arc<crate::TcpTransport>) {
    let (inbox, mb) = mailbox();
    let t = crate::TcpTransport::start(id, listen, peers, crate::ClusterKey::from_secret("s"), Arc::new(move |m| inbox.deliver(m))).unwrap();
    let dir = root.join(format!("n{id}"));
    let cfg = NodeConfig { id, voters, join, addrs: [(id, listen)].into(), auto_promote: false, ..Default::default() };
    let node = Node::start_peered(&DataDir::new(&dir.join("data")), views(&dir.join("pki")), cfg, t.clone(), mb).unwrap();
    (node, t)
}


#[test]
fn joiners_catch_up_as_learners_are_promoted_and_survive_the_founder() {
    let dir = tempfile::tempdir().unwrap();
    let a1 = free_addr("127.0.0.1");
    let (n1, t1) = node_at(dir.path(), 1, a1, HashMap::new(), vec![1], false);
    propose_retrying(&n1, &[key("before-join", KeyState::Accepted)]);
    // Node 2 starts empty, knowing only the founder; the founder adds it as a learner
    // (its address travels in the log) and it catches up from the log.
    let a2 = free_addr("127.0.0.2");
    let (n2, t2) = node_at(dir.path(), 2, a2, [(1, a1)].into(), vec![], true);
    n1.add_learner(2, a2).unwrap();
    wait_until("the learner to catch up", 20, || n2.state().get_key("before-join").unwrap().is_some());
    assert_eq!(n1.membership().unwrap().2, vec![2], "2 is a learner");
    n1.add_voter(2, None).unwrap();
    assert_eq!(n1.membership().unwrap().1, vec![1, 2]);
    // A third joins the same way; a proposal on the new voter is forwarded and applied.
    let a3 = free_addr("127.0.0.3");
    let (n3, t3) = node_at(dir.path(), 3, a3, [(1, a1)].into(), vec![], true);
    n2.add_learner(3, a3).unwrap();
    n1.add_voter(3, None).unwrap();
    propose_retrying(&n2, &[key("after-join", KeyState::Pending)]);
    wait_until("the third node to have everything", 20, || n3.state().get_key("after-join").unwrap().is_some());
    wait_until("everyone to see three voters", 20, || n3.membership().unwrap().1 == vec![1, 2, 3]);
    // The founder goes away; 2 and 3 (which learned each other's address from the log)
    // elect a leader and commit.
    n1.stop();
    t1.shutdown();
    propose_retrying(&n3, &[key("without-founder", KeyState::Pending)]);
    wait_until("both survivors to apply", 20, || [&n2, &n3].iter().all(|n| n.state().get_key("without-founder").unwrap().is_some()));
    // Node 3 goes down; node 1 comes back from its disk knowing no peer (its log's
    // address book is enough) and with node 2 makes a quorum again.
    n3.stop();
    t3.shutdown();
    std::thread::sleep(Duration::from_millis(300));
    let (n1, t1) = node_at(dir.path(), 1, a1, HashMap::new(), vec![1], false);
    propose_retrying(&n2, &[key("while-3-was-down", KeyState::Pending)]);
    // Node 3 restarts the same way and catches up.
    let (n3, t3) = node_at(dir.path(), 3, a3, HashMap::new(), vec![], true);
    wait_until("the restarted node to catch up", 30, || n3.state().get_key("while-3-was-down").unwrap().is_some());
    assert_eq!(n3.membership().unwrap().1, vec![1, 2, 3]);
    for (n, t) in [(n1, t1), (n2, t2), (n3, t3)] {
        n.stop();
        t.shutdown();
    }
}

/// A lone node with a small `cluster_max_log_size` compacts its log again and again
/// while writes go on (each compaction drops the entries and the older snapshot), and a
/// restart reads the snapshot and the tail only and finds the same state.
#[test]
fn lone_node_compacts_while_writing_and_restarts_from_snapshot_and_tail() {
    use halite_storage::compaction::CompactionLimits;
    use halite_storage::log::RaftLog;
    use halite_storage::snapshot::SnapshotStore;
    let dir = tempfile::tempdir().unwrap();
    let data = DataDir::new(&dir.path().join("data"));
    let pki = dir.path().join("pki");
    let cfg = NodeConfig { compaction: CompactionLimits { max_entries: Some(60), max_bytes: None, min_entries: 20 }, ..Default::default() };
    let node = Node::start(&data, views(&pki), cfg.clone()).unwrap();
    // Write until the log was compacted through three different snapshots (the writes
    // outpace the policy's tick, so each compaction happens while writes go on); a
    // bound on the writes makes a node that never compacts fail instead of hang.
    let mut seen = std::collections::BTreeSet::new();
    let mut i = 0;
    while seen.len() < 3 {
        assert!(i < 50_000, "the log was compacted through only {seen:?} after {i} writes");
        node.propose(&[key(&format!("m{i}"), KeyState::Pending)]).unwrap();
        if i % 10 == 0 {
            node.propose(&[key(&format!("m{}", i / 2), KeyState::Accepted)]).unwrap();
        }
        let s = node.log.snapshot_meta().unwrap().index;
        if s > 0 {
            seen.insert(s);
        }
        i += 1;
    }
    let last = node.propose(&[key("last", KeyState::Rejected)]).unwrap();
    let before = node.state().digest().unwrap();
    assert_eq!(before.applied_index, last);
    let snap = node.log.snapshot_meta().unwrap().index;
    drop(node);
    // The log starts after its snapshot; only that snapshot is kept.
    let log = RaftLog::open(&data.log()).unwrap();
    assert_eq!(log.first_entry_index(), Some(snap + 1).filter(|f| *f <= last));
    assert!(snap >= *seen.iter().next_back().unwrap());
    assert_eq!(SnapshotStore::open(&data.snapshots()).unwrap().list().unwrap(), vec![snap]);
    drop(log);
    // A restart reads the snapshot and the tail: the same state, and writes go on.
    // (A restarted node elects itself in a new term and appends that term's empty
    // entry: the applied index moves by one, the applied state does not.)
    let state = |d: halite_storage::state::StateDigest| (d.items, d.sha256);
    let node = Node::start(&data, views(&pki), cfg).unwrap();
    assert_eq!(state(node.state().digest().unwrap()), state(before));
    let v = MmapKeys::open(&pki, geo()).unwrap();
    assert_eq!(v.get_key("last").unwrap().unwrap().state, BankState::Rejected);
    assert_eq!(v.get_key("m0").unwrap().unwrap().state, BankState::Accepted);
    assert!(node.propose(&[key("after", KeyState::Pending)]).unwrap() > last);
    // The restarted node was also started with the state machine wiped: installed from
    // the snapshot at start, then the tail replayed, to the same digest.
    let after = node.state().digest().unwrap();
    drop(node);
    std::fs::remove_dir_all(data.state()).unwrap();
    let node = Node::start(&data, views(&pki), NodeConfig::default()).unwrap();
    // The tail is applied by the driver thread after the start returns.
    wait_until("the tail applied", 60, || node.state().applied_index().unwrap() > after.applied_index);
    assert_eq!(state(node.state().digest().unwrap()), state(after));
    assert!(node.state().applied_index().unwrap() > snap);
}
