//! The request port's intake: reading requests off the ROUTER socket, and starting them
//! within the port's limits (requests in flight, [`crate::daemon::budget`]).
//!
//! Two tasks, joined by bounded queues of received requests (one per class):
//!
//! - the **reader** ([`run`]) receives messages and puts them in the waiting queue. It
//!   keeps receiving while the requests in flight are at their limit, so the socket's
//!   fair queue keeps polling every connection: a peer that closed its connection (a
//!   minion whose request timed out, a sign-in storm after a restart) is seen at once
//!   and its descriptor closed. A loop that stopped receiving while it waited for a
//!   permit would poll no connection, and closed connections would pile up in
//!   `CLOSE-WAIT` holding their descriptors and read buffers (19,000 of them, 1.2 GiB,
//!   in a restart storm of 8,000 minions).
//! - the **starter** takes the waiting requests by their classes' shares, waits for a
//!   permit and the budget's charge for each, and spawns its handler — unless
//!   the peer that sent it has gone meanwhile (its connection closed: the reply could
//!   not reach it, and a minion that gave up has sent or will send the request again on
//!   a new connection). Such a request is dropped without being handled, counted as
//!   `halite_refused_total{port="request",reason="peer_gone"}`. After a restart storm
//!   the queue can hold thousands of sign-ins whose minions timed out; each would have
//!   cost an RSA decryption and signature for nobody.
//!
//! The waiting requests are kept by class ([`Class`]: sign-ins, returns, the rest; the
//! daemon's `classify` tells which from the request) and started by the class's share
//! of the port ([`super::shares`]: a weighted round-robin between the classes that wait, each
//! with its own bound in flight), so a storm of sign-ins does not hold back returns nor
//! a blast of returns sign-ins. With `halite_request_fifo: True` they start in arrival
//! order whatever their class (one queue).
//!
//! Each class's waiting queue is bounded: at most [`MAX_WAITING`] requests and
//! [`MAX_WAITING_BYTES`] bytes (a request larger than that waits alone), so the three
//! hold at most three times that. When a class is full the reader stops receiving, so
//! what the master holds stays bounded and TCP flow control holds the senders back
//! (the other classes' waiting requests still start meanwhile, and the full class drains
//! at its share). A minion has at most one request
//! outstanding on a connection, so a fleet of tens of thousands fits before that.
//! A waiting request is copied out of its connection's read buffer, so it holds its
//! own bytes and not the buffer it was read into. It waits with what the classifier
//! opened of it ([`Opened`]: a body of at most `req::LIGHT_MAX_BYTES`, decoded and
//! decrypted once, then handed to the handler), so a light request holds about twice its
//! bytes while it waits.
//!
//! Metrics, by class: `halite_request_waiting`, `halite_request_in_flight`,
//! `halite_request_started_total` (`crate::metrics`).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use zeromq::{SocketRecv, ZmqMessage};

use super::shares::{Class, Shares};
use crate::daemon::budget::{self, Budget};
use crate::metrics::{metrics, ClassLabel};
use prometheus_client::metrics::{counter::Counter, gauge::Gauge};

/// Most requests of one class received and waiting to start.
pub const MAX_WAITING: usize = 32_768;

/// Most bytes of requests of one class received and waiting to start.
pub const MAX_WAITING_BYTES: usize = 32 << 20;

/// Most sign-ins in flight in fair mode: enough to keep every core on RSA and a group
/// commit full; the rest wait in their queue, where one whose minion has gone is
/// dropped without its RSA.
pub const SIGN_INS_IN_FLIGHT: usize = 128;

/// The waiting queue's byte bound counts in units of this many bytes.
const UNIT: usize = 1024;

/// What bounds the requests started: at most `in_flight` at once (a permit each), and
/// their bytes within `budget`; `fifo` starts them in arrival order, else by class.
#[derive(Clone)]
pub struct Limits {
    pub in_flight: Arc<Semaphore>,
    pub budget: Budget,
    pub fifo: bool,
}

/// A received request, waiting to start, holding its place in its class's queue.
struct Waiting {
    msg: ZmqMessage,
    /// When the reader received it.
    arrived: Instant,
    /// The request as the classifier opened it, handed to its handler.
    opened: Opened,
    _place: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
}

/// Each class's bound in flight in fair mode, of `total` permits: sign-ins
/// [`SIGN_INS_IN_FLIGHT`], the others three quarters each, so none takes every permit.
pub fn caps(total: usize) -> [usize; 3] {
    [SIGN_INS_IN_FLIGHT.min(total), total * 3 / 4, total * 3 / 4]
}

/// The shares and the reader's and finished handlers' signal to the starter.
struct Sched {
    shares: Mutex<Shares<Waiting>>,
    wake: Notify,
    meters: Meters,
}

/// Each class's metrics, looked up once (a lookup by label hashes the label and takes
/// the family's lock; a request moves three of them).
struct Meters {
    waiting: [Gauge; 3],
    in_flight: [Gauge; 3],
    started: [Counter; 3],
}

impl Meters {
    fn new() -> Self {
        let m = metrics();
        Meters {
            waiting: Class::ALL.map(|c| m.request_waiting.get_or_create(&label(c)).clone()),
            in_flight: Class::ALL.map(|c| m.request_in_flight.get_or_create(&label(c)).clone()),
            started: Class::ALL.map(|c| m.request_started.get_or_create(&label(c)).clone()),
        }
    }
}

