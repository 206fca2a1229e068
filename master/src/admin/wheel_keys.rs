//! The key functions of Salt's wheel that salt-api serves beyond `salt-key`'s:
//! `key.finger` (`GET /keys/<id>`) and `key.gen_accept` (`POST /keys`).
//!
//! - `{"cmd": "key.finger", "match": GLOB}`: `{"fingers": {bucket: {id: finger}}}` for
//!   the keys the glob matches (comma-separated patterns, as `key.list`'s), the finger
//!   Salt's `pem_finger` over the stored bytes ([`finger`]).
//! - `{"cmd": "key.gen_accept", "id", "pub", "force"}`: accepts `pub` (a PEM public key
//!   the caller generated) for `id`, as Salt's `key.gen_accept` writes it into the
//!   accepted keys; an id whose key is accepted already is left as it is unless `force`
//!   (answer `{"accepted": false}`). The record expects the key the master read, so a
//!   change committed meanwhile wins and this one does nothing (`accepted: false`).

use serde_json::{json, Map, Value as J};
use sha2::{Digest, Sha256};

use halite_storage::format::{KeySet, KeyState, Record};
use halite_storage::keys::BankState;
use halite_storage::state::StoredKey;

use super::keys::{glob_match, looks_like_public_key, state_listing, DEN};
use super::{AdminView, Answer, Plan, Settled};
use crate::error::{Error, Result};

/// Largest public key accepted from `key.gen_accept` (an RSA 16384-bit PEM is ~2.8 KiB).
pub const MAX_PUB_LEN: usize = 16 << 10;

/// A `key.finger` or `key.gen_accept` request.
#[derive(Debug, Clone, PartialEq)]
pub enum WheelKeyCmd {
    Finger { pattern: String },
    GenAccept { id: String, pub_key: Vec<u8>, force: bool },
}

impl WheelKeyCmd {
    pub fn parse(req: &J) -> Result<WheelKeyCmd> {
        let s = |k: &str| req.get(k).and_then(J::as_str);
        Ok(match s("cmd").unwrap_or("") {
            "key.finger" => WheelKeyCmd::Finger { pattern: s("match").filter(|m| !m.is_empty()).ok_or_else(|| Error::refused("key.finger needs a match"))?.to_string() },
            _ => {
                let id = s("id").ok_or_else(|| Error::refused("key.gen_accept needs an id"))?;
                let id = halite_storage::id::validate_minion_id(id).map_err(|_| Error::refused(format!("key.gen_accept: {id:?} is not a minion id")))?.to_string();
                let pub_key = s("pub").unwrap_or("").as_bytes().to_vec();
                if pub_key.len() > MAX_PUB_LEN || !looks_like_public_key(&pub_key) {
                    return Err(Error::refused("key.gen_accept: pub is not a PEM public key"));
                }
                WheelKeyCmd::GenAccept { id, pub_key, force: req.get("force").and_then(J::as_bool).unwrap_or(false) }
            }
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let sm = view.state();
        match self {
            WheelKeyCmd::Finger { pattern } => {
                let mut out = Map::new();
                for (bucket, ids) in glob_match(&state_listing(sm)?, &pattern) {
                    let mut m = Map::new();
                    for id in ids.as_array().into_iter().flatten().filter_map(J::as_str) {
                        let key = if bucket == DEN { sm.get_denied(id)?.map(|(_, p)| p) } else { sm.get_key(id)?.map(|k| k.pub_key) };
                        if let Some(p) = key {
                            m.insert(id.to_string(), J::String(finger(&p)));
                        }
                    }
                    out.insert(bucket, J::Object(m));
                }
                Ok(Plan::answer(json!({ "fingers": out })))
            }
            WheelKeyCmd::GenAccept { id, pub_key, force } => {
                let stored = sm.get_key(&id)?;
                if !force && stored.as_ref().is_some_and(|k| k.state == BankState::Accepted) {
                    return Ok(Plan::answer(json!({ "accepted": false })));
                }
                let rec = Record::KeySet(KeySet::new(id.as_str(), KeyState::Accepted, pub_key.clone(), view.now_ns()).expecting(StoredKey::expectation(stored.as_ref())));
                let mut plan = Plan { proposals: vec![vec![rec]], ..Default::default() };
                plan.answer = Answer::After(Box::new(move |v: &dyn AdminView| {
                    let held = v.state().get_key(&id)?.is_some_and(|k| k.state == BankState::Accepted && k.pub_key == pub_key);
                    Ok(Settled::from(json!({ "accepted": held })))
                }));
                Ok(plan)
            }
        }
    }
}

/// Salt's `pem_finger` over the exact stored bytes: sha256 hex, `:` every two digits.
pub fn finger(pub_key: &[u8]) -> String {
    let hex = hex::encode(Sha256::digest(pub_key));
    hex.as_bytes().chunks(2).map(|c| std::str::from_utf8(c).unwrap_or("")).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use halite_storage::format::KeyState;
    use serde_json::json;

    use super::*;
    use crate::admin::tests::Fixture;

    const PUB: &str = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----\n";
    const OTHER: &str = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkr\n-----END PUBLIC KEY-----\n";

    #[test]
    fn gen_accept_accepts_a_new_id_and_leaves_an_accepted_one_unless_forced() {
        let f = Fixture::new("wheel-gen-accept");
        let got = f.carry_out(f.run(json!({"cmd": "key.gen_accept", "id": "kick", "pub": PUB})).unwrap());
        assert_eq!(got.value, json!({"accepted": true}));
        assert_eq!(f.sm.get_key("kick").unwrap().map(|k| (k.state, k.pub_key)), Some((BankState::Accepted, PUB.as_bytes().to_vec())));
        // Accepted already: nothing proposed, the key kept.
        let plan = f.run(json!({"cmd": "key.gen_accept", "id": "kick", "pub": OTHER})).unwrap();
        assert!(plan.proposals.is_empty());
        assert_eq!(f.carry_out(plan).value, json!({"accepted": false}));
        let got = f.carry_out(f.run(json!({"cmd": "key.gen_accept", "id": "kick", "pub": OTHER, "force": true})).unwrap());
        assert_eq!(got.value, json!({"accepted": true}));
        assert_eq!(f.sm.get_key("kick").unwrap().unwrap().pub_key, OTHER.as_bytes());
        // A pending key is replaced by the accepted one.
        f.key("pend", KeyState::Pending, PUB);
        assert_eq!(f.carry_out(f.run(json!({"cmd": "key.gen_accept", "id": "pend", "pub": OTHER})).unwrap()).value, json!({"accepted": true}));
        for bad in [json!({"cmd": "key.gen_accept", "id": "../x", "pub": PUB}), json!({"cmd": "key.gen_accept", "id": "a", "pub": "not a key"}), json!({"cmd": "key.gen_accept", "pub": PUB})] {
            assert!(f.run(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn finger_answers_each_matched_bucket() {
        let f = Fixture::new("wheel-finger");
        f.key("web1", KeyState::Accepted, PUB);
        f.key("web2", KeyState::Pending, OTHER);
        assert_eq!(f.now(json!({"cmd": "key.finger", "match": "web*"})), json!({"fingers": {"minions_pre": {"web2": finger(OTHER.as_bytes())}, "minions": {"web1": finger(PUB.as_bytes())}}}));
        assert_eq!(f.now(json!({"cmd": "key.finger", "match": "db*"})), json!({"fingers": {}}));
        assert_eq!(finger(b"x").len(), 95);
        assert!(f.run(json!({"cmd": "key.finger"})).is_err());
    }
}
