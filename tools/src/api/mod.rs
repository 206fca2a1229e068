//! `salt-api`: a REST endpoint in the shape of Salt's `rest_cherrypy`, in front of a
//! running Halite master (through its admin socket, as `salt` and `salt-run` talk to it).
//!
//! | method, path | auth | does |
//! |---|---|---|
//! | `GET /` | | `{"return": "Welcome", "clients": [...]}` |
//! | `POST /` | token | runs a lowstate (a chunk or a list of chunks, [`clients`]): `{"return": [one result per chunk]}` |
//! | `POST /login` | `username`, `password`, `eauth` | `{"return": [{"token", "expire", "start", "user", "eauth", "perms"}]}`, the token also in `X-Auth-Token` and the `session_id` cookie |
//! | `POST /logout` | token | revokes the token on every member: `{"return": "Your token has been cleared"}` |
//! | `GET /minions[/ID]` | token | `local` `grains.items` on `*` or ID |
//! | `POST /minions` | token | `local_async` chunks: 202, `{"return": [{"jid", "minions"}], "_links": {"jobs": [{"href": "/jobs/JID"}]}}` |
//! | `GET /jobs[/JID]` | token | runner `jobs.list_jobs`, or `jobs.list_job` as `{"info": [job], "return": [{minion: return}]}` |
//! | `GET /keys` | token | wheel `key.list_all`'s return |
//! | `GET /events` | token | the master's event bus as server-sent events: `retry: 400`, then `tag: TAG\ndata: {"tag", "data"}\n\n` per event |
//!
//! The token is the `X-Auth-Token` header or the `session_id` cookie (as rest_cherrypy
//! 3008.5: a token in the URL is refused with 400); an open event stream ends within
//! [`STREAM_RECHECK`] of its token's logout or expiry. Tokens are kind-18 records
//! (`halite_storage::eauth_token`): made through one member of a cluster, valid through
//! every member until `token_expire` or `/logout`.
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
pub mod input;
pub mod reply;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Map, Value as J};
use sha2::Digest;
use tokio::net::TcpListener;

use halite_master::metrics::{refuse, Port};

use clients::Session;
use config::ApiConfig;
use reply::{ApiError, Body, Format};

/// Most bytes of a request head.
pub const MAX_HEAD_BYTES: usize = 64 << 10;
/// Most headers in a request.
pub const MAX_HEADERS: usize = 100;
/// Time allowed to send a request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Most chunks in one lowstate.
pub const MAX_CHUNKS: usize = 100;
/// How often an open event stream checks that its token is still valid (a logout or
/// expiry ends the stream within this time).
pub const STREAM_RECHECK: Duration = Duration::from_secs(5);

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
    let mut resp = match route(cfg, req, fmt).await {
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
    h.insert("Cache-Control", HeaderValue::from_static("private"));
    resp
}

