//! `GET /events`: the master's event bus as server-sent events (`retry: 400`, then
//! `tag: TAG\ndata: {"tag", "data"}\n\n` per event) until the client goes away, or its
//! token is revoked or expires (checked every [`STREAM_RECHECK`]).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::Response;
use serde_json::{json, Value as J};

use crate::admin;
use crate::clients::Session;
use crate::config::ApiConfig;
use crate::reply::{ApiError, Body};

/// How often an open event stream checks that its token is still valid (a logout or
/// expiry ends the stream within this time).
pub const STREAM_RECHECK: Duration = Duration::from_secs(5);

/// `GET /events`: the bus as server-sent events until the client goes away.
pub async fn events(cfg: &ApiConfig, s: &Session) -> Result<Response<Body>, ApiError> {
    let mut conn = admin::open(&cfg.sock_dir, &json!({ "cmd": "events.watch" })).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(256);
    let (user, hash, sock_dir) = (s.user.clone(), s.hash.clone(), cfg.sock_dir.clone());
    tokio::spawn(async move {
        if tx.send(Bytes::from_static(b"retry: 400\n\n")).await.is_err() {
            return;
        }
        let mut recheck = tokio::time::interval(STREAM_RECHECK);
        recheck.tick().await;
        loop {
            let ev = tokio::select! {
                _ = tx.closed() => break,
                _ = recheck.tick() => {
                    let held = admin::call(&sock_dir, &json!({ "cmd": "token.get", "hash": hash })).await;
                    if !held.is_ok_and(|v| v["token"].is_object()) {
                        tracing::info!(user, "salt-api: token revoked or expired; event stream closed");
                        break;
                    }
                    continue;
                }
                ev = admin::next(&mut conn) => ev,
            };
            let Ok(Some(ev)) = ev else { break };
            let tag = ev.get("tag").and_then(J::as_str).unwrap_or("");
            // A line break in a tag would forge SSE fields: such events are not sent.
            if tag.contains(['\n', '\r']) {
                continue;
            }
            let line = format!("tag: {tag}\ndata: {}\n\n", json!({ "tag": tag, "data": ev.get("data").cloned().unwrap_or(J::Null) }));
            if tx.send(Bytes::from(line)).await.is_err() {
                break;
            }
        }
        tracing::debug!(user, "salt-api: event stream closed");
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx)) });
    let mut r = Response::new(StreamBody::new(stream).boxed());
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream;charset=utf-8"));
    h.insert("Cache-Control", HeaderValue::from_static("no-cache"));
    Ok(r)
}
