//! Events (Salt's event bus): a tag and a map of data. Request commands and admin verbs return
//! the events they cause; the daemon fires them on its bus (`daemon::bus`) once the
//! records they follow are committed, and stamps them then with Salt's `_stamp`.

use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value as J};

/// One event: a tag and a map of data.
///
/// A job return's event carries the minion's whole load. Most are read by nobody (the
/// `salt` CLI's follow writes its JSON line straight from msgpack, and with no watcher
/// on the bus an event is dropped as soon as it is fired), so such data is kept as the
/// msgpack bytes that were stored and turned into JSON the first time someone reads it
/// ([`Event::data`]), `_stamp` included.
#[derive(Debug, Clone)]
pub struct Event {
    pub tag: String,
    data: Data,
}

#[derive(Debug, Clone)]
enum Data {
    Json(J),
    /// A msgpack map (the bytes of a stored return), rendered on first read; `stamp`:
    /// the `_stamp` to add then.
    Load { load: Arc<[u8]>, stamp: Option<u64>, json: Arc<OnceLock<J>> },
}

/// Tags minions may not fire: Salt's `_minion_event` blacklist for `events` lists, and
/// `cluster/*` (the tags members use among themselves). Halite applies it to
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

/// Data that is not a map wrapped as `{"data": ...}`, as Salt does.
fn as_map(data: J) -> Map<String, J> {
    match data {
        J::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("data".into(), other);
            m
        }
    }
}

/// An event; data that is not a map is wrapped as `{"data": ...}`, as Salt does.
pub fn event(tag: impl Into<String>, data: J) -> Event {
    Event { tag: tag.into(), data: Data::Json(J::Object(as_map(data))) }
}

/// The `salt/job/<jid>/ret/<id>` event of a return minion `id` sent itself (its
/// `_return`, committed before the event is fired): the data is the load (msgpack, as
/// stored), turned into JSON only when read (see [`Event`]), the same as
/// `event(tag, payload::to_json(&payload::decode(&load)?))`. Only such an event carries a return
/// ([`Event::carried_return`]): an event a minion fires (`_minion_event`) or a peer
/// forwards may name anyone in its tag.
pub fn return_event(jid: &str, id: &str, load: Arc<[u8]>) -> Event {
    // Built by hand: one allocation of the right size (`format!` grows its buffer and
    // costs more than the rest of the event, once for every return).
    const HEAD: &str = "salt/job/";
    const MID: &str = "/ret/";
    let mut tag = String::with_capacity(HEAD.len() + jid.len() + MID.len() + id.len());
    for part in [HEAD, jid, MID, id] {
        tag.push_str(part);
    }
    Event { tag, data: Data::Load { load, stamp: None, json: Arc::new(OnceLock::new()) } }
}

/// Salt's `salt/job/<jid>/new` event of a publish `load` sent to `minions` (`missing`:
/// listed ids with no accepted key).
pub fn new_job_event(load: &J, minions: &[String], missing: &[String]) -> Event {
    let jid = load["jid"].as_str().unwrap_or_default();
    event(
        format!("salt/job/{jid}/new"),
        serde_json::json!({ "jid": jid, "tgt_type": load["tgt_type"], "tgt": load["tgt"], "user": load["user"], "fun": load["fun"], "arg": load["arg"], "minions": minions, "missing": missing }),
    )
}

impl Event {
    /// Adds `_stamp` (the moment it is fired).
    pub fn stamped(mut self, micros: u64) -> Self {
        match &mut self.data {
            Data::Json(J::Object(m)) => {
                m.insert("_stamp".into(), J::String(stamp_at(micros)));
            }
            Data::Json(_) => {}
            Data::Load { stamp, json, .. } => {
                *stamp = Some(micros);
                // Rendered before it was stamped (not done by the daemon): again.
                if json.get().is_some() {
                    *json = Arc::new(OnceLock::new());
                }
            }
        }
        self
    }

    /// The committed return this event carries, if it is a [`return_event`]: the
    /// minion's load as it was stored (msgpack).
    pub fn carried_return(&self) -> Option<&[u8]> {
        match &self.data {
            Data::Load { load, .. } => Some(load),
            Data::Json(_) => None,
        }
    }

    /// The event's data, a JSON map (rendered on the first read for a load).
    pub fn data(&self) -> &J {
        match &self.data {
            Data::Json(j) => j,
            Data::Load { load, stamp, json } => json.get_or_init(|| {
                use crate::wire::payload;
                // It decodes: it is what the return stored (`None` only if it was not).
                let load = payload::decode(load).unwrap_or(rmpv::Value::Nil);
                let mut m = as_map(payload::to_json_with_room(&load, usize::from(stamp.is_some())));
                if let Some(micros) = stamp {
                    m.insert("_stamp".into(), J::String(stamp_at(*micros)));
                }
                J::Object(m)
            }),
        }
    }
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.tag == other.tag && self.data() == other.data()
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
        assert_eq!(e.data(), &serde_json::json!({"data": 3, "_stamp": "1970-01-01T00:00:00.000000"}));
    }

    /// A load's event reads as the event of the load's JSON, stamp and all; a load that
    /// is not a map is wrapped as Salt wraps it.
    #[test]
    fn a_loads_event_is_rendered_on_read_as_its_json_would_be() {
        use crate::wire::payload::{bin, encode, map, to_json};
        use rmpv::Value;
        let load = map([("id", Value::from("m1")), ("return", Value::Boolean(true)), ("tok", bin(vec![0, 255])), ("n", Value::from(-3))]);
        for l in [load, Value::from(7), Value::Array(vec![Value::Nil])] {
            let bytes = encode(&l);
            let lazy = super::return_event("1", "m1", bytes.as_slice().into()).stamped(1_795_000_000_123_456);
            let eager = super::event("salt/job/1/ret/m1", to_json(&l)).stamped(1_795_000_000_123_456);
            assert_eq!(lazy.data(), eager.data());
            assert_eq!(lazy, eager);
            assert_eq!(lazy.clone().data()["_stamp"], "2026-11-18T11:06:40.123456");
            assert_eq!(lazy.carried_return(), Some(bytes.as_slice()));
            assert_eq!(eager.carried_return(), None, "an event made of JSON carries no return");
        }
    }
}
