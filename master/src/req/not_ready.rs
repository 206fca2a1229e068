//! The answer of a member that is not ready (not caught up with the cluster, or without
//! a leader: `replication/src/node/status.rs`): it decides nothing from its stale state
//! and tells the minion to come back, the way Salt 3008.5 does.
//!
//! - `_auth`: the signed `{"ret": true, "nonce"}` sign-in reply, which a stock minion
//!   reads as "the key is cached, wait `acceptance_wait_time` and sign in again"; no key
//!   record, no session key, no event. (Salt's cluster gate lets `_auth` through; here a
//!   stale member must not turn its read into a key record, so it answers a retry.)
//! - `ping`: answered (it reads nothing).
//! - everything else: `{"enc": "clear", "load": {"ret": false, "cluster_retry": true}}`,
//!   Salt's answer while its cluster is not ready; the minion's channel finds no usable
//!   reply in it, signs in again and resends.

use rmpv::Value;

use super::Outcome;
use crate::view::View;
use crate::wire::crypto::SigAlgo;
use crate::wire::envelope::{self, Enc};
use crate::wire::payload::{bin, encode, get, get_text, map};

/// The answer to `body` while this member is not ready (see the module docs).
pub fn answer(view: &dyn View, body: &[u8]) -> Outcome {
    let env = match envelope::decode(body, view.config().halite_max_request_bytes) {
        Ok(e) => e,
        Err(why) => return Outcome::bad_load(why, "?", "?"),
    };
    let cmd = if env.enc == Enc::Clear { get_text(&env.load, "cmd").unwrap_or("") } else { "aes" };
    match cmd {
        "_auth" => {
            let load = &env.load;
            let id = get_text(load, "id").unwrap_or("");
            let nonce = get(load, "nonce").cloned().unwrap_or(Value::Nil);
            let sig = SigAlgo::parse(get_text(load, "sig_algo").unwrap_or("PKCS1v15-SHA1")).unwrap_or(SigAlgo::Pkcs1v15Sha1);
            let inner = encode(&map([("ret", Value::Boolean(true)), ("nonce", nonce)]));
            let reply = match view.master_keys().private.sign(&inner, sig) {
                Ok(s) => map([("enc", Value::from("clear")), ("load", bin(inner)), ("sig", bin(s))]),
                Err(e) => {
                    tracing::error!("cannot sign a not-ready sign-in reply: {e}");
                    return Outcome::bad_load("cannot sign", "_auth", id);
                }
            };
            tracing::info!(id = %id.escape_debug(), "sign-in answered with a retry: this member is catching up with the cluster");
            Outcome::reply(encode(&reply), "_auth", id)
        }
        "ping" => Outcome::reply(encode(&env.load), "ping", ""),
        _ => Outcome::reply(cluster_retry(), cmd, env.id.as_str()),
    }
}

/// Salt's "cluster not ready" answer.
pub fn cluster_retry() -> Vec<u8> {
    encode(&map([("enc", Value::from("clear")), ("load", map([("ret", Value::Boolean(false)), ("cluster_retry", Value::Boolean(true))]))]))
}
