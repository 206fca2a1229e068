//! salt-api's verbs: its login tokens (kind-18 records, `halite_storage::eauth_token`)
//! and the minions a target expression names (for its `external_auth` target rules).
//!
//! | `cmd` | fields | answer |
//! |---|---|---|
//! | `token.create` | `hash` (hex SHA-256 of the token), `user`, `eauth`, `perms` (JSON list), `expire` (seconds of validity) | `{"start", "expire"}` (Unix seconds) once this very create applied |
//! | `token.get` | `hash` | `{"token": {"user", "eauth", "perms", "start", "expire"}}`, or `{"token": null}` when unknown, revoked or expired on this member's clock |
//! | `token.revoke` | `hash` | `{"revoked": true}` once applied (also for an unknown hash) |
//! | `target.minions` | `tgt`, `tgt_type` | `{"minions": [ids]}`: the accepted minions the expression matches, as `publish` would send to |
//!
//! The token itself never reaches the master: salt-api sends its hash, so neither the
//! log, the state nor a backup can be replayed as a login.

use serde_json::{json, Value as J};

use halite_storage::eauth_token::{EauthToken, TokenOp, HASH_LEN};
use halite_storage::format::Record;

use super::{Answer, AdminView, Plan, Settled};
use crate::error::{Error, Result};

/// Longest validity a token may be given (a year).
pub const MAX_EXPIRE_SECS: u64 = 366 * 24 * 3600;

/// A parsed token or target request.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenCmd {
    Create { hash: String, user: String, eauth: String, perms: J, expire_secs: u64 },
    Get { hash: String },
    Revoke { hash: String },
    Minions { tgt: J, tgt_type: String },
}

fn hash_of(req: &J) -> Result<String> {
    let h = req.get("hash").and_then(J::as_str).unwrap_or("");
    if h.len() != HASH_LEN || !h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(Error::refused("a token hash is 64 lowercase hex digits"));
    }
    Ok(h.to_string())
}

impl TokenCmd {
    pub fn parse(req: &J) -> Result<TokenCmd> {
        let s = |k: &str| req.get(k).and_then(J::as_str).unwrap_or("").to_string();
        Ok(match req.get("cmd").and_then(J::as_str).unwrap_or("") {
            "token.create" => {
                let secs = req.get("expire").and_then(J::as_u64).unwrap_or(0);
                if secs == 0 || secs > MAX_EXPIRE_SECS {
                    return Err(Error::refused(format!("token.create: expire is 1 to {MAX_EXPIRE_SECS} seconds")));
                }
                TokenCmd::Create { hash: hash_of(req)?, user: s("user"), eauth: s("eauth"), perms: req.get("perms").cloned().unwrap_or(J::Array(vec![])), expire_secs: secs }
            }
            "token.get" => TokenCmd::Get { hash: hash_of(req)? },
            "token.revoke" => TokenCmd::Revoke { hash: hash_of(req)? },
            "target.minions" => TokenCmd::Minions { tgt: req.get("tgt").cloned().unwrap_or(J::Null), tgt_type: req.get("tgt_type").and_then(J::as_str).unwrap_or("glob").to_string() },
            other => return Err(Error::refused(format!("unknown admin command {other:?}"))),
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        match self {
            TokenCmd::Create { hash, user, eauth, perms, expire_secs } => {
                let start_ns = view.now_ns();
                let t = EauthToken { op: TokenOp::Create, hash: hash.clone(), user: user.clone(), eauth, perms: perms.to_string().into_bytes(), start_ns, expire_ns: start_ns.saturating_add(expire_secs * 1_000_000_000), time_ns: start_ns };
                let rec = Record::EauthToken(t);
                // The record's own checks (lengths, names) refuse bad input before it is proposed.
                rec.encode().map_err(|e| Error::refused(e.to_string()))?;
                let mut plan = Plan::default();
                plan.proposals = vec![vec![rec]];
                // Success only if this create is the one that applied (same start).
                plan.answer = Answer::After(Box::new(move |v: &dyn AdminView| match v.state().eauth_token(&hash)? {
                    Some(t) if t.user == user && t.start_ns == start_ns => Ok(Settled::from(json!({ "start": secs(t.start_ns), "expire": secs(t.expire_ns) }))),
                    _ => Err(Error::refused("the token was not stored (its hash is taken)")),
                }));
                Ok(plan)
            }
            TokenCmd::Get { hash } => {
                let now = view.now_ns();
                let token = match view.state().eauth_token(&hash)? {
                    Some(t) if t.expire_ns > now => json!({
                        "user": t.user,
                        "eauth": t.eauth,
                        "perms": serde_json::from_slice::<J>(&t.perms).unwrap_or(J::Array(vec![])),
                        "start": secs(t.start_ns),
                        "expire": secs(t.expire_ns),
                    }),
                    _ => J::Null,
                };
                Ok(Plan::answer(json!({ "token": token })))
            }
            TokenCmd::Revoke { hash } => {
                let rec = Record::EauthToken(EauthToken { op: TokenOp::Revoke, hash, user: String::new(), eauth: String::new(), perms: Vec::new(), start_ns: 0, expire_ns: 0, time_ns: view.now_ns() });
                let mut plan = Plan::answer(json!({ "revoked": true }));
                plan.proposals = vec![vec![rec]];
                Ok(plan)
            }
            TokenCmd::Minions { tgt, tgt_type } => {
                let (tgt, tgt_type) = match &tgt {
                    J::String(t) => {
                        let (t, ty) = crate::nodegroups::resolve(t, &tgt_type, &view.config().nodegroups)?;
                        (J::String(t), ty)
                    }
                    _ => (tgt, tgt_type),
                };
                let (minions, _) = crate::jobs::expected_minions(view.state(), &tgt, &tgt_type)?;
                Ok(Plan::answer(json!({ "minions": minions })))
            }
        }
    }
}

/// Unix ns as Salt's float seconds.
fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}
