//! `runner` and `runner_async`, and the background runs `wheel_async` shares.
//!
//! A background run is a job the master keeps (`run.start`: the job recorded,
//! `salt/run/<jid>/new` fired, answered `{"jid", "tag"}` at once); salt-api then runs
//! the function through the admin socket and hands the master its end (`run.return`:
//! the event data stored as the job's return, `salt/run/<jid>/ret` fired), so the
//! result is found the ways Salt's is: on the event bus, and with `jobs.lookup_jid`.
//! At most [`MAX_IN_FLIGHT`] runs go on at once; past that a new one is refused (503).

use std::future::Future;

use serde_json::{json, Value as J};
use tokio::sync::Semaphore;

use super::{check_special, ApiConfig, ApiError, Session, Special};
use crate::api::admin;

/// Most `runner_async` and `wheel_async` runs going on at once.
pub const MAX_IN_FLIGHT: usize = 32;

static IN_FLIGHT: Semaphore = Semaphore::const_new(MAX_IN_FLIGHT);

/// `runner`: the runner's return.
pub async fn runner(cfg: &ApiConfig, s: &Session, c: &Special) -> Result<J, ApiError> {
    check_special(s, "runner", c)?;
    call(cfg, c).await
}

async fn call(cfg: &ApiConfig, c: &Special) -> Result<J, ApiError> {
    let v = admin::call(&cfg.sock_dir, &json!({ "cmd": "runner", "fun": c.fun, "arg": c.arg, "kwarg": c.kwarg })).await?;
    Ok(v.get("return").cloned().unwrap_or(J::Null))
}

/// `runner_async`: `{"tag": "salt/run/<jid>", "jid"}`.
pub async fn runner_async(cfg: &ApiConfig, s: &Session, c: Special) -> Result<J, ApiError> {
    check_special(s, "runner", &c)?;
    let cfg2 = cfg.clone();
    let c2 = c.clone();
    background(cfg, s, "runner", &c, async move { call(&cfg2, &c2).await }).await
}

/// Starts `work` as the background run of `client`'s `c`; its answer.
pub(super) async fn background<F>(cfg: &ApiConfig, s: &Session, client: &str, c: &Special, work: F) -> Result<J, ApiError>
where
    F: Future<Output = Result<J, ApiError>> + Send + 'static,
{
    let Ok(permit) = IN_FLIGHT.try_acquire() else {
        return Err(ApiError::new(503, format!("{MAX_IN_FLIGHT} runner_async and wheel_async runs are going on already; try again later")));
    };
    let started = admin::call(&cfg.sock_dir, &json!({ "cmd": "run.start", "client": client, "fun": c.fun, "fun_args": c.fun_args(), "user": s.user })).await?;
    let jid = started.get("jid").and_then(J::as_str).ok_or_else(|| ApiError::new(500, "run.start answered no jid"))?.to_string();
    let tag = started.get("tag").cloned().unwrap_or(J::Null);
    tracing::info!(user = %s.user, fun = %c.fun, jid = %jid, "salt-api: {client} run started");
    let (sock_dir, fun, job) = (cfg.sock_dir.clone(), c.fun.clone(), jid.clone());
    tokio::spawn(async move {
        let (ret, success) = match work.await {
            Ok(v) => (v, true),
            Err(e) => (J::String(e.msg), false),
        };
        if let Err(e) = admin::call(&sock_dir, &json!({ "cmd": "run.return", "jid": job, "return": ret, "success": success })).await {
            tracing::error!(fun, jid = %job, "salt-api: the end of a background run was not kept: {}", e.msg);
        }
        drop(permit);
    });
    Ok(json!({ "tag": tag, "jid": jid }))
}
