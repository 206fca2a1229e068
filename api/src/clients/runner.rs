//! `runner` and `runner_async`, and the kept runs the wheel clients share: every call
//! of either client, synchronous or not, is a job of the master's own with its `new`
//! and `ret` events, as Salt's runner and wheel clients keep theirs ([`kept`],
//! [`background`]).
//!
//! A background run is a job the master keeps (`run.start`: the job recorded,
//! `salt/run/<jid>/new` fired, answered `{"jid", "tag"}` at once); salt-api then runs
//! the function through the admin socket and hands the master its end (`run.return`:
//! the event data stored as the job's return, `salt/run/<jid>/ret` fired), so the
//! result is found the ways Salt's is: on the event bus, and with `jobs.lookup_jid`.
//! At most [`MAX_IN_FLIGHT`] runs go on at once; past that a new one is refused (503).
//!
//! An orchestration (`state.orchestrate`, `state.orch`, `state.sls`) is driven here as
//! `salt-run` drives it (`halite_tools::orchestrate`, on a blocking admin connection in
//! tokio's blocking pool): the master renders it and records its run job (that job's
//! jid is the one `runner_async` answers: one job per run, no `run.start`), the steps
//! run, and the run's return (`{"data", "outputter": "highstate", "retcode"}`, Salt's)
//! is stored with `orchestrate.return`, which fires `salt/run/<jid>/ret`. `runner`
//! answers that return when the run ends; `runner_async` answers the jid once the
//! SLS is rendered and drives the run in the background (counted in
//! [`MAX_IN_FLIGHT`]). A run goes on to its end when the HTTP client leaves. Each step
//! waits for its minions for its own `timeout`, else the chunk's, else
//! [`halite_tools::orchestrate::STEP_TIMEOUT`] (as `salt-run` without `-t`).

use std::future::Future;
use std::time::Duration;

use halite_master::admin::client::{AdminClient, CALL_GRACE, REQUEST_TIMEOUT};
use serde_json::{json, Value as J};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::{check_special, ApiConfig, ApiError, Session, Special};
use super::local::{publish, Follow};
use crate::admin;
use halite_tools::orchestrate::{self, Rendered};

/// Most `runner_async` and `wheel_async` runs going on at once.
pub const MAX_IN_FLIGHT: usize = 32;

static IN_FLIGHT: Semaphore = Semaphore::const_new(MAX_IN_FLIGHT);

/// `runner`: the runner's return.
pub async fn runner(cfg: &ApiConfig, s: &Session, c: &Special) -> Result<J, ApiError> {
    check_special(s, "runner", c)?;
    if orchestrate::is_orchestrate(&c.fun) {
        let (mut admin, rendered) = render(cfg, s, c).await?;
        let timeout = step_timeout(c);
        let done = tokio::task::spawn_blocking(move || rendered.drive(&mut admin, timeout)).await.map_err(|e| ApiError::new(500, format!("the orchestration's driver failed: {e}")))?;
        if let Err(e) = &done.stored {
            tracing::error!(fun = %c.fun, "salt-api: the orchestration's return was not kept: {e}");
        }
        return Ok(done.ret);
    }
    let (jid, ret) = kept(cfg, s, "runner", c, call(cfg, s, c)).await?;
    if !c.full_return {
        return Ok(ret);
    }
    Ok(json!({ "fun": format!("runner.{}", c.fun), "fun_args": c.fun_args(), "jid": jid, "user": s.user, "_stamp": halite_master::events::stamp_now(), "return": ret, "success": true }))
}

async fn call(cfg: &ApiConfig, s: &Session, c: &Special) -> Result<J, ApiError> {
    if let f @ ("manage.status" | "manage.up" | "manage.down") = c.fun.as_str() {
        let (up, down) = manage(cfg, s, c).await?;
        return Ok(match f {
            "manage.up" => json!(up),
            "manage.down" => json!(down),
            _ => json!({ "up": up, "down": down }),
        });
    }
    let v = admin::call(&cfg.sock_dir, &json!({ "cmd": "runner", "fun": c.fun, "arg": c.arg, "kwarg": c.kwarg })).await?;
    Ok(v.get("return").cloned().unwrap_or(J::Null))
}

