//! Salt payloads: msgpack as a Python minion writes it (Salt's `salt/payload.py`).
//!
//! Python sends text and binary blobs alike as msgpack *str*, so a str may hold bytes that
//! are not UTF-8 (ciphertexts, signatures). Values are kept as [`rmpv::Value`], which
//! preserves such bytes; the accessors here treat str and bin the same way. Replies
//! encode text as str and blobs as bin, which a stock minion decodes identically.
//!
//! Decoding is bounded: the input size is checked by the caller (the request size limit)
//! and nesting deeper than [`MAX_DEPTH`] is refused, so hostile input cannot exhaust the
//! stack.

use rmpv::{Value, ValueRef};

pub const MAX_DEPTH: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("malformed msgpack: {0}")]
    Decode(String),
    #[error("msgpack nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("trailing bytes after the msgpack object")]
    Trailing,
}

/// rmpv's decode error as a [`PayloadError`].
fn read_error(e: rmpv::decode::Error) -> PayloadError {
    match e {
        rmpv::decode::Error::DepthLimitExceeded => PayloadError::TooDeep,
        other => PayloadError::Decode(other.to_string()),
    }
}

/// Decodes exactly one msgpack object.
pub fn decode(bytes: &[u8]) -> Result<Value, PayloadError> {
    let mut rd = bytes;
    let v = rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH).map_err(read_error)?;
    if !rd.is_empty() {
        return Err(PayloadError::Trailing);
    }
    Ok(v)
}

/// [`decode`], borrowing: strings and byte strings stay in `bytes` (the same depth bound
/// and trailing-bytes check).
pub fn decode_ref(bytes: &[u8]) -> Result<ValueRef<'_>, PayloadError> {
    let mut rd = bytes;
    let v = rmpv::decode::read_value_ref_with_max_depth(&mut rd, MAX_DEPTH).map_err(read_error)?;
    if !rd.is_empty() {
        return Err(PayloadError::Trailing);
    }
    Ok(v)
}

pub fn encode(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, v);
    out
}

/// The bytes of a str or bin value (str content may be non-UTF-8).
pub fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::String(s) => Some(s.as_bytes()),
        Value::Binary(b) => Some(b),
        _ => None,
    }
}

/// The text of a str or bin value, if it is UTF-8.
pub fn text(v: &Value) -> Option<&str> {
    bytes(v).and_then(|b| std::str::from_utf8(b).ok())
}

/// [`bytes`] of a value [`decode_ref`] read from `body`, for as long as `body` lives.
/// rmpv lends an invalid-UTF-8 str's bytes only for as long as the value, so they are
/// found again in `body`, which they were borrowed from (`None` if they are not there).
pub fn ref_bytes<'a>(body: &'a [u8], v: &ValueRef<'a>) -> Option<&'a [u8]> {
    let b: &[u8] = match v {
        ValueRef::String(s) => s.as_bytes(),
        ValueRef::Binary(b) => b,
        _ => return None,
    };
    let start = (b.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    body.get(start..start.checked_add(b.len())?)
}

/// [`text`] of a value [`decode_ref`] read from `body`.
pub fn ref_text<'a>(body: &'a [u8], v: &ValueRef<'a>) -> Option<&'a str> {
    ref_bytes(body, v).and_then(|b| std::str::from_utf8(b).ok())
}

/// Looks up `key` in a map whose keys are str or bin.
pub fn get<'a>(map: &'a Value, key: &str) -> Option<&'a Value> {
    match map {
        Value::Map(m) => m.iter().find(|(k, _)| bytes(k) == Some(key.as_bytes())).map(|(_, v)| v),
        _ => None,
    }
}

pub fn get_text<'a>(map: &'a Value, key: &str) -> Option<&'a str> {
    get(map, key).and_then(text)
}

pub fn get_bytes<'a>(map: &'a Value, key: &str) -> Option<&'a [u8]> {
    get(map, key).and_then(bytes)
}

/// Removes `key` from a map, returning its value.
pub fn take(map: &mut Value, key: &str) -> Option<Value> {
    match map {
        Value::Map(m) => {
            let i = m.iter().position(|(k, _)| bytes(k) == Some(key.as_bytes()))?;
            Some(m.remove(i).1)
        }
        _ => None,
    }
}

