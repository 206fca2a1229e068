//! The master event bus: tagged events (spec §9.3) fanned out to watchers of the admin
//! socket (`salt-run state.event`). Handlers return the events a request causes; the
//! server fires them after the request's records are committed.

use serde_json::{Map, Value as J};
use tokio::sync::broadcast;

/// One event: a tag and its data (with Salt's `_stamp`).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub tag: String,
    pub data: J,
}

/// Tags minions may not fire (Salt's `_minion_event` blacklist for `events` lists).
pub fn blacklisted(tag: &str) -> bool {
    use crate::glob::fnmatch;
    ["salt/job/*/publish", "salt/job/*/new", "salt/job/*/return", "salt/key", "salt/cloud/*", "salt/run/*", "salt/cluster/*", "salt/wheel/*/new", "salt/wheel/*/return"]
        .iter()
        .any(|p| fnmatch(p, tag))
}

/// Salt's `_stamp`: ISO-8601 UTC with microseconds.
pub fn stamp() -> String {
    let jid = crate::jobs::new_jid();
    format!("{}-{}-{}T{}:{}:{}.{}", &jid[0..4], &jid[4..6], &jid[6..8], &jid[8..10], &jid[10..12], &jid[12..14], &jid[14..20])
}

pub fn event(tag: impl Into<String>, data: J) -> Event {
    let mut data = match data {
        J::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("data".into(), other);
            m
        }
    };
    data.insert("_stamp".into(), J::String(stamp()));
    Event { tag: tag.into(), data: J::Object(data) }
}

/// The bus: a bounded broadcast channel; slow watchers lose the oldest events.
#[derive(Clone)]
pub struct EventBus {
    tx: broadcast::Sender<Event>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus { tx: broadcast::channel(4096).0 }
    }
}

impl EventBus {
    pub fn fire(&self, e: Event) {
        tracing::debug!(tag = %e.tag, "event");
        let _ = self.tx.send(e);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn blacklist_and_stamp() {
        assert!(super::blacklisted("salt/job/123/new"));
        assert!(super::blacklisted("salt/key"));
        assert!(!super::blacklisted("my/custom/tag"));
        assert_eq!(super::stamp().len(), 26);
    }
}
