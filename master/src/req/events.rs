//! `_minion_event`: events a minion fires onto the master's bus.
//!
//! A single `tag` + `data` fires the whole load under that tag; an `events` list fires
//! each `data` under its `tag` (at most 1,000); with a `pretag` each is also fired as
//! `<pretag>/<tag>`. Reserved tags (`crate::events::blacklisted`: the ones Salt reserves,
//! and `cluster/*`), whether single or in a list, are dropped and counted
//! (`halite_refused_total{port="request",reason="reserved_tag"}`), as are tags longer
//! than 1,024 bytes. Nothing is stored. In a cluster every event fired here reaches every
//! member's bus (`crate::daemon::peer_events`).

use rmpv::Value;

use super::{Answer, Ctx};
use crate::events::{blacklisted, event};
use crate::metrics::{refuse, Port};
use crate::wire::payload::{self, get, get_text};

/// Most events taken from one request's `events` list.
const MAX_EVENTS: usize = 1000;
/// Longest tag fired.
const MAX_TAG: usize = 1024;

/// A `_minion_event` request.
pub struct MinionEvent {
    load: Value,
}

impl MinionEvent {
    pub fn parse(inner: &Value) -> Self {
        MinionEvent { load: inner.clone() }
    }

    pub fn answer(self, ctx: &Ctx) -> Answer {
        let load = &self.load;
        let pretag = get_text(load, "pretag").map(String::from);
        let mut events = Vec::new();
        let mut fire = |tag: &str, data: serde_json::Value| {
            if tag.is_empty() || tag.len() > MAX_TAG {
                return;
            }
            if blacklisted(tag) {
                refuse(Port::Request, ctx.id, "reserved_tag", &format_args!("minion event with the reserved tag {:?} dropped", tag.escape_debug().to_string()));
                return;
            }
            if let Some(p) = &pretag {
                events.push(event(format!("{p}/{tag}"), data.clone()));
            }
            events.push(event(tag, data));
        };
        if let Some(tag) = get_text(load, "tag") {
            fire(tag, payload::to_json(load));
        }
        if let Some(Value::Array(list)) = get(load, "events") {
            for e in list.iter().take(MAX_EVENTS) {
                let Some(tag) = get_text(e, "tag") else { continue };
                fire(tag, get(e, "data").map(payload::to_json).unwrap_or(serde_json::Value::Null));
            }
        }
        Answer { events, ..Answer::value(Value::Nil) }
    }
}

/// The events of a list, for tests.
#[cfg(test)]
pub fn tags(events: &[crate::events::Event]) -> Vec<&str> {
    events.iter().map(|e| e.tag.as_str()).collect()
}
