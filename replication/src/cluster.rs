//! The cluster plan: from member names to raft ids, transport addresses and the
//! transport key.
//!
//! A member is known by its name (a host name or an address, the same text on every
//! member). Its raft id is derived from the name ([`member_id`]), so every member
//! computes the same ids without talking to the others, and its transport address is the
//! name resolved on the cluster's pool port. [`plan`] does this for this member and the
//! founding peers; the layer above supplies the names, the port and the secret from its
//! own configuration (the master: `interface`, `cluster_peers`, `cluster_pool_port`,
//! `cluster_secret`) and reports its own option errors.

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};

use sha2::{Digest, Sha256};

use crate::transport::ClusterKey;

/// How this member takes part in a cluster: its raft id and listen address, every
/// founding member's raft id, name and transport address, and the transport key.
pub struct ClusterPlan {
    pub me: u64,
    pub listen: SocketAddr,
    /// Raft id → name, every founding member (this one included).
    pub names: BTreeMap<u64, String>,
    /// Raft id → address on the pool port.
    pub addrs: HashMap<u64, SocketAddr>,
    pub key: ClusterKey,
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("no cluster secret: every member seals its traffic with a key derived from the same secret")]
    NoSecret,
    #[error("cluster member {name:?}: cannot resolve: {source}")]
    Resolve { name: String, source: std::io::Error },
    #[error("cluster member {name:?} has no address")]
    NoAddress { name: String },
}

/// A member's raft id: the first 8 bytes of SHA-256 of its name, shifted right by one
/// bit (never 0).
pub fn member_id(name: &str) -> u64 {
    let h = Sha256::digest(name.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[..8]);
    (u64::from_be_bytes(b) >> 1).max(1)
}

/// The raft id of incarnation `incarnation` of member `name`: [`member_id`] of the name
/// for the first (0), of `name#incarnation` for later ones. A member that lost its disk
/// cannot know what it voted for, so it never takes back its old id: it joins again under
/// a new incarnation, and the old id is removed from the group (see `join.rs`).
pub fn incarnation_id(name: &str, incarnation: u64) -> u64 {
    match incarnation {
        0 => member_id(name),
        n => member_id(&format!("{name}#{n}")),
    }
}

/// Raft id → name of this member and its founding peers (no address resolution). A
/// name listed twice (this member among its own peers) counts once.
pub fn founder_names(me: &str, peers: &[String]) -> BTreeMap<u64, String> {
    std::iter::once(me).chain(peers.iter().map(String::as_str)).map(|n| (member_id(n), n.to_string())).collect()
}

/// The plan of member `me` with founding `peers`, all listening on `port`, sealing
/// their traffic with the key derived from `secret`. Every name is resolved now; the
/// first address a name resolves to is the member's.
pub fn plan(me: &str, peers: &[String], port: u16, secret: &str) -> Result<ClusterPlan, PlanError> {
    if secret.is_empty() {
        return Err(PlanError::NoSecret);
    }
    let names = founder_names(me, peers);
    let mut addrs = HashMap::new();
    for (id, name) in &names {
        addrs.insert(*id, resolve(name, port)?);
    }
    let me = member_id(me);
    let listen = addrs[&me];
    Ok(ClusterPlan { me, listen, names, addrs, key: ClusterKey::from_secret(secret) })
}

fn resolve(name: &str, port: u16) -> Result<SocketAddr, PlanError> {
    (name, port)
        .to_socket_addrs()
        .map_err(|source| PlanError::Resolve { name: name.to_string(), source })?
        .next()
        .ok_or_else(|| PlanError::NoAddress { name: name.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_are_sha256_derived_and_stable() {
        // SHA-256("127.0.0.1") starts 12ca17b49af22894; shifted right by one bit.
        assert_eq!(member_id("127.0.0.1"), 0x12ca17b49af22894 >> 1);
        assert_ne!(member_id("127.0.0.1"), member_id("127.0.0.2"));
        assert!(member_id("") >= 1);
    }

    #[test]
    fn a_plan_names_every_founder_and_listens_on_its_own_address() {
        let peers = vec!["127.0.0.2".to_string(), "127.0.0.3".to_string(), "127.0.0.1".to_string()];
        let p = plan("127.0.0.1", &peers, 4520, "s").unwrap();
        assert_eq!(p.me, member_id("127.0.0.1"));
        assert_eq!(p.listen, "127.0.0.1:4520".parse().unwrap());
        assert_eq!(p.names.len(), 3, "this member listed among its peers counts once");
        assert_eq!(p.addrs[&member_id("127.0.0.3")], "127.0.0.3:4520".parse().unwrap());
        assert_eq!(p.names.keys().collect::<Vec<_>>(), p.addrs.keys().collect::<std::collections::BTreeSet<_>>().into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn a_later_incarnation_has_another_id() {
        assert_eq!(incarnation_id("127.0.0.1", 0), member_id("127.0.0.1"));
        assert_ne!(incarnation_id("127.0.0.1", 1), member_id("127.0.0.1"));
        assert_eq!(incarnation_id("127.0.0.1", 7), member_id("127.0.0.1#7"));
    }

    #[test]
    fn no_secret_no_plan() {
        assert!(matches!(plan("127.0.0.1", &["127.0.0.2".into()], 4520, ""), Err(PlanError::NoSecret)));
    }
}
