//! Events across a cluster: every event fired on one member's bus is fired
//! on every other member's bus too, with Salt's `__peer_id` (the name of the member it
//! was fired on) added to its data, so `salt-run state.event` on any member shows what
//! happened on all of them.
//!
//! How: a best-effort fan-out over the peer transport's control frames (the join
//! handshake's application messages, `halite_replication::join::Handshake::send_app`),
//! sealed with `cluster_secret` like every frame between members. Not records in the
//! log: an event changes no state (what it reports is committed already, or is a
//! minion's message), every return would otherwise be written twice, and a member that
//! was down would replay hours of stale events on its bus. So an event reaches the
//! members that are up when it is fired and may be lost when one is not, as in Salt.
//!
//! Events are batched: a forwarder thread takes what the bus queued (at most
//! [`QUEUE`] events waiting; beyond that the newest are dropped and counted), and sends
//! at most [`BATCH`] of them in one message to every other member, then pauses
//! [`PAUSE`] so a busy bus costs a few connections a second, not one per event. A
//! receiver fires what it gets on its own bus only (never forwarded again, so no loops),
//! after checking it: at most [`BATCH`] events, tags of 1 to 1,024 bytes, data a map.

use std::sync::mpsc::{sync_channel, Receiver, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value as J};

use halite_replication::join::Handshake;

use crate::start::PeerLink;

use crate::daemon::bus::EventBus;
use crate::events::Event;
use crate::metrics::{refuse, Port};

/// Events waiting to be forwarded.
const QUEUE: usize = 8192;
/// Most events in one message.
const BATCH: usize = 512;
/// Most bytes of events in one message (well under the transport's frame bound).
const BATCH_BYTES: usize = 2 << 20;
/// The pause after each message.
const PAUSE: Duration = Duration::from_millis(50);
/// Longest tag taken from a peer.
const MAX_TAG: usize = 1024;

/// Connects `bus` to the other members over `link` (a cluster member's, from
/// [`crate::start`]): what is fired here is forwarded, what they forward is fired here.
pub fn start(bus: &EventBus, link: PeerLink) {
    let PeerLink { handshake: hs, name } = link;
    let local = bus.clone();
    hs.on_app(Arc::new(move |from, body| receive(&local, from, body)));
    let (tx, rx) = sync_channel::<Event>(QUEUE);
    bus.forward_to(Arc::new(move |e: &Event| match tx.try_send(e.clone()) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => refuse(Port::Cluster, "event bus", "event_queue_full", &format_args!("more than {QUEUE} events waiting to be forwarded to the other members; dropped")),
        Err(TrySendError::Disconnected(_)) => {}
    }));
    let spawned = std::thread::Builder::new().name("peer-events".into()).spawn(move || forward(rx, &hs, &name));
    if let Err(e) = spawned {
        tracing::error!("cannot start the event forwarder (events stay on this member): {e}");
    }
}

/// Sends what the bus queued, in batches, until the bus is gone.
fn forward(rx: Receiver<Event>, hs: &Handshake, name: &str) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![json!({ "tag": first.tag, "data": first.data() })];
        let mut bytes = first.data().to_string().len();
        while batch.len() < BATCH && bytes < BATCH_BYTES {
            let Ok(e) = rx.try_recv() else { break };
            bytes += e.tag.len() + e.data().to_string().len();
            batch.push(json!({ "tag": e.tag, "data": e.data() }));
        }
        hs.send_app(json!({ "events": { "peer": name, "list": batch } }));
        std::thread::sleep(PAUSE);
    }
}

/// Fires the events a peer forwarded on this member's bus only, with `__peer_id`.
fn receive(bus: &EventBus, from: u64, body: J) {
    let source = format!("member {from}");
    let Some(msg) = body.get("events") else {
        refuse(Port::Cluster, &source, "unknown_app_message", &"an application message this member does not know; dropped");
        return;
    };
    let peer = msg.get("peer").and_then(J::as_str).filter(|p| !p.is_empty() && p.len() <= 255);
    let list = msg.get("list").and_then(J::as_array).filter(|l| l.len() <= BATCH);
    let (Some(peer), Some(list)) = (peer, list) else {
        refuse(Port::Cluster, &source, "bad_event_batch", &"a forwarded event batch without a peer name or with too many events; dropped");
        return;
    };
    for e in list {
        let tag = e.get("tag").and_then(J::as_str).filter(|t| !t.is_empty() && t.len() <= MAX_TAG);
        let data = e.get("data").and_then(J::as_object);
        let (Some(tag), Some(data)) = (tag, data) else {
            refuse(Port::Cluster, &source, "bad_event", &"a forwarded event without a tag of 1 to 1,024 bytes or a data map; dropped");
            continue;
        };
        let mut data = data.clone();
        data.insert("__peer_id".into(), J::String(peer.to_string()));
        bus.fire_from_peer(crate::events::event(tag, J::Object(data)));
    }
}
