//! The health endpoint: HTTP on `interface:halite_health_port` (off unless the port is
//! set), for a load balancer's checks and for Prometheus, served by hyper.
//!
//! | path | answer |
//! |---|---|
//! | `/alive` | `200` while the process runs (it says nothing of the cluster: a liveness probe that followed the cluster would restart members during an election) |
//! | `/ready` | `200` once this member has caught up with the cluster and serves minions, `503` before (and while it has no leader); the body says which, with the indexes |
//! | `/metrics` | `200`, every metric in Prometheus' text format (`crate::metrics`, `node_metrics.rs`) |
//!
//! `GET` and `HEAD` only; anything else is `405`, an unknown path `404`. Bounds
//! ([`BOUNDS`]): at most 64 connections at once (more are closed at once), 5 s to send the
//! head (idle connections included) and 10 s for the whole exchange, 4 KiB and 100
//! headers of head; one request per connection. A head that is not HTTP is answered by hyper
//! (`400`, or `431` when too long) and counted with `crate::metrics::refuse`, as are
//! heads not sent in time (closed without an answer).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};

use crate::daemon::live::Master;
use crate::daemon::node_metrics;
use crate::metrics::{refuse, Port};

/// What one connection may take.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Connections served at once.
    pub max_connections: usize,
    /// Most bytes of a request head (request line and headers).
    pub max_head: usize,
    /// Most headers in a request head.
    pub max_headers: usize,
    /// Time allowed to receive the head (from the accept); twice this for the whole
    /// exchange, the answer taken included.
    pub io_timeout: Duration,
}

/// The endpoint's bounds.
pub const BOUNDS: Bounds = Bounds { max_connections: 64, max_head: 4096, max_headers: 100, io_timeout: Duration::from_secs(5) };

/// One answer: status, content type, body.
pub type Answer = (u16, &'static str, Vec<u8>);

/// Serves the endpoint on `listener` until the process ends.
pub async fn serve(master: Arc<Master>, listener: TcpListener) {
    serve_with(listener, BOUNDS, Arc::new(move |method: &Method, path: &str| route(&master, method, path))).await
}

/// Serves `answer` on `listener` within `bounds` until the process ends.
pub async fn serve_with<F>(listener: TcpListener, bounds: Bounds, answer: Arc<F>)
where
    F: Fn(&Method, &str) -> Answer + Send + Sync + 'static,
{
    let slots = Arc::new(tokio::sync::Semaphore::new(bounds.max_connections));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("health port: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refuse(Port::Health, &peer.ip().to_string(), "too_many_connections", &format!("more than {} health connections at once; closed", bounds.max_connections));
            continue;
        };
        let answer = answer.clone();
        tokio::spawn(async move {
            connection(stream, &peer.ip().to_string(), bounds, answer).await;
            drop(slot);
        });
    }
}

/// One connection: one request, one answer, closed.
async fn connection<F>(stream: TcpStream, source: &str, bounds: Bounds, answer: Arc<F>)
where
    F: Fn(&Method, &str) -> Answer + Send + Sync + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let (status, content_type, body) = answer(req.method(), req.uri().path());
        std::future::ready(Ok::<_, Infallible>(response(status, content_type, body)))
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.io_timeout)
        .max_header_size(bounds.max_head)
        .max_headers(bounds.max_headers)
        .keep_alive(false)
        .title_case_headers(true)
        .serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(bounds.io_timeout * 2, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.is_timeout() => refuse(Port::Health, source, "timeout", &format!("no complete request head within {:?}", bounds.io_timeout)),
        Ok(Err(e)) if e.is_parse_too_large() => refuse(Port::Health, source, "head_too_long", &format!("a request head over {} bytes or {} headers", bounds.max_head, bounds.max_headers)),
        Ok(Err(e)) if e.is_parse() => refuse(Port::Health, source, "bad_request_line", &"not an HTTP/1.x request"),
        Ok(Err(e)) => tracing::debug!(source, "health port: {e}"),
        Err(_) => tracing::debug!(source, "health port: the answer not taken within {:?}", bounds.io_timeout),
    }
}

/// One complete response, closing the connection; hyper leaves the body out of the
/// answer to a `HEAD` but keeps its length.
fn response(status: u16, content_type: &'static str, body: Vec<u8>) -> Response<Full<Bytes>> {
    let len = body.len();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(CONNECTION, HeaderValue::from_static("close"));
    r
}

/// The answer to `method path`.
fn route(master: &Master, method: &Method, path: &str) -> Answer {
    if method != Method::GET && method != Method::HEAD {
        return (405, "text/plain", b"GET or HEAD only\n".to_vec());
    }
    match path {
        "/alive" => (200, "text/plain", b"alive\n".to_vec()),
        "/ready" => {
            let s = master.node.status().get();
            let body = format!(
                "{}\nrole {}\nterm {}\nleader {}\ncommit {}\napplied {}\ncatch_up_to {}\n",
                if s.ready { "ready" } else { "not ready: catching up with the cluster" },
                s.role.as_str(),
                s.term,
                s.leader.map(|l| l.to_string()).unwrap_or_else(|| "none".into()),
                s.commit,
                s.applied,
                s.catch_up_to.map(|t| t.to_string()).unwrap_or_else(|| "unknown".into()),
            );
            (if s.ready { 200 } else { 503 }, "text/plain", body.into_bytes())
        }
        "/metrics" => {
            let leader = master.node.leader().map(|id| crate::start::member_names(&master.cfg, Some(&master.node.handle())).get(&id).cloned().unwrap_or_else(|| id.to_string()));
            node_metrics::refresh(master.node.status(), leader, &master.cfg.interface, master.cfg.publish_port);
            node_metrics::refresh_state_memory(master.sm());
            (200, "text/plain; version=0.0.4; charset=utf-8", crate::metrics::encode().into_bytes())
        }
        _ => (404, "text/plain", b"not found: /alive, /ready, /metrics\n".to_vec()),
    }
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
