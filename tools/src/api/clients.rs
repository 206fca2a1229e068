//! Lowstate clients: what one chunk (`{"client": ..., "fun": ..., ...}`) does, checked
//! against the caller's `external_auth` rules first, then carried out through the
//! master's admin socket as `salt` and `salt-run` do.
//!
//! | client | does | answers |
//! |---|---|---|
//! | `local` | publishes, waits for the returns (the chunk's `timeout`, else the master's `timeout`) | `{minion: return}` for the minions that returned |
//! | `local_async` | publishes | `{"jid", "minions"}` |
//! | `runner` | a runner the master answers (`jobs.*`, `manage.present`, `fileserver.*`, ...) | the runner's return |
//! | `wheel` | `key.list_all`, `key.accept`, `key.reject`, `key.delete` (`match`) | `{"tag", "data": {"fun", "jid", "user", "return", "success", ...}}` |
//!
//! A call the rules do not allow is refused with 401 ("Authorization error occurred."),
//! as rest_cherrypy answers Salt's authorization errors.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value as J};

use super::acl;
use super::admin;
use super::config::ApiConfig;
use super::reply::ApiError;

/// The clients salt-api knows (`GET /` lists them).
pub const CLIENTS: [&str; 4] = ["local", "local_async", "runner", "wheel"];

/// Chunk keys that are not a runner's keyword arguments.
const RESERVED: [&str; 12] = ["client", "fun", "arg", "kwarg", "token", "eauth", "username", "password", "tgt", "tgt_type", "timeout", "full_return"];

/// A logged-in caller, from a token the master holds.
#[derive(Debug, Clone)]
pub struct Session {
    pub hash: String,
    pub user: String,
    pub eauth: String,
    pub perms: Vec<J>,
    pub start: f64,
    pub expire: f64,
}

fn denied() -> ApiError {
    ApiError::new(401, "Authorization error occurred.")
}

fn str_of<'a>(chunk: &'a Map<String, J>, k: &str) -> Option<&'a str> {
    chunk.get(k).and_then(J::as_str)
}

fn args_of(chunk: &Map<String, J>) -> Vec<J> {
    match chunk.get("arg") {
        None | Some(J::Null) => vec![],
        Some(J::Array(a)) => a.clone(),
        Some(other) => vec![other.clone()],
    }
}

fn kwargs_of(chunk: &Map<String, J>) -> Map<String, J> {
    chunk.get("kwarg").and_then(J::as_object).cloned().unwrap_or_default()
}

/// Runs one chunk for `s`; `client` overrides the chunk's own (the endpoints that fix it).
pub async fn run(cfg: &ApiConfig, s: &Session, chunk: Map<String, J>, client: Option<&str>) -> Result<J, ApiError> {
    let client = client.map(str::to_string).or_else(|| str_of(&chunk, "client").map(str::to_string)).ok_or_else(|| ApiError::new(400, "No client specified"))?;
    let fun = str_of(&chunk, "fun").filter(|f| !f.is_empty()).ok_or_else(|| ApiError::new(400, "Missing fun"))?.to_string();
    match client.as_str() {
        "local" | "local_async" => local(cfg, s, &chunk, &fun, client == "local_async").await,
        "runner" => runner(cfg, s, &chunk, &fun).await,
        "wheel" => wheel(cfg, s, &chunk, &fun).await,
        other => Err(ApiError::new(400, format!("Invalid client {other:?}: Halite's salt-api has {}", CLIENTS.join(", ")))),
    }
}

async fn minions_of(cfg: &ApiConfig, tgt: &J, tgt_type: &str) -> Result<BTreeSet<String>, ApiError> {
    let v = admin::call(&cfg.sock_dir, &json!({ "cmd": "target.minions", "tgt": tgt, "tgt_type": tgt_type })).await?;
    Ok(v.get("minions").and_then(J::as_array).map(|a| a.iter().filter_map(J::as_str).map(str::to_string).collect()).unwrap_or_default())
}

