//! Events (spec §9.3): a tag and a map of data. Request commands and admin verbs return
//! the events they cause; the daemon fires them on its bus (`daemon::bus`) once the
//! records they follow are committed, and stamps them then with Salt's `_stamp`.

use serde_json::{Map, Value as J};

/// One event: a tag and its data.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub tag: String,
    pub data: J,
}

/// Tags minions may not fire: Salt's `_minion_event` blacklist for `events` lists, and
/// `cluster/*` (the tags members use among themselves, spec §9.1). Halite applies it to
/// a single `tag` too.
pub fn blacklisted(tag: &str) -> bool {
    use crate::glob::fnmatch;
    ["cluster/*", "salt/job/*/publish", "salt/job/*/new", "salt/job/*/return", "salt/key", "salt/cloud/*", "salt/run/*", "salt/cluster/*", "salt/wheel/*/new", "salt/wheel/*/return"]
        .iter()
        .any(|p| fnmatch(p, tag))
}

/// Salt's `_stamp` of an instant (microseconds since the epoch): ISO-8601 UTC with
/// microseconds, `2026-11-23T08:24:48.123456`.
pub fn stamp_at(micros: u64) -> String {
    let jid = crate::jobs::jid_at(micros);
    format!("{}-{}-{}T{}:{}:{}.{}", &jid[0..4], &jid[4..6], &jid[6..8], &jid[8..10], &jid[10..12], &jid[12..14], &jid[14..20])
}

/// Salt's `_stamp` of now.
pub fn stamp_now() -> String {
    stamp_at(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_micros() as u64)
}

/// An event; data that is not a map is wrapped as `{"data": ...}`, as Salt does.
pub fn event(tag: impl Into<String>, data: J) -> Event {
    let data = match data {
        J::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("data".into(), other);
            m
        }
    };
    Event { tag: tag.into(), data: J::Object(data) }
}

impl Event {
    /// Adds `_stamp` (the moment it is fired).
    pub fn stamped(mut self, micros: u64) -> Self {
        if let J::Object(m) = &mut self.data {
            m.insert("_stamp".into(), J::String(stamp_at(micros)));
        }
        self
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn blacklist_and_stamp() {
        assert!(super::blacklisted("salt/job/123/new"));
        assert!(super::blacklisted("salt/key"));
        assert!(super::blacklisted("cluster/event/10.0.0.1/x"));
        assert!(!super::blacklisted("my/custom/tag"));
        assert_eq!(super::stamp_at(1_795_000_000_123_456), "2026-11-18T11:06:40.123456");
        let e = super::event("t", serde_json::json!(3)).stamped(0);
        assert_eq!(e.data, serde_json::json!({"data": 3, "_stamp": "1970-01-01T00:00:00.000000"}));
    }
}
