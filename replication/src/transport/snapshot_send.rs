//! The sending side of a snapshot transfer: one connection of its own, the handshake,
//! then the manifest, every chunk and the raft message as sealed frames of kind 4
//! (`crate::snapshot_transfer` has the part layout and the receiving side).
//!
//! After the end part the sender closes its side and waits for the receiver to close
//! its own: the receiver reads until that end of stream, so it has checked every part
//! and handed the raft message to its node before its close arrives. Only then is the
//! transfer reported finished (and raft told, `report_snapshot`). Reported as soon as
//! the last byte was written, the leader went on to probe the member with the log's
//! tail while the member was still reading buffered chunks; the member, not holding the
//! snapshot yet, refused the probe, and the leader sent the whole snapshot again, over
//! the install of the first one.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Instant;

use protobuf::Message as _;
use raft::eraftpb::Message;

use halite_storage::snapshot::{Snapshot, SnapshotSource};

use super::frame::{Sealer, KIND_SNAPSHOT};
use super::refusal::Refused;
use super::{handshake, Credentials, Limits, CONNECT_TIMEOUT, SNAPSHOT_WRITE_TIMEOUT};
use crate::snapshot_transfer;

/// Why a snapshot was not sent (what the `done` of [`super::Outbox::send_snapshot`]
/// hears; the transfer is tried again when raft asks again).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotSendError {
    #[error("no address for peer {0}")]
    NoAddress(u64),
    #[error("this transport cannot send a snapshot to {0}")]
    Unsupported(u64),
    /// The connection, the handshake, a write, or the wait for the peer to read
    /// everything failed; `reason` is the refusal it was counted as
    /// (`snapshot_send_failed`, or the handshake's own).
    #[error("{detail}")]
    Failed { reason: &'static str, detail: String },
    /// No thread could be started for the transfer (the process is out of threads or
    /// memory); the snapshot is offered again later.
    #[error("cannot start a snapshot transfer thread: {0}")]
    NoThread(String),
}

impl From<Refused> for SnapshotSendError {
    fn from(r: Refused) -> Self {
        SnapshotSendError::Failed { reason: r.reason, detail: r.detail }
    }
}

/// What hears how a snapshot transfer ended.
pub type SnapshotDone = Box<dyn FnOnce(Result<(), SnapshotSendError>) + Send>;

/// Writes one snapshot transfer to `addr` on a connection of its own: the handshake,
/// then begin, chunks, end. Returns the file bytes sent; a failure is a refusal to count
/// (the handshake's own, or `snapshot_send_failed`).
pub(super) fn stream_snapshot(key: &Credentials, me: u64, to: u64, addr: SocketAddr, limits: Limits, snap: &Snapshot, msg: &Message) -> Result<u64, Refused> {
    let mut s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| Refused::new("snapshot_send_failed", format!("connecting to {addr}: {e}")))?;
    let _ = s.set_nodelay(true);
    s.set_write_timeout(Some(SNAPSHOT_WRITE_TIMEOUT)).map_err(|e| Refused::new("snapshot_send_failed", e))?;
    let sealer = handshake::initiate(&mut s, key, me, to, Instant::now() + limits.handshake)?;
    stream_parts(s, sealer, me, to, addr, snap, msg)
}

/// A transfer that failed after the handshake (counted as `snapshot_send_failed`).
fn failed(detail: impl std::fmt::Display) -> Refused {
    Refused::new("snapshot_send_failed", detail)
}

/// The parts of one snapshot transfer, on an authenticated connection.
fn stream_parts(mut s: TcpStream, mut sealer: Sealer, me: u64, to: u64, addr: SocketAddr, snap: &Snapshot, msg: &Message) -> Result<u64, Refused> {
    let mut transfer = [0u8; 8];
    openssl::rand::rand_bytes(&mut transfer).map_err(failed)?;
    let transfer = u64::from_be_bytes(transfer);
    // A part's header and its payload (a chunk: its header and data) are sealed into
    // the frame without being joined first.
    let mut write = |part: u8, payload: &[&[u8]]| -> Result<(), Refused> {
        let head = snapshot_transfer::part_header(part, transfer);
        let pieces: Vec<&[u8]> = std::iter::once(&head[..]).chain(payload.iter().copied()).collect();
        let frame = sealer.seal_parts(KIND_SNAPSHOT, me, to, &pieces).map_err(failed)?;
        s.write_all(&frame).map_err(|e| failed(format_args!("writing to {addr}: {e}")))
    };
    let mut src = SnapshotSource::new(snap);
    tracing::info!(to, index = snap.index(), bytes = src.total_bytes(), "snapshot transfer begins");
    write(snapshot_transfer::PART_BEGIN, &[&src.manifest_bytes()])?;
    let (total, mut logged) = (src.total_bytes(), 0u64);
    while let Some((header, data)) = src.next_chunk_parts().map_err(failed)? {
        write(snapshot_transfer::PART_CHUNK, &[&header, data])?;
        if src.sent_bytes() >= logged + (total / 10).clamp(1, 256 << 20) {
            logged = src.sent_bytes();
            tracing::info!(to, bytes = logged, total, "snapshot sent {}%", logged * 100 / total.max(1));
        }
    }
    write(snapshot_transfer::PART_END, &[&msg.write_to_bytes().map_err(failed)?])?;
    // Wait for the receiver to have read (and checked) everything: its close.
    s.shutdown(Shutdown::Write).map_err(|e| failed(format_args!("closing the transfer to {addr}: {e}")))?;
    s.set_read_timeout(Some(SNAPSHOT_WRITE_TIMEOUT)).map_err(failed)?;
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => break,
            // The receiver sends nothing on this connection; bytes are ignored.
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A reset after everything was read is a close too (the receiver does not
            // read the end of stream if it stopped first); a timeout is not.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(failed(format_args!("waiting for {addr} to finish reading the transfer: {e}"))),
        }
    }
    Ok(src.sent_bytes())
}
