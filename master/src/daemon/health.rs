//! The health endpoint: HTTP on `interface:halite_health_port` (off unless the port is
//! set), for a load balancer's checks and for Prometheus.
//!
//! | path | answer |
//! |---|---|
//! | `/alive` | `200` while the process runs (it says nothing of the cluster: a liveness probe that followed the cluster would restart members during an election) |
//! | `/ready` | `200` once this member has caught up with the cluster and serves minions, `503` before (and while it has no leader); the body says which, with the indexes |
//! | `/metrics` | `200`, every metric in Prometheus' text format (`crate::metrics`, `node_metrics.rs`) |
//!
//! `GET` and `HEAD` only; anything else is `405`, an unknown path `404`, a head that is
//! not HTTP `400` (counted with `crate::metrics::refuse`). Bounds: at most
//! [`MAX_CONNECTIONS`] at once (more are closed at once), [`IO_TIMEOUT`] to send the head
//! and to take the answer, [`http::MAX_HEAD`] bytes of head; one request per connection.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::http::{self, Head};
use super::live::Master;
use super::node_metrics;
use crate::metrics::{refuse, Port};

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Time allowed to receive the head, and to send the answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves the endpoint on `listener` until the process ends.
pub async fn serve(master: Arc<Master>, listener: TcpListener) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
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
            refuse(Port::Health, &peer.ip().to_string(), "too_many_connections", &format!("more than {MAX_CONNECTIONS} health connections at once; closed"));
            continue;
        };
        let m = master.clone();
        tokio::spawn(async move {
            connection(&m, stream, &peer.ip().to_string()).await;
            drop(slot);
        });
    }
}

/// One connection: one request, one answer.
async fn connection(master: &Master, mut stream: TcpStream, source: &str) {
    let mut buf = Vec::with_capacity(512);
    let answer = match tokio::time::timeout(IO_TIMEOUT, read_head(&mut stream, &mut buf)).await {
        Err(_) => {
            refuse(Port::Health, source, "timeout", &format!("no complete request head within {IO_TIMEOUT:?}"));
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!(source, "health port: {e}");
            return;
        }
        Ok(Ok(())) => match http::parse_head(&buf) {
            Head::Request { method, path } => route(master, method, path),
            Head::Bad(why) => {
                refuse(Port::Health, source, why, &"not an HTTP/1.x request");
                http::response(400, "text/plain", b"bad request\n", false)
            }
            Head::Incomplete => http::response(400, "text/plain", b"bad request\n", false),
        },
    };
    let _ = tokio::time::timeout(IO_TIMEOUT, async {
        let _ = stream.write_all(&answer).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// Reads until the head is complete, refused, or the peer stops sending.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let mut chunk = [0u8; 1024];
    loop {
        if !matches!(http::parse_head(buf), Head::Incomplete) {
            return Ok(());
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The answer to `method path`.
fn route(master: &Master, method: &str, path: &str) -> Vec<u8> {
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return http::response(405, "text/plain", b"GET or HEAD only\n", false);
    }
    match path {
        "/alive" => http::response(200, "text/plain", b"alive\n", head_only),
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
            http::response(if s.ready { 200 } else { 503 }, "text/plain", body.as_bytes(), head_only)
        }
        "/metrics" => {
            let leader = master.node.leader().map(|id| crate::start::member_names(&master.cfg, Some(&master.node.handle())).get(&id).cloned().unwrap_or_else(|| id.to_string()));
            node_metrics::refresh(master.node.status(), leader, &master.cfg.interface, master.cfg.publish_port);
            node_metrics::refresh_state_memory(master.sm());
            http::response(200, "text/plain; version=0.0.4; charset=utf-8", crate::metrics::encode().as_bytes(), head_only)
        }
        _ => http::response(404, "text/plain", b"not found: /alive, /ready, /metrics\n", head_only),
    }
}
