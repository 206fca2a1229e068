//! Fuzzing of what a peer's bytes reach on the cluster port, as property tests on stable
//! Rust: the responder's handshake (`handshake.rs`) over a real socket, fed any bytes or a
//! real hello with a byte changed and any proof, the frame opener (`frame.rs`) on arbitrary bodies and on sealed frames with a
//! byte changed or cut, the raft message decoder behind it (protobuf `Message`, with
//! entries, snapshot metadata and conf changes inside), and the snapshot transfer's part
//! sequence (`snapshot_transfer::Incoming`) on arbitrary parts. What must hold: no
//! panic; no handshake completes without the secret's proof, and each fails with one of
//! its named reasons; a changed frame never opens; nothing is accepted that was not sealed.
//!
//! The default run is short (proptest's 256 cases per property). The long run is a
//! documented command (`docs/benchmarks.md`, "Hostile-input bounds"):
//! `PROPTEST_CASES=200000 cargo test --release -p halite-replication fuzz_`.

use protobuf::Message as _;
use proptest::prelude::*;
use raft::eraftpb::{ConfChange, ConfChangeType, Entry, EntryType, Message, MessageType, Snapshot};

use super::frame::{Opener, Sealer, KIND_RAFT};
use crate::snapshot_transfer::{encode_part, Incoming, SnapshotInbox, PART_BEGIN, PART_CHUNK, PART_END};

const KEY: [u8; 32] = [7; 32];

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

/// A raft message with something in every field a peer fills.
fn message(data: &[u8]) -> Message {
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgAppend);
    m.from = 2;
    m.to = 1;
    m.term = 5;
    m.index = 9;
    m.log_term = 4;
    m.commit = 8;
    let mut cc = ConfChange::default();
    cc.set_change_type(ConfChangeType::AddLearnerNode);
    cc.node_id = 4;
    let mut e1 = Entry { index: 10, term: 5, data: data.to_vec().into(), context: b"ctx".to_vec().into(), ..Default::default() };
    e1.set_entry_type(EntryType::EntryNormal);
    let mut e2 = Entry { index: 11, term: 5, data: cc.write_to_bytes().unwrap().into(), ..Default::default() };
    e2.set_entry_type(EntryType::EntryConfChange);
    m.entries = vec![e1, e2].into();
    let mut s = Snapshot::default();
    s.mut_metadata().index = 7;
    s.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
    m.set_snapshot(s);
    m
}

/// Takes every snapshot transfer into a scratch store and drops what completes.
struct Scratch(halite_storage::snapshot::SnapshotStore);

impl SnapshotInbox for Scratch {
    fn store(&self, _from: u64) -> Option<halite_storage::snapshot::SnapshotStore> {
        Some(self.0.clone())
    }
    fn received(&self, _from: u64, _snap: halite_storage::snapshot::Snapshot, _msg: Message) {}
}

/// Feeds the responder's handshake `first` then `then` from a real connection (and EOF)
/// and returns how it ended.
fn respond_to(first: Vec<u8>, then: Vec<u8>) -> Result<u64, &'static str> {
    use std::io::Write as _;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let client = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let _ = s.write_all(&first);
        let _ = s.write_all(&then);
        let _ = s.shutdown(std::net::Shutdown::Write);
        // Held open until the responder is done (what it sends fits the socket buffer).
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut sink);
    });
    let (mut s, _) = listener.accept().unwrap();
    let creds: super::Credentials = super::ClusterKey::from_secret("s").into();
    let r = super::handshake::respond(&mut s, &creds, 2, std::time::Instant::now() + std::time::Duration::from_secs(5)).map(|(peer, _)| peer.id).map_err(|r| r.reason);
    drop(s);
    client.join().unwrap();
    r
}