/// `manage.status` (`up`, `down`), as `salt-run` answers it: every accepted minion
/// `test.ping`ed, up when it answered within the chunk's `timeout` (else the master's
/// `timeout`); each list sorted.
async fn manage(cfg: &ApiConfig, s: &Session, c: &Special) -> Result<(Vec<String>, Vec<String>), ApiError> {
    let l = admin::call(&cfg.sock_dir, &json!({ "cmd": "key.list" })).await?;
    let mut accepted: Vec<String> = l["listing"]["minions"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect();
    accepted.sort();
    if accepted.is_empty() {
        return Ok((vec![], vec![]));
    }
    let none = serde_json::Map::new();
    let Some(p) = publish(cfg, s, &json!("*"), "glob", "test.ping", &[], &none, &none).await? else { return Ok((vec![], accepted)) };
    let (got, _) = Follow::open(cfg, &p.jid, c.timeout.unwrap_or(cfg.timeout as f64)).await?.collect().await?;
    let answered: std::collections::BTreeSet<String> = got.into_iter().map(|(id, _)| id).collect();
    Ok(accepted.into_iter().partition(|m| answered.contains(m)))
}

/// How long an orchestration's steps wait for their minions when a step does not say.
fn step_timeout(c: &Special) -> Duration {
    c.timeout.map_or(orchestrate::STEP_TIMEOUT, Duration::from_secs_f64)
}

/// A blocking admin connection for an orchestration, with the run rendered on it (its
/// job recorded for `s.user`). A refused render is a 400 (nothing recorded).
async fn render(cfg: &ApiConfig, s: &Session, c: &Special) -> Result<(AdminClient, Rendered), ApiError> {
    let (sock_dir, user, c) = (cfg.sock_dir.clone(), s.user.clone(), c.clone());
    // Each request waits for the master as `salt-run` lets it (a step's publish or
    // `job.returns`, a `salt.runner` step's runner).
    let per_call = step_timeout(&c).max(REQUEST_TIMEOUT).saturating_add(CALL_GRACE);
    tokio::task::spawn_blocking(move || {
        let mut a = AdminClient::connect(&sock_dir).ok_or_else(|| ApiError::new(503, format!("the master is not running (no admin socket in {})", sock_dir.display())))?;
        a.set_timeout(Some(per_call));
        let r = orchestrate::render(&mut a, &c.fun, &c.arg, &c.kwarg, Some(&user)).map_err(|e| ApiError::new(400, e.to_string()))?;
        Ok((a, r))
    })
    .await
    .map_err(|e| ApiError::new(500, format!("the orchestration's render failed: {e}")))?
}

/// `runner_async` of an orchestration: rendered now (its run job's jid answered), driven
/// in the background.
async fn orchestrate_async(cfg: &ApiConfig, s: &Session, c: &Special) -> Result<J, ApiError> {
    let permit = permit()?;
    let (mut admin, rendered) = render(cfg, s, c).await?;
    let (Some(jid), Some(tag)) = (rendered.jid.clone(), rendered.tag()) else {
        return Err(ApiError::new(500, "the master recorded no job for the orchestration"));
    };
    tracing::info!(user = %s.user, fun = %c.fun, jid = %jid, "salt-api: runner run started");
    let (timeout, fun, job) = (step_timeout(c), c.fun.clone(), jid.clone());
    tokio::task::spawn_blocking(move || {
        let done = rendered.drive(&mut admin, timeout);
        if let Err(e) = &done.stored {
            tracing::error!(fun, jid = %job, "salt-api: the end of a background run was not kept: {e}");
        }
        drop(permit);
    });
    Ok(json!({ "tag": tag, "jid": jid }))
}

/// A place among the [`MAX_IN_FLIGHT`] background runs, else the 503.
fn permit() -> Result<SemaphorePermit<'static>, ApiError> {
    IN_FLIGHT.try_acquire().map_err(|_| ApiError::new(503, format!("{MAX_IN_FLIGHT} runner_async and wheel_async runs are going on already; try again later")))
}

/// `runner_async`: `{"tag": "salt/run/<jid>", "jid"}`.
pub async fn runner_async(cfg: &ApiConfig, s: &Session, c: Special) -> Result<J, ApiError> {
    check_special(s, "runner", &c)?;
    if orchestrate::is_orchestrate(&c.fun) {
        return orchestrate_async(cfg, s, &c).await;
    }
    let (cfg2, s2, c2) = (cfg.clone(), s.clone(), c.clone());
    background(cfg, s, "runner", &c, async move { call(&cfg2, &s2, &c2).await }).await
}

/// Starts `work` as the background run of `client`'s `c`; its answer.
pub(super) async fn background<F>(cfg: &ApiConfig, s: &Session, client: &str, c: &Special, work: F) -> Result<J, ApiError>
where
    F: Future<Output = Result<J, ApiError>> + Send + 'static,
{
    let permit = permit()?;
    let (jid, tag) = start_run(cfg, s, client, c).await?;
    let (sock_dir, fun, job) = (cfg.sock_dir.clone(), c.fun.clone(), jid.clone());
    tokio::spawn(async move {
        end_run(&sock_dir, &fun, &job, &work.await).await;
        drop(permit);
    });
    Ok(json!({ "tag": tag, "jid": jid }))
}

/// Runs `work` as `client`'s call `c`, kept as Salt's runner and wheel clients keep
/// every call, the synchronous ones too: a job of the master's own, with its
/// `salt/run|wheel/<jid>/new` and `/ret` events (`run.start`, `run.return`). Answers
/// the run's jid and `work`'s result once the end is kept.
pub(super) async fn kept<F>(cfg: &ApiConfig, s: &Session, client: &str, c: &Special, work: F) -> Result<(String, J), ApiError>
where
    F: Future<Output = Result<J, ApiError>>,
{
    let (jid, _) = start_run(cfg, s, client, c).await?;
    let res = work.await;
    end_run(&cfg.sock_dir, &c.fun, &jid, &res).await;
    res.map(|v| (jid, v))
}

/// `run.start`: the run's job recorded and its `new` event fired; its jid and tag.
async fn start_run(cfg: &ApiConfig, s: &Session, client: &str, c: &Special) -> Result<(String, J), ApiError> {
    let started = admin::call(&cfg.sock_dir, &json!({ "cmd": "run.start", "client": client, "fun": c.fun, "fun_args": c.fun_args(), "user": s.user })).await?;
    let jid = started.get("jid").and_then(J::as_str).ok_or_else(|| ApiError::new(500, "run.start answered no jid"))?.to_string();
    tracing::info!(user = %s.user, fun = %c.fun, jid = %jid, "salt-api: {client} run started");
    Ok((jid, started.get("tag").cloned().unwrap_or(J::Null)))
}

/// `run.return`: the run's end kept (an error as its message, unsuccessful).
async fn end_run(sock_dir: &std::path::Path, fun: &str, jid: &str, res: &Result<J, ApiError>) {
    let (ret, success) = match res {
        Ok(v) => (v.clone(), true),
        Err(e) => (J::String(e.msg.clone()), false),
    };
    if let Err(e) = admin::call(sock_dir, &json!({ "cmd": "run.return", "jid": jid, "return": ret, "success": success })).await {
        tracing::error!(fun, jid, "salt-api: the end of a run was not kept: {}", e.msg);
    }
}
