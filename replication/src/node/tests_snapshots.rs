//! Snapshot transfer end to end, in-process over the sealed TCP transport: a leader
//! whose log is compacted brings new members in by sending its snapshot, then the log's
//! tail; every member ends with the same state digest.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use halite_storage::compaction::CompactionLimits;
use halite_storage::format::{KeySet, KeyState};
use halite_storage::keys::{mmap::MmapKeys, BankState, Geometry, KeyView};
use halite_storage::roots::{RootsDirs, RootsMaterialiser};
use halite_storage::state::StateDigest;
use halite_storage::views::Views;
use halite_storage::Record;

use super::{mailbox, DataDir, Node, NodeConfig};
use crate::testutil::{free_addr, wait_until};

fn geo() -> Geometry {
    Geometry { size: 4096, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 20 }
}

fn key(id: &str, state: KeyState) -> Record {
    Record::KeySet(KeySet { id: id.into(), state, pub_key: format!("PUB-{id}").into_bytes(), time_ns: 1, expect: None, pending_below: None })
}

/// Small limits, so the log is compacted after a few dozen entries.
fn limits() -> CompactionLimits {
    CompactionLimits { max_entries: Some(40), max_bytes: None, min_entries: 20 }
}

fn start(root: &Path, id: u64, listen: SocketAddr, peers: HashMap<u64, SocketAddr>, voters: Vec<u64>, join: bool) -> (Node, Arc<crate::TcpTransport>) {
    let (inbox, mb) = mailbox();
    let t = crate::TcpTransport::start(id, listen, peers, crate::ClusterKey::from_secret("s"), Arc::new(move |m| inbox.deliver(m))).unwrap();
    let dir = root.join(format!("n{id}"));
    let views = Views::new(Box::new(MmapKeys::open(&dir.join("pki"), geo()).unwrap()), RootsMaterialiser::new(RootsDirs::default()));
    let cfg = NodeConfig { id, voters, join, addrs: [(id, listen)].into(), auto_promote: false, compaction: limits(), ..Default::default() };
    let node = Node::start_peered(&DataDir::new(&dir.join("data")), views, cfg, t.clone(), mb).unwrap();
    (node, t)
}

/// The applied state without the index (each member's own bookkeeping aside).
fn state(d: StateDigest) -> (u64, [u8; 32]) {
    (d.items, d.sha256)
}

/// A founder on 127.0.0.1 that wrote keys `m0`, `m1`, ... (every third accepted)
/// until its log was compacted (bounded: a node that never compacts fails here rather
/// than hang).
fn compacted_founder(root: &Path) -> (Node, Arc<crate::TcpTransport>, SocketAddr) {
    let a1 = free_addr("127.0.0.1");
    let (n1, t1) = start(root, 1, a1, HashMap::new(), vec![1], false);
    let mut i = 0;
    while n1.log.snapshot_meta().unwrap().index == 0 {
        assert!(i < 20_000, "no compaction after {i} writes");
        n1.propose(&[key(&format!("m{i}"), if i % 3 == 0 { KeyState::Accepted } else { KeyState::Pending })]).unwrap();
        i += 1;
    }
    (n1, t1, a1)
}

