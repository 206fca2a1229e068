//! `local` and `local_async`, and what the other `local_*` clients share with them: the
//! call a chunk names, publishing it, and following a job's returns.

use serde_json::{json, Map, Value as J};
use tokio::io::BufReader;
use tokio::net::UnixStream;

use super::{args_of, kwargs_of, ApiConfig, ApiError, Rules, Session};
use crate::admin;

/// Most seconds a chunk's `timeout` may ask for (the master's own bound of a follow).
pub const MAX_TIMEOUT_SECS: f64 = 24.0 * 3600.0;

/// The call a `local*` chunk names.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub tgt: J,
    pub tgt_type: String,
    pub fun: String,
    pub arg: Vec<J>,
    pub kwarg: Map<String, J>,
    /// The chunk's `timeout` (seconds), else the master's.
    pub timeout: Option<f64>,
    /// `full_return`: each minion's `{"ret", "retcode", "jid", "out"}` instead of its
    /// return (Salt's `cmd(full_return=True)`).
    pub full_return: bool,
    /// The chunk's `ret`, `ret_config` and `ret_kwargs` (returners the minions also
    /// send the returns to), `metadata` and `start_event`: what the publish load carries
    /// beyond the job, as Salt's local client passes them on (checked by the master,
    /// `halite_master::admin::publish_options`).
    pub publish_opts: Map<String, J>,
}

/// The chunk keys the publish load carries beyond the job.
pub(crate) const PUBLISH_KEYS: [&str; 5] = ["ret", "ret_config", "ret_kwargs", "metadata", "start_event"];

/// A chunk's `full_return`: `true`/`false` (or a form's `"true"`/`"false"`).
pub(crate) fn full_return_of(chunk: &Map<String, J>) -> Result<bool, ApiError> {
    match chunk.get("full_return") {
        None | Some(J::Null) => Ok(false),
        Some(J::Bool(b)) => Ok(*b),
        Some(J::String(t)) if t.eq_ignore_ascii_case("true") => Ok(true),
        Some(J::String(t)) if t.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(ApiError::new(400, format!("full_return must be true or false, not {}", super::short(v)))),
    }
}

/// A chunk's `timeout`: a positive number of seconds (a JSON number or a string), at
/// most [`MAX_TIMEOUT_SECS`]; `None` when absent.
pub(crate) fn timeout_of(chunk: &Map<String, J>) -> Result<Option<f64>, ApiError> {
    Ok(match chunk.get("timeout") {
        None | Some(J::Null) => None,
        Some(t) => Some(t.as_f64().or_else(|| t.as_str().and_then(|s| s.trim().parse().ok())).filter(|t| t.is_finite() && *t > 0.0).ok_or_else(|| ApiError::new(400, format!("timeout must be a number of seconds, not {}", super::short(t))))?.min(MAX_TIMEOUT_SECS)),
    })
}

impl Call {
    pub fn parse(chunk: &Map<String, J>, fun: String) -> Result<Call, ApiError> {
        let tgt = chunk.get("tgt").cloned().filter(|t| !t.is_null()).ok_or_else(|| ApiError::new(400, "Missing tgt"))?;
        let tgt_type = match chunk.get("tgt_type") {
            None | Some(J::Null) => "glob".to_string(),
            Some(J::String(t)) => t.clone(),
            Some(_) => return Err(ApiError::new(400, "tgt_type must be a string")),
        };
        let publish_opts = chunk.iter().filter(|(k, _)| PUBLISH_KEYS.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
        Ok(Call { tgt, tgt_type, fun, arg: args_of(chunk), kwarg: kwargs_of(chunk)?, timeout: timeout_of(chunk)?, full_return: full_return_of(chunk)?, publish_opts })
    }

    /// Seconds to wait for returns.
    pub fn timeout(&self, cfg: &ApiConfig) -> f64 {
        self.timeout.unwrap_or(cfg.timeout as f64)
    }
}

/// A published job: its jid and the minions it went to (`None` from [`publish`]: no
/// minion matched).
pub struct Published {
    pub jid: String,
    pub minions: J,
    /// Listed ids with no accepted key: sent nothing.
    pub missing: Vec<String>,
}

/// Publishes `fun` to a target as `s`'s job; `extra` joins the request (returners, metadata, start_event).
#[allow(clippy::too_many_arguments)]
pub async fn publish(cfg: &ApiConfig, s: &Session, tgt: &J, tgt_type: &str, fun: &str, arg: &[J], kwarg: &Map<String, J>, extra: &Map<String, J>) -> Result<Option<Published>, ApiError> {
    let mut req = json!({ "cmd": "publish", "tgt": tgt, "tgt_type": tgt_type, "fun": fun, "arg": arg, "kwarg": kwarg, "user": s.user });
    if let J::Object(m) = &mut req {
        m.extend(extra.clone());
    }
    let job = match admin::call(&cfg.sock_dir, &req).await {
        Ok(j) => j,
        // Salt's clients answer an empty map when nothing matched.
        Err(e) if e.kind == halite_master::Error::NoMinionsMatched.kind() => return Ok(None),
        Err(e) => return Err(e),
    };
    let jid = job.get("jid").and_then(J::as_str).unwrap_or("").to_string();
    tracing::info!(user = %s.user, fun, jid = %jid, "salt-api: published");
    let missing = job.get("missing").and_then(J::as_array).map(|a| a.iter().filter_map(J::as_str).map(str::to_string).collect()).unwrap_or_default();
    Ok(Some(Published { jid, minions: job.get("minions").cloned().unwrap_or(J::Array(vec![])), missing }))
}

/// What a followed job brings.
#[derive(Debug)]
pub enum Arrival {
    /// A minion's return load (`return`, `retcode`, ...).
    Return { id: String, load: J },
    /// The job is over: every minion returned, or these did not in time.
    Done { missing: Vec<String> },
}

/// A job's returns as the master commits them (`job.follow`).
pub struct Follow(BufReader<UnixStream>);

impl Follow {
    pub async fn open(cfg: &ApiConfig, jid: &str, timeout: f64) -> Result<Follow, ApiError> {
        Ok(Follow(admin::open(&cfg.sock_dir, &json!({ "cmd": "job.follow", "jid": jid, "timeout": timeout })).await?))
    }

