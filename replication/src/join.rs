//! Adding a member to a running cluster: the join handshake, over the sealed transport.
//!
//! Every message is a control frame (`transport/frame.rs`, kind 2) on a connection whose
//! handshake proved the cluster secret (`transport/handshake.rs`), so only a member
//! configured with the cluster's secret can ask to join; the secret itself is never
//! sent, not even hashed. The sender id a handler sees is the one the connection's
//! handshake named, and a frame is accepted once: a captured `join` sent again does
//! nothing.
//!
//! 1. A member starting on an empty data directory sends `hello` to each founding peer
//!    of its [`ClusterPlan`] and waits up to [`DISCOVER_FOR`] for `welcome`s
//!    ([`Handshake::discover`]).
//! 2. A peer answers whether it runs an established cluster (it knows a leader), whether
//!    the newcomer is already a member (a founder that started late), every member's
//!    address, and the fingerprint the layer above has it announce (the master: the
//!    SHA-256 of the cluster's public key).
//! 3. Established and not a member: the newcomer starts its node empty
//!    ([`NodeConfig::join`](crate::NodeConfig::join)) and asks that peer to `join` it,
//!    again every two seconds until the log names it a member ([`Handshake::request`]).
//!    The peer proposes it as a learner; the learner receives the whole log (that is the
//!    state sync: every record and every member's address) and the leader promotes it to
//!    voter once it has caught up. If the newcomer expects a fingerprint and the cluster
//!    announces another (or none), it refuses to join ([`JoinError`]).
//!    Otherwise (nobody established, or already a member) it starts as a founder.
//!
//! The messages are JSON objects tagged by `"t"`:
//!
//! ```text
//! {"t":"hello","id":<raft id>,"addr":"ip:port"}
//! {"t":"welcome","established":bool,"member":bool,"members":[[<id>,"ip:port"],...],"cluster_pub_sha256":"<hex>"|null}
//! {"t":"join","id":<raft id>,"name":"<member name>","addr":"ip:port"}
//! ```
//!
//! A hello or join whose `id` is not its sender's (or, for a join, not the id of its
//! `name`) is dropped; a message that does not parse is logged and dropped.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cluster::{member_id, ClusterPlan};
use crate::{NodeHandle, Outbox, TcpTransport};

/// How long a new member waits for its peers' answers before founding a cluster.
pub const DISCOVER_FOR: Duration = Duration::from_secs(3);

/// What a member announces in its welcomes as the cluster's fingerprint (`None`: none
/// yet). Called for every hello, on a transport thread.
pub type Fingerprint = Arc<dyn Fn() -> Option<String> + Send + Sync>;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "t")]
enum Control {
    Hello {
        id: u64,
        addr: String,
    },
    /// `members`: every member's raft id and transport address (from the log), so that a
    /// joiner can answer whichever member leads.
    /// `fingerprint`: what this member announces (see [`Fingerprint`]); a joiner that
    /// expects one checks it before asking to join. Its key on the wire is
    /// `cluster_pub_sha256` (what the master announces).
    Welcome {
        established: bool,
        member: bool,
        members: Vec<(u64, String)>,
        #[serde(default, rename = "cluster_pub_sha256")]
        fingerprint: Option<String>,
    },
    Join {
        id: u64,
        name: String,
        addr: String,
    },
}

/// A peer's answer to our hello.
#[derive(Debug, Clone)]
struct Welcome {
    from: u64,
    established: bool,
    member: bool,
    members: Vec<(u64, SocketAddr)>,
    fingerprint: Option<String>,
}

/// Why a member did not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The established cluster announces another fingerprint than the one expected
    /// (`announced`: `None` if it announces none). Nothing was joined.
    #[error("refusing to join: the cluster announces fingerprint {}, not the expected {expected}", announced.as_deref().unwrap_or("(not announced)"))]
    FingerprintMismatch { announced: Option<String>, expected: String },
}

/// The handshake's state on one member.
pub struct Handshake {
    transport: Arc<TcpTransport>,
    me: u64,
    listen: SocketAddr,
    /// What this member announces as the cluster's fingerprint.
    fingerprint: Fingerprint,
    welcomes: Mutex<Vec<Welcome>>,
}

fn send(transport: &TcpTransport, to: u64, addr: SocketAddr, c: &Control) {
    match serde_json::to_vec(c) {
        Ok(body) => transport.send_control(to, addr, &body),
        Err(e) => tracing::error!("control message not encoded: {e}"),
    }
}