#[test]
fn members_joining_a_compacted_log_catch_up_by_snapshot_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (n1, t1, a1) = compacted_founder(dir.path());
    assert!(n1.log.first_entry_index().unwrap_or(u64::MAX) > 1, "the log no longer starts at 1");
    // A new member: its log is empty, the entries it needs are gone; it gets the
    // snapshot, then the tail.
    let a2 = free_addr("127.0.0.2");
    let (n2, t2) = start(dir.path(), 2, a2, [(1, a1)].into(), vec![], true);
    n1.add_learner(2, a2).unwrap();
    let last = n1.propose(&[key("after-learner", KeyState::Rejected)]).unwrap();
    wait_until("the learner to catch up", 60, || n2.state().applied_index().unwrap() >= last);
    assert!(n2.log.snapshot_meta().unwrap().index > 0, "the learner installed a snapshot");
    assert_eq!(n2.state().get_key("m0").unwrap().unwrap().state, BankState::Accepted);
    // Its views were rebuilt from the installed state, then followed the tail.
    let v = MmapKeys::open(&dir.path().join("n2/pki"), geo()).unwrap();
    wait_until("the learner's view", 30, || v.get_key("after-learner").ok().flatten().is_some());
    assert_eq!(v.get_key("m0").unwrap().unwrap().state, BankState::Accepted);
    n1.add_voter(2, None).unwrap();
    // Writes go on (compacting again on both); a third member joins the same way.
    for j in 0..100 {
        n1.propose(&[key(&format!("more{j}"), KeyState::Pending)]).unwrap();
    }
    let a3 = free_addr("127.0.0.3");
    let (n3, t3) = start(dir.path(), 3, a3, [(1, a1)].into(), vec![], true);
    n1.add_learner(3, a3).unwrap();
    n1.add_voter(3, None).unwrap();
    let last = n2.propose(&[key("last", KeyState::Accepted)]).unwrap();
    let nodes = [&n1, &n2, &n3];
    wait_until("every member to apply the last entry", 60, || nodes.iter().all(|n| n.state().applied_index().unwrap() >= last));
    assert!(n3.log.snapshot_meta().unwrap().index > 0, "the third member installed a snapshot");
    // The same applied state on every member (taken when no write is in flight).
    wait_until("equal applied indexes", 30, || {
        let a: Vec<u64> = nodes.iter().map(|n| n.state().applied_index().unwrap()).collect();
        a.iter().all(|x| *x == a[0])
    });
    let d1 = state(n1.state().digest().unwrap());
    assert_eq!(state(n2.state().digest().unwrap()), d1);
    assert_eq!(state(n3.state().digest().unwrap()), d1);
    assert_eq!(n3.membership().unwrap().1, vec![1, 2, 3]);
    for (n, t) in [(n1, t1), (n2, t2), (n3, t3)] {
        n.stop();
        t.shutdown();
    }
}

/// A new member whose state machine's filesystem is full when the leader's snapshot
/// arrives (its log and snapshot store on another, so the transfer completes): the log
/// records the snapshot, the install meets the full disk and the member holds, the same
/// node running; once space is freed it installs the snapshot, follows the tail, and
/// ends with the leader's state.
#[test]
fn a_member_whose_snapshot_install_met_a_full_disk_installs_it_once_freed() {
    let dir = tempfile::tempdir().unwrap();
    let (n1, t1, a1) = compacted_founder(dir.path());
    // The member's data directory: a small filesystem for its state machine, its log
    // and snapshot store elsewhere.
    let data = dir.path().join("n2/data");
    let Some(disk) = crate::testutil::Tmpfs::mount(&data, 32, "a_member_whose_snapshot_install_met_a_full_disk_installs_it_once_freed") else { return };
    for sub in ["log", "snapshots"] {
        let elsewhere = dir.path().join(format!("n2-{sub}"));
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, data.join(sub)).unwrap();
    }
    let a2 = free_addr("127.0.0.2");
    let (n2, t2) = start(dir.path(), 2, a2, [(1, a1)].into(), vec![], true);
    disk.fill();
    n1.add_learner(2, a2).unwrap();
    wait_until("the member to hold for want of space", 60, || n2.status().disk_full().is_some());
    assert!(n2.log.snapshot_meta().unwrap().index > 0, "the log records the snapshot");
    assert_eq!(n2.state().applied_index().unwrap(), 0, "the old state is served");
    let last = n1.propose(&[key("while-full", KeyState::Rejected)]).unwrap();

    disk.free();
    wait_until("the member to install the snapshot and follow the tail", 60, || n2.state().applied_index().unwrap_or(0) >= last);
    assert_eq!(n2.status().disk_full(), None);
    assert_eq!(n2.state().get_key("m0").unwrap().unwrap().state, BankState::Accepted);
    let v = MmapKeys::open(&dir.path().join("n2/pki"), geo()).unwrap();
    wait_until("the member's view", 30, || v.get_key("while-full").ok().flatten().is_some());
    let last = n2.propose(&[key("after", KeyState::Accepted)]).unwrap();
    wait_until("both to apply the last entry", 30, || n1.state().applied_index().unwrap() >= last && n2.state().applied_index().unwrap() >= last);
    wait_until("equal applied indexes", 30, || n1.state().applied_index().unwrap() == n2.state().applied_index().unwrap());
    assert_eq!(state(n2.state().digest().unwrap()), state(n1.state().digest().unwrap()));
    for (n, t) in [(n1, t1), (n2, t2)] {
        n.stop();
        t.shutdown();
    }
    drop(disk);
}
