//! `wheel` and `wheel_async`: the key functions Halite's master answers.

use serde_json::{json, Value as J};

use super::{check_special, ApiConfig, ApiError, Session, Special};
use crate::api::admin;

/// The wheel functions Halite has.
pub const FUNS: [&str; 4] = ["key.list_all", "key.accept", "key.reject", "key.delete"];

fn known(fun: &str) -> Result<(), ApiError> {
    if FUNS.contains(&fun) {
        return Ok(());
    }
    Err(ApiError::new(400, format!("wheel function {fun:?} is not available in Halite ({} are)", FUNS.join(", "))))
}

/// `wheel`: `{"tag", "data": {"fun", "jid", "tag", "user", "_stamp", "return", "success"}}`.
pub async fn wheel(cfg: &ApiConfig, s: &Session, c: &Special) -> Result<J, ApiError> {
    check_special(s, "wheel", c)?;
    known(&c.fun)?;
    let (jid, ret) = super::runner::kept(cfg, s, "wheel", c, call(cfg, c)).await?;
    let tag = format!("salt/wheel/{jid}");
    Ok(json!({ "tag": tag, "data": { "fun": format!("wheel.{}", c.fun), "jid": jid, "tag": tag, "user": s.user, "_stamp": halite_master::events::stamp_now(), "return": ret, "success": true } }))
}

/// `wheel_async`: `{"tag": "salt/wheel/<jid>", "jid"}`; the run's `salt/wheel/<jid>/ret`
/// event carries its return.
pub async fn wheel_async(cfg: &ApiConfig, s: &Session, c: Special) -> Result<J, ApiError> {
    check_special(s, "wheel", &c)?;
    known(&c.fun)?;
    let cfg2 = cfg.clone();
    let c2 = c.clone();
    super::runner::background(cfg, s, "wheel", &c, async move { call(&cfg2, &c2).await }).await
}

/// The wheel function's return.
async fn call(cfg: &ApiConfig, c: &Special) -> Result<J, ApiError> {
    let (fun, arg, kwarg) = (c.fun.as_str(), &c.arg, &c.kwarg);
    Ok(match fun {
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
        _ => {
            known(fun)?;
            let action = &fun[4..];
            let pattern = arg.first().and_then(J::as_str).or_else(|| kwarg.get("match").and_then(J::as_str)).ok_or_else(|| ApiError::new(400, format!("{fun} needs a match")))?;
            let flag = |k: &str| kwarg.get(k).and_then(J::as_bool).unwrap_or(false);
            let sel = admin::call(&cfg.sock_dir, &json!({ "cmd": "key.select", "action": action, "match": pattern, "include_accepted": flag("include_accepted") || action == "delete", "include_rejected": flag("include_rejected") || action == "delete", "include_denied": flag("include_denied") || action == "delete" })).await?;
            let selected = sel.get("selected").cloned().unwrap_or(json!({}));
            let done = admin::call(&cfg.sock_dir, &json!({ "cmd": "key.apply", "action": action, "selected": selected })).await?;
            let bucket = match action {
                "reject" => "minions_rejected",
                _ => "minions",
            };
            json!({ bucket: done.get("done").cloned().unwrap_or(json!([])) })
        }
    })
}