/// Builds a map from `(key, value)` pairs.
pub fn map<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Map(pairs.into_iter().map(|(k, v)| (Value::from(k), v)).collect())
}

pub fn bin(b: impl Into<Vec<u8>>) -> Value {
    Value::Binary(b.into())
}

/// Converts a payload value to JSON for events and CLI output: text stays text, other
/// bytes become a string with replacement characters.
pub fn to_json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::Nil => J::Null,
        Value::Boolean(b) => J::Bool(*b),
        Value::Integer(i) => {
            if let Some(u) = i.as_u64() {
                J::from(u)
            } else if let Some(s) = i.as_i64() {
                J::from(s)
            } else {
                J::Null
            }
        }
        Value::F32(f) => serde_json::Number::from_f64(*f as f64).map(J::Number).unwrap_or(J::Null),
        Value::F64(f) => serde_json::Number::from_f64(*f).map(J::Number).unwrap_or(J::Null),
        Value::String(_) | Value::Binary(_) => J::String(String::from_utf8_lossy(bytes(v).unwrap_or_default()).into_owned()),
        Value::Array(a) => J::Array(a.iter().map(to_json).collect()),
        Value::Map(_) => to_json_with_room(v, 0),
        Value::Ext(_, b) => J::String(String::from_utf8_lossy(b).into_owned()),
    }
}

/// [`to_json`], with room in a top-level map for `extra` more keys, so that adding them
/// (an event's `_stamp`, when it is fired) neither grows nor rehashes the map.
pub fn to_json_with_room(v: &Value, extra: usize) -> serde_json::Value {
    match v {
        Value::Map(m) => {
            let mut out = serde_json::Map::with_capacity(m.len() + extra);
            for (k, x) in m {
                out.insert(key_text(k).into_owned(), to_json(x));
            }
            serde_json::Value::Object(out)
        }
        other => to_json(other),
    }
}

/// Writes the JSON text of [`to_json`] of the msgpack object `msgpack` into `out`, read in
/// place ([`decode_ref`]) and without building the JSON value: the follow's answer lines,
/// written from the stored bytes of each return (half of the follow's cost was
/// allocating that value, then building the msgpack tree). Byte for byte what
/// `serde_json::to_writer(out, &to_json(&decode(msgpack)?))` writes; `null` if the bytes
/// do not decode. A map that names a key twice (only a hostile minion sends one) is
/// written through [`to_json`], whose last value wins in the first one's place.
pub fn write_json(msgpack: &[u8], out: &mut Vec<u8>) {
    match decode_ref(msgpack) {
        Ok(v) => write_json_ref(&v, out),
        Err(_) => out.extend_from_slice(b"null"),
    }
}

fn write_json_ref(v: &ValueRef<'_>, out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    match v {
        // Scalars: owned without allocating, then as `to_json` makes them.
        ValueRef::Nil | ValueRef::Boolean(_) | ValueRef::Integer(_) | ValueRef::F32(_) | ValueRef::F64(_) => {
            let _ = serde_json::to_writer(&mut *out, &to_json(&v.to_owned()));
        }
        ValueRef::String(t) => {
            let _ = serde_json::to_writer(&mut *out, &*String::from_utf8_lossy(t.as_bytes()));
        }
        ValueRef::Binary(b) | ValueRef::Ext(_, b) => {
            let _ = serde_json::to_writer(&mut *out, &*String::from_utf8_lossy(b));
        }
        ValueRef::Array(a) => {
            out.push(b'[');
            for (n, x) in a.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_json_ref(x, out);
            }
            out.push(b']');
        }
        ValueRef::Map(m) => {
            let keys: Vec<std::borrow::Cow<'_, str>> = m.iter().map(|(k, _)| key_text_ref(k)).collect();
            if has_repeats(&keys) {
                let _ = serde_json::to_writer(&mut *out, &to_json(&v.to_owned()));
                return;
            }
            out.push(b'{');
            for (n, (key, (_, x))) in keys.iter().zip(m).enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                let _ = serde_json::to_writer(&mut *out, &**key);
                out.push(b':');
                write_json_ref(x, out);
            }
            out.push(b'}');
        }
    }
}