async fn route(cfg: &ApiConfig, req: Request<Incoming>, fmt: Format) -> Result<Response<Body>, ApiError> {
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
    let token = token_of(&parts.headers);
    match (method.as_str(), segs.as_slice()) {
        ("GET", []) => ok(json!({ "return": "Welcome", "clients": clients::CLIENTS })),
        ("GET", ["login"]) => ok(json!({ "return": "Please log in", "status": 401 })),
        ("POST", ["login"]) => {
            let body = read_body(cfg, &parts.headers, body).await?;
            login(cfg, fmt, body).await
        }
        ("POST", ["logout"]) => {
            let s = session(cfg, token.as_deref()).await?;
            admin::call(&cfg.sock_dir, &json!({ "cmd": "token.revoke", "hash": s.hash })).await?;
            tracing::info!(user = %s.user, "salt-api: logged out");
            let mut r = reply::data(200, fmt, &json!({ "return": "Your token has been cleared" }));
            r.headers_mut().insert(hyper::header::SET_COOKIE, HeaderValue::from_static("session_id=; expires=Thu, 01 Jan 1970 00:00:00 GMT; Path=/"));
            Ok(r)
        }
        ("POST", []) => {
            let s = session(cfg, token.as_deref()).await?;
            let body = read_body(cfg, &parts.headers, body).await?;
            let chunks = input::chunks(body)?;
            ok(json!({ "return": run_all(cfg, &s, chunks, None).await? }))
        }
        ("GET", ["minions"]) | ("GET", ["minions", _]) => {
            let s = session(cfg, token.as_deref()).await?;
            let tgt = segs.get(1).copied().unwrap_or("*");
            let chunk = json!({ "client": "local", "tgt": tgt, "fun": "grains.items" });
            ok(json!({ "return": run_all(cfg, &s, input::chunks(chunk)?, Some("local")).await? }))
        }
        ("POST", ["minions"]) => {
            let s = session(cfg, token.as_deref()).await?;
            let body = read_body(cfg, &parts.headers, body).await?;
            let jobs = run_all(cfg, &s, input::chunks(body)?, Some("local_async")).await?;
            let links: Vec<J> = jobs.iter().filter_map(|j| j.get("jid").and_then(J::as_str)).map(|jid| json!({ "href": format!("/jobs/{jid}") })).collect();
            Ok(reply::data(202, fmt, &json!({ "return": jobs, "_links": { "jobs": links } })))
        }
        ("GET", ["jobs"]) => {
            let s = session(cfg, token.as_deref()).await?;
            let r = run_all(cfg, &s, input::chunks(json!({ "fun": "jobs.list_jobs" }))?, Some("runner")).await?;
            ok(json!({ "return": r }))
        }
        ("GET", ["jobs", jid]) => {
            let s = session(cfg, token.as_deref()).await?;
            let mut r = run_all(cfg, &s, input::chunks(json!({ "fun": "jobs.list_job", "jid": jid }))?, Some("runner")).await?;
            let info = r.pop().unwrap_or(J::Null);
            let mut returns = Map::new();
            if let Some(res) = info.get("Result").and_then(J::as_object) {
                for (id, load) in res {
                    returns.insert(id.clone(), load.get("return").cloned().unwrap_or(J::Null));
                }
            }
            ok(json!({ "info": [info], "return": [returns] }))
        }
        ("GET", ["keys"]) => {
            let s = session(cfg, token.as_deref()).await?;
            let mut r = run_all(cfg, &s, input::chunks(json!({ "fun": "key.list_all" }))?, Some("wheel")).await?;
            let ret = r.pop().and_then(|w| w.get("data").and_then(|d| d.get("return")).cloned()).unwrap_or(J::Null);
            ok(json!({ "return": ret }))
        }
        ("GET", ["events"]) => {
            if query.split('&').any(|p| !p.is_empty()) {
                return Err(ApiError::new(400, "/events takes no query parameters: send the token in X-Auth-Token or the session_id cookie"));
            }
            let s = session(cfg, token.as_deref()).await?;
            events(cfg, &s).await
        }
        (_, [] | ["login"] | ["logout"] | ["minions"] | ["minions", _] | ["jobs"] | ["jobs", _] | ["keys"] | ["events"]) => Err(ApiError::new(405, format!("{method} is not allowed on {path}"))),
        _ => Err(ApiError::new(404, format!("The path '{}' was not found.", parts.uri.path()))),
    }
}

/// Runs every chunk in order; the first failure fails the request (as rest_cherrypy's
/// exceptions do).
async fn run_all(cfg: &ApiConfig, s: &Session, chunks: Vec<Map<String, J>>, client: Option<&str>) -> Result<Vec<J>, ApiError> {
    if chunks.len() > MAX_CHUNKS {
        return Err(ApiError::new(400, format!("more than {MAX_CHUNKS} lowstate chunks")));
    }
    let mut out = Vec::with_capacity(chunks.len());
    for c in chunks {
        match clients::run(cfg, s, c, client).await? {
            clients::Reply::One(v) => out.push(v),
            // rest_cherrypy lists each item a client yields (local_batch's returns).
            clients::Reply::Many(vs) => out.extend(vs),
        }
    }
    Ok(out)
}

/// The token a request shows: `X-Auth-Token`, else the `session_id` cookie.
fn token_of(h: &hyper::HeaderMap) -> Option<String> {
    if let Some(t) = h.get("x-auth-token").and_then(|v| v.to_str().ok()).filter(|t| !t.is_empty()) {
        return Some(t.trim().to_string());
    }
    h.get_all(hyper::header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|c| c.split(';')).filter_map(|kv| kv.trim().split_once('=')).find(|(k, _)| *k == "session_id").map(|(_, v)| v.to_string())
}

/// The SHA-256 the master knows a token by.
pub fn token_hash(token: &str) -> String {
    hex::encode(sha2::Sha256::digest(token.as_bytes()))
}

/// The caller a token names (401 unless the master holds it, unrevoked and unexpired).
async fn session(cfg: &ApiConfig, token: Option<&str>) -> Result<Session, ApiError> {
    let token = token.ok_or_else(|| ApiError::new(401, "No token: log in first (POST /login), then send X-Auth-Token"))?;
    // Tokens are hex (as Salt checks); anything else is not looked up.
    if token.is_empty() || token.len() > 128 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::new(401, "Invalid token"));
    }
    let hash = token_hash(&token.to_ascii_lowercase());
    let v = admin::call(&cfg.sock_dir, &json!({ "cmd": "token.get", "hash": hash })).await?;
    let t = v.get("token").filter(|t| t.is_object()).ok_or_else(|| ApiError::new(401, "Invalid token: unknown, revoked or expired"))?;
    let s = |k: &str| t.get(k).and_then(J::as_str).unwrap_or("").to_string();
    Ok(Session {
        hash,
        user: s("user"),
        eauth: s("eauth"),
        perms: t.get("perms").and_then(J::as_array).cloned().unwrap_or_default(),
        start: t.get("start").and_then(J::as_f64).unwrap_or(0.0),
        expire: t.get("expire").and_then(J::as_f64).unwrap_or(0.0),
    })
}

