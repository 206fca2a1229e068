//! `salt-api`: a REST endpoint in the shape of Salt's `rest_cherrypy`, in front of a
//! running Halite master (through its admin socket, as `salt` and `salt-run` talk to it).
//!
//! | method, path | auth | does | file |
//! |---|---|---|---|
//! | `GET /` | | `{"return": "Welcome", "clients": [...]}` | |
//! | `POST /` | token | runs a lowstate (a chunk or a list of chunks, [`clients`]): `{"return": [one result per chunk]}` | |
//! | `POST /run` | each chunk's `token` or `username`/`password`/`eauth` (no session) | as `POST /` | [`session`] |
//! | `POST /login` | `username`, `password`, `eauth` | `{"return": [{"token", "expire", "start", "user", "eauth", "perms"}]}`, the token also in `X-Auth-Token` and the `session_id` cookie | [`session`] |
//! | `POST /token` | `username`, `password`, `eauth` | `[{"token", "start", "expire", "name", "eauth"}]` (rest_cherrypy's `Token`) | [`session`] |
//! | `POST /logout` | token | revokes the token on every member: `{"return": "Your token has been cleared"}` | |
//! | `GET /minions[/ID]` | token | `local` `grains.items` on `*` or ID | |
//! | `POST /minions` | token | `local_async` chunks: 202, `{"return": [{"jid", "minions"}], "_links": {"jobs": [{"href": "/jobs/JID"}]}}` | |
//! | `GET /jobs[/JID]` | token | runner `jobs.list_jobs`, or `jobs.list_job` as `{"info": [job], "return": [{minion: return}]}` | |
//! | `GET /keys[/ID]` | token | wheel `key.list_all`'s, or `key.finger`'s, return | [`keys`] |
//! | `POST /keys` | the body's credentials | wheel `key.gen_accept` for `mid`: a tar of `minion.pub`, `minion.pem` | [`keys`] |
//! | `POST /hook/TAG...` (`webhook_url`) | token unless `webhook_disable_auth` | fires `salt/netapi/hook/TAG...` with `{"body", "post", "headers"}`: `{"success": true}` | [`hook`] |
//! | `GET /events` | token | the master's event bus as server-sent events | [`events`] |
//!
//! Every answer carries `X-Salt-Version` (the Salt release Halite answers as, 3008.5;
//! pepper reads it and then sends a runner's or a wheel's arguments as `arg` and a
//! `timeout`, both read here). The token is the `X-Auth-Token` header or the
//! `session_id` cookie (as rest_cherrypy 3008.5: a token in the URL is refused with
//! 400). Tokens are kind-18 records (`halite_storage::eauth_token`): made through one
//! member of a cluster, valid through every member until `token_expire` or `/logout`.
//!
//! Hostile input: at most `thread_pool` connections at once, heads of at most
//! [`MAX_HEAD_BYTES`] and [`MAX_HEADERS`] headers, [`HEAD_TIMEOUT`] to send a head, bodies
//! of at most `max_request_body_size` (413); every refusal is counted by
//! `halite_master::metrics::refuse` (port `api`) and answered in Salt's error shape.

pub use halite_master::acl;
pub mod admin;
pub mod clients;
pub mod config;
pub mod eauth;
pub mod events;
pub mod hook;
pub mod input;
pub mod keys;
pub mod reply;
pub mod session;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Map, Value as J};
use tokio::net::TcpListener;

use halite_master::metrics::{refuse, Port};

use clients::Session;
use config::ApiConfig;
use reply::{ApiError, Body, Format};
pub use events::STREAM_RECHECK;
pub use session::token_hash;

/// Most bytes of a request head.
pub const MAX_HEAD_BYTES: usize = 64 << 10;
/// Most headers in a request.
pub const MAX_HEADERS: usize = 100;
/// Time allowed to send a request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Most chunks in one lowstate.
pub const MAX_CHUNKS: usize = 100;
/// The `X-Salt-Version` every answer carries: the Salt release Halite answers as.
pub const SALT_VERSION: &str = halite_master::admin::manage::SALT_VERSION;

