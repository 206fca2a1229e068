//! The request port's intake: reading requests off the ROUTER socket, and starting them
//! within the port's limits (requests in flight, [`crate::daemon::budget`]).
//!
//! Two tasks, joined by a bounded queue of received requests:
//!
//! - the **reader** ([`run`]) receives messages and puts them in the waiting queue. It
//!   keeps receiving while the requests in flight are at their limit, so the socket's
//!   fair queue keeps polling every connection: a peer that closed its connection (a
//!   minion whose request timed out, a sign-in storm after a restart) is seen at once
//!   and its descriptor closed. A loop that stopped receiving while it waited for a
//!   permit would poll no connection, and closed connections would pile up in
//!   `CLOSE-WAIT` holding their descriptors and read buffers (19,000 of them, 1.2 GiB,
//!   in a restart storm of 8,000 minions).
//! - the **starter** takes the waiting requests in order, waits for a permit and the
//!   budget's charge for each, and spawns its handler — unless
//!   the peer that sent it has gone meanwhile (its connection closed: the reply could
//!   not reach it, and a minion that gave up has sent or will send the request again on
//!   a new connection). Such a request is dropped without being handled, counted as
//!   `halite_refused_total{port="request",reason="peer_gone"}`. After a restart storm
//!   the queue can hold thousands of sign-ins whose minions timed out; each would have
//!   cost an RSA decryption and signature for nobody.
//!
//! The waiting queue is bounded: at most [`MAX_WAITING`] requests and
//! [`MAX_WAITING_BYTES`] bytes (a request larger than that waits alone). When it is
//! full the reader stops receiving, so what the master holds stays bounded and TCP flow
//! control holds the senders back. A minion has at most one request
//! outstanding on a connection, so a fleet of tens of thousands fits before that.
//! A waiting request is copied out of its connection's read buffer, so it holds its
//! own bytes and not the buffer it was read into.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use zeromq::{SocketRecv, ZmqMessage};

use crate::daemon::budget::{self, Budget};

/// Most requests received and waiting to start.
pub const MAX_WAITING: usize = 32_768;

/// Most bytes of requests received and waiting to start.
pub const MAX_WAITING_BYTES: usize = 32 << 20;

/// The waiting queue's byte bound counts in units of this many bytes.
const UNIT: usize = 1024;

/// What bounds the requests started: at most `in_flight` at once (a permit each), and
/// their bytes within `budget`.
#[derive(Clone)]
pub struct Limits {
    pub in_flight: Arc<Semaphore>,
    pub budget: Budget,
}

/// A received request, waiting to start, with its share of the waiting queue's bytes.
struct Waiting {
    msg: ZmqMessage,
    _bytes: OwnedSemaphorePermit,
}

/// The message with every frame copied into storage of its own: a decoded frame shares
/// the read buffer it was read into, which can be much larger than the frame.
fn compact(msg: ZmqMessage) -> ZmqMessage {
    let frames: Vec<Bytes> = msg.into_vec().into_iter().map(|f| Bytes::copy_from_slice(&f)).collect();
    // Never empty: it was a message.
    ZmqMessage::try_from(frames).unwrap_or_else(|_| ZmqMessage::from(Bytes::new()))
}

/// Reads requests from `recv` until `stop` completes or the socket ends, and starts
/// each with `start(message, permit, charge)` (the permit and charge are held until the
/// request has been answered) within `limits`, if `present(message)` (its sender is
/// still connected) when its turn comes.
pub async fn run<S, F, Fut, P>(mut recv: S, limits: Limits, start: F, stop: impl Future<Output = ()>, present: P)
where
    S: SocketRecv,
    F: Fn(ZmqMessage, OwnedSemaphorePermit, budget::Charge) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
    P: Fn(&ZmqMessage) -> bool + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Waiting>(MAX_WAITING);
    let starter = tokio::spawn(starter(rx, limits, start, present));
    let waiting_bytes = Arc::new(Semaphore::new(MAX_WAITING_BYTES / UNIT));
    tokio::pin!(stop);
    loop {
        tokio::select! {
            msg = recv.recv() => match msg {
                Ok(msg) => {
                    let units = budget::message_bytes(&msg).div_ceil(UNIT).clamp(1, MAX_WAITING_BYTES / UNIT) as u32;
                    // Full (by bytes or by count): stop reading until requests start.
                    let Ok(bytes) = waiting_bytes.clone().acquire_many_owned(units).await else { break };
                    if tx.send(Waiting { msg: compact(msg), _bytes: bytes }).await.is_err() {
                        break;
                    }
                }
                Err(e) => tracing::warn!("request socket: {e}"),
            },
            _ = &mut stop => break,
        }
    }
    starter.abort();
}

/// Starts the waiting requests in order, each once it has a permit and its charge, if
/// its sender is still there.
async fn starter<F, Fut, P>(mut rx: mpsc::Receiver<Waiting>, limits: Limits, start: F, present: P)
where
    F: Fn(ZmqMessage, OwnedSemaphorePermit, budget::Charge) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
    P: Fn(&ZmqMessage) -> bool,
{
    while let Some(w) = rx.recv().await {
        let Ok(permit) = limits.in_flight.clone().acquire_owned().await else { return };
        if !present(&w.msg) {
            crate::metrics::refuse(crate::metrics::Port::Request, "?", "peer_gone", &"a queued request's connection closed before its turn: dropped unhandled");
            continue;
        }
        let Some(charge) = limits.budget.charge(budget::message_bytes(&w.msg)).await else { return };
        tokio::spawn(start(w.msg, permit, charge));
    }
}

#[cfg(test)]
#[path = "intake_tests.rs"]
mod tests;
