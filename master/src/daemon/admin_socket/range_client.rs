//! The range server's client: the network half of `crate::range`. One HTTP `GET` per
//! expression (hyper, on a plain TCP connection, `Connection: close`), bounded in every
//! direction: connecting takes at most [`CONNECT_TIMEOUT`], the whole exchange at most
//! [`DEADLINE`], and no more than `range::MAX_RESPONSE` bytes of body are read. A
//! server that fails, answers an error or something that is not a list of names makes
//! the publish fail with the reason (counted:
//! `halite_refused_total{port="admin",reason="range_server"}`); Salt instead logs it and
//! targets nobody.
//!
//! The admin connection awaits [`resolve`]; the reactor's thread blocks on
//! [`resolve_target`] with the runtime's handle.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::header::{CONNECTION, HOST, USER_AGENT};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value as J;

use crate::config::MasterConfig;
use crate::error::{Error, Result};
use crate::range::{self, RangeError};

/// Longest wait for the connection to the range server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest a whole query (connect, send, read to the end) may take.
pub const DEADLINE: Duration = Duration::from_secs(15);

/// One expansion from `server` (`host` or `host:port`, port 80 by default).
pub async fn expand(server: &str, expr: &str) -> std::result::Result<Vec<String>, RangeError> {
    tokio::time::timeout(DEADLINE, ask(server, expr)).await.map_err(|_| RangeError::Deadline(DEADLINE))?
}

async fn ask(server: &str, expr: &str) -> std::result::Result<Vec<String>, RangeError> {
    let with_port = if server.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) { server.to_string() } else { format!("{server}:80") };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&with_port).await.map_err(|source| RangeError::Resolve { server: server.to_string(), source })?.collect();
    let mut last = RangeError::NoAddress(server.to_string());
    let mut stream = None;
    for addr in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                stream = Some(s);
                break;
            }
            Ok(Err(source)) => last = RangeError::Connect { addr, source },
            Err(_) => last = RangeError::Connect { addr, source: std::io::ErrorKind::TimedOut.into() },
        }
    }
    let stream = stream.ok_or(last)?;
    let http = |e: hyper::Error| RangeError::Http(e.to_string());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(http)?;
    // The connection is driven beside the request; it ends when the answer is read and
    // the sender dropped (or with this task, at the deadline).
    let driver = tokio::spawn(conn);
    let req = Request::get(range::request_path(expr))
        .header(HOST, server)
        .header(USER_AGENT, "halite-range")
        .header(CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|e| RangeError::Http(e.to_string()))?;
    let answer = async {
        let resp = sender.send_request(req).await.map_err(http)?;
        if resp.status() != StatusCode::OK {
            return Err(RangeError::Status(resp.status().to_string()));
        }
        if let Some(v) = resp.headers().get("RangeException") {
            return Err(RangeError::Exception(String::from_utf8_lossy(v.as_bytes()).trim().to_string()));
        }
        let body = Limited::new(resp.into_body(), range::MAX_RESPONSE).collect().await.map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                RangeError::TooLong
            } else {
                RangeError::Http(e.to_string())
            }
        })?;
        range::parse_names(&body.to_bytes())
    }
    .await;
    driver.abort();
    answer
}

/// The target with its nodegroups resolved (so a group may hold `R@` words) if it then
/// holds range words, `None` if it needs no range server. Pure: what both
/// [`resolve_target`] and [`command_needs_range`] decide from.
fn ranged(cfg: &MasterConfig, tgt: &J, tgt_type: &str) -> Result<Option<(String, String)>> {
    let Some(t) = tgt.as_str() else { return Ok(None) };
    let (t, ty) = crate::nodegroups::resolve(t, tgt_type, &cfg.nodegroups)?;
    Ok(range::needs_range(&J::String(t.clone()), &ty).then_some((t, ty)))
}

