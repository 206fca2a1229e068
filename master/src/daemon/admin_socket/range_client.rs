//! The range server's client: the network half of `crate::range`. One HTTP/1.0 `GET`
//! per expression, on a plain TCP connection, bounded in every direction: connecting
//! takes at most [`CONNECT_TIMEOUT`], the whole exchange at most [`DEADLINE`], and no
//! more than `range::MAX_RESPONSE` bytes are read. A server that fails, answers an
//! error or something that is not a list of names makes the publish fail with the
//! reason (counted: `halite_refused_total{port="admin",reason="range_server"}`); Salt
//! instead logs it and targets nobody.
//!
//! Runs on the blocking pool (the admin connection hands the command over; the reactor
//! runs there already).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde_json::Value as J;

use crate::config::MasterConfig;
use crate::error::{Error, Result};
use crate::range;

/// Longest wait for the connection to the range server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest a whole query (connect, send, read to the end) may take.
pub const DEADLINE: Duration = Duration::from_secs(15);

/// One expansion from `server` (`host` or `host:port`, port 80 by default).
pub fn expand(server: &str, expr: &str) -> std::result::Result<Vec<String>, String> {
    let start = Instant::now();
    let with_port = if server.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) { server.to_string() } else { format!("{server}:80") };
    let addrs: Vec<_> = with_port.to_socket_addrs().map_err(|e| format!("cannot resolve {server}: {e}"))?.collect();
    let mut last = format!("{server} resolves to no address");
    let mut stream = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("cannot connect to {a}: {e}"),
        }
    }
    let mut s = stream.ok_or(last)?;
    let req = format!("GET {} HTTP/1.0\r\nHost: {server}\r\nUser-Agent: halite-range\r\nConnection: close\r\n\r\n", range::request_path(expr));
    let left = |start: Instant| DEADLINE.checked_sub(start.elapsed()).filter(|d| !d.is_zero()).ok_or_else(|| format!("no complete answer within {DEADLINE:?}"));
    s.set_write_timeout(Some(left(start)?)).map_err(|e| e.to_string())?;
    s.write_all(req.as_bytes()).map_err(|e| format!("sending the query: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        s.set_read_timeout(Some(left(start)?)).map_err(|e| e.to_string())?;
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > range::MAX_RESPONSE {
                    return Err(format!("answer longer than {} bytes", range::MAX_RESPONSE));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading the answer: {e}")),
        }
    }
    range::parse_response(&buf)
}

/// The target with its nodegroups resolved (so a group may hold `R@` words) if it then
/// holds range words, `None` if it needs no range server. Pure: what both
/// [`resolve_target`] and [`command_needs_range`] decide from.
fn ranged(cfg: &MasterConfig, tgt: &J, tgt_type: &str) -> std::result::Result<Option<(String, String)>, String> {
    let Some(t) = tgt.as_str() else { return Ok(None) };
    let (t, ty) = crate::nodegroups::resolve(t, tgt_type, &cfg.nodegroups).map_err(|e| e.to_string())?;
    Ok(range::needs_range(&J::String(t.clone()), &ty).then_some((t, ty)))
}

/// A target with its range parts expanded (nodegroups first, so a group may hold `R@`
/// words), or `None` when it needs no range server. `port` names who asked, for the
/// refusal count.
pub fn resolve_target(cfg: &MasterConfig, port: crate::metrics::Port, tgt: &J, tgt_type: &str) -> Result<Option<(J, String)>> {
    let Some((t, ty)) = ranged(cfg, tgt, tgt_type).map_err(Error::refused)? else { return Ok(None) };
    let server = cfg.range_server.clone();
    let mut ask = |expr: &str| {
        expand(&server, expr).map_err(|why| {
            crate::metrics::refuse(port, &server, "range_server", &format_args!("range expression {expr:?}: {why}"));
            format!("Range server {server} could not expand {expr:?}: {why}")
        })
    };
    range::rewrite(&t, &ty, &mut ask).map(Some).map_err(Error::refused)
}

/// A parsed admin command whose target (a publish's, `mine.get`'s, `cache.*`'s) holds
/// range words, with them expanded; other commands unchanged.
pub fn resolve(cfg: &MasterConfig, mut cmd: crate::admin::Command) -> Result<crate::admin::Command> {
    if let Some((tgt, tgt_type)) = cmd.target_mut() {
        if let Some((t, ty)) = resolve_target(cfg, crate::metrics::Port::Admin, tgt, tgt_type)? {
            *tgt = t;
            *tgt_type = ty;
        }
    }
    Ok(cmd)
}

/// Whether a parsed command's target needs the range server (so the daemon hands it
/// to the blocking pool first).
pub fn command_needs_range(cfg: &MasterConfig, cmd: &mut crate::admin::Command) -> bool {
    cmd.target_mut().is_some_and(|(tgt, tgt_type)| matches!(ranged(cfg, tgt, tgt_type), Ok(Some(_))))
}
