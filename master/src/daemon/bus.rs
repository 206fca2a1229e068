//! The event bus: events fanned out to watchers of the admin socket (`salt-run
//! state.event`), stamped with Salt's `_stamp` as they are fired. A bounded broadcast
//! channel: a watcher that falls behind loses the oldest events (and is told how many).

use tokio::sync::broadcast;

use crate::events::Event;

#[derive(Clone)]
pub struct EventBus {
    tx: broadcast::Sender<Event>,
}

/// Events kept for a slow watcher.
const CAPACITY: usize = 4096;

impl Default for EventBus {
    fn default() -> Self {
        EventBus { tx: broadcast::channel(CAPACITY).0 }
    }
}

impl EventBus {
    pub fn fire(&self, e: Event) {
        tracing::debug!(tag = %e.tag, "event");
        let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_micros() as u64;
        let _ = self.tx.send(e.stamped(micros));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.tx.subscribe()
    }
}
