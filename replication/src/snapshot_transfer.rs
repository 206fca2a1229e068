//! Snapshot transfer over the peer transport: a snapshot's manifest, then its chunks,
//! then the raft `MsgSnapshot` that refers to it, as sealed frames of kind 4 (see the
//! frame layout in `transport/frame.rs` and docs/formats.md §5 and §6).
//!
//! A transfer has a connection of its own, opened by the sender's thread
//! ([`crate::transport::TcpTransport::send_snapshot`]): raft's frames to the same peer
//! never wait behind a megabyte of chunk, and TCP's flow control paces the sender
//! (blocking writes with a timeout), so nothing is queued in memory beyond one chunk.
//! The body of a snapshot frame:
//!
//! ```text
//! u8      part: 1 begin | 2 chunk | 3 end
//! u64 BE  transfer id (random, chosen by the sender; every part of one transfer names it)
//! [n]     begin: the manifest's JSON (≤ MAX_MANIFEST_BYTES)
//!         chunk: one chunk (halite_storage::snapshot::Chunk, ≤ CHUNK_HEADER_LEN + CHUNK_MAX)
//!         end:   the raft MsgSnapshot, protobuf (its metadata names the snapshot's index)
//! ```
//!
//! The receiving side ([`Incoming`]) feeds the parts to a
//! [`halite_storage::snapshot::Receiver`], which checks everything a peer declares
//! (manifest bounds and paths, chunk CRCs and order, each file's sha256); any part out
//! of place or refused ends the transfer (its staging directory is removed) and closes
//! the connection, and the sender starts over when raft asks again. Once the end part
//! arrives and the snapshot is complete, it goes to the [`SnapshotInbox`] with the raft
//! message, whose index must be the snapshot's.

use halite_storage::snapshot::{ReceiveLimits, Receiver, Snapshot, SnapshotStore, CHUNK_HEADER_LEN, CHUNK_MAX, MAX_MANIFEST_BYTES};
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};

/// Parts of a transfer.
pub const PART_BEGIN: u8 = 1;
pub const PART_CHUNK: u8 = 2;
pub const PART_END: u8 = 3;
/// Largest body of a snapshot frame (the end part's raft message carries only the
/// snapshot's metadata, which is small).
pub const MAX_PART: usize = 9 + if MAX_MANIFEST_BYTES > CHUNK_HEADER_LEN + CHUNK_MAX { MAX_MANIFEST_BYTES } else { CHUNK_HEADER_LEN + CHUNK_MAX };

/// Where received snapshots go (the node).
pub trait SnapshotInbox: Send + Sync {
    /// The store a transfer from `from` is received into; `None` refuses it.
    fn store(&self, from: u64) -> Option<SnapshotStore>;
    /// A complete, checked snapshot from `from`, and the raft message to step once it is
    /// installed.
    fn received(&self, from: u64, snap: Snapshot, msg: Message);
}

/// The bytes of one part.
#[cfg(test)]
pub(crate) fn encode_part(part: u8, transfer: u64, payload: &[u8]) -> Vec<u8> {
    [&part_header(part, transfer)[..], payload].concat()
}

/// The bytes before a part's payload.
pub fn part_header(part: u8, transfer: u64) -> [u8; 9] {
    let mut h = [0u8; 9];
    h[0] = part;
    h[1..].copy_from_slice(&transfer.to_be_bytes());
    h
}

/// The transfer in progress on one inbound connection.
#[derive(Default)]
pub struct Incoming {
    current: Option<(u64, Receiver)>,
    /// Bytes received when progress was last logged.
    logged: u64,
}

