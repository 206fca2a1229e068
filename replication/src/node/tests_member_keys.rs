//! The member key book end to end, in-process over the sealed TCP transport, each member
//! with a key pair of its own: founders record their keys, a joiner's key comes with its
//! join, every member (a restarted one included, before it talks to anyone) refuses a
//! holder of the secret that claims a member's id with another key, a removed member's
//! key opens no session, and a member that joins after compaction learns every key from
//! the snapshot.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use halite_storage::compaction::CompactionLimits;
use halite_storage::format::{KeySet, KeyState, RECORD_SET, RELEASE};
use halite_storage::keys::{mmap::MmapKeys, Geometry};
use halite_storage::roots::{RootsDirs, RootsMaterialiser};
use halite_storage::views::Views;
use halite_storage::Record;
use raft::eraftpb::{Message, MessageType};

use super::{mailbox, DataDir, Node, NodeConfig, NodeError};
use crate::testutil::{free_addr, wait_until};
use crate::transport::identity::{MemberKey, PeerKeys};
use crate::{join, member_id, ClusterKey, Credentials, Outbox, TcpTransport};

type Key = [u8; 32];

fn key(id: &str) -> Record {
    Record::KeySet(KeySet { id: id.into(), state: KeyState::Pending, pub_key: format!("PUB-{id}").into_bytes(), time_ns: 1, expect: None, pending_below: None })
}

/// Credentials with a fresh key pair of their own.
fn creds() -> Credentials {
    Credentials::new(ClusterKey::from_secret("s"), MemberKey::generate().unwrap(), Arc::new(PeerKeys::default()))
}

/// Founders `1..=n`, each with a key pair of its own and every other founder's key
/// pinned (the founding configuration: the master pins `peers/<name>.pub`).
fn founders(n: u64) -> Vec<(u64, Credentials)> {
    let f: Vec<(u64, Credentials)> = (1..=n).map(|i| (i, creds())).collect();
    for (i, c) in &f {
        for (j, o) in &f {
            if i != j {
                c.peers.pin(*j, o.member.public());
            }
        }
    }
    f
}

struct Member {
    node: Node,
    t: Arc<TcpTransport>,
    key: Key,
}

struct Opts<'a> {
    voters: Vec<u64>,
    join: bool,
    addrs: HashMap<u64, SocketAddr>,
    compaction: CompactionLimits,
    creds: &'a Credentials,
    joins: bool,
}

/// A member `id` at `listen` with its own key, answering join requests if `o.joins`
/// (the handshake then holds a handle of the node for as long as the transport lives).
fn start(root: &Path, id: u64, listen: SocketAddr, peers: HashMap<u64, SocketAddr>, o: Opts) -> (Member, Arc<join::Handshake>) {
    let (inbox, mb) = mailbox();
    let t = TcpTransport::start(id, listen, peers, o.creds.clone(), Arc::new(move |m| inbox.deliver(m))).unwrap();
    let slot = Arc::new(OnceLock::new());
    let hs = join::serve(&t, id, listen, Arc::new(|| None), if o.joins { slot.clone() } else { Arc::new(OnceLock::new()) });
    let dir = root.join(format!("n{id}"));
    let views = Views::new(Box::new(MmapKeys::open(&dir.join("pki"), Geometry { size: 4096, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 20 }).unwrap()), RootsMaterialiser::new(RootsDirs::default()));
    let cfg = NodeConfig { id, voters: o.voters, join: o.join, addrs: o.addrs, compaction: o.compaction, member_key: Some(o.creds.member.public()), ..Default::default() };
    let node = Node::start_peered(&DataDir::new(&dir.join("data")), views, cfg, t.clone(), mb).unwrap();
    let _ = slot.set(node.handle());
    (Member { node, t, key: o.creds.member.public() }, hs)
}

fn propose_retrying(node: &Node, recs: &[Record]) -> u64 {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match node.propose(recs) {
            Ok(i) => return i,
            Err(NodeError::NotLeader | NodeError::Timeout(_)) if std::time::Instant::now() < end => std::thread::sleep(std::time::Duration::from_millis(100)),
            Err(e) => panic!("proposal failed: {e}"),
        }
    }
}

