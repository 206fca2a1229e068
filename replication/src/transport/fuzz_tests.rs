//! Fuzzing of what a peer's bytes reach on the cluster port, as property tests on stable
//! Rust: the frame opener (`frame.rs`) on arbitrary bodies and on sealed frames with a
//! byte changed or cut, the raft message decoder behind it (protobuf `Message`, with
//! entries, snapshot metadata and conf changes inside), and the snapshot transfer's part
//! sequence (`snapshot_transfer::Incoming`) on arbitrary parts. What must hold: no
//! panic; a changed frame never opens; nothing is accepted that was not sealed.
//!
//! The default run is short (proptest's 256 cases per property). The long run is a
//! documented command (`docs/benchmarks.md`, "Fuzzing"):
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

proptest! {
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