async fn local(cfg: &ApiConfig, s: &Session, chunk: &Map<String, J>, fun: &str, asynchronous: bool) -> Result<J, ApiError> {
    let tgt = chunk.get("tgt").cloned().filter(|t| !t.is_null()).ok_or_else(|| ApiError::new(400, "Missing tgt"))?;
    let tgt_type = str_of(chunk, "tgt_type").unwrap_or("glob").to_string();
    let (arg, kwarg) = (args_of(chunk), kwargs_of(chunk));
    // The minions the call reaches, and those of each target rule, decide (Salt's
    // validate_tgt); looked up only when a target rule needs them.
    let needed = acl::targets_needed(&s.perms);
    let mut targets = BTreeMap::new();
    let minions = if needed.is_empty() { BTreeSet::new() } else { minions_of(cfg, &tgt, &tgt_type).await? };
    for t in needed {
        let m = minions_of(cfg, &J::String(t.clone()), "compound").await?;
        targets.insert(t, m);
    }
    if !acl::minion_call_allowed(&s.perms, fun, &arg, &kwarg, &minions, &targets) {
        tracing::warn!(user = %s.user, fun, "salt-api: call refused by external_auth");
        return Err(denied());
    }
    let publish = json!({ "cmd": "publish", "tgt": tgt, "tgt_type": tgt_type, "fun": fun, "arg": arg, "kwarg": kwarg, "user": s.user });
    let job = match admin::call(&cfg.sock_dir, &publish).await {
        Ok(j) => j,
        // Salt's clients answer an empty map when nothing matched.
        Err(e) if e.msg.starts_with("No minions matched") => return Ok(json!({})),
        Err(e) => return Err(e),
    };
    let jid = job.get("jid").and_then(J::as_str).unwrap_or("").to_string();
    tracing::info!(user = %s.user, fun, jid = %jid, "salt-api: published");
    if asynchronous {
        return Ok(json!({ "jid": jid, "minions": job.get("minions").cloned().unwrap_or(J::Array(vec![])) }));
    }
    let timeout = chunk.get("timeout").and_then(|t| t.as_f64().or_else(|| t.as_str().and_then(|s| s.parse().ok()))).filter(|t| t.is_finite() && *t > 0.0).unwrap_or(cfg.timeout as f64);
    let mut conn = admin::open(&cfg.sock_dir, &json!({ "cmd": "job.follow", "jid": jid, "timeout": timeout })).await?;
    let mut out = Map::new();
    while let Some(line) = admin::next(&mut conn).await? {
        if let Some(e) = line.get("error").and_then(J::as_str) {
            return Err(ApiError::new(500, e));
        }
        if line.get("done").is_some() {
            break;
        }
        if let Some(id) = line.get("id").and_then(J::as_str) {
            out.insert(id.to_string(), line.get("return").and_then(|r| r.get("return")).cloned().unwrap_or(J::Null));
        }
    }
    Ok(J::Object(out))
}

async fn runner(cfg: &ApiConfig, s: &Session, chunk: &Map<String, J>, fun: &str) -> Result<J, ApiError> {
    let (arg, mut kwarg) = (args_of(chunk), kwargs_of(chunk));
    for (k, v) in chunk {
        if !RESERVED.contains(&k.as_str()) && !k.starts_with("__") {
            kwarg.insert(k.clone(), v.clone());
        }
    }
    if !acl::special_call_allowed(&s.perms, "runner", fun, &arg, &kwarg) {
        tracing::warn!(user = %s.user, fun, "salt-api: runner refused by external_auth");
        return Err(denied());
    }
    let v = admin::call(&cfg.sock_dir, &json!({ "cmd": "runner", "fun": fun, "arg": arg, "kwarg": kwarg })).await?;
    Ok(v.get("return").cloned().unwrap_or(J::Null))
}

async fn wheel(cfg: &ApiConfig, s: &Session, chunk: &Map<String, J>, fun: &str) -> Result<J, ApiError> {
    let (arg, mut kwarg) = (args_of(chunk), kwargs_of(chunk));
    for (k, v) in chunk {
        if !RESERVED.contains(&k.as_str()) && !k.starts_with("__") {
            kwarg.insert(k.clone(), v.clone());
        }
    }
    if !acl::special_call_allowed(&s.perms, "wheel", fun, &arg, &kwarg) {
        tracing::warn!(user = %s.user, fun, "salt-api: wheel refused by external_auth");
        return Err(denied());
    }
    let ret = match fun {
        "key.list_all" => {
            let l = admin::call(&cfg.sock_dir, &json!({ "cmd": "key.list" })).await?;
            let l = l.get("listing").cloned().unwrap_or(J::Null);
            json!({
                "local": ["master.pem", "master.pub"],
                "minions_rejected": l.get("minions_rejected").cloned().unwrap_or(json!([])),
                "minions_denied": l.get("minions_denied").cloned().unwrap_or(json!([])),
                "minions_pre": l.get("minions_pre").cloned().unwrap_or(json!([])),
                "minions": l.get("minions").cloned().unwrap_or(json!([])),
            })
        }
        "key.accept" | "key.reject" | "key.delete" => {
            let action = &fun[4..];
            let pattern = arg.first().and_then(J::as_str).or_else(|| kwarg.get("match").and_then(J::as_str)).ok_or_else(|| ApiError::new(400, format!("{fun} needs a match")))?;
            let flag = |k: &str| kwarg.get(k).and_then(J::as_bool).unwrap_or(false);
            let sel = admin::call(&cfg.sock_dir, &json!({ "cmd": "key.select", "action": action, "match": pattern, "include_accepted": flag("include_accepted") || action == "delete", "include_rejected": flag("include_rejected") || action == "delete", "include_denied": flag("include_denied") || action == "delete" })).await?;
            let selected = sel.get("selected").cloned().unwrap_or(json!({}));
            let done = admin::call(&cfg.sock_dir, &json!({ "cmd": "key.apply", "action": action, "selected": selected })).await?;
            let bucket = match action {
                "accept" => "minions",
                "reject" => "minions_rejected",
                _ => "minions",
            };
            json!({ bucket: done.get("done").cloned().unwrap_or(json!([])) })
        }
        other => return Err(ApiError::new(400, format!("wheel function {other:?} is not available in Halite (key.list_all, key.accept, key.reject, key.delete are)"))),
    };
    let jid = halite_master::jobs::new_jid();
    let tag = format!("salt/wheel/{jid}");
    let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0);
    Ok(json!({ "tag": tag, "data": { "fun": format!("wheel.{fun}"), "jid": jid, "tag": tag, "user": s.user, "_stamp": halite_master::events::stamp_at(micros), "return": ret, "success": true } }))
}
