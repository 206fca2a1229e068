//! A ROUTER's bounded per-peer send queues (`send_queue_capacity`, `send_queue_bytes`):
//! a message is queued for its peer at once or given back, never waited for.

use super::{GenericSocketBackend, PEER_SEND_QUEUE_CAPACITY};
use crate::codec::Message;
use crate::util::PeerIdentity;
use crate::write_queue::{message_bytes, message_queue};
use crate::{MultiPeerBackend, SocketType, ZmqError, ZmqResult};

use futures::channel::mpsc;

use std::sync::atomic::Ordering;

/// What a bounded send did (`GenericSocketBackend::try_send_to_peer`).
enum Queued {
    Sent,
    Full(Message),
    Closed(mpsc::SendError),
}

impl GenericSocketBackend {
    /// A ROUTER's `send_queue_capacity`: the messages a peer's queue holds. Other
    /// socket types ignore the option.
    pub(super) fn bounded_peer_queues(&self) -> Option<usize> {
        match self.socket_type {
            SocketType::ROUTER => self.socket_options.send_queue_capacity,
            _ => None,
        }
    }

    /// `send_to_peer` with `send_queue_capacity` set: the message is queued for the
    /// peer at once or not at all, as libzmq's ROUTER drops at its high-water mark. A
    /// full queue gives the message back in `ZmqError::ReturnToSender` instead of
    /// waiting, so a peer that sends and never reads holds at most that many messages,
    /// and one such peer cannot hold up the sender's replies to the others.
    ///
    /// It is sent on the sender kept in the peer's entry: a bounded futures channel
    /// gives every sender a slot of its own beyond the buffer, so a fresh clone's
    /// `try_send` always succeeds and sending on clones (as without the option) never
    /// finds the queue full.
    pub(super) fn try_send_to_peer(&self, peer_id: &PeerIdentity, message: Message) -> ZmqResult<()> {
        let max_bytes = self.socket_options.send_queue_bytes;
        let Some(queued) = self.peers.update_sync(peer_id, |_, peer| {
            let size = message_bytes(&message);
            let counted = peer.queued_bytes.as_ref().zip(max_bytes);
            if let Some((bytes, max)) = counted {
                // Added before the message is queued, so the writer never takes off
                // bytes that were not added.
                let before = bytes.fetch_add(size, Ordering::AcqRel);
                if before > 0 && before.saturating_add(size) > max {
                    bytes.fetch_sub(size, Ordering::AcqRel);
                    return Queued::Full(message);
                }
            }
            match peer.send_queue.try_send(message) {
                Ok(()) => Queued::Sent,
                Err(error) => {
                    if let Some((bytes, _)) = counted {
                        bytes.fetch_sub(size, Ordering::AcqRel);
                    }
                    if error.is_full() {
                        Queued::Full(error.into_inner())
                    } else {
                        Queued::Closed(error.into_send_error())
                    }
                }
            }
        }) else {
            return Err(ZmqError::Other("Destination client not found by identity"));
        };
        match queued {
            Queued::Sent => Ok(()),
            Queued::Full(Message::Message(message)) => Err(ZmqError::ReturnToSender {
                reason: "The peer's send queue is full",
                message,
            }),
            Queued::Full(_) => Err(ZmqError::BufferFull("The peer's send queue is full")),
            Queued::Closed(error) => {
                self.peer_disconnected(peer_id);
                Err(error.into())
            }
        }
    }
}

/// A peer's queue: `capacity` messages when set (the map keeps one sender a peer), else
/// a buffer of 100,000 as before.
pub(super) fn peer_send_queue(capacity: Option<usize>) -> (mpsc::Sender<Message>, mpsc::Receiver<Message>) {
    match capacity {
        Some(capacity) => message_queue(capacity),
        None => mpsc::channel(PEER_SEND_QUEUE_CAPACITY),
    }
}
