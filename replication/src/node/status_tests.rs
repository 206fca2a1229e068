//! Readiness and view faults, end to end in-process: a lone node is ready once its log is
//! applied; a member restarted behind the others is ready only once it has applied
//! what they had committed; a member cut off from the majority is not ready; a view
//! that cannot be written leaves the node serving and is rebuilt once it can be.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use sha2::Digest;

use halite_storage::format::{KeySet, KeyState, RootsBlob, RootsTree};
use halite_storage::keys::{mmap::MmapKeys, Geometry};
use halite_storage::roots::{RootsDirs, RootsMaterialiser};
use halite_storage::views::Views;
use halite_storage::Record;

use super::{mailbox, DataDir, Node, NodeConfig, NodeError, Role};
use crate::testutil::wait_until;

fn geo() -> Geometry {
    Geometry { size: 4096, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 20 }
}

fn views(pki: &Path, roots: Option<&Path>) -> Views {
    let mut dirs = RootsDirs::default();
    if let Some(r) = roots {
        dirs.file.insert("base".into(), r.to_path_buf());
    }
    Views::new(Box::new(MmapKeys::open(pki, geo()).unwrap()), RootsMaterialiser::new(dirs))
}

fn key(id: &str) -> Record {
    Record::KeySet(KeySet { id: id.into(), state: KeyState::Pending, pub_key: format!("PUB-{id}").into_bytes(), time_ns: 1, expect: None, pending_below: None })
}

fn blob(path: &str, data: &[u8]) -> Record {
    Record::RootsBlob(RootsBlob {
        tree: RootsTree::File,
        saltenv: "base".into(),
        path: path.into(),
        mode: 0o644,
        sha256: sha2::Sha256::digest(data).to_vec(),
        size: data.len() as u64,
        chunk: 0,
        chunks: 1,
        data: data.to_vec(),
    })
}

fn propose_retrying(node: &Node, recs: &[Record]) -> u64 {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match node.propose(recs) {
            Ok(i) => return i,
            Err(NodeError::NotLeader | NodeError::Timeout(_)) if std::time::Instant::now() < end => std::thread::sleep(std::time::Duration::from_millis(100)),
            Err(e) => panic!("proposal failed: {e}"),
        }
    }
}

#[test]
fn a_lone_node_is_ready_once_its_log_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataDir::new(&dir.path().join("data"));
    let node = Node::start(&data, views(&dir.path().join("pki"), None), NodeConfig::default()).unwrap();
    let idx = node.propose(&[key("a"), key("b")]).unwrap();
    drop(node);
    let node = Node::start(&data, views(&dir.path().join("pki"), None), NodeConfig::default()).unwrap();
    wait_until("the restarted lone node to be ready", 10, || node.status().ready());
    let s = node.status().get();
    assert_eq!(s.role, Role::Leader);
    assert_eq!(s.leader, Some(1));
    assert!(s.applied >= idx, "{s:?}");
    assert!(s.catch_up_to.is_some_and(|t| s.applied >= t), "{s:?}");
    assert_eq!(s.lag(), 0);
    assert!(node.status().proposals() == 0);
    node.propose(&[key("c")]).unwrap();
    assert_eq!(node.status().proposals(), 1);
}

/// A founding member of a three-node group on 127.0.0.`id`.
fn member(root: &Path, id: u64, addrs: &HashMap<u64, std::net::SocketAddr>) -> (Node, Arc<crate::TcpTransport>) {
    let (inbox, mb) = mailbox();
    let peers = addrs.iter().filter(|(k, _)| **k != id).map(|(k, v)| (*k, *v)).collect();
    let t = crate::TcpTransport::start(id, addrs[&id], peers, crate::ClusterKey::from_secret("s"), Arc::new(move |m| inbox.deliver(m))).unwrap();
    let dir = root.join(format!("n{id}"));
    let cfg = NodeConfig { id, voters: vec![1, 2, 3], addrs: addrs.clone(), ..Default::default() };
    let node = Node::start_peered(&DataDir::new(&dir.join("data")), views(&dir.join("pki"), None), cfg, t.clone(), mb).unwrap();
    (node, t)
}

#[test]
fn a_member_is_ready_only_once_caught_up_and_not_while_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = crate::testutil::member_addrs(3);
    let mut nodes: HashMap<u64, (Node, Arc<crate::TcpTransport>)> = (1..=3).map(|i| (i, member(dir.path(), i, &addrs))).collect();
    wait_until("all three ready", 20, || (1..=3).all(|i| nodes[&i].0.status().ready()));
    // The leader sees every peer's progress.
    let leader = nodes[&1].0.leader().unwrap();
    propose_retrying(&nodes[&leader].0, &[key("first")]);
    let s = nodes[&leader].0.status().get();
    assert_eq!(s.role, Role::Leader);
    assert_eq!(s.peers.iter().map(|p| p.id).collect::<Vec<_>>(), (1..=3).filter(|i| *i != leader).collect::<Vec<_>>());
    // Member 3 (or whichever is not the leader) stops; the others take many writes.
    let behind = (1..=3).find(|i| *i != leader).unwrap();
    let (n, t) = nodes.remove(&behind).unwrap();
    n.stop();
    t.shutdown();
    let live: Vec<u64> = nodes.keys().copied().collect();
    let mut last = 0;
    for g in 0..40 {
        let recs: Vec<Record> = (0..250).map(|i| key(&format!("k{g}-{i}"))).collect();
        last = propose_retrying(&nodes[&live[0]].0, &recs);
    }
    let committed_before_restart = nodes[&live[0]].0.state().applied_index().unwrap();
    assert!(committed_before_restart >= last);
    // Back from its disk: once it says ready, it has applied all of that.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let back = member(dir.path(), behind, &addrs);
    wait_until("the restarted member to be ready", 30, || back.0.status().ready());
    let applied_when_ready = back.0.state().applied_index().unwrap();
    assert!(applied_when_ready >= committed_before_restart, "ready at {applied_when_ready}, the cluster had committed {committed_before_restart}");
    let s = back.0.status().get();
    assert!(s.catch_up_to.unwrap() >= committed_before_restart, "{s:?}");
    // Cut off: both others stop; the member loses its leader and is not ready.
    for (_, (n, t)) in nodes {
        n.stop();
        t.shutdown();
    }
    wait_until("the lone member to report not ready", 20, || !back.0.status().ready());
    assert_eq!(back.0.status().get().leader, None);
    back.0.stop();
    back.1.shutdown();
}