/// A transport claiming member `claim` with a key of its own (it holds the secret), that
/// opens a handshake with `target` at `addr`.
fn impostor(claim: u64, target: u64, addr: SocketAddr) -> Arc<TcpTransport> {
    let t = TcpTransport::start(claim, free_addr("127.0.0.9"), [(target, addr)].into(), creds(), Arc::new(|_| {})).unwrap();
    t.introduce();
    t
}

fn stop(m: Member) {
    m.node.stop();
    m.t.shutdown();
}

#[test]
fn keys_come_from_the_log_an_impostor_is_refused_everywhere_and_a_removed_member_cannot_speak() {
    let _ = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).with_test_writer().try_init();
    let dir = tempfile::tempdir().unwrap();
    let addrs = crate::testutil::member_addrs(3);
    let founders = founders(3);
    let mut m: BTreeMap<u64, Member> = founders
        .iter()
        .map(|(i, c)| {
            let peers = addrs.iter().filter(|(k, _)| *k != i).map(|(k, v)| (*k, *v)).collect();
            let o = Opts { voters: vec![1, 2, 3], join: false, addrs: addrs.clone(), compaction: CompactionLimits::default(), creds: c, joins: *i == 2 };
            (*i, start(dir.path(), *i, addrs[i], peers, o).0)
        })
        .collect();
    // Each founder records its own key once a leader exists; every member applies all.
    let want: BTreeMap<u64, Key> = m.iter().map(|(i, x)| (*i, x.key)).collect();
    wait_until("every founder's key in every member's applied state", 30, || m.values().all(|x| x.node.state().member_keys().unwrap() == want));
    // The transports learn them from the applied state, just after it (an effect of the
    // apply): waited for, not asserted at once.
    wait_until("and in every transport", 30, || m.values().all(|x| x.t.peer_keys().book() == want));
    // And its build (`driver/member_releases.rs`): the cluster's record set is this build's.
    let builds = |m: &BTreeMap<u64, Member>, ids: &[u64]| {
        m.values().all(|x| {
            let r = x.node.state().member_releases().unwrap();
            r.keys().copied().collect::<Vec<_>>() == ids && r.values().all(|b| b.record_set == RECORD_SET && b.release == RELEASE)
        })
    };
    wait_until("every founder's build in every member's applied state", 30, || builds(&m, &[1, 2, 3]));
    wait_until("the cluster's record set on every member", 20, || m.values().all(|x| x.node.handle().cluster_record_set() == RECORD_SET));

    // A joiner asks member 2 to join; its key travels in the membership change.
    let jid = member_id("n4");
    let ja = free_addr("127.0.0.4");
    let jc = creds();
    let o = Opts { voters: vec![], join: true, addrs: [(jid, ja)].into(), compaction: CompactionLimits::default(), creds: &jc, joins: true };
    // (It knows every founder's address, as a joiner does from the welcomes.)
    let (j, jhs) = start(dir.path(), jid, ja, addrs.clone(), o);
    jhs.request("n4".into(), 0, (2, addrs[&2]), j.node.handle());
    let mut want = want;
    want.insert(jid, j.key);
    m.insert(jid, j);
    wait_until("the joiner's key in every member's applied state", 60, || m.values().all(|x| x.node.state().member_keys().unwrap() == want));
    let mut ids: Vec<u64> = vec![1, 2, 3, jid];
    ids.sort_unstable();
    wait_until("the joiner's build in every member's applied state", 60, || builds(&m, &ids));
    let last = propose_retrying(&m[&jid].node, &[key("from-the-joiner")]);
    wait_until("the joiner's proposal applied everywhere", 30, || m.values().all(|x| x.node.state().applied_index().unwrap() >= last));

    // A holder of the secret with another key claiming member 3 is refused by every
    // other member, the joiner included.
    let before: BTreeMap<u64, u64> = m.iter().map(|(i, x)| (*i, x.t.refused("peer_key_mismatch"))).collect();
    for target in [1, 2, jid] {
        let imp = impostor(3, target, m[&target].t.local_addr());
        wait_until("the impostor refused", 20, || m[&target].t.refused("peer_key_mismatch") > before[&target]);
        imp.shutdown();
    }

    // Member 1 restarted with a transport that never talked to anyone (no pins, nothing
    // learned): the book it reads at start from its state machine refuses the impostor.
    let Member { node, t, .. } = m.remove(&1).unwrap();
    node.stop();
    t.shutdown();
    let peers = addrs.iter().filter(|(k, _)| **k != 1).map(|(k, v)| (*k, *v)).collect();
    let c1 = Credentials::new(ClusterKey::from_secret("s"), MemberKey::from_pem(&founders[0].1.member.to_pem().unwrap()).unwrap(), Arc::new(PeerKeys::default()));
    let o = Opts { voters: vec![1, 2, 3], join: false, addrs: addrs.clone(), compaction: CompactionLimits::default(), creds: &c1, joins: false };
    let (m1, _) = start(dir.path(), 1, addrs[&1], peers, o);
    wait_until("the restarted member's book", 20, || m1.t.peer_keys().book() == want);
    let imp = impostor(3, 1, m1.t.local_addr());
    wait_until("the impostor refused by the restarted member", 20, || m1.t.refused("peer_key_mismatch") > 0);
    imp.shutdown();
    m.insert(1, m1);

    // The joiner is removed: its key leaves the book on every member, and raft frames
    // it sends are refused (`not_a_member`), never delivered.
    propose_retrying(&m[&1].node, &[key("before-removal")]);
    let remover = m[&1].node.handle();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while let Err(e) = remover.remove_member(jid) {
        assert!(std::time::Instant::now() < end, "removal failed: {e}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    want.remove(&jid);
    let live = [1, 2, 3];
    wait_until("the removed member's key gone everywhere", 30, || live.iter().all(|i| m[i].node.state().member_keys().unwrap() == want && m[i].t.peer_keys().book() == want));
    assert!(live.iter().all(|i| !m[i].node.state().member_releases().unwrap().contains_key(&jid)), "the removed member's build is gone with it");
    let term = m[&1].node.membership().unwrap().0;
    let removed = &m[&jid].t;
    let not_member_before = m[&1].t.refused("not_a_member");
    wait_until("the removed member's frames refused", 30, || {
        let mut hb = Message::default();
        hb.set_msg_type(MessageType::MsgHeartbeat);
        (hb.from, hb.to, hb.term) = (jid, 1, term + 1000);
        Outbox::send(&**removed, vec![hb]);
        m[&1].t.refused("not_a_member") > not_member_before
    });
    assert!(m[&1].node.membership().unwrap().0 < term + 1000, "no frame of the removed member was delivered");
    // The cluster goes on without it.
    propose_retrying(&m[&2].node, &[key("after-removal")]);
    for (_, x) in m {
        stop(x);
    }
}

#[test]
fn a_member_joining_after_compaction_learns_every_key_from_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let limits = CompactionLimits { max_entries: Some(40), max_bytes: None, min_entries: 20 };
    let a1 = free_addr("127.0.0.1");
    let c1 = creds();
    let o = Opts { voters: vec![1], join: false, addrs: [(1, a1)].into(), compaction: limits, creds: &c1, joins: false };
    let (m1, _) = start(dir.path(), 1, a1, HashMap::new(), o);
    wait_until("the founder's key recorded", 30, || m1.node.state().member_key(1).unwrap() == Some(m1.key));
    let recorded_by = m1.node.state().applied_index().unwrap();
    // Write until the entry that recorded the key is compacted away: only the snapshot
    // can tell the joiner.
    let mut i = 0;
    while m1.node.log().first_entry_index().unwrap_or(0) <= recorded_by {
        assert!(i < 20_000, "no compaction after {i} writes");
        m1.node.propose(&[key(&format!("m{i}"))]).unwrap();
        i += 1;
    }
    let a2 = free_addr("127.0.0.2");
    let c2 = creds();
    let o = Opts { voters: vec![], join: true, addrs: [(2, a2)].into(), compaction: limits, creds: &c2, joins: false };
    let (m2, _) = start(dir.path(), 2, a2, [(1, a1)].into(), o);
    // Added as the join path adds it: with the key it proves.
    m1.node.add_learner_keyed(2, a2, m2.key).unwrap();
    let last = m1.node.propose(&[key("after-join")]).unwrap();
    wait_until("the joiner to catch up", 60, || m2.node.state().applied_index().unwrap() >= last);
    assert!(m2.node.log().snapshot_meta().unwrap().index > 0, "the joiner installed a snapshot");
    let want: BTreeMap<u64, Key> = [(1, m1.key), (2, m2.key)].into();
    assert_eq!(m2.node.state().member_keys().unwrap(), want);
    wait_until("the joiner's transport binds both", 20, || m2.t.peer_keys().book() == want);
    // Its transport refuses another key for the founder.
    let imp = impostor(1, 2, a2);
    wait_until("the impostor refused by the joiner", 20, || m2.t.refused("peer_key_mismatch") > 0);
    imp.shutdown();
    stop(m2);
    stop(m1);
}

