//! The sending side of a snapshot transfer: one connection of its own, the handshake,
//! then the manifest, every chunk and the raft message as sealed frames of kind 4
//! (`crate::snapshot_transfer` has the part layout and the receiving side).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use protobuf::Message as _;
use raft::eraftpb::Message;

use halite_storage::snapshot::{Snapshot, SnapshotSource};

use super::frame::{Sealer, KIND_SNAPSHOT};
use super::refusal::Refused;
use super::{handshake, Credentials, Limits, CONNECT_TIMEOUT, SNAPSHOT_WRITE_TIMEOUT};
use crate::snapshot_transfer;

/// Writes one snapshot transfer to `addr` on a connection of its own: the handshake,
/// then begin, chunks, end. Returns the file bytes sent; a failure is a refusal to count
/// (the handshake's own, or `snapshot_send_failed`).
pub(super) fn stream_snapshot(key: &Credentials, me: u64, to: u64, addr: SocketAddr, limits: Limits, snap: &Snapshot, msg: &Message) -> Result<u64, Refused> {
    let mut s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| Refused::new("snapshot_send_failed", format!("connecting to {addr}: {e}")))?;
    let _ = s.set_nodelay(true);
    s.set_write_timeout(Some(SNAPSHOT_WRITE_TIMEOUT)).map_err(|e| Refused::new("snapshot_send_failed", e))?;
    let sealer = handshake::initiate(&mut s, key, me, to, Instant::now() + limits.handshake)?;
    stream_parts(s, sealer, me, to, addr, snap, msg).map_err(|e| Refused::new("snapshot_send_failed", e))
}

/// The parts of one snapshot transfer, on an authenticated connection.
fn stream_parts(mut s: TcpStream, mut sealer: Sealer, me: u64, to: u64, addr: SocketAddr, snap: &Snapshot, msg: &Message) -> Result<u64, String> {
    let mut transfer = [0u8; 8];
    openssl::rand::rand_bytes(&mut transfer).map_err(|e| e.to_string())?;
    let transfer = u64::from_be_bytes(transfer);
    let mut write = |part: u8, payload: &[u8]| -> Result<(), String> {
        let frame = sealer.seal(KIND_SNAPSHOT, me, to, &snapshot_transfer::encode_part(part, transfer, payload))?;
        s.write_all(&frame).map_err(|e| format!("writing to {addr}: {e}"))
    };
    let mut src = SnapshotSource::new(snap);
    tracing::info!(to, index = snap.index(), bytes = src.total_bytes(), "snapshot transfer begins");
    write(snapshot_transfer::PART_BEGIN, &src.manifest_bytes())?;
    let (total, mut logged) = (src.total_bytes(), 0u64);
    while let Some(chunk) = src.next_chunk().map_err(|e| e.to_string())? {
        write(snapshot_transfer::PART_CHUNK, &chunk)?;
        if src.sent_bytes() >= logged + (total / 10).clamp(1, 256 << 20) {
            logged = src.sent_bytes();
            tracing::info!(to, bytes = logged, total, "snapshot sent {}%", logged * 100 / total.max(1));
        }
    }
    write(snapshot_transfer::PART_END, &msg.write_to_bytes().map_err(|e| e.to_string())?)?;
    Ok(src.sent_bytes())
}
