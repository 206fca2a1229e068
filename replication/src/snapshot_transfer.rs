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

/// Why a snapshot part was refused: the transfer ends (its staging directory is
/// removed) and the connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("snapshot part too short")]
    TooShort,
    #[error("snapshot part of {len} bytes, over the {max}-byte bound")]
    TooLarge { len: usize, max: usize },
    #[error("unknown snapshot part {0}")]
    UnknownPart(u8),
    #[error("a new snapshot transfer began before the last one ended")]
    Overlapping,
    #[error("this node takes no snapshot now")]
    NotTaken,
    /// A chunk or end part (`part`) with no transfer begun.
    #[error("a snapshot {part} outside a transfer")]
    OutsideTransfer { part: &'static str },
    /// A chunk or end part (`part`) naming another transfer than the one begun.
    #[error("a snapshot {part} of another transfer")]
    OtherTransfer { part: &'static str },
    #[error("the snapshot's raft message does not decode: {0}")]
    BadMessage(#[from] protobuf::ProtobufError),
    #[error("the end of a snapshot transfer carries a {kind:?} from {from}")]
    NotASnapshotMessage { kind: MessageType, from: u64 },
    #[error("the raft message names snapshot index {named}, the transfer carried {carried}")]
    IndexMismatch { named: u64, carried: u64 },
    #[error("the snapshot transfer ended before every file was complete")]
    Incomplete,
    /// The storage receiver refused the manifest or a chunk (bounds, paths, CRCs,
    /// order, a file's sha256), or could not write it.
    #[error(transparent)]
    Storage(#[from] halite_storage::Error),
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
    pub fn part(&mut self, from: u64, body: &[u8], inbox: &dyn SnapshotInbox) -> Result<(), TransferError> {
        if body.len() < 9 {
            return Err(TransferError::TooShort);
        }
        if body.len() > MAX_PART {
            return Err(TransferError::TooLarge { len: body.len(), max: MAX_PART });
        }
        let transfer = u64::from_be_bytes(body[1..9].try_into().map_err(|_| TransferError::TooShort)?);
        let payload = &body[9..];
        match body[0] {
            PART_BEGIN => {
                if self.current.is_some() {
                    return Err(TransferError::Overlapping);
                }
                let store = inbox.store(from).ok_or(TransferError::NotTaken)?;
                let r = Receiver::begin(&store, payload, ReceiveLimits::default())?;
                tracing::info!(from, index = r.manifest().index, files = r.manifest().files.len(), bytes = r.manifest().total_bytes(), "snapshot transfer begins");
                self.current = Some((transfer, r));
                self.logged = 0;
                Ok(())
            }
            PART_CHUNK => {
                let (id, r) = self.current.as_mut().ok_or(TransferError::OutsideTransfer { part: "chunk" })?;
                if *id != transfer {
                    return Err(TransferError::OtherTransfer { part: "chunk" });
                }
                let got = r.accept(payload)?;
                // Progress at every tenth of the whole (and every 256 MiB).
                if got.bytes >= self.logged + (got.total / 10).clamp(1, 256 << 20) || got.complete {
                    self.logged = got.bytes;
                    let pct = (got.bytes * 100).checked_div(got.total).unwrap_or(100);
                    tracing::info!(from, bytes = got.bytes, total = got.total, "snapshot transfer {pct}%");
                }
                Ok(())
            }
            PART_END => {
                let (id, r) = self.current.take().ok_or(TransferError::OutsideTransfer { part: "end" })?;
                if id != transfer {
                    return Err(TransferError::OtherTransfer { part: "end" });
                }
                let msg = Message::parse_from_bytes(payload)?;
                if msg.get_msg_type() != MessageType::MsgSnapshot || msg.from != from {
                    return Err(TransferError::NotASnapshotMessage { kind: msg.get_msg_type(), from: msg.from });
                }
                let index = msg.get_snapshot().get_metadata().index;
                if index != r.manifest().index {
                    return Err(TransferError::IndexMismatch { named: index, carried: r.manifest().index });
                }
                if !r.progress().complete {
                    return Err(TransferError::Incomplete);
                }
                let snap = r.finish()?;
                tracing::info!(from, index, bytes = snap.manifest().total_bytes(), "snapshot transfer complete");
                inbox.received(from, snap, msg);
                Ok(())
            }
            p => Err(TransferError::UnknownPart(p)),
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
        assert!(matches!(inc.part(1, &[PART_CHUNK, 0, 0], &inbox), Err(TransferError::TooShort)));
        assert!(matches!(inc.part(1, &encode_part(PART_CHUNK, 7, b"x"), &inbox), Err(TransferError::OutsideTransfer { part: "chunk" })));
        assert!(matches!(inc.part(1, &encode_part(PART_END, 7, b""), &inbox), Err(TransferError::OutsideTransfer { part: "end" })));
        assert!(matches!(inc.part(1, &encode_part(9, 7, b""), &inbox), Err(TransferError::UnknownPart(9))));
        // A manifest that does not decode is refused by the storage receiver.
        assert!(matches!(inc.part(1, &encode_part(PART_BEGIN, 7, b"{not json"), &inbox), Err(TransferError::Storage(_))));
        let huge = vec![0u8; MAX_PART + 1];
        assert!(matches!(inc.part(1, &huge, &inbox), Err(TransferError::TooLarge { .. })));
        assert!(inbox.1.lock().unwrap().is_empty());
        // Nothing was left behind in the store.
        assert!(inbox.0.list().unwrap().is_empty());
    }
}
