//! `wheel` and `wheel_async`: the key functions Halite's master answers, and
//! `key.gen_accept` (a key pair made here, its public key accepted through the log).

use serde_json::{json, Value as J};

use super::{check_special, ApiConfig, ApiError, Session, Special};
use crate::admin;

/// The wheel functions Halite has.
pub const FUNS: [&str; 6] = ["key.list_all", "key.accept", "key.reject", "key.delete", "key.finger", "key.gen_accept"];

/// Salt's smallest key size for `key.gen_accept` (smaller is raised to it, as Salt does).
pub const MIN_KEYSIZE: u64 = 2048;
/// The largest key size made (a bound on the CPU one request can ask for).
pub const MAX_KEYSIZE: u64 = 8192;

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
        "key.finger" => {
            let pattern = arg.first().and_then(J::as_str).or_else(|| kwarg.get("match").and_then(J::as_str)).ok_or_else(|| ApiError::new(400, "key.finger needs a match"))?;
            if let Some(h) = kwarg.get("hash_type").filter(|h| h.as_str() != Some("sha256")) {
                return Err(ApiError::new(400, format!("key.finger: hash_type {h} is not implemented (sha256, Salt's default, is)")));
            }
            admin::call(&cfg.sock_dir, &json!({ "cmd": "key.finger", "match": pattern })).await?.get("fingers").cloned().unwrap_or(json!({}))
        }
        "key.gen_accept" => gen_accept(cfg, arg, kwarg).await?,
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

/// `key.gen_accept`: `{"pub", "priv"}` of a new key pair whose public key is now the
/// accepted key of `id_`; `{}` when `id_` has an accepted key already and not `force`.
async fn gen_accept(cfg: &ApiConfig, arg: &[J], kwarg: &serde_json::Map<String, J>) -> Result<J, ApiError> {
    let id = arg.first().or_else(|| kwarg.get("id_")).and_then(J::as_str).ok_or_else(|| ApiError::new(400, "key.gen_accept needs id_"))?.to_string();
    let keysize = match kwarg.get("keysize") {
        None | Some(J::Null) => MIN_KEYSIZE,
        Some(v) => super::count(v, "keysize", MAX_KEYSIZE)?.max(MIN_KEYSIZE),
    };
    let force = match kwarg.get("force") {
        None | Some(J::Null) => false,
        Some(J::Bool(b)) => *b,
        Some(J::String(t)) if t.eq_ignore_ascii_case("true") => true,
        Some(J::String(t)) if t.eq_ignore_ascii_case("false") => false,
        Some(v) => return Err(ApiError::new(400, format!("force must be true or false, not {}", super::short(v)))),
    };
    let (private, public) = tokio::task::spawn_blocking(move || gen_keys(keysize as u32)).await.map_err(|e| ApiError::new(500, e.to_string()))??;
    let done = admin::call(&cfg.sock_dir, &json!({ "cmd": "key.gen_accept", "id": id, "pub": public, "force": force })).await?;
    if done.get("accepted") != Some(&J::Bool(true)) {
        return Ok(json!({}));
    }
    tracing::info!(id, "salt-api: key.gen_accept: a key pair made, its public key accepted");
    Ok(json!({ "pub": public, "priv": private }))
}

/// A key pair as Salt's `gen_keys` writes it: the private key as PKCS#1 PEM, the
/// public key as SubjectPublicKeyInfo PEM.
pub fn gen_keys(bits: u32) -> Result<(String, String), ApiError> {
    let fail = |e: openssl::error::ErrorStack| ApiError::new(500, format!("making a key pair: {e}"));
    let rsa = openssl::rsa::Rsa::generate(bits).map_err(fail)?;
    let private = String::from_utf8(rsa.private_key_to_pem().map_err(fail)?).map_err(|e| ApiError::new(500, e.to_string()))?;
    let public = String::from_utf8(rsa.public_key_to_pem().map_err(fail)?).map_err(|e| ApiError::new(500, e.to_string()))?;
    Ok((private, public))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_pairs_as_salt_writes_them() {
        let (private, public) = gen_keys(2048).unwrap();
        assert!(private.starts_with("-----BEGIN RSA PRIVATE KEY-----\n"), "{private}");
        assert!(public.starts_with("-----BEGIN PUBLIC KEY-----\n") && public.ends_with("-----END PUBLIC KEY-----\n"), "{public}");
        let back = openssl::rsa::Rsa::private_key_from_pem(private.as_bytes()).unwrap();
        assert_eq!(back.public_key_to_pem().unwrap(), public.as_bytes(), "the pair is one key");
    }
}