impl Incoming {
    /// Takes one part from `from`. An error refuses the transfer (the caller closes the
    /// connection; dropping `self` removes the staging directory).
    pub fn part(&mut self, from: u64, body: &[u8], inbox: &dyn SnapshotInbox) -> Result<(), String> {
        if body.len() < 9 {
            return Err("snapshot part too short".into());
        }
        if body.len() > MAX_PART {
            return Err(format!("snapshot part of {} bytes, over the {MAX_PART}-byte bound", body.len()));
        }
        let transfer = u64::from_be_bytes(body[1..9].try_into().map_err(|_| "short snapshot part")?);
        let payload = &body[9..];
        match body[0] {
            PART_BEGIN => {
                if self.current.is_some() {
                    return Err("a new snapshot transfer began before the last one ended".into());
                }
                let store = inbox.store(from).ok_or("this node takes no snapshot now")?;
                let r = Receiver::begin(&store, payload, ReceiveLimits::default()).map_err(|e| e.to_string())?;
                tracing::info!(from, index = r.manifest().index, files = r.manifest().files.len(), bytes = r.manifest().total_bytes(), "snapshot transfer begins");
                self.current = Some((transfer, r));
                self.logged = 0;
                Ok(())
            }
            PART_CHUNK => {
                let (id, r) = self.current.as_mut().ok_or("a snapshot chunk outside a transfer")?;
                if *id != transfer {
                    return Err("a snapshot chunk of another transfer".into());
                }
                let got = r.accept(payload).map_err(|e| e.to_string())?;
                // Progress at every tenth of the whole (and every 256 MiB).
                if got.bytes >= self.logged + (got.total / 10).clamp(1, 256 << 20) || got.complete {
                    self.logged = got.bytes;
                    let pct = (got.bytes * 100).checked_div(got.total).unwrap_or(100);
                    tracing::info!(from, bytes = got.bytes, total = got.total, "snapshot transfer {pct}%");
                }
                Ok(())
            }
            PART_END => {
                let (id, r) = self.current.take().ok_or("a snapshot end outside a transfer")?;
                if id != transfer {
                    return Err("the end of another snapshot transfer".into());
                }
                let msg = Message::parse_from_bytes(payload).map_err(|e| format!("the snapshot's raft message does not decode: {e}"))?;
                if msg.get_msg_type() != MessageType::MsgSnapshot || msg.from != from {
                    return Err(format!("the end of a snapshot transfer carries a {:?} from {}", msg.get_msg_type(), msg.from));
                }
                let index = msg.get_snapshot().get_metadata().index;
                if index != r.manifest().index {
                    return Err(format!("the raft message names snapshot index {index}, the transfer carried {}", r.manifest().index));
                }
                if !r.progress().complete {
                    return Err("the snapshot transfer ended before every file was complete".into());
                }
                let snap = r.finish().map_err(|e| e.to_string())?;
                tracing::info!(from, index, bytes = snap.manifest().total_bytes(), "snapshot transfer complete");
                inbox.received(from, snap, msg);
                Ok(())
            }
            p => Err(format!("unknown snapshot part {p}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Store(SnapshotStore, std::sync::Mutex<Vec<u64>>);

    impl SnapshotInbox for Store {
        fn store(&self, _from: u64) -> Option<SnapshotStore> {
            Some(self.0.clone())
        }
        fn received(&self, from: u64, _snap: Snapshot, _msg: Message) {
            self.1.lock().unwrap().push(from);
        }
    }

    #[test]
    fn parts_out_of_place_or_malformed_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = Store(SnapshotStore::open(dir.path()).unwrap(), Default::default());
        let mut inc = Incoming::default();
        assert!(inc.part(1, &[PART_CHUNK, 0, 0], &inbox).unwrap_err().contains("too short"));
        assert!(inc.part(1, &encode_part(PART_CHUNK, 7, b"x"), &inbox).unwrap_err().contains("outside a transfer"));
        assert!(inc.part(1, &encode_part(PART_END, 7, b""), &inbox).unwrap_err().contains("outside a transfer"));
        assert!(inc.part(1, &encode_part(9, 7, b""), &inbox).unwrap_err().contains("unknown snapshot part"));
        // A manifest that does not decode is refused by the storage receiver.
        assert!(inc.part(1, &encode_part(PART_BEGIN, 7, b"{not json"), &inbox).is_err());
        let huge = vec![0u8; MAX_PART + 1];
        assert!(inc.part(1, &huge, &inbox).unwrap_err().contains("bound"));
        assert!(inbox.1.lock().unwrap().is_empty());
        // Nothing was left behind in the store.
        assert!(inbox.0.list().unwrap().is_empty());
    }
}