/// A target with its range parts expanded (nodegroups first, so a group may hold `R@`
/// words), or `None` when it needs no range server. `port` names who asked, for the
/// refusal count.
pub async fn resolve_target(cfg: &MasterConfig, port: crate::metrics::Port, tgt: &J, tgt_type: &str) -> Result<Option<(J, String)>> {
    let Some((t, ty)) = ranged(cfg, tgt, tgt_type)? else { return Ok(None) };
    let server = cfg.range_server.as_str();
    // Each range word of the target, expanded in turn; then the target rewritten.
    let exprs: Vec<&str> = match ty.as_str() {
        "range" => vec![t.trim()],
        _ => t.split_whitespace().filter_map(|w| w.strip_prefix("R@")).collect(),
    };
    let mut expanded = std::collections::BTreeMap::new();
    for expr in exprs {
        if expanded.contains_key(expr) {
            continue;
        }
        match expand(server, expr).await {
            Ok(names) => {
                expanded.insert(expr.to_string(), names);
            }
            Err(why) => {
                crate::metrics::refuse(port, server, "range_server", &format_args!("range expression {expr:?}: {why}"));
                return Err(Error::refused(format!("Range server {server} could not expand {expr:?}: {why}")));
            }
        }
    }
    let mut known = |expr: &str| expanded.get(expr).cloned().ok_or(());
    let rewritten = range::rewrite(&t, &ty, &mut known).map_err(|()| Error::refused("a range word was not expanded"))?;
    Ok(Some(rewritten))
}

/// A parsed admin command whose target (a publish's, `mine.get`'s, `cache.*`'s) holds
/// range words, with them expanded; other commands unchanged.
pub async fn resolve(cfg: &MasterConfig, mut cmd: crate::admin::Command) -> Result<crate::admin::Command> {
    if let Some((tgt, tgt_type)) = cmd.target_mut() {
        if let Some((t, ty)) = resolve_target(cfg, crate::metrics::Port::Admin, tgt, tgt_type).await? {
            *tgt = t;
            *tgt_type = ty;
        }
    }
    Ok(cmd)
}

/// Whether a parsed command's target needs the range server (so the daemon expands it
/// before the command is answered).
pub fn command_needs_range(cfg: &MasterConfig, cmd: &mut crate::admin::Command) -> bool {
    cmd.target_mut().is_some_and(|(tgt, tgt_type)| matches!(ranged(cfg, tgt, tgt_type), Ok(Some(_))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A range server on loopback that reads one request and answers `answer` as is
    /// (then closes); returns its address and the request it read.
    async fn server(answer: Vec<u8>) -> (String, tokio::task::JoinHandle<String>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                req.extend_from_slice(&buf[..n]);
            }
            // A peer that went away first is no failure of the server's.
            let _ = s.write_all(&answer).await;
            let _ = s.shutdown().await;
            String::from_utf8_lossy(&req).into_owned()
        });
        (addr, task)
    }

    #[tokio::test]
    async fn answers_are_read_over_http_and_bounded() {
        let (at, req) = server(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nweb2\nweb1\n".to_vec()).await;
        assert_eq!(expand(&at, "%web,db").await.unwrap(), ["web1", "web2"]);
        let req = req.await.unwrap();
        assert!(req.starts_with("GET /range/list?%25web%2Cdb HTTP/1.1\r\n"), "{req}");
        // Chunked bodies are read as HTTP says.
        let (at, _) = server(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nweb1\n\r\n0\r\n\r\n".to_vec()).await;
        assert_eq!(expand(&at, "%web").await.unwrap(), ["web1"]);
        let (at, _) = server(b"HTTP/1.0 500 Internal\r\n\r\nboom".to_vec()).await;
        assert!(matches!(expand(&at, "%x").await, Err(RangeError::Status(s)) if s.starts_with("500")));
        let (at, _) = server(b"HTTP/1.0 200 OK\r\nRangeException: NO_CLUSTER\r\n\r\n".to_vec()).await;
        assert!(matches!(expand(&at, "%x").await, Err(RangeError::Exception(s)) if s == "NO_CLUSTER"));
        let (at, _) = server(b"SSH-2.0-OpenSSH\r\n\r\n".to_vec()).await;
        assert!(matches!(expand(&at, "%x").await, Err(RangeError::Http(_))));
        let long = [b"HTTP/1.0 200 OK\r\n\r\n".to_vec(), "m\n".repeat(range::MAX_RESPONSE).into_bytes()].concat();
        let (at, _) = server(long).await;
        assert!(matches!(expand(&at, "%x").await, Err(RangeError::TooLong)));
        // Nobody listening: a clear refusal to connect.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        assert!(matches!(expand(&free.to_string(), "%x").await, Err(RangeError::Connect { .. })));
    }
}