    /// A follow of some of the job's minions only (a batch run's group).
    pub async fn open_some(cfg: &ApiConfig, jid: &str, minions: &[String], timeout: f64) -> Result<Follow, ApiError> {
        Ok(Follow(admin::open(&cfg.sock_dir, &json!({ "cmd": "job.follow", "jid": jid, "minions": minions, "timeout": timeout })).await?))
    }

    /// The next arrival; `None` after `Done` (or when the master closed early).
    pub async fn next(&mut self) -> Result<Option<Arrival>, ApiError> {
        loop {
            let Some(line) = admin::next(&mut self.0).await? else { return Ok(None) };
            if let Some(e) = line.get("error").and_then(J::as_str) {
                return Err(ApiError::new(500, e));
            }
            if line.get("done").is_some() {
                let missing = line.get("missing").and_then(J::as_array).map(|a| a.iter().filter_map(J::as_str).map(str::to_string).collect()).unwrap_or_default();
                return Ok(Some(Arrival::Done { missing }));
            }
            if let Some(id) = line.get("id").and_then(J::as_str) {
                return Ok(Some(Arrival::Return { id: id.to_string(), load: line.get("return").cloned().unwrap_or(J::Null) }));
            }
        }
    }

    /// Follows to the end: the returns in the order they came, and who did not return.
    pub async fn collect(mut self) -> Result<(Vec<(String, J)>, Vec<String>), ApiError> {
        let mut got = Vec::new();
        while let Some(a) = self.next().await? {
            match a {
                Arrival::Return { id, load } => got.push((id, load)),
                Arrival::Done { missing } => return Ok((got, missing)),
            }
        }
        Ok((got, Vec::new()))
    }
}

/// The return of a load (`load["return"]`).
pub fn ret_of(load: &J) -> J {
    load.get("return").cloned().unwrap_or(J::Null)
}

/// `local`: `{minion: return}`, and `false` for each minion the job went to that did not
/// return in time (Salt's `LocalClient.cmd`, which rest_cherrypy's `local` calls).
pub async fn local(cfg: &ApiConfig, s: &Session, c: &Call) -> Result<J, ApiError> {
    Rules::load(cfg, s).await?.check(cfg, &c.fun, &c.arg, &c.kwarg, &c.tgt, &c.tgt_type).await?;
    let Some(p) = publish(cfg, s, &c.tgt, &c.tgt_type, &c.fun, &c.arg, &c.kwarg, &c.publish_opts).await? else { return Ok(json!({})) };
    let (got, _) = Follow::open(cfg, &p.jid, c.timeout(cfg)).await?.collect().await?;
    Ok(J::Object(with_silent(got, &p.minions, c.full_return)))
}

/// What Salt's `cmd(full_return=True)` gives for a return: `{"ret"}` with the load's
/// `out`, `retcode` and `jid` when it has them.
pub fn full_of(load: &J) -> J {
    let mut m = Map::new();
    m.insert("ret".into(), ret_of(load));
    for k in ["out", "retcode", "jid"] {
        if let Some(v) = load.get(k) {
            m.insert(k.into(), v.clone());
        }
    }
    J::Object(m)
}

/// The returns (each [`full_of`] it when `full`), then `false` for each of `minions`
/// that is not among them.
pub(crate) fn with_silent(got: Vec<(String, J)>, minions: &J, full: bool) -> Map<String, J> {
    let mut out: Map<String, J> = got.into_iter().map(|(id, load)| (id, if full { full_of(&load) } else { ret_of(&load) })).collect();
    for id in minions.as_array().into_iter().flatten().filter_map(J::as_str) {
        out.entry(id.to_string()).or_insert(J::Bool(false));
    }
    out
}

/// `local_async`: `{"jid", "minions"}` at once.
pub async fn local_async(cfg: &ApiConfig, s: &Session, c: &Call) -> Result<J, ApiError> {
    Rules::load(cfg, s).await?.check(cfg, &c.fun, &c.arg, &c.kwarg, &c.tgt, &c.tgt_type).await?;
    let Some(p) = publish(cfg, s, &c.tgt, &c.tgt_type, &c.fun, &c.arg, &c.kwarg, &c.publish_opts).await? else { return Ok(json!({})) };
    Ok(json!({ "jid": p.jid, "minions": p.minions }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_names_its_returners_apart_from_the_functions_arguments() {
        let chunk = json!({"client": "local", "tgt": "*", "fun": "test.ping", "ret": "rawfile_json", "ret_config": "alt", "ret_kwargs": {"k": 1}, "metadata": {"t": 1}, "start_event": true, "kwarg": {"x": 2}});
        let c = Call::parse(chunk.as_object().unwrap(), "test.ping".into()).unwrap();
        assert_eq!(J::Object(c.publish_opts), json!({"ret": "rawfile_json", "ret_config": "alt", "ret_kwargs": {"k": 1}, "metadata": {"t": 1}, "start_event": true}));
        assert_eq!(J::Object(c.kwarg), json!({"x": 2}));
    }
}
