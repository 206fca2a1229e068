//! What salt-api answers: the output format the client accepts (`Accept`: JSON first,
//! YAML), errors in Salt's shape (`{"status": CODE, "return": MESSAGE}`), and response
//! building.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::{Response, StatusCode};
use serde_json::{json, Value as J};

pub type Body = BoxBody<Bytes, Infallible>;

/// A refused or failed request: its status and a message for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {msg}")]
pub struct ApiError {
    pub status: u16,
    pub msg: String,
    /// The kind of the master's refusal a client acts on, when the error is the master's
    /// answer (`halite_master::Error::kind`).
    pub kind: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: u16, msg: impl Into<String>) -> ApiError {
        ApiError { status, msg: msg.into(), kind: None }
    }
}

/// The formats salt-api writes, in its order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Yaml => "application/x-yaml",
        }
    }

    /// The best format for an `Accept` header (none: JSON); `None` when it accepts
    /// neither (406).
    pub fn negotiate(accept: Option<&str>) -> Option<Format> {
        let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else { return Some(Format::Json) };
        let mut best: Option<(f32, Format)> = None;
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts.filter_map(|p| p.trim().strip_prefix("q=").and_then(|v| v.trim().parse::<f32>().ok())).next().unwrap_or(1.0);
            let fmt = match media.as_str() {
                "application/json" | "*/*" | "application/*" => Format::Json,
                "application/x-yaml" | "text/yaml" | "application/yaml" => Format::Yaml,
                _ => continue,
            };
            if q > 0.0 && best.is_none_or(|(bq, bf)| q > bq || (q == bq && fmt == Format::Json && bf != Format::Json)) {
                best = Some((q, fmt));
            }
        }
        best.map(|(_, f)| f)
    }

    pub fn render(self, v: &J) -> Vec<u8> {
        match self {
            Format::Json => v.to_string().into_bytes(),
            Format::Yaml => serde_yaml::to_string(v).unwrap_or_default().into_bytes(),
        }
    }
}

pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed()
}

/// A response with `v` rendered in `fmt`.
pub fn data(status: u16, fmt: Format, v: &J) -> Response<Body> {
    let mut r = Response::new(full(fmt.render(v)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(fmt.content_type()));
    r
}

/// An error response in Salt's shape.
pub fn error(fmt: Format, e: &ApiError) -> Response<Body> {
    data(e.status, fmt, &json!({ "status": e.status, "return": e.msg }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers() {
        assert_eq!(Format::negotiate(None), Some(Format::Json));
        assert_eq!(Format::negotiate(Some("*/*")), Some(Format::Json));
        assert_eq!(Format::negotiate(Some("application/x-yaml")), Some(Format::Yaml));
        assert_eq!(Format::negotiate(Some("application/json;q=0.5, application/x-yaml")), Some(Format::Yaml));
        assert_eq!(Format::negotiate(Some("application/x-yaml, application/json")), Some(Format::Json));
        assert_eq!(Format::negotiate(Some("text/html")), None);
        assert_eq!(Format::negotiate(Some("application/json;q=0")), None);
    }
}