/// Serves until the process ends: HTTPS when `tls` is given (`tls::acceptor`), else
/// plain HTTP.
pub async fn serve(cfg: Arc<ApiConfig>, listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(cfg.max_connections));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("salt-api: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refuse(Port::Api, &peer.ip().to_string(), "too_many_connections", &format!("more than {} connections at once (rest_cherrypy:thread_pool); closed", cfg.max_connections));
            continue;
        };
        let (cfg, tls) = (cfg.clone(), tls.clone());
        tokio::spawn(async move {
            match tls {
                None => connection(cfg, stream, peer).await,
                Some(acceptor) => match tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(s)) => connection(cfg, s, peer).await,
                    Ok(Err(e)) => refuse(Port::Api, &peer.ip().to_string(), "tls_handshake", &e),
                    Err(_) => refuse(Port::Api, &peer.ip().to_string(), "tls_handshake", &format_args!("no TLS handshake within {HEAD_TIMEOUT:?}")),
                },
            }
            drop(slot);
        });
    }
}

/// Serves one connection (plain or TLS) until it closes.
async fn connection<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static>(cfg: Arc<ApiConfig>, stream: S, peer: SocketAddr) {
    let service = hyper::service::service_fn(move |req| {
        let cfg = cfg.clone();
        async move { Ok::<_, std::convert::Infallible>(handle(&cfg, req, peer).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_header_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        .serve_connection(TokioIo::new(stream), service);
    if let Err(e) = conn.await {
        // Malformed heads, too many headers, slow heads: hyper answers or closes.
        refuse(Port::Api, &peer.ip().to_string(), "bad_http", &e);
    }
}

/// One request.
async fn handle(cfg: &ApiConfig, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
    let accept = req.headers().get(hyper::header::ACCEPT).and_then(|v| v.to_str().ok()).map(str::to_string);
    let Some(fmt) = Format::negotiate(accept.as_deref()) else {
        return reply::error(Format::Json, &ApiError::new(406, "Not Acceptable: salt-api writes application/json and application/x-yaml"));
    };
    let mut resp = match route(cfg, req, fmt, peer).await {
        Ok(r) => r,
        Err(e) => {
            if e.status >= 400 && e.status != 404 {
                let reason = match e.status {
                    401 => "unauthorized",
                    413 => "body_too_large",
                    415 => "unsupported_media_type",
                    503 => "master_unavailable",
                    _ if e.status < 500 => "bad_request",
                    _ => "failed",
                };
                refuse(Port::Api, &peer.ip().to_string(), reason, &e.msg);
            }
            reply::error(fmt, &e)
        }
    };
    // rest_cherrypy's "simple" CORS headers.
    let h = resp.headers_mut();
    h.insert("Access-Control-Allow-Origin", HeaderValue::from_static("*"));
    h.insert("Access-Control-Expose-Headers", HeaderValue::from_static("GET, POST"));
    if !h.contains_key("Cache-Control") {
        h.insert("Cache-Control", HeaderValue::from_static("private"));
    }
    h.insert("X-Salt-Version", HeaderValue::from_static(SALT_VERSION));
    resp
}

async fn route(cfg: &ApiConfig, req: Request<Incoming>, fmt: Format, peer: SocketAddr) -> Result<Response<Body>, ApiError> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let ok = |v: J| Ok(reply::data(200, fmt, &v));
    let (method, segs): (&Method, Vec<&str>) = (&parts.method, path.split('/').filter(|s| !s.is_empty()).collect());
    if method == Method::OPTIONS {
        let mut r = reply::data(200, fmt, &J::Null);
        r.headers_mut().insert("Access-Control-Allow-Methods", HeaderValue::from_static("GET, POST"));
        r.headers_mut().insert("Access-Control-Allow-Headers", HeaderValue::from_static("Content-Type, X-Auth-Token, X-Requested-With"));
        return Ok(r);
    }
    let token = session::token_of(&parts.headers);
    if let Some(tag) = hook::tag_of(&cfg.webhook_url, parts.uri.path()) {
        if method != Method::POST {
            return Err(ApiError::new(405, format!("{method} is not allowed on {path}")));
        }
        let tag = tag?;
        if !cfg.webhook_disable_auth {
            session::session(cfg, token.as_deref()).await?;
        }
        let raw = read_raw(cfg, &parts.headers, body).await?;
        return hook::fire(cfg, fmt, &tag, &parts.headers, &raw, peer).await;
    }
    match (method.as_str(), segs.as_slice()) {
        ("GET", []) => ok(json!({ "return": "Welcome", "clients": clients::CLIENTS })),
        ("GET", ["login"]) => ok(json!({ "return": "Please log in", "status": 401 })),
        ("POST", ["login"]) => {
            let body = read_body(cfg, &parts.headers, body).await?;
            session::login(cfg, fmt, body).await
        }
        ("POST", ["token"]) => {
            clients::enabled(&cfg.enabled_clients, &Map::new(), Some("runner"))?;
            let body = read_body(cfg, &parts.headers, body).await?;
            session::token(cfg, fmt, body).await
        }
        ("POST", ["logout"]) => {
            let s = session::session(cfg, token.as_deref()).await?;
            admin::call(&cfg.sock_dir, &json!({ "cmd": "token.revoke", "hash": s.hash })).await?;
            tracing::info!(user = %s.user, "salt-api: logged out");
            let mut r = reply::data(200, fmt, &json!({ "return": "Your token has been cleared" }));
            r.headers_mut().insert(hyper::header::SET_COOKIE, HeaderValue::from_static("session_id=; expires=Thu, 01 Jan 1970 00:00:00 GMT; Path=/"));
            Ok(r)
        }
        ("POST", []) => {
            let s = session::session(cfg, token.as_deref()).await?;
            let body = read_body(cfg, &parts.headers, body).await?;
            let chunks = input::chunks(body)?;
            ok(json!({ "return": run_all(cfg, Some(&s), chunks, None).await? }))
        }
        ("POST", ["run"]) => {
            let body = read_body(cfg, &parts.headers, body).await?;
            let chunks = input::chunks(body)?;
            ok(json!({ "return": run_all(cfg, None, chunks, None).await? }))
        }
        ("GET", ["minions"]) | ("GET", ["minions", _]) => {
            let s = session::session(cfg, token.as_deref()).await?;
            let tgt = segs.get(1).copied().unwrap_or("*");
            let chunk = json!({ "client": "local", "tgt": tgt, "fun": "grains.items" });
            ok(json!({ "return": run_all(cfg, Some(&s), input::chunks(chunk)?, Some("local")).await? }))
        }
        ("POST", ["minions"]) => {
            let s = session::session(cfg, token.as_deref()).await?;
            let body = read_body(cfg, &parts.headers, body).await?;
            let jobs = run_all(cfg, Some(&s), input::chunks(body)?, Some("local_async")).await?;
            let links: Vec<J> = jobs.iter().filter_map(|j| j.get("jid").and_then(J::as_str)).map(|jid| json!({ "href": format!("/jobs/{jid}") })).collect();
            Ok(reply::data(202, fmt, &json!({ "return": jobs, "_links": { "jobs": links } })))
        }
        ("GET", ["jobs"]) => {
            let s = session::session(cfg, token.as_deref()).await?;
            let r = run_all(cfg, Some(&s), input::chunks(json!({ "fun": "jobs.list_jobs" }))?, Some("runner")).await?;
            ok(json!({ "return": r }))
        }
        ("GET", ["jobs", jid]) => {
            let s = session::session(cfg, token.as_deref()).await?;
            let mut r = run_all(cfg, Some(&s), input::chunks(json!({ "fun": "jobs.list_job", "jid": jid }))?, Some("runner")).await?;
            let info = r.pop().unwrap_or(J::Null);
            let mut returns = Map::new();
            if let Some(res) = info.get("Result").and_then(J::as_object) {
                for (id, load) in res {
                    returns.insert(id.clone(), load.get("return").cloned().unwrap_or(J::Null));
                }
            }
            ok(json!({ "info": [info], "return": [returns] }))
        }
        ("GET", ["keys"]) | ("GET", ["keys", _]) => {
            let s = session::session(cfg, token.as_deref()).await?;
            clients::enabled(&cfg.enabled_clients, &Map::new(), Some("wheel"))?;
            keys::get(cfg, &s, fmt, segs.get(1).copied()).await
        }
        ("POST", ["keys"]) => {
            clients::enabled(&cfg.enabled_clients, &Map::new(), Some("wheel"))?;
            let body = read_body(cfg, &parts.headers, body).await?;
            keys::post(cfg, body).await
        }
        ("GET", ["events"]) => {
            if query.split('&').any(|p| !p.is_empty()) {
                return Err(ApiError::new(400, "/events takes no query parameters: send the token in X-Auth-Token or the session_id cookie"));
            }
            let s = session::session(cfg, token.as_deref()).await?;
            events::events(cfg, &s).await
        }
        (_, [] | ["login"] | ["logout"] | ["token"] | ["run"] | ["minions"] | ["minions", _] | ["jobs"] | ["jobs", _] | ["keys"] | ["keys", _] | ["events"]) => Err(ApiError::new(405, format!("{method} is not allowed on {path}"))),
        _ => Err(ApiError::new(404, format!("The path '{}' was not found.", parts.uri.path()))),
    }
}

/// Runs every chunk in order, as the session `s`, or (`/run`) as each chunk's own
/// credentials; the first failure fails the request (as rest_cherrypy's exceptions do).
async fn run_all(cfg: &ApiConfig, s: Option<&Session>, chunks: Vec<Map<String, J>>, client: Option<&str>) -> Result<Vec<J>, ApiError> {
    if chunks.len() > MAX_CHUNKS {
        return Err(ApiError::new(400, format!("more than {MAX_CHUNKS} lowstate chunks")));
    }
    let mut out = Vec::with_capacity(chunks.len());
    for c in chunks {
        let own;
        let s = match s {
            Some(s) => s,
            None => {
                own = session::of_chunk(cfg, &c).await?;
                &own
            }
        };
        match clients::run(cfg, s, c, client).await? {
            clients::Reply::One(v) => out.push(v),
            // rest_cherrypy lists each item a client yields (local_batch's returns).
            clients::Reply::Many(vs) => out.extend(vs),
        }
    }
    Ok(out)
}

/// Reads a body of at most `max_request_body_size` bytes and parses it.
async fn read_body(cfg: &ApiConfig, h: &hyper::HeaderMap, body: Incoming) -> Result<J, ApiError> {
    let bytes = read_raw(cfg, h, body).await?;
    input::parse(h.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()), &bytes)
}

/// Reads a body of at most `max_request_body_size` bytes (413 past it).
///
/// A refused body is read on and thrown away (at most [`DRAIN_BYTES`], for at most
/// [`DRAIN_TIME`]) before the 413 goes out: a socket closed with unread bytes in it is
/// reset, and the reset can reach the client before it has read the answer.
async fn read_raw(cfg: &ApiConfig, h: &hyper::HeaderMap, mut body: Incoming) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::new(413, format!("Request Entity Too Large: the body is larger than {} bytes (rest_cherrypy:max_request_body_size)", cfg.max_body));
    if let Some(len) = h.get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok()) {
        if len > cfg.max_body as u64 {
            // A client that waits for `100 Continue` has sent nothing yet: answer at once.
            let waits = h.get(hyper::header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
            if !waits {
                drain(body).await;
            }
            return Err(too_large());
        }
    }
    let mut read = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::new(400, format!("reading the body: {e}")))?;
        if let Some(data) = frame.data_ref() {
            if read.len() + data.len() > cfg.max_body {
                drain(body).await;
                return Err(too_large());
            }
            read.extend_from_slice(data);
        }
    }
    Ok(read.freeze())
}

/// The most of a refused body read and thrown away before its 413 is sent.
pub const DRAIN_BYTES: usize = 8 << 20;
/// The longest a refused body is read for before its 413 is sent.
pub const DRAIN_TIME: Duration = Duration::from_secs(2);

/// Reads `body` to its end and throws it away, within [`DRAIN_BYTES`] and [`DRAIN_TIME`].
async fn drain(mut body: Incoming) {
    let mut seen = 0usize;
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, |d| d.len());
            if seen > DRAIN_BYTES {
                break;
            }
        }
    })
    .await;
}
