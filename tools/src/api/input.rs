//! Request bodies: lowstate (and login credentials) as JSON, YAML or
//! `application/x-www-form-urlencoded`, as rest_cherrypy reads them. A body is a chunk
//! (a map) or a list of chunks; form fields given more than once become lists, and
//! `arg` is always a list.

use serde_json::{Map, Value as J};

use super::reply::ApiError;

/// Parses a body by its `Content-Type` (none, with an empty body: no chunk).
pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<J, ApiError> {
    let ct = content_type.unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if body.is_empty() {
        return Ok(J::Null);
    }
    match ct.as_str() {
        "application/json" => serde_json::from_slice(body).map_err(|_| ApiError::new(400, "Invalid JSON document")),
        "application/x-yaml" | "text/yaml" | "application/yaml" => {
            let v: serde_yaml::Value = serde_yaml::from_slice(body).map_err(|_| ApiError::new(400, "Invalid YAML document"))?;
            serde_json::to_value(v).map_err(|_| ApiError::new(400, "Invalid YAML document"))
        }
        "application/x-www-form-urlencoded" | "" => form(body),
        other => Err(ApiError::new(415, format!("Unsupported Media Type {other:?}"))),
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
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
                out.push(hex.ok_or_else(|| ApiError::new(400, "bad percent-encoding in the form"))?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| ApiError::new(400, "the form is not UTF-8"))
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
}