/// Installs the control handler: answers hellos (announcing `fingerprint()`) and joins
/// (once `node` is set), and collects welcomes for [`Handshake::discover`].
pub fn serve(transport: &Arc<TcpTransport>, me: u64, listen: SocketAddr, fingerprint: Fingerprint, node: Arc<OnceLock<NodeHandle>>) -> Arc<Handshake> {
    let hs = Arc::new(Handshake { transport: transport.clone(), me, listen, fingerprint, welcomes: Mutex::new(Vec::new()) });
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
                let fingerprint = (hs.fingerprint)();
                send(&hs.transport, id, addr, &Control::Welcome { established, member, members, fingerprint });
            }
            Control::Welcome { established, member, members, fingerprint } => {
                let members = members.into_iter().filter_map(|(id, a)| Some((id, a.parse().ok()?))).collect();
                hs.welcomes.lock().unwrap_or_else(|p| p.into_inner()).push(Welcome { from, established, member, members, fingerprint });
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
                tracing::info!(name = %name, id, %addr, "a member asks to join: adding it as a learner");
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
    /// `expect`, an established cluster announcing another fingerprint (compared without
    /// regard to ASCII case or surrounding blanks) is refused: an error, and nothing
    /// joined.
    pub fn discover(&self, plan: &ClusterPlan, expect: Option<&str>) -> Result<Option<(u64, SocketAddr)>, JoinError> {
        let peers: Vec<(u64, SocketAddr)> = plan.addrs.iter().filter(|(id, _)| **id != self.me).map(|(id, a)| (*id, *a)).collect();
        for (id, addr) in &peers {
            send(&self.transport, *id, *addr, &Control::Hello { id: self.me, addr: self.listen.to_string() });
        }
        let deadline = Instant::now() + DISCOVER_FOR;
        loop {
            let got = self.welcomes.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if got.iter().any(|w| w.member) {
                tracing::info!("a peer lists this member as a member: starting as a founding member");
                return Ok(None);
            }
            if let Some(w) = got.iter().find(|w| w.established) {
                if let Some(fp) = expect {
                    if !w.fingerprint.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(fp.trim())) {
                        return Err(JoinError::FingerprintMismatch { announced: w.fingerprint.clone(), expected: fp.to_string() });
                    }
                }
                let Some(addr) = peers.iter().find(|(id, _)| *id == w.from).map(|(_, a)| *a) else { return Ok(None) };
                tracing::info!(peer = %addr, members = w.members.len(), "the peers run a cluster this member is not in: joining it");
                // Whichever member leads must be reachable before the log arrives.
                for (id, a) in &w.members {
                    self.transport.set_peer(*id, Some(*a));
                }
                return Ok(Some((w.from, addr)));
            }
            let answered: HashSet<u64> = got.iter().map(|w| w.from).collect();
            if answered.len() == peers.len() || Instant::now() >= deadline {
                tracing::info!(answered = answered.len(), peers = peers.len(), "no established cluster among the peers: founding one");
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asks `peer` to add this member under `name`, every two seconds until the log
    /// names it a member (or two minutes pass).
    pub fn request(self: &Arc<Self>, name: String, peer: (u64, SocketAddr), node: NodeHandle) {
        let hs = self.clone();
        let _ = std::thread::Builder::new().name("cluster-join-request".into()).spawn(move || {
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(120) {
                if node.membership().is_ok_and(|(_, v, l)| v.contains(&hs.me) || l.contains(&hs.me)) {
                    tracing::info!("this member is now a cluster member");
                    return;
                }
                send(&hs.transport, peer.0, peer.1, &Control::Join { id: hs.me, name: name.clone(), addr: hs.listen.to_string() });
                std::thread::sleep(Duration::from_secs(2));
            }
            tracing::error!("not admitted to the cluster after two minutes; check the cluster secret and the peers' logs");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{free_addr, wait_until};

    /// The wire form is shared with members running other builds: keys and tags as
    /// documented above.
    #[test]
    fn control_messages_keep_their_wire_form() {
        let w = Control::Welcome { established: true, member: false, members: vec![(7, "127.0.0.1:4520".into())], fingerprint: Some("ab".into()) };
        let v: serde_json::Value = serde_json::to_value(&w).unwrap();
        assert_eq!(v, serde_json::json!({"t": "welcome", "established": true, "member": false, "members": [[7, "127.0.0.1:4520"]], "cluster_pub_sha256": "ab"}));
        // A welcome without the fingerprint key (an older member) still parses.
        let old: Control = serde_json::from_str(r#"{"t":"welcome","established":false,"member":false,"members":[]}"#).unwrap();
        assert!(matches!(old, Control::Welcome { fingerprint: None, .. }));
        let h = serde_json::to_value(Control::Hello { id: 1, addr: "127.0.0.1:1".into() }).unwrap();
        assert_eq!(h, serde_json::json!({"t": "hello", "id": 1, "addr": "127.0.0.1:1"}));
        let j = serde_json::to_value(Control::Join { id: 2, name: "n".into(), addr: "127.0.0.2:1".into() }).unwrap();
        assert_eq!(j, serde_json::json!({"t": "join", "id": 2, "name": "n", "addr": "127.0.0.2:1"}));
        for bad in ["", "{}", "[]", r#"{"t":"hello"}"#, r#"{"t":"nope","id":1}"#, r#"{"t":"hello","id":-1,"addr":"x"}"#] {
            assert!(serde_json::from_str::<Control>(bad).is_err(), "{bad}");
        }
    }



    /// A member named `name` (its raft id derived from it) with the sealed transport and
    /// the handshake served, announcing `fingerprint`; its node is started by the caller.
    struct Member {
        name: String,
        id: u64,
        listen: SocketAddr,
        transport: Arc<TcpTransport>,
        mailbox: Option<crate::Mailbox>,
        slot: Arc<OnceLock<NodeHandle>>,
        hs: Arc<Handshake>,
    }

    fn member(name: &str, peers: &[&Member], fingerprint: Option<&str>) -> Member {
        let id = member_id(name);
        let listen = free_addr(name);
        let (inbox, mailbox) = crate::node::mailbox();
        let peers = peers.iter().map(|p| (p.id, p.listen)).collect();
        let transport = TcpTransport::start(id, listen, peers, crate::ClusterKey::from_secret("s"), Arc::new(move |m| inbox.deliver(m))).unwrap();
        let slot = Arc::new(OnceLock::new());
        let fp = fingerprint.map(str::to_string);
        let hs = serve(&transport, id, listen, Arc::new(move || fp.clone()), slot.clone());
        Member { name: name.into(), id, listen, transport, mailbox: Some(mailbox), slot, hs }
    }

    fn plan_of(m: &Member, peers: &[&Member]) -> ClusterPlan {
        let all = std::iter::once(m).chain(peers.iter().copied());
        ClusterPlan {
            me: m.id,
            listen: m.listen,
            names: all.clone().map(|p| (p.id, p.name.clone())).collect(),
            addrs: all.map(|p| (p.id, p.listen)).collect(),
            key: crate::ClusterKey::from_secret("s"),
        }
    }

    fn start_node(root: &std::path::Path, m: &mut Member, voters: Vec<u64>, join: bool) -> crate::Node {
        use halite_storage::keys::{mmap::MmapKeys, Geometry};
        use halite_storage::roots::{RootsDirs, RootsMaterialiser};
        let dir = root.join(m.id.to_string());
        let geo = Geometry { size: 4096, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 20 };
        let views = halite_storage::views::Views::new(Box::new(MmapKeys::open(&dir.join("pki"), geo).unwrap()), RootsMaterialiser::new(RootsDirs::default()));
        let cfg = crate::NodeConfig { id: m.id, voters, join, addrs: [(m.id, m.listen)].into(), ..Default::default() };
        let node = crate::Node::start_peered(&crate::DataDir::new(&dir.join("data")), views, cfg, m.transport.clone(), m.mailbox.take().unwrap()).unwrap();
        let _ = m.slot.set(node.handle());
        node
    }

    #[test]
    fn a_newcomer_finds_the_cluster_joins_as_a_learner_and_is_promoted() {
        let dir = tempfile::tempdir().unwrap();
        // Before any node runs, nobody is established: a newcomer would found.
        let mut a = member("127.0.0.1", &[], Some("AB12"));
        let early = member("127.0.0.4", &[&a], None);
        assert_eq!(early.hs.discover(&plan_of(&early, &[&a]), None).unwrap(), None);
        // The founder runs alone and leads.
        let founders = vec![a.id];
        let n1 = start_node(dir.path(), &mut a, founders, false);
        wait_until("the founder to lead", 20, || n1.leader() == Some(a.id));
        let rec = halite_storage::Record::KeySet(halite_storage::format::KeySet {
            id: "before-join".into(),
            state: halite_storage::format::KeyState::Accepted,
            pub_key: b"PUB".to_vec(),
            time_ns: 1,
            expect: None,
        });
        n1.propose(&[rec]).unwrap();
        // A newcomer expecting another fingerprint refuses to join; case does not matter.
        let wrong = member("127.0.0.3", &[&a], None);
        match wrong.hs.discover(&plan_of(&wrong, &[&a]), Some("cd34")) {
            Err(JoinError::FingerprintMismatch { announced, expected }) => {
                assert_eq!((announced.as_deref(), expected.as_str()), (Some("AB12"), "cd34"));
            }
            other => panic!("joined a cluster announcing another fingerprint: {other:?}"),
        }
        assert!(!n1.membership().unwrap().2.contains(&wrong.id), "nothing was joined");
        // The right one: told to join through the founder, started empty, admitted as a
        // learner, caught up and promoted.
        let mut b = member("127.0.0.2", &[&a], None);
        let via = b.hs.discover(&plan_of(&b, &[&a]), Some(" ab12 ")).unwrap();
        assert_eq!(via, Some((a.id, a.listen)));
        let n2 = start_node(dir.path(), &mut b, vec![], true);
        b.hs.request(b.name.clone(), via.unwrap(), n2.handle());
        wait_until("the newcomer to catch up", 30, || n2.state().get_key("before-join").unwrap().is_some());
        wait_until("the newcomer to be promoted", 30, || n1.membership().unwrap().1 == {
            let mut v = vec![a.id, b.id];
            v.sort_unstable();
            v
        });
        n2.stop();
        n1.stop();
        for m in [a, b, early, wrong] {
            m.transport.shutdown();
        }
    }
}