#[test]
fn a_view_that_cannot_be_written_is_dirty_and_rebuilt_later() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataDir::new(&dir.path().join("data"));
    let roots = dir.path().join("roots");
    std::fs::create_dir_all(roots.join("sub")).unwrap();
    let node = Node::start(&data, views(&dir.path().join("pki"), Some(&roots)), NodeConfig::default()).unwrap();
    node.propose(&[blob("sub/a.sls", b"one")]).unwrap();
    assert_eq!(std::fs::read(roots.join("sub/a.sls")).unwrap(), b"one");
    // The operator replaces the directory by a file: writes under it fail.
    std::fs::remove_dir_all(roots.join("sub")).unwrap();
    std::fs::write(roots.join("sub"), b"not a directory").unwrap();
    let before = node.status().view_errors();
    node.propose(&[blob("sub/a.sls", b"two"), blob("sub/b.sls", b"bee")]).unwrap();
    assert!(node.status().view_errors() > before);
    wait_until("the roots view reported dirty", 10, || node.status().get().dirty_views == vec!["roots"]);
    // The state machine and the key view go on.
    node.propose(&[key("still-served")]).unwrap();
    assert!(node.state().get_key("still-served").unwrap().is_some());
    let v = MmapKeys::open(&dir.path().join("pki"), geo()).unwrap();
    assert!(halite_storage::keys::KeyView::get_key(&v, "still-served").unwrap().is_some());
    assert!(node.status().ready());
    // Fixed: the view is rebuilt, with everything applied meanwhile.
    std::fs::remove_file(roots.join("sub")).unwrap();
    wait_until("the roots view rebuilt", 20, || node.status().get().dirty_views.is_empty());
    assert_eq!(std::fs::read(roots.join("sub/a.sls")).unwrap(), b"two");
    assert_eq!(std::fs::read(roots.join("sub/b.sls")).unwrap(), b"bee");
    // A restart while a view is dirty starts (the view is dirty again, not fatal).
    std::fs::remove_dir_all(roots.join("sub")).unwrap();
    std::fs::write(roots.join("sub"), b"again").unwrap();
    node.propose(&[blob("sub/c.sls", b"sea")]).unwrap();
    drop(node);
    let node = Node::start(&data, views(&dir.path().join("pki"), Some(&roots)), NodeConfig::default()).unwrap();
    wait_until("the roots view dirty after the restart", 10, || node.status().get().dirty_views.contains(&"roots"));
    node.propose(&[key("after-restart")]).unwrap();
    std::fs::remove_file(roots.join("sub")).unwrap();
    wait_until("the roots view rebuilt after the restart", 20, || roots.join("sub/c.sls").is_file() && node.status().get().dirty_views.is_empty());
}

/// A lone node without a reserve whose log write meets a full disk: the driver writes
/// it again until it is written, and meanwhile the published status (what `/metrics`
/// reads) says the disk is full; once freed the write lands, the proposal is answered
/// and the status says so.
#[test]
fn a_log_write_tried_again_on_a_full_disk_shows_the_disk_full() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = crate::testutil::Tmpfs::mount(&dir.path().join("data"), 32, "a_log_write_tried_again_on_a_full_disk_shows_the_disk_full") else { return };
    let node = Node::start(&DataDir::new(&disk.0), views(&dir.path().join("pki"), None), NodeConfig::default()).unwrap();
    node.propose(&[key("before")]).unwrap();
    assert_eq!(node.status().get().disk_full, None);
    disk.fill();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let big = |n: u64| Record::KeySet(KeySet { id: format!("during{n}"), state: KeyState::Pending, pub_key: vec![b'k'; 8 << 10], time_ns: 1, expect: None, pending_below: None });
    // The log's file has room allocated ahead: writes go on until it needs more.
    let written = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                node.propose(&[big(n)])?;
                n += 1;
            }
            Ok::<u64, NodeError>(n)
        });
        // Not `wait_until`: the disk is freed whatever is seen, so the writer ends.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut shown = false;
        while !shown && !writer.is_finished() && std::time::Instant::now() < end {
            shown = node.status().get().disk_full.is_some();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let waiting = !writer.is_finished();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        disk.free();
        let written = writer.join().unwrap();
        assert!(shown, "the status never said the disk is full while a log write was tried again");
        assert!(waiting, "a proposal was answered or refused instead of written again: {written:?}");
        written.expect("every proposal answered once written")
    });
    wait_until("the status to say writing again", 30, || node.status().get().disk_full.is_none());
    assert!(node.state().get_key(&format!("during{}", written - 1)).unwrap().is_some());
    drop(node);
}
