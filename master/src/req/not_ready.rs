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
        _ => Outcome::reply(cluster_retry(), cmd, env.id),
    }
}

/// Salt's "cluster not ready" answer.
pub fn cluster_retry() -> Vec<u8> {
    encode(&map([("enc", Value::from("clear")), ("load", map([("ret", Value::Boolean(false)), ("cluster_retry", Value::Boolean(true))]))]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::memory::MemoryView;
    use crate::wire::payload::{decode, get_bytes};

    fn clear(load: Value) -> Vec<u8> {
        encode(&map([("enc", Value::from("clear")), ("load", load), ("version", Value::from(3))]))
    }

    #[test]
    fn a_sign_in_is_told_to_retry_and_records_nothing() {
        let v = MemoryView::new();
        let load = map([("cmd", Value::from("_auth")), ("id", Value::from("m1")), ("nonce", Value::from("n-1")), ("pub", Value::from("PEM"))]);
        let o = answer(&v, &clear(load));
        assert!(o.records.is_empty() && o.effects.is_empty() && o.events.is_empty() && o.claims.is_empty());
        let reply = decode(&o.reply).unwrap();
        let inner = get_bytes(&reply, "load").expect("a signed reply");
        let sig = get_bytes(&reply, "sig").unwrap();
        assert!(v.keys.private.public_key().unwrap().verify(inner, sig, SigAlgo::Pkcs1v15Sha1).unwrap());
        let inner = decode(inner).unwrap();
        assert_eq!(get(&inner, "ret"), Some(&Value::Boolean(true)));
        assert_eq!(get_text(&inner, "nonce"), Some("n-1"));
    }

    #[test]
    fn other_requests_get_salts_cluster_retry_and_ping_is_answered() {
        let v = MemoryView::new();
        let aes = encode(&map([("enc", Value::from("aes")), ("load", bin(vec![1, 2, 3])), ("id", Value::from("m1")), ("version", Value::from(3))]));
        let o = answer(&v, &aes);
        assert!(o.records.is_empty());
        let reply = decode(&o.reply).unwrap();
        let load = get(&reply, "load").unwrap();
        assert_eq!(get(load, "cluster_retry"), Some(&Value::Boolean(true)));
        assert_eq!(get(load, "ret"), Some(&Value::Boolean(false)));
        let ping = map([("cmd", Value::from("ping")), ("x", Value::from(1))]);
        assert_eq!(decode(&answer(&v, &clear(ping.clone())).reply).unwrap(), ping);
        assert_eq!(answer(&v, b"\xc1garbage").reply, envelope::bad_load());
    }
}
