//! Adding a master to a running cluster: the join handshake, over the sealed transport.
//!
//! Every message is a control frame sealed with the key derived from `cluster_secret`, so
//! only a master configured with the cluster's secret can ask to join (Salt's rule, but
//! here the secret is never sent, not even hashed: knowing it is proved by every frame).
//!
//! 1. A master starting on an empty data directory sends `hello` to each entry of its
//!    `cluster_peers` and waits up to [`DISCOVER_FOR`] for `welcome`s.
//! 2. A peer answers whether it runs an established cluster (it knows a leader) and
//!    whether the newcomer is already a member (a founder that started late).
//! 3. Established and not a member: the newcomer starts its node empty (`join`) and asks
//!    that peer to `join` it, again every two seconds until the log names it a member.
//!    The peer proposes it as a learner; the learner receives the whole log (that is the
//!    state-sync: keys, jobs, roots, the cluster secrets, every member's address) and the
//!    leader promotes it to voter once it has caught up.
//!    Otherwise (nobody established, or already a member) it starts as a founder.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use halite_replication::{NodeHandle, Outbox, TcpTransport};

use crate::store::{member_id, ClusterPlan};

/// How long a new master waits for its peers' answers before founding a cluster.
pub const DISCOVER_FOR: Duration = Duration::from_secs(3);

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "t")]
enum Control {
    Hello { id: u64, addr: String },
    /// `members`: every member's raft id and transport address (from the log), so that a
    /// joiner can answer whichever member leads.
    /// `cluster_pub_sha256`: SHA-256 hex of this member's `cluster.pub` (what a joiner with
    /// `cluster_pub_fingerprint` checks before asking to join).
    Welcome { established: bool, member: bool, members: Vec<(u64, String)>, #[serde(default)] cluster_pub_sha256: Option<String> },
    Join { id: u64, name: String, addr: String },
}

/// A peer's answer to our hello.
#[derive(Debug, Clone)]
struct Welcome {
    from: u64,
    established: bool,
    member: bool,
    members: Vec<(u64, SocketAddr)>,
    cluster_pub_sha256: Option<String>,
}

/// The handshake's state on one master.
pub struct Handshake {
    transport: Arc<TcpTransport>,
    me: u64,
    listen: SocketAddr,
    /// Where this member's `cluster.pub` is (written once the cluster secrets apply).
    cluster_pub: std::path::PathBuf,
    welcomes: Mutex<Vec<Welcome>>,
}

fn send(transport: &TcpTransport, to: u64, addr: SocketAddr, c: &Control) {
    match serde_json::to_vec(c) {
        Ok(body) => transport.send_control(to, addr, &body),
        Err(e) => tracing::error!("control message not encoded: {e}"),
    }
}

/// Installs the control handler: answers hellos and joins (once `node` is set), and
/// collects welcomes for [`Handshake::discover`].
pub fn serve(transport: &Arc<TcpTransport>, me: u64, listen: SocketAddr, cluster_pub: std::path::PathBuf, node: Arc<OnceLock<NodeHandle>>) -> Arc<Handshake> {
    let hs = Arc::new(Handshake { transport: transport.clone(), me, listen, cluster_pub, welcomes: Mutex::new(Vec::new()) });
    // The handler keeps the handshake alive as long as the transport (the process).
    let hs2 = hs.clone();
    transport.on_control(Arc::new(move |from, body| {
        let hs = &hs2;
        let msg: Control = match serde_json::from_slice(&body) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(from, "control message refused: {e}");
                return;
            }
        };
        let membership = |id: u64| -> Option<(bool, bool)> {
            let h = node.get()?;
            let (_, voters, learners) = h.membership().ok()?;
            Some((h.leader().is_some(), voters.contains(&id) || learners.contains(&id)))
        };
        match msg {
            Control::Hello { id, addr } => {
                let Ok(addr) = addr.parse::<SocketAddr>() else { return };
                if id != from {
                    tracing::warn!(from, id, "hello with a mismatched id dropped");
                    return;
                }
                let (established, member) = membership(id).unwrap_or((false, false));
                let members = node.get().map(|h| h.addresses()).unwrap_or_default().into_iter().map(|(id, a)| (id, a.to_string())).collect();
                let cluster_pub_sha256 = std::fs::read(&hs.cluster_pub).ok().map(|b| crate::wire::crypto::sha256_hex(&b));
                send(&hs.transport, id, addr, &Control::Welcome { established, member, members, cluster_pub_sha256 });
            }
            Control::Welcome { established, member, members, cluster_pub_sha256 } => {
                let members = members.into_iter().filter_map(|(id, a)| Some((id, a.parse().ok()?))).collect();
                hs.welcomes.lock().unwrap_or_else(|p| p.into_inner()).push(Welcome { from, established, member, members, cluster_pub_sha256 });
            }
            Control::Join { id, name, addr } => {
                let Ok(addr) = addr.parse::<SocketAddr>() else { return };
                if id != from || id != member_id(&name) {
                    tracing::warn!(from, id, name = %name, "join with a mismatched id dropped");
                    return;
                }
                let Some(h) = node.get().cloned() else { return };
                if membership(id).is_some_and(|(_, member)| member) {
                    return;
                }
                tracing::info!(name = %name, id, %addr, "a master asks to join: adding it as a learner");
                let _ = std::thread::Builder::new().name("cluster-join".into()).spawn(move || match h.add_learner(id, addr) {
                    Ok(_) => tracing::info!(name = %name, "joined as a learner; it is promoted once caught up"),
                    Err(e) => tracing::warn!(name = %name, "adding the learner failed (it will ask again): {e}"),
                });
            }
        }
    }));
    hs
}