/// Reads a body of at most `max_request_body_size` bytes and parses it.
async fn read_body(cfg: &ApiConfig, h: &hyper::HeaderMap, body: Incoming) -> Result<J, ApiError> {
    let too_large = || ApiError::new(413, format!("Request Entity Too Large: the body is larger than {} bytes (rest_cherrypy:max_request_body_size)", cfg.max_body));
    if let Some(len) = h.get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok()) {
        if len > cfg.max_body as u64 {
            return Err(too_large());
        }
    }
    let bytes = Limited::new(body, cfg.max_body).collect().await.map_err(|e| if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() { too_large() } else { ApiError::new(400, format!("reading the body: {e}")) })?.to_bytes();
    input::parse(h.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()), &bytes)
}

/// `POST /login`.
async fn login(cfg: &ApiConfig, fmt: Format, body: J) -> Result<Response<Body>, ApiError> {
    let creds = match body {
        J::Array(mut a) if !a.is_empty() => a.swap_remove(0),
        other => other,
    };
    let field = |k: &str| creds.get(k).and_then(J::as_str).unwrap_or("").to_string();
    let (user, password, eauth) = (field("username"), field("password"), field("eauth"));
    let fail = || ApiError::new(401, "Could not authenticate using provided credentials");
    if user.is_empty() || eauth.is_empty() || user.len() > halite_storage::eauth_token::MAX_USER_LEN {
        return Err(fail());
    }
    let Some(backend) = cfg.external_auth.get(&eauth).filter(|b| b.is_object()) else {
        tracing::warn!(user, eauth, "salt-api: login with an eauth backend external_auth does not configure");
        return Err(fail());
    };
    let checked = match eauth.as_str() {
        "file" => {
            let (b, u, p) = (backend.clone(), user.clone(), password.clone());
            tokio::task::spawn_blocking(move || eauth::file::check_file(&b, &u, &p)).await.map_err(|e| ApiError::new(500, e.to_string()))?
        }
        "pam" => {
            let (svc, dir, u, p) = (cfg.pam_service.clone(), cfg.pam_confdir.clone(), user.clone(), password.clone());
            tokio::task::spawn_blocking(move || eauth::pam::check(&svc, dir.as_deref(), &u, &p)).await.map_err(|e| ApiError::new(500, e.to_string()))?
        }
        other => Err(eauth::Denied::Config(format!("eauth backend {other:?} is not supported by Halite's salt-api (file and pam are)"))),
    };
    match checked {
        Ok(()) => {}
        Err(eauth::Denied::Credentials) => {
            tracing::warn!(user, eauth, "salt-api: authentication failed");
            return Err(fail());
        }
        Err(eauth::Denied::Config(why)) => {
            tracing::error!(user, eauth, "salt-api: {why}");
            return Err(fail());
        }
    }
    // Only `pam` users have groups (their system groups), as in Salt.
    let groups = if eauth == "pam" {
        let u = user.clone();
        tokio::task::spawn_blocking(move || eauth::pam::groups(&u)).await.unwrap_or_default()
    } else {
        vec![]
    };
    let perms = acl::rules_for(backend, &user, &groups);
    let mut raw = [0u8; 32];
    rand::Rng::fill(&mut rand::rngs::OsRng, &mut raw[..]);
    let token = hex::encode(raw);
    let made = admin::call(&cfg.sock_dir, &json!({ "cmd": "token.create", "hash": token_hash(&token), "user": user, "eauth": eauth, "perms": perms, "expire": cfg.token_expire })).await?;
    tracing::info!(user, eauth, "salt-api: logged in");
    let out = json!({ "return": [{
        "token": token,
        "expire": made.get("expire").cloned().unwrap_or(J::Null),
        "start": made.get("start").cloned().unwrap_or(J::Null),
        "user": user,
        "eauth": eauth,
        "perms": perms,
    }] });
    let mut r = reply::data(200, fmt, &out);
    let h = r.headers_mut();
    h.insert("X-Auth-Token", HeaderValue::from_str(&token).map_err(|e| ApiError::new(500, e.to_string()))?);
    h.insert(hyper::header::SET_COOKIE, HeaderValue::from_str(&format!("session_id={token}; Max-Age={}; Path=/; HttpOnly", cfg.token_expire)).map_err(|e| ApiError::new(500, e.to_string()))?);
    Ok(r)
}

/// `GET /events`: the bus as server-sent events until the client goes away.
async fn events(cfg: &ApiConfig, s: &Session) -> Result<Response<Body>, ApiError> {
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
