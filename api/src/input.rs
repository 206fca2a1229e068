//! Request bodies: lowstate (and login credentials) as JSON, YAML or
//! `application/x-www-form-urlencoded`, as rest_cherrypy reads them. A body is a chunk
//! (a map) or a list of chunks; form fields given more than once become lists, and
//! `arg` is always a list.

use std::cell::Cell;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value as J};

use super::reply::ApiError;

/// The most values a JSON body may hold (each scalar, list and map counts one; a map's
/// keys too). A parsed value takes 32 bytes or more however small it is in the body
/// (`0,` is two bytes), so a body of `max_request_body_size` (1 MiB by default) could
/// be a tree 15 times its size (measured with zeros), `thread_pool` (100) of them at
/// once, before any login. Counted first, without building anything; a lowstate holds tens of values.
pub const MAX_VALUES: usize = 65_536;

/// Parses a body by its `Content-Type` (none, with an empty body: no chunk).
pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<J, ApiError> {
    let ct = content_type.unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if body.is_empty() {
        return Ok(J::Null);
    }
    match ct.as_str() {
        "application/json" => {
            if !json_within(body, MAX_VALUES) {
                return Err(ApiError::new(413, format!("Request Entity Too Large: more than {MAX_VALUES} values in the body")));
            }
            serde_json::from_slice(body).map_err(|_| ApiError::new(400, "Invalid JSON document"))
        }
        "application/x-yaml" | "text/yaml" | "application/yaml" => {
            let v: serde_yaml::Value = serde_yaml::from_slice(body).map_err(|_| ApiError::new(400, "Invalid YAML document"))?;
            serde_json::to_value(v).map_err(|_| ApiError::new(400, "Invalid YAML document"))
        }
        "application/x-www-form-urlencoded" | "" => form(body),
        other => Err(ApiError::new(415, format!("Unsupported Media Type {other:?}"))),
    }
}

/// Whether the JSON document `body` holds at most `max` values (true for a document that
/// does not parse: its parse says why). Stepped through by serde_json without a tree.
fn json_within(body: &[u8], max: usize) -> bool {
    let left = Cell::new(max);
    let mut de = serde_json::Deserializer::from_slice(body);
    Count(&left).deserialize(&mut de).is_ok() || left.get() > 0
}

/// Counts the values it is handed down, failing once `.0` reaches zero.
#[derive(Clone, Copy)]
struct Count<'a>(&'a Cell<usize>);

impl Count<'_> {
    fn one<E: serde::de::Error>(self) -> Result<(), E> {
        let n = self.0.get().checked_sub(1).ok_or_else(|| E::custom("too many values"))?;
        self.0.set(n);
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Count<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Count<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.one()
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.one()
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.one()
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.one()
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.one()
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.one()
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.one()?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.one()?;
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }
}

/// A form body as one chunk.
fn form(body: &[u8]) -> Result<J, ApiError> {
    let text = std::str::from_utf8(body).map_err(|_| ApiError::new(400, "the form is not UTF-8"))?;
    let mut out: Map<String, J> = Map::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode(k)?, decode(v)?);
        match out.get_mut(&k) {
            Some(J::Array(a)) => a.push(J::String(v)),
            Some(prev) => *prev = J::Array(vec![prev.take(), J::String(v)]),
            None => {
                out.insert(k, J::String(v));
            }
        }
    }
    if let Some(a) = out.get_mut("arg") {
        if !a.is_array() {
            *a = J::Array(vec![a.take()]);
        }
    }
    Ok(J::Object(out))
}

fn decode(s: &str) -> Result<String, ApiError> {
    percent_decode(s, true)
}

/// A path segment percent-decoded (`+` stays `+`).
pub fn decode_path(s: &str) -> Result<String, ApiError> {
    percent_decode(s, false)
}

fn percent_decode(s: &str, plus_is_space: bool) -> Result<String, ApiError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' if plus_is_space => out.push(b' '),
            b'%' => {
                let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
                out.push(hex.ok_or_else(|| ApiError::new(400, "bad percent-encoding"))?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| ApiError::new(400, "not UTF-8 once percent-decoded"))
}

/// The chunks of a lowstate body: a map is one chunk, a list must hold maps.
pub fn chunks(v: J) -> Result<Vec<Map<String, J>>, ApiError> {
    match v {
        J::Object(m) => Ok(vec![m]),
        J::Array(a) => a.into_iter().map(|c| match c {
            J::Object(m) => Ok(m),
            _ => Err(ApiError::new(400, "Lowstates must be a list of maps")),
        }).collect(),
        J::Null => Ok(vec![]),
        _ => Err(ApiError::new(400, "Lowstates must be a list")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies() {
        assert_eq!(parse(Some("application/json"), br#"[{"client":"local"}]"#).unwrap(), json!([{"client": "local"}]));
        assert_eq!(parse(Some("application/x-yaml"), b"- client: runner\n  fun: jobs.list_jobs\n").unwrap(), json!([{"client": "runner", "fun": "jobs.list_jobs"}]));
        assert_eq!(parse(Some("application/x-www-form-urlencoded"), b"client=local&tgt=%2A&fun=test.arg&arg=a+b&arg=c").unwrap(), json!({"client": "local", "tgt": "*", "fun": "test.arg", "arg": ["a b", "c"]}));
        assert_eq!(parse(None, b"fun=test.ping&arg=x").unwrap(), json!({"fun": "test.ping", "arg": ["x"]}));
        assert_eq!(parse(Some("application/json"), b"{").unwrap_err().status, 400);
        assert_eq!(parse(Some("text/html"), b"x").unwrap_err().status, 415);
        assert_eq!(parse(None, b"a=%zz").unwrap_err().status, 400);
        assert_eq!(chunks(json!("x")).unwrap_err().status, 400);
        assert_eq!(chunks(json!([1])).unwrap_err().status, 400);
        assert_eq!(chunks(json!({"a": 1})).unwrap().len(), 1);
    }

    #[test]
    fn a_json_body_of_too_many_values_is_refused_before_it_is_parsed() {
        // A list, MAX_VALUES - 1 zeros: MAX_VALUES values in all.
        let at = format!("[{}]", vec!["0"; MAX_VALUES - 1].join(","));
        assert!(parse(Some("application/json"), at.as_bytes()).is_ok());
        let over = format!("[{}]", vec!["0"; MAX_VALUES].join(","));
        assert_eq!(parse(Some("application/json"), over.as_bytes()).unwrap_err().status, 413);
        // Keys count (here 9 values: the map, 2 keys, a string, a list, 1, a map, its key
        // and null), strings with brackets in them are one value, and a document that
        // does not parse is left to the parse.
        assert!(json_within(br#"{"a": "[[[", "b": [1, {"c": null}]}"#, 9));
        assert!(!json_within(br#"{"a": "[[[", "b": [1, {"c": null}]}"#, 8));
        assert_eq!(parse(Some("application/json"), b"[0, 0").unwrap_err().status, 400);
    }
}