impl Handshake {
    /// Asks the peers whether to join (returns the peer to join through) or found. With
    /// `fingerprint` (`cluster_pub_fingerprint`), an established cluster whose
    /// `cluster.pub` hashes otherwise is refused: an error, and nothing joined.
    pub fn discover(&self, plan: &ClusterPlan, fingerprint: Option<&str>) -> Result<Option<(u64, SocketAddr)>, String> {
        let peers: Vec<(u64, SocketAddr)> = plan.addrs.iter().filter(|(id, _)| **id != self.me).map(|(id, a)| (*id, *a)).collect();
        for (id, addr) in &peers {
            send(&self.transport, *id, *addr, &Control::Hello { id: self.me, addr: self.listen.to_string() });
        }
        let deadline = Instant::now() + DISCOVER_FOR;
        loop {
            let got = self.welcomes.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if got.iter().any(|w| w.member) {
                tracing::info!("a peer lists this master as a member: starting as a founding member");
                return Ok(None);
            }
            if let Some(w) = got.iter().find(|w| w.established) {
                if let Some(fp) = fingerprint {
                    if !w.cluster_pub_sha256.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(fp.trim())) {
                        return Err(format!(
                            "refusing to join: the cluster's cluster.pub has SHA-256 {}, not the configured cluster_pub_fingerprint {fp}",
                            w.cluster_pub_sha256.as_deref().unwrap_or("(not announced)")
                        ));
                    }
                }
                let Some(addr) = peers.iter().find(|(id, _)| *id == w.from).map(|(_, a)| *a) else { return Ok(None) };
                tracing::info!(peer = %addr, members = w.members.len(), "the peers run a cluster this master is not in: joining it");
                // Whichever member leads must be reachable before the log arrives.
                for (id, a) in &w.members {
                    self.transport.set_peer(*id, Some(*a));
                }
                return Ok(Some((w.from, addr)));
            }
            let answered: std::collections::HashSet<u64> = got.iter().map(|w| w.from).collect();
            if answered.len() == peers.len() || Instant::now() >= deadline {
                tracing::info!(answered = answered.len(), peers = peers.len(), "no established cluster among the peers: founding one");
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asks `peer` to add this master, every two seconds until the log names it a member
    /// (or two minutes pass).
    pub fn request(self: &Arc<Self>, name: String, peer: (u64, SocketAddr), node: NodeHandle) {
        let hs = self.clone();
        let _ = std::thread::Builder::new().name("cluster-join-request".into()).spawn(move || {
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(120) {
                if node.membership().is_ok_and(|(_, v, l)| v.contains(&hs.me) || l.contains(&hs.me)) {
                    tracing::info!("this master is now a cluster member");
                    return;
                }
                send(&hs.transport, peer.0, peer.1, &Control::Join { id: hs.me, name: name.clone(), addr: hs.listen.to_string() });
                std::thread::sleep(Duration::from_secs(2));
            }
            tracing::error!("not admitted to the cluster after two minutes; check cluster_secret and the peers' logs");
        });
    }
}
