//! `POST /hook/<tag...>`: rest_cherrypy's `Webhook`. The path under `webhook_url`
//! (`/hook` by default) becomes the tag `salt/netapi/hook/<tag...>`, fired on the
//! master's event bus (the master's `hook.fire`, so its reactor reacts and a cluster's
//! other members see it) with the data rest_cherrypy fires:
//!
//! - `body`: the request body as text (bytes that are not UTF-8 replaced);
//! - `post`: the body parsed by its `Content-Type` (JSON, YAML or a form; `{}` when
//!   empty);
//! - `headers`: the request's headers (names as CherryPy writes them, `Content-Type`),
//!   with `Remote-Addr`; `X-Auth-Token` and `Cookie` are left out (a token on the bus
//!   would be readable by every watcher of `/events`).
//!
//! A token is required unless `rest_cherrypy: webhook_disable_auth: True`. Answer:
//! `{"success": true}`.

use std::net::SocketAddr;

use hyper::{HeaderMap, Response};
use serde_json::{json, Map, Value as J};

use crate::config::ApiConfig;
use crate::reply::{self, ApiError, Body, Format};
use crate::{admin, input};

/// The tag base of every hook event.
pub const TAG_BASE: &str = "salt/netapi/hook";

/// The tag a request path names when it is under `webhook_url` (`None`: another
/// endpoint); each segment percent-decoded, empty ones dropped. A segment with a
/// control character, or one that does not decode, is a 400.
pub fn tag_of(webhook_url: &str, path: &str) -> Option<Result<String, ApiError>> {
    let base = webhook_url.trim_end_matches('/');
    let rest = path.strip_prefix(base)?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let mut tag = TAG_BASE.to_string();
    for seg in rest.split('/').filter(|s| !s.is_empty()) {
        let seg = match input::decode_path(seg) {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        if seg.chars().any(char::is_control) {
            return Some(Err(ApiError::new(400, "a hook tag holds no control characters")));
        }
        tag.push('/');
        tag.push_str(&seg);
    }
    Some(Ok(tag))
}

/// Header names as CherryPy writes them (`content-type` → `Content-Type`).
fn title_case(name: &str) -> String {
    name.split('-').map(|w| {
        let mut c = w.chars();
        c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
    }).collect::<Vec<_>>().join("-")
}

/// Fires the hook's event.
pub async fn fire(cfg: &ApiConfig, fmt: Format, tag: &str, h: &HeaderMap, raw: &[u8], peer: SocketAddr) -> Result<Response<Body>, ApiError> {
    let post = match input::parse(h.get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()), raw)? {
        J::Null => json!({}),
        v => v,
    };
    let mut headers = Map::new();
    for (k, v) in h {
        if matches!(k.as_str(), "x-auth-token" | "cookie") {
            continue;
        }
        headers.insert(title_case(k.as_str()), J::String(String::from_utf8_lossy(v.as_bytes()).into_owned()));
    }
    headers.insert("Remote-Addr".into(), J::String(peer.ip().to_string()));
    let data = json!({ "body": String::from_utf8_lossy(raw), "post": post, "headers": headers });
    let v = admin::call(&cfg.sock_dir, &json!({ "cmd": "hook.fire", "tag": tag, "data": data })).await?;
    tracing::info!(tag, "salt-api: hook fired");
    Ok(reply::data(200, fmt, &json!({ "success": v.get("success").cloned().unwrap_or(J::Bool(true)) })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_webhook_url_name_tags() {
        assert_eq!(tag_of("/hook", "/hook/ci/build/ok").unwrap().unwrap(), "salt/netapi/hook/ci/build/ok");
        assert_eq!(tag_of("/hook", "/hook").unwrap().unwrap(), "salt/netapi/hook");
        assert_eq!(tag_of("/hook/", "/hook//a/").unwrap().unwrap(), "salt/netapi/hook/a");
        assert_eq!(tag_of("/api/hooks", "/api/hooks/my%20app").unwrap().unwrap(), "salt/netapi/hook/my app");
        assert!(tag_of("/hook", "/hooks/a").is_none(), "another path");
        assert!(tag_of("/hook", "/run").is_none());
        assert_eq!(tag_of("/hook", "/hook/a%0Ab").unwrap().unwrap_err().status, 400);
        assert_eq!(tag_of("/hook", "/hook/a%zz").unwrap().unwrap_err().status, 400);
        assert_eq!(title_case("x-my-secret-key"), "X-My-Secret-Key");
    }
}