#[test]
fn an_impostor_racing_a_founder_at_cluster_start_is_refused_from_its_first_frame() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = crate::testutil::member_addrs(3);
    let founders = founders(3);
    let others = |i: u64| -> HashMap<u64, SocketAddr> { addrs.iter().filter(|(k, _)| **k != i).map(|(k, v)| (*k, *v)).collect() };
    // Before any founder runs, a holder of the secret with a key of its own takes founder
    // 3's place: it listens at 3's address and keeps sending heartbeats far ahead in term
    // to founders 1 and 2, claiming to be 3.
    let imp = TcpTransport::start(3, addrs[&3], others(3), creds(), Arc::new(|_| {})).unwrap();
    let racing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sender = {
        let (imp, racing) = (imp.clone(), racing.clone());
        std::thread::spawn(move || {
            while racing.load(std::sync::atomic::Ordering::SeqCst) {
                for to in [1, 2] {
                    let mut hb = Message::default();
                    hb.set_msg_type(MessageType::MsgHeartbeat);
                    (hb.from, hb.to, hb.term) = (3, to, 1000);
                    Outbox::send(&*imp, vec![hb]);
                }
                // Paces the impostor's heartbeats for as long as it races.
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    // Founders 1 and 2 start, 3 pinned in their founding configuration.
    let mut m: BTreeMap<u64, Member> = BTreeMap::new();
    for (i, c) in &founders[..2] {
        let o = Opts { voters: vec![1, 2, 3], join: false, addrs: addrs.clone(), compaction: CompactionLimits::default(), creds: c, joins: false };
        m.insert(*i, start(dir.path(), *i, addrs[i], others(*i), o).0);
    }
    // Both refuse it: its handshakes under 3, and its answers when they dial 3 themselves.
    wait_until("the impostor refused by both founders", 30, || m.values().all(|x| x.t.refused("peer_key_mismatch") >= 2));
    // The two elect a leader and record their own keys; nothing of the impostor's reaches
    // raft (no term jumps to its 1000) or the book (no key for 3).
    let want2: BTreeMap<u64, Key> = m.iter().map(|(i, x)| (*i, x.key)).collect();
    wait_until("the two founders' keys applied", 30, || m.values().all(|x| x.node.state().member_keys().unwrap() == want2));
    racing.store(false, std::sync::atomic::Ordering::SeqCst);
    sender.join().unwrap();
    imp.shutdown();
    for x in m.values() {
        assert!(x.node.membership().unwrap().0 < 1000, "a heartbeat of the impostor was delivered");
        assert_eq!(x.node.state().member_key(3).unwrap(), None);
    }
    // The real founder 3 starts at its address: admitted under its pinned key, it records
    // its own key, and every member's book holds the founders' real keys.
    let (i, c) = &founders[2];
    let o = Opts { voters: vec![1, 2, 3], join: false, addrs: addrs.clone(), compaction: CompactionLimits::default(), creds: c, joins: false };
    m.insert(*i, start(dir.path(), *i, addrs[i], others(*i), o).0);
    let want: BTreeMap<u64, Key> = m.iter().map(|(i, x)| (*i, x.key)).collect();
    wait_until("every founder's real key in every member's applied state", 30, || m.values().all(|x| x.node.state().member_keys().unwrap() == want));
    let last = propose_retrying(&m[&3].node, &[key("from-the-real-third")]);
    wait_until("its proposal applied everywhere", 30, || m.values().all(|x| x.node.state().applied_index().unwrap() >= last));
    for (_, x) in m {
        stop(x);
    }
}