/// A map key as JSON names it: text (bytes that are not UTF-8 with replacement
/// characters), or the JSON text of a key that is not a string.
fn key_text(k: &Value) -> std::borrow::Cow<'_, str> {
    match bytes(k) {
        Some(b) => String::from_utf8_lossy(b),
        None => std::borrow::Cow::Owned(to_json(k).to_string()),
    }
}

/// [`key_text`] of a key read in place.
fn key_text_ref<'a>(k: &'a ValueRef<'_>) -> std::borrow::Cow<'a, str> {
    match k {
        ValueRef::String(t) => String::from_utf8_lossy(t.as_bytes()),
        ValueRef::Binary(b) => String::from_utf8_lossy(b),
        other => std::borrow::Cow::Owned(to_json(&other.to_owned()).to_string()),
    }
}

/// Whether a map's keys name one twice.
fn has_repeats(keys: &[std::borrow::Cow<'_, str>]) -> bool {
    if keys.len() <= 16 {
        return keys.iter().enumerate().any(|(i, k)| keys[..i].contains(k));
    }
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    !keys.iter().all(|k| seen.insert(&**k))
}

/// Converts JSON (from the CLI) to a payload value.
pub fn from_json(j: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match j {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::from(u)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                Value::F64(n.as_f64().unwrap_or(0.0))
            }
        }
        J::String(s) => Value::from(s.as_str()),
        J::Array(a) => Value::Array(a.iter().map(from_json).collect()),
        J::Object(m) => Value::Map(m.iter().map(|(k, v)| (Value::from(k.as_str()), from_json(v))).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Any payload value: every msgpack kind, text and non-UTF-8 bytes, repeated keys,
    /// keys that are not text, nesting.
    fn any_value() -> impl Strategy<Value = Value> {
        crate::wire::test_values::values(crate::wire::test_values::Shape { text: "[a-c\\\"\u{0}-\u{1f}é🦀]{0,6}", max_bin: 5, ext: true, depth: 4, size: 48, items: 6, text_keys: true })
    }

    proptest! {
        #[test]
        fn write_json_is_to_json_written(v in any_value()) {
            let mut w = Vec::new();
            write_json(&encode(&v), &mut w);
            prop_assert_eq!(String::from_utf8(w).unwrap(), serde_json::to_string(&to_json(&v)).unwrap());
        }
    }

    #[test]
    fn python_str_blobs_and_limits() {
        // {"load": <96 non-UTF-8 bytes as str16>} as Python writes it.
        let mut b = vec![0x81, 0xa4];
        b.extend_from_slice(b"load");
        b.extend_from_slice(&[0xda, 0x00, 0x60]);
        b.extend_from_slice(&[0xff; 96]);
        let v = decode(&b).unwrap();
        assert_eq!(get_bytes(&v, "load").unwrap(), &[0xff; 96][..]);
        assert!(get_text(&v, "load").is_none());
        // Deep nesting is refused, not a stack overflow.
        let m = map([("b", Value::from(2)), ("a", Value::Array(vec![Value::Nil])), ("b", Value::from(3))]);
        let j = to_json_with_room(&m, 1);
        assert_eq!(j, serde_json::json!({"b": 3, "a": [null]}), "a repeated key keeps its place, the last value wins");
        assert_eq!(j.to_string(), to_json(&m).to_string());
        let deep = vec![0x91; 10_000];
        let mut w = Vec::new();
        write_json(&encode(&m), &mut w);
        assert_eq!(w, to_json(&m).to_string().into_bytes());
        let mut w = Vec::new();
        write_json(&[0xc1], &mut w);
        assert_eq!(w, b"null", "bytes that do not decode");
        // Past 16 keys the repeat check is a set: without and with a repeated key.
        let mut big: Vec<(Value, Value)> = (0..20).map(|i| (Value::from(format!("k{i}").as_str()), Value::from(i))).collect();
        for _ in 0..2 {
            let v = Value::Map(big.clone());
            let mut w = Vec::new();
            write_json(&encode(&v), &mut w);
            assert_eq!(w, to_json(&v).to_string().into_bytes());
            big.push((Value::from("k3"), Value::Nil));
        }
        assert!(decode(&deep).is_err());
        assert!(decode(&[0xda, 0x00, 0x10, b'a']).is_err(), "a str cut short");
        let mut t = encode(&Value::from(1));
        t.push(0);
        assert!(matches!(decode(&t), Err(PayloadError::Trailing)));
    }
}
