//! The event bus: events fanned out to watchers of the admin socket (`salt-run
//! state.event`), stamped with Salt's `_stamp` as they are fired. A bounded broadcast
//! channel: a watcher that falls behind loses the oldest events (and is told how many).
//! In a cluster, what is fired here is also handed to the forwarder to the other
//! members (`peer_events`), and what they forward is fired here without being handed
//! on again.
//!
//! An event is shared (`Arc`), not cloned, for each watcher: a return's event carries
//! the whole return, and the `salt` CLI, a reactor and salt-api streams may all watch.

use std::sync::{Arc, OnceLock};

use tokio::sync::broadcast;

use crate::events::Event;

/// Where fired events are handed on (the forwarder to the other members).
pub type Forward = Arc<dyn Fn(&Event) + Send + Sync>;

#[derive(Clone)]
pub struct EventBus {
    tx: broadcast::Sender<Arc<Event>>,
    forward: Arc<OnceLock<Forward>>,
}

/// Events kept for a slow watcher.
const CAPACITY: usize = 4096;

impl Default for EventBus {
    fn default() -> Self {
        EventBus { tx: broadcast::channel(CAPACITY).0, forward: Arc::new(OnceLock::new()) }
    }
}

impl EventBus {
    /// Fires an event of this member (stamped now), and hands it on to the other members.
    pub fn fire(&self, e: Event) {
        tracing::debug!(tag = %e.tag, "event");
        let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_micros() as u64;
        let e = e.stamped(micros);
        if let Some(f) = self.forward.get() {
            f(&e);
        }
        // No watcher: nothing would keep it (a watcher gets only what is fired after it
        // subscribed), so it is not put behind an `Arc` to be dropped at once.
        if self.tx.receiver_count() > 0 {
            let _ = self.tx.send(Arc::new(e));
        }
    }

    /// Fires an event another member forwarded (it keeps its own `_stamp`).
    pub fn fire_from_peer(&self, e: Event) {
        tracing::debug!(tag = %e.tag, "event from a peer");
        let _ = self.tx.send(Arc::new(e));
    }

    /// Hands every event fired from now on to `f` too (set once).
    pub fn forward_to(&self, f: Forward) {
        let _ = self.forward.set(f);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watcher gets what is fired while it watches; what was fired before it
    /// subscribed (with nobody watching) it never sees.
    #[test]
    fn a_watcher_gets_what_is_fired_while_it_watches() {
        let bus = EventBus::default();
        bus.fire(crate::events::event("before", serde_json::json!({})));
        let mut rx = bus.subscribe();
        bus.fire(crate::events::event("during", serde_json::json!({"n": 1})));
        let got = rx.try_recv().expect("the event fired while watching");
        assert_eq!(got.tag, "during");
        assert!(rx.try_recv().is_err(), "nothing else: the event before the watcher is not kept");
    }
}
