//! One minion driven by hand over the wire (the swarm's protocol code), for requests no
//! real minion sends: replays, stale timestamps, paths out of the roots, a second key.

use std::time::Duration;

use super::*;

pub use halite_tools::swarm::minion::{AesReply, Creds, Identity};
use halite_tools::swarm::minion;

pub struct WireMinion {
    pub me: Identity,
    pub creds: Creds,
    rt: tokio::runtime::Runtime,
    ep: String,
}

impl WireMinion {
    /// Signs `id` in to `env`'s master with a new 2048-bit key; the master must accept it
    /// at once (auto_accept or an autosign rule).
    pub fn sign_in(env: &Env, id: &str) -> WireMinion {
        let key = halite_master::wire::crypto::PrivateKey::generate(2048).expect("key pair");
        WireMinion::sign_in_with(&env.ip, env.ret, Identity::new(id.to_string(), key).expect("identity"))
    }

    /// Signs `me` in to the master at `ip:ret`; fails the test unless it is let in.
    pub fn sign_in_with(ip: &str, ret: u16, me: Identity) -> WireMinion {
        let id = me.id.clone();
        WireMinion::try_sign_in_with(ip, ret, me, None).unwrap_or_else(|e| panic!("{id} was not let in: {e}"))
    }

    /// Signs `me` in to the master at `ip:ret`, as a minion that cached `master_pub`
    /// (it then sends a token the master must echo), or says why it was not let in.
    pub fn try_sign_in_with(ip: &str, ret: u16, me: Identity, master_pub: Option<&halite_master::wire::crypto::PublicKey>) -> Result<WireMinion, String> {
        let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
        let ep = format!("tcp://{ip}:{ret}");
        let nonce = minion::nonce();
        let reply = send_raw(&rt, &ep, minion::auth_request(&me, &nonce, master_pub).expect("auth request"));
        let creds = minion::auth_reply(&me, &nonce, &reply, master_pub).map_err(|e| e.to_string())?;
        Ok(WireMinion { me, creds, rt, ep })
    }

    /// Sends raw bytes to another master's request port; returns the reply's bytes.
    pub fn send_to(&self, ip: &str, ret: u16, body: Vec<u8>) -> Vec<u8> {
        send_raw(&self.rt, &format!("tcp://{ip}:{ret}"), body)
    }

    /// Sends raw bytes to the master's request port; returns the reply's bytes.
    pub fn send(&self, body: Vec<u8>) -> Vec<u8> {
        send_raw(&self.rt, &self.ep, body)
    }

    /// Sends the same raw bytes `copies` times at once, each on a connection of its own;
    /// returns the replies' bytes.
    pub fn send_at_once(&self, body: Vec<u8>, copies: usize) -> Vec<Vec<u8>> {
        let ep = self.ep.clone();
        self.rt.block_on(async move {
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..copies {
                let (ep, body) = (ep.clone(), body.clone());
                set.spawn(async move { minion::request_once(&ep, body, Duration::from_secs(20), "request").await.unwrap_or_else(|e| panic!("{ep}: {e}")) });
            }
            set.join_all().await
        })
    }

    /// A session-encrypted request with `load`, and what the master answered.
    pub fn ask(&self, load: Vec<(rmpv::Value, rmpv::Value)>) -> AesReply {
        let (body, nonce) = minion::aes_request(&self.me, &self.creds.session, load).expect("aes request");
        minion::aes_reply(&self.creds.session, &nonce, &self.send(body)).expect("aes reply")
    }
}

/// Sends one `_auth` for `id` with a new key to `env`'s master and returns once it has
/// answered (whatever it answered): without auto_accept the key is then pending.
pub fn register_key(env: &Env, id: &str) {
    let key = halite_master::wire::crypto::PrivateKey::generate(2048).expect("key pair");
    let me = Identity::new(id.to_string(), key).expect("identity");
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let body = minion::auth_request(&me, &minion::nonce(), None).expect("auth request");
    send_raw(&rt, &format!("tcp://{}:{}", env.ip, env.ret), body);
}

/// One request on a fresh REQ socket to `ep`, 20 s at most.
fn send_raw(rt: &tokio::runtime::Runtime, ep: &str, body: Vec<u8>) -> Vec<u8> {
    rt.block_on(minion::request_once(ep, body, Duration::from_secs(20), "request")).unwrap_or_else(|e| panic!("{ep}: {e}"))
}

/// A request load from (key, value) pairs.
pub fn load(pairs: &[(&str, rmpv::Value)]) -> Vec<(rmpv::Value, rmpv::Value)> {
    pairs.iter().map(|(k, v)| (rmpv::Value::from(*k), v.clone())).collect()
}
