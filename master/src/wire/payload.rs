//! Salt payloads: msgpack as a Python minion writes it (spec `minion-protocol.md` §2).
//!
//! Python sends text and binary blobs alike as msgpack *str*, so a str may hold bytes that
//! are not UTF-8 (ciphertexts, signatures). Values are kept as [`rmpv::Value`], which
//! preserves such bytes; the accessors here treat str and bin the same way. Replies
//! encode text as str and blobs as bin, which a stock minion decodes identically.
//!
//! Decoding is bounded: the input size is checked by the caller (the request size limit)
//! and nesting deeper than [`MAX_DEPTH`] is refused, so hostile input cannot exhaust the
//! stack.

use rmpv::Value;

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

/// Decodes exactly one msgpack object.
pub fn decode(bytes: &[u8]) -> Result<Value, PayloadError> {
    let mut rd = bytes;
    let v = rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH).map_err(|e| match e {
        rmpv::decode::Error::DepthLimitExceeded => PayloadError::TooDeep,
        other => PayloadError::Decode(other.to_string()),
    })?;
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
        Value::Map(m) => J::Object(
            m.iter()
                .map(|(k, x)| {
                    let key = match bytes(k) {
                        Some(b) => String::from_utf8_lossy(b).into_owned(),
                        None => to_json(k).to_string(),
                    };
                    (key, to_json(x))
                })
                .collect(),
        ),
        Value::Ext(_, b) => J::String(String::from_utf8_lossy(b).into_owned()),
    }
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
        let deep = vec![0x91; 10_000];
        assert!(decode(&deep).is_err());
        assert!(decode(&[0xda, 0x00, 0x10, b'a']).is_err(), "a str cut short");
        let mut t = encode(&Value::from(1));
        t.push(0);
        assert!(matches!(decode(&t), Err(PayloadError::Trailing)));
    }
}