proptest! {
    #[test]
    fn fuzz_handshakes(raw in bytes(200), real_hello in any::<bool>(), pos in any::<usize>(), val in any::<u8>(), proof in bytes(120)) {
        // A hello as a member sends it (this process's key, id 1), one byte changed, or
        // any bytes; then any proof and signature.
        let first = if real_hello {
            let mut h = super::handshake::HELLO_MAGIC.to_vec();
            h.extend_from_slice(&1u64.to_be_bytes());
            h.extend_from_slice(&[9; 32]);
            h.extend_from_slice(&super::Credentials::from(super::ClusterKey::from_secret("s")).member.public());
            let p = pos % h.len();
            h[p] = val;
            h
        } else {
            raw
        };
        let ended = respond_to(first, proof);
        prop_assert!(matches!(ended, Err("closed" | "bad_hello" | "peer_version" | "bad_proof" | "bad_signature" | "peer_key_mismatch")), "{ended:?}");
    }

    #[test]
    fn fuzz_peer_frames(raw in bytes(512), zero_counter in any::<bool>(), body in bytes(256), pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>()) {
        // Arbitrary bytes never open (with the expected counter, they reach the tag check).
        let mut raw = raw;
        if zero_counter && raw.len() >= 8 {
            raw[..8].fill(0);
        }
        prop_assert!(Opener::new(KEY, 0).open(&raw).is_err());
        // A sealed frame opens once, whole; changed or cut, it never opens.
        let frame = Sealer::new(KEY, 0).seal(KIND_RAFT, 2, 1, &body).unwrap();
        let good = frame[4..].to_vec();
        prop_assert_eq!(u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize, good.len());
        let f = Opener::new(KEY, 0).open(&good).unwrap();
        prop_assert_eq!((f.kind, f.from, f.to, f.body()), (KIND_RAFT, 2, 1, &body[..]));
        let mut changed = good.clone();
        let p = pos % changed.len();
        changed[p] = val;
        let opened = Opener::new(KEY, 0).open(&changed);
        prop_assert_eq!(opened.is_ok(), changed == good, "a changed frame opened");
        let c = cut % good.len();
        prop_assert!(Opener::new(KEY, 0).open(&good[..c]).is_err());
        // The other direction's key never opens it.
        prop_assert!(Opener::new(KEY, 1).open(&good).is_err());
    }

    #[test]
    fn fuzz_raft_messages(raw in bytes(512), data in bytes(64), pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>()) {
        let _ = Message::parse_from_bytes(&raw);
        let _ = ConfChange::parse_from_bytes(&raw);
        let good = message(&data).write_to_bytes().unwrap();
        prop_assert_eq!(Message::parse_from_bytes(&good).unwrap(), message(&data));
        let mut m = good.clone();
        let p = pos % m.len();
        m[p] = val;
        if let Ok(msg) = Message::parse_from_bytes(&m) {
            // What a decoded message holds came from its bytes: never more entries than bytes.
            prop_assert!(msg.entries.len() <= m.len());
            for e in msg.entries.iter() {
                if e.get_entry_type() == EntryType::EntryConfChange {
                    let _ = ConfChange::parse_from_bytes(&e.data);
                }
            }
        }
        let _ = Message::parse_from_bytes(&good[..cut % (good.len() + 1)]);
    }

    #[test]
    fn fuzz_snapshot_parts(parts in proptest::collection::vec((0u8..5, 0u64..3, bytes(300)), 1..6)) {
        let d = tempfile::tempdir().unwrap();
        let inbox = Scratch(halite_storage::snapshot::SnapshotStore::open(d.path()).unwrap());
        let mut incoming = Incoming::default();
        for (part, transfer, payload) in parts {
            let kind = [PART_BEGIN, PART_CHUNK, PART_END, 0, 9][part as usize];
            let body = encode_part(kind, transfer, &payload);
            if incoming.part(2, &body, &inbox).is_err() {
                // The connection is closed on any refusal: a new one starts afresh.
                incoming = Incoming::default();
            }
        }
        let _ = incoming.part(2, &[], &inbox);
        let _ = incoming.part(2, &[PART_CHUNK; 8], &inbox);
    }
}