impl Sched {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shares<Waiting>> {
        self.shares.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A started request's hold on the port: its permit and its place among its class's
/// requests in flight, both given back when dropped (after the reply is sent).
pub struct Permit {
    _permit: OwnedSemaphorePermit,
    class: Class,
    arrived: Instant,
    sched: Arc<Sched>,
}

impl Permit {
    /// The class the request was started as.
    pub fn class(&self) -> Class {
        self.class
    }

    /// When the request was received (before it waited its turn).
    pub fn arrived(&self) -> Instant {
        self.arrived
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        // The starter needs waking only if this class was held back by its bound with
        // requests waiting; the port's own permit wakes it through its semaphore.
        let unblocked = self.sched.lock().done(self.class);
        self.sched.meters.in_flight[self.class.index()].dec();
        if unblocked {
            self.sched.wake.notify_one();
        }
    }
}

fn label(class: Class) -> ClassLabel {
    ClassLabel { class: class.as_str() }
}

/// The message with every frame it read copied into storage of its own: a decoded frame
/// shares the read buffer it was read into, which can be much larger than the frame. The
/// first frame, the routing identity the socket put in front, is the socket's own (held
/// for as long as the connection) and is kept as it is.
fn compact(msg: ZmqMessage) -> ZmqMessage {
    let frames: Vec<Bytes> = msg.into_vec().into_iter().enumerate().map(|(i, f)| if i == 0 { f } else { Bytes::copy_from_slice(&f) }).collect();
    // Never empty: it was a message.
    ZmqMessage::try_from(frames).unwrap_or_else(|_| ZmqMessage::from(Bytes::new()))
}

/// What the classifier opened of a request on its way to classing it (`None`: nothing,
/// the handler opens it): each request is opened once (`requests::class_of`).
pub type Opened = Option<Result<crate::req::Opened, crate::req::Outcome>>;

/// Reads requests from `recv` until `stop` completes or the socket ends, and starts
/// each with `start(message, opened, permit, charge)` (the permit and charge are held
/// until the request has been answered) within `limits`, by its class (`classify`, which
/// also gives what it opened), if `present(message)` (its sender is still connected)
/// when its turn comes.
pub async fn run<S, C, F, Fut, P>(mut recv: S, limits: Limits, classify: C, start: F, stop: impl Future<Output = ()>, present: P)
where
    S: SocketRecv,
    C: Fn(&ZmqMessage) -> (Class, Opened),
    F: Fn(ZmqMessage, Opened, Permit, budget::Charge) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
    P: Fn(&ZmqMessage) -> bool + Send + 'static,
{
    let shares = if limits.fifo { Shares::fifo() } else { Shares::new(caps(limits.in_flight.available_permits())) };
    let sched = Arc::new(Sched { shares: Mutex::new(shares), wake: Notify::new(), meters: Meters::new() });
    let starter = tokio::spawn(starter(sched.clone(), limits, start, present));
    let places: [Arc<Semaphore>; 3] = std::array::from_fn(|_| Arc::new(Semaphore::new(MAX_WAITING)));
    let bytes: [Arc<Semaphore>; 3] = std::array::from_fn(|_| Arc::new(Semaphore::new(MAX_WAITING_BYTES / UNIT)));
    tokio::pin!(stop);
    loop {
        tokio::select! {
            msg = recv.recv() => match msg {
                Ok(msg) => {
                    let (class, opened) = classify(&msg);
                    let units = budget::message_bytes(&msg).div_ceil(UNIT).clamp(1, MAX_WAITING_BYTES / UNIT) as u32;
                    let i = class.index();
                    // The class is full (by count or by bytes): stop reading until one
                    // of its requests starts.
                    let Ok(place) = places[i].clone().acquire_owned().await else { break };
                    let Ok(held) = bytes[i].clone().acquire_many_owned(units).await else { break };
                    sched.lock().push(class, Waiting { msg: compact(msg), arrived: Instant::now(), opened, _place: place, _bytes: held });
                    sched.meters.waiting[i].inc();
                    sched.wake.notify_one();
                }
                Err(e) => tracing::warn!("request socket: {e}"),
            },
            _ = &mut stop => break,
        }
    }
    starter.abort();
}

/// Starts the waiting requests by their classes' shares, each once it has a permit and
/// its charge, if its sender is still there.
async fn starter<F, Fut, P>(sched: Arc<Sched>, limits: Limits, start: F, present: P)
where
    F: Fn(ZmqMessage, Opened, Permit, budget::Charge) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
    P: Fn(&ZmqMessage) -> bool,
{
    loop {
        let Ok(permit) = limits.in_flight.clone().acquire_owned().await else { return };
        // The next request its class's share allows; woken by an arrival or a request
        // of a class at its bound finishing (`Notify` keeps a wake-up that comes while
        // the starter is not waiting).
        let (class, w) = loop {
            if let Some(next) = sched.lock().pick() {
                break next;
            }
            sched.wake.notified().await;
        };
        sched.meters.waiting[class.index()].dec();
        sched.meters.in_flight[class.index()].inc();
        let Waiting { msg, arrived, opened, .. } = w;
        let held = Permit { _permit: permit, class, arrived, sched: sched.clone() };
        if !present(&msg) {
            crate::metrics::refuse(crate::metrics::Port::Request, "?", "peer_gone", &"a queued request's connection closed before its turn: dropped unhandled");
            continue;
        }
        sched.meters.started[class.index()].inc();
        let Some(charge) = limits.budget.charge(budget::message_bytes(&msg)).await else { return };
        tokio::spawn(start(msg, opened, held, charge));
    }
}

#[cfg(test)]
#[path = "intake_tests.rs"]
mod tests;
