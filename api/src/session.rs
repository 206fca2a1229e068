//! Who a request is: `POST /login` (a token in `X-Auth-Token` and the `session_id`
//! cookie), `POST /token` (rest_cherrypy's `Token`: a token from credentials, no
//! session), the token a request shows, and the credentials a chunk carries itself
//! (`POST /run`, `POST /keys`: `username`/`password`/`eauth`, or `token`).
//!
//! Tokens are kind-18 records (`halite_storage::eauth_token`) the master keeps by their
//! SHA-256: made through one member of a cluster, valid through every member until
//! `token_expire` (or the login's own, as `token_expire_user_override` allows) or
//! `/logout`. A `/login` token and a `/token` token are the same
//! thing here (rest_cherrypy answers `/login` with its session id, which `/run` does not
//! take; Halite's login token is taken by both).

use hyper::header::HeaderValue;
use hyper::{HeaderMap, Response};
use serde_json::{json, Map, Value as J};
use sha2::Digest;

use crate::clients::Session;
use crate::config::ApiConfig;
use crate::reply::{self, ApiError, Body, Format};
use crate::{acl, admin, eauth};

/// The token a request shows: `X-Auth-Token`, else the `session_id` cookie.
pub fn token_of(h: &HeaderMap) -> Option<String> {
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
pub async fn session(cfg: &ApiConfig, token: Option<&str>) -> Result<Session, ApiError> {
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

/// The caller a chunk names by itself (`/run`, `/keys`): its `token`, else its
/// `username`/`password`/`eauth` checked now (no token is kept); 401 without either,
/// as Salt's "No authentication credentials given".
pub async fn of_chunk(cfg: &ApiConfig, chunk: &Map<String, J>) -> Result<Session, ApiError> {
    match chunk.get("token") {
        Some(J::String(t)) => return session(cfg, Some(t)).await,
        Some(_) => return Err(ApiError::new(401, "Invalid token")),
        None => {}
    }
    if !chunk.contains_key("eauth") {
        return Err(ApiError::new(401, "No authentication credentials given"));
    }
    let (user, eauth, perms) = authenticate(cfg, &Creds::of(chunk)).await?;
    Ok(Session { hash: String::new(), user, eauth, perms, start: 0.0, expire: 0.0 })
}

/// A login's credentials.
pub struct Creds {
    pub user: String,
    pub password: String,
    pub eauth: String,
}

impl Creds {
    pub fn of(m: &Map<String, J>) -> Creds {
        let field = |k: &str| m.get(k).and_then(J::as_str).unwrap_or("").to_string();
        Creds { user: field("username"), password: field("password"), eauth: field("eauth") }
    }
}

/// Checks credentials against `external_auth`; the user, the backend and the user's
/// rules. Every failure is the same 401 to the client; the reason goes to the log.
pub async fn authenticate(cfg: &ApiConfig, c: &Creds) -> Result<(String, String, Vec<J>), ApiError> {
    let fail = || ApiError::new(401, "Could not authenticate using provided credentials");
    let (user, eauth) = (c.user.clone(), c.eauth.clone());
    if user.is_empty() || eauth.is_empty() || user.len() > halite_storage::eauth_token::MAX_USER_LEN {
        return Err(fail());
    }
    let Some(backend) = cfg.external_auth.get(&eauth).filter(|b| b.is_object()) else {
        tracing::warn!(user, eauth, "salt-api: login with an eauth backend external_auth does not configure");
        return Err(fail());
    };
    let checked = match eauth.as_str() {
        "file" => {
            let (b, u, p) = (backend.clone(), user.clone(), c.password.clone());
            tokio::task::spawn_blocking(move || eauth::file::check_file(&b, &u, &p)).await.map_err(|e| ApiError::new(500, e.to_string()))?
        }
        "pam" => {
            let (svc, dir, u, p) = (cfg.pam_service.clone(), cfg.pam_confdir.clone(), user.clone(), c.password.clone());
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
    Ok((user, eauth, perms))
}

/// A new token for an authenticated user, lasting `secs`, kept by the master: the
/// token and the master's `{"start", "expire"}`.
async fn mint(cfg: &ApiConfig, user: &str, eauth: &str, perms: &[J], secs: u64) -> Result<(String, J), ApiError> {
    let mut raw = [0u8; 32];
    rand::Rng::fill(&mut rand::rngs::OsRng, &mut raw[..]);
    let token = hex::encode(raw);
    let made = admin::call(&cfg.sock_dir, &json!({ "cmd": "token.create", "hash": token_hash(&token), "user": user, "eauth": eauth, "perms": perms, "expire": secs })).await?;
    Ok((token, made))
}

/// How long a login's token lasts: its own `token_expire` when
/// `token_expire_user_override` allows the user one (a number of seconds, 1 to the
/// master's bound, else 400), else `token_expire` of the config; a `token_expire` of a
/// user the option does not name is dropped, as Salt drops it (and logged).
fn lifetime(cfg: &ApiConfig, creds: &Map<String, J>, user: &str, eauth: &str, endpoint: &str) -> Result<u64, ApiError> {
    let Some(asked) = creds.get("token_expire").filter(|v| !v.is_null()) else { return Ok(cfg.token_expire) };
    if !cfg.expire_override.allows(eauth, user) {
        tracing::info!(user, eauth, "salt-api: {endpoint}: token_expire not honoured: token_expire_user_override does not allow this user; the token lasts token_expire of the master config");
        return Ok(cfg.token_expire);
    }
    let max = halite_master::admin::tokens::MAX_EXPIRE_SECS;
    let secs = match asked {
        J::Number(n) => n.as_u64().or_else(|| n.as_f64().filter(|f| f.is_finite() && *f > 0.0 && *f <= max as f64).map(|f| f.ceil() as u64)),
        J::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    };
    secs.filter(|s| (1..=max).contains(s)).ok_or_else(|| ApiError::new(400, format!("token_expire must be a number of seconds, 1 to {max}")))
}

/// The credentials of a `/login` or `/token` body: a map, or the first map of a list.
fn creds_map(body: J) -> Map<String, J> {
    match body {
        J::Array(a) => a.into_iter().next().and_then(|c| c.as_object().cloned()).unwrap_or_default(),
        J::Object(m) => m,
        _ => Map::new(),
    }
}

/// Fields of a login body Halite requires; `token_expire` is read too ([`lifetime`]),
/// any other is named in a warning.
const LOGIN_FIELDS: [&str; 3] = ["username", "password", "eauth"];

fn warn_unread(creds: &Map<String, J>, endpoint: &str) {
    for k in creds.keys().filter(|k| !LOGIN_FIELDS.contains(&k.as_str()) && *k != "token_expire") {
        tracing::warn!(field = %k, "salt-api: {endpoint}: field not read");
    }
}

/// `POST /login`.
pub async fn login(cfg: &ApiConfig, fmt: Format, body: J) -> Result<Response<Body>, ApiError> {
    let creds = creds_map(body);
    warn_unread(&creds, "/login");
    let (user, eauth, perms) = authenticate(cfg, &Creds::of(&creds)).await?;
    let secs = lifetime(cfg, &creds, &user, &eauth, "/login")?;
    let (token, made) = mint(cfg, &user, &eauth, &perms, secs).await?;
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
    h.insert(hyper::header::SET_COOKIE, HeaderValue::from_str(&format!("session_id={token}; Max-Age={secs}; Path=/; HttpOnly")).map_err(|e| ApiError::new(500, e.to_string()))?);
    Ok(r)
}

/// `POST /token`: rest_cherrypy's `Token` (the runner `auth.mk_token` for each set of
/// credentials): a list of `{"token", "start", "expire", "name", "eauth"}`, not wrapped
/// in `return`; 400 when a set lacks `username`, `password` or `eauth`. As in Salt, it
/// is a runner call: the `runner` client must be enabled and the user's rules must allow
/// `auth.mk_token` (`@runner`, `@auth`), else 401.
pub async fn token(cfg: &ApiConfig, fmt: Format, body: J) -> Result<Response<Body>, ApiError> {
    let sets: Vec<Map<String, J>> = match body {
        J::Object(m) => vec![m],
        J::Array(a) => a.into_iter().map(|c| c.as_object().cloned().ok_or_else(|| ApiError::new(400, "Lowstates must be a list of maps"))).collect::<Result<_, _>>()?,
        _ => return Err(ApiError::new(400, r#"Require "username", "password", and "eauth" params"#)),
    };
    if sets.is_empty() || sets.len() > crate::MAX_CHUNKS {
        return Err(ApiError::new(400, format!(r#"Require "username", "password", and "eauth" params (1 to {} sets)"#, crate::MAX_CHUNKS)));
    }
    let mut out = Vec::with_capacity(sets.len());
    for creds in &sets {
        if LOGIN_FIELDS.iter().any(|k| !creds.contains_key(*k)) {
            return Err(ApiError::new(400, r#"Require "username", "password", and "eauth" params"#));
        }
        warn_unread(creds, "/token");
        let (user, eauth, perms) = authenticate(cfg, &Creds::of(creds)).await?;
        if !acl::special_call_allowed(&perms, "runner", "auth.mk_token", &[], &Map::new()) {
            tracing::warn!(user, "salt-api: /token refused: the user's rules do not allow the runner auth.mk_token");
            return Err(crate::clients::denied());
        }
        let secs = lifetime(cfg, creds, &user, &eauth, "/token")?;
        let (token, made) = mint(cfg, &user, &eauth, &perms, secs).await?;
        tracing::info!(user, eauth, "salt-api: token made");
        out.push(json!({ "token": token, "start": made.get("start").cloned().unwrap_or(J::Null), "expire": made.get("expire").cloned().unwrap_or(J::Null), "name": user, "eauth": eauth }));
    }
    Ok(reply::data(200, fmt, &J::Array(out)))
}
