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
//!    Otherwise (nobody established) it starts as a founder.
//! 4. **A member on an empty disk** (wiped, or a founder that starts after the others
//!    elected a leader) is listed as a member by its peers, but it cannot know what it
//!    voted for or acknowledged before: taking its old raft id back with a fresh hard
//!    state could vote twice in a term, and a heartbeat naming a commit index past its
//!    (empty) log end would stop raft-rs. So it never re-founds: it joins again as a new
//!    **incarnation**, under a new raft id ([`incarnation_id`] of its name and a number
//!    chosen from the clock, persisted beside its log), and the member handling its
//!    `join` first removes the old id (the member at the same address) from the group,
//!    then adds the new one as a learner (promoted once caught up). Frames for the old id
//!    are dropped by the transport of the new one. Raft changes one member at a time, so
//!    every step keeps a majority in common with the one before. If the peers list it
//!    but none leads and their term shows an election happened, it waits for a leader
//!    (re-asking every two seconds) rather than found: it would rather not serve than
//!    risk a second vote. A member whose peers are still at the founding term 1 (nothing
//!    was ever elected, so it never voted) founds as before.
//!
//! The messages are JSON objects tagged by `"t"`:
//!
//! ```text
//! {"t":"hello","id":<raft id>,"addr":"ip:port"}
//! {"t":"welcome","established":bool,"member":bool,"members":[[<id>,"ip:port"],...],"cluster_pub_sha256":"<hex>"|null,"term":<raft term>,"record_set":<n>}
//! {"t":"join","id":<raft id>,"name":"<member name>","addr":"ip:port","incarnation":<n>,"key":"<hex>","record_set":<n>}
//! ```
//!
//! `record_set` (1 when absent) is, in a welcome, the cluster's (its members' lowest
//! recorded [`RECORD_SET`], `storage/src/record/member_release.rs`) and, in a join, the
//! joiner's build's. A newcomer whose build reads less than the cluster's does not join
//! ([`JoinError::NewerRecordSet`]), and a join from one is refused (`join_record_set`):
//! it could not read what the members write.
//!
//! `key` is the joiner's member public key (32 bytes, hex): the one its connection's
//! handshake proved, or the join is dropped. The learner change carries it in its entry
//! context (v2), so the key is decided at apply with the membership (see
//! `transport::identity`); a joiner is admitted to the join path only until then.
//!
//! (`term` and `incarnation` are 0 when absent, as from an older member.) A hello or join
//! whose `id` is not its sender's (or, for a join, not the id of incarnation
//! `incarnation` of its `name`) is dropped (`control_id_mismatch`), as is a join naming
//! another key than its connection proved (`join_key_mismatch`) and a message that does not
//! parse (`bad_control`): each counted and logged, rate-limited, like every refusal on the
//! cluster port.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use halite_storage::format::RECORD_SET;
use serde::{Deserialize, Serialize};

use crate::cluster::{incarnation_id, ClusterPlan};
use crate::transport::refusal::Refused;
use crate::node::NodeHandle;
use crate::transport::{Outbox, TcpTransport};

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
        /// The answering member's raft term: above 1, an election has happened.
        #[serde(default)]
        term: u64,
        /// The cluster's record set (its members' lowest, `NodeHandle::cluster_record_set`):
        /// a build that reads less does not join.
        #[serde(default = "record_set_one")]
        record_set: u32,
    },
    Join {
        id: u64,
        name: String,
        addr: String,
        /// Which incarnation of `name` asks (`id` is [`incarnation_id`] of both).
        #[serde(default)]
        incarnation: u64,
        /// The joiner's member public key, hex (absent from an older joiner). It must be
        /// the key the join's connection proved; the membership change that adds the
        /// joiner carries it, and once that applies only this key speaks for `id`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// The record set the joiner's build reads and writes (`format::RECORD_SET`).
        #[serde(default = "record_set_one")]
        record_set: u32,
    },
    /// A message of the application above the raft group (the master's event fan-out):
    /// opaque JSON, best effort, handed to the handler set with [`Handshake::on_app`].
    App {
        body: serde_json::Value,
    },
}

/// A message without a record set is from a build of record set 1.
fn record_set_one() -> u32 {
    1
}

/// Where application messages go: the sender's raft id (proved by its connection) and
/// the body.
pub type AppHandler = Arc<dyn Fn(u64, serde_json::Value) + Send + Sync>;

/// What [`Handshake::discover`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discovered {
    /// Nobody runs an established cluster (or only founders that never elected):
    /// start as a founding member.
    Found,
    /// An established cluster this member is not in: join it through this peer.
    Join(u64, SocketAddr),
    /// An established cluster that lists this member, which starts on an empty disk:
    /// join again through this peer as a new incarnation (see the module docs).
    Rejoin(u64, SocketAddr),
}

/// A peer's answer to our hello.
#[derive(Debug, Clone)]
struct Welcome {
    from: u64,
    established: bool,
    member: bool,
    members: Vec<(u64, SocketAddr)>,
    fingerprint: Option<String>,
    term: u64,
    record_set: u32,
}

/// Why a member did not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The established cluster announces another fingerprint than the one expected
    /// (`announced`: `None` if it announces none). Nothing was joined.
    #[error("refusing to join: the cluster announces fingerprint {}, not the expected {expected}", announced.as_deref().unwrap_or("(not announced)"))]
    FingerprintMismatch { announced: Option<String>, expected: String },
    /// The established cluster's members write a newer record set than this build reads
    /// (`format::RECORD_SET`). Nothing was joined.
    #[error("refusing to join: the cluster's members write record set {cluster} and this build reads record set {ours} at most; install the members' release (or a newer one) on this member (docs/operations.md, \"Upgrading a cluster\")")]
    NewerRecordSet { cluster: u32, ours: u32 },
}

/// The handshake's state on one member.
pub struct Handshake {
    transport: Arc<TcpTransport>,
    me: u64,
    listen: SocketAddr,
    /// What this member announces as the cluster's fingerprint.
    fingerprint: Fingerprint,
    welcomes: Mutex<Vec<Welcome>>,
    /// The node, once started (the members to send application messages to).
    node: Arc<OnceLock<NodeHandle>>,
    app: Mutex<Option<AppHandler>>,
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
    let hs = Arc::new(Handshake { transport: transport.clone(), me, listen, fingerprint, welcomes: Mutex::new(Vec::new()), node: node.clone(), app: Mutex::new(None) });
    // The handler keeps the handshake alive as long as the transport (the process).
    let hs2 = hs.clone();
    transport.on_control_keyed(Arc::new(move |from, proved: &[u8; 32], body| {
        let hs = &hs2;
        let msg: Control = match serde_json::from_slice(&body) {
            Ok(m) => m,
            Err(e) => return hs.transport.refuse_message(from, Refused::new("bad_control", format!("a control message that does not parse dropped: {e}"))),
        };
        let membership = |id: u64| -> Option<(bool, bool, u64)> {
            let h = node.get()?;
            let (term, voters, learners) = h.membership().ok()?;
            Some((h.leader().is_some(), voters.contains(&id) || learners.contains(&id), term))
        };
        match msg {
            Control::App { body } => {
                let handler = hs.app.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if let Some(h) = handler {
                    h(from, body);
                }
            }
            Control::Hello { id, addr } => {
                let Ok(addr) = addr.parse::<SocketAddr>() else { return };
                if id != from {
                    return hs.transport.refuse_message(from, Refused::new("control_id_mismatch", format!("a hello naming member {id} dropped")));
                }
                // A member is known by its id, or by its address: a member on a new data
                // dir says hello under a provisional id (its member key is new, and its
                // old id is bound to its old one; see `transport::identity`).
                let (established, member, term) = membership(id).unwrap_or((false, false, 0));
                let member = member || node.get().is_some_and(|h| h.addresses().iter().any(|(o, a)| *a == addr && membership(*o).is_some_and(|(_, m, _)| m)));
                let members = node.get().map(|h| h.addresses()).unwrap_or_default().into_iter().map(|(id, a)| (id, a.to_string())).collect();
                let fingerprint = (hs.fingerprint)();
                let record_set = node.get().map_or(1, |h| h.cluster_record_set());
                send(&hs.transport, id, addr, &Control::Welcome { established, member, members, fingerprint, term, record_set });
            }
            Control::Welcome { established, member, members, fingerprint, term, record_set } => {
                let members = members.into_iter().filter_map(|(id, a)| Some((id, a.parse().ok()?))).collect();
                hs.welcomes.lock().unwrap_or_else(|p| p.into_inner()).push(Welcome { from, established, member, members, fingerprint, term, record_set });
            }
            Control::Join { id, name, addr, incarnation, key, record_set } => {
                let Ok(addr) = addr.parse::<SocketAddr>() else { return };
                if id != from || id != incarnation_id(&name, incarnation) {
                    return hs.transport.refuse_message(from, Refused::new("control_id_mismatch", format!("a join naming member {id} ({name:?}, incarnation {incarnation}) dropped")));
                }
                if key.is_some_and(|k| !k.eq_ignore_ascii_case(&hex::encode(proved))) {
                    return hs.transport.refuse_message(from, Refused::new("join_key_mismatch", format!("a join of {name:?} naming another member key than its connection proved dropped")));
                }
                let proved = *proved;
                let Some(h) = node.get().cloned() else { return };
                if membership(id).is_some_and(|(_, member, _)| member) {
                    return;
                }
                let cluster = h.cluster_record_set();
                if record_set < cluster {
                    return hs.transport.refuse_message(from, Refused::new("join_record_set", format!("a join of {name:?} refused: its build reads record set {record_set}, the cluster's members write record set {cluster} (it must run the members' release or a newer one)")));
                }
                // An earlier incarnation at the same address is removed first (one change
                // at a time: see the module docs).
                let (_, voters, learners) = match h.membership() {
                    Ok(m) => m,
                    Err(_) => return,
                };
                let old: Vec<u64> = h.addresses().into_iter().filter(|(o, a)| *o != id && *a == addr && (voters.contains(o) || learners.contains(o))).map(|(o, _)| o).collect();
                tracing::info!(name = %name, id, incarnation, %addr, replaces = ?old, "a member asks to join: adding it as a learner");
                let _ = std::thread::Builder::new().name("cluster-join".into()).spawn(move || {
                    for o in old {
                        match h.remove_member(o) {
                            Ok(_) => tracing::info!(name = %name, old = o, "the member's earlier incarnation removed"),
                            Err(e) => {
                                tracing::warn!(name = %name, old = o, "removing the member's earlier incarnation failed (it will ask again): {e}");
                                return;
                            }
                        }
                    }
                    match h.add_learner_keyed(id, addr, proved) {
                        Ok(_) => tracing::info!(name = %name, "joined as a learner; it is promoted once caught up"),
                        Err(e) => tracing::warn!(name = %name, "adding the learner failed (it will ask again): {e}"),
                    }
                });
            }
        }
    }));
    hs
}

impl Handshake {
    /// Where application messages received from now on go.
    pub fn on_app(&self, handler: AppHandler) {
        *self.app.lock().unwrap_or_else(|p| p.into_inner()) = Some(handler);
    }

    /// Sends an application message to every other member the node knows (none before
    /// it started), each on a connection of its own: best effort, failures are logged.
    pub fn send_app(&self, body: serde_json::Value) {
        let Some(h) = self.node.get() else { return };
        let msg = Control::App { body };
        for (id, addr) in h.addresses() {
            if id != self.me && addr != self.listen {
                send(&self.transport, id, addr, &msg);
            }
        }
    }

    /// Asks the peers whether to join (returns the peer to join through) or found. With
    /// `expect`, an established cluster announcing another fingerprint (compared without
    /// regard to ASCII case or surrounding blanks) is refused: an error, and nothing
    /// joined.
    pub fn discover(&self, plan: &ClusterPlan, expect: Option<&str>) -> Result<Discovered, JoinError> {
        // Not this member itself (under an earlier incarnation's id, it is in the plan too).
        let peers: Vec<(u64, SocketAddr)> = plan.addrs.iter().filter(|(id, a)| **id != self.me && **a != self.listen).map(|(id, a)| (*id, *a)).collect();
        // Asked again (a member waiting to found), only the answers to this round count.
        self.welcomes.lock().unwrap_or_else(|p| p.into_inner()).clear();
        let hello = || {
            for (id, addr) in &peers {
                send(&self.transport, *id, *addr, &Control::Hello { id: self.me, addr: self.listen.to_string() });
            }
        };
        hello();
        let started = Instant::now();
        let mut asked = Instant::now();
        loop {
            let got = self.welcomes.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(w) = got.iter().find(|w| w.established) {
                if w.record_set > RECORD_SET {
                    return Err(JoinError::NewerRecordSet { cluster: w.record_set, ours: RECORD_SET });
                }
                if let Some(fp) = expect {
                    if !w.fingerprint.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(fp.trim())) {
                        return Err(JoinError::FingerprintMismatch { announced: w.fingerprint.clone(), expected: fp.to_string() });
                    }
                }
                let Some(addr) = peers.iter().find(|(id, _)| *id == w.from).map(|(_, a)| *a) else { return Ok(Discovered::Found) };
                // Whichever member leads must be reachable before the log arrives.
                for (id, a) in &w.members {
                    self.transport.set_peer(*id, Some(*a));
                }
                if got.iter().any(|w| w.member) {
                    tracing::warn!(peer = %addr, "the cluster lists this member but its disk is empty: joining again as a new incarnation (never founding anew)");
                    return Ok(Discovered::Rejoin(w.from, addr));
                }
                tracing::info!(peer = %addr, members = w.members.len(), "the peers run a cluster this member is not in: joining it");
                return Ok(Discovered::Join(w.from, addr));
            }
            let listed = got.iter().filter(|w| w.member).map(|w| w.term).max();
            match listed {
                // Listed by a peer that has seen an election: this member may have voted
                // before it lost its disk. Wait for a leader to join through.
                Some(term) if term > 1 => {
                    if asked.elapsed() >= Duration::from_secs(2) {
                        tracing::warn!(term, waited_s = started.elapsed().as_secs(), "the peers list this member, its disk is empty and none of them leads: waiting for a leader to join again through");
                        self.welcomes.lock().unwrap_or_else(|p| p.into_inner()).clear();
                        hello();
                        asked = Instant::now();
                    }
                }
                Some(_) => {
                    tracing::info!("a peer lists this member and nothing was elected yet: starting as a founding member");
                    return Ok(Discovered::Found);
                }
                None => {
                    let answered: HashSet<u64> = got.iter().map(|w| w.from).collect();
                    if answered.len() == peers.len() || started.elapsed() >= DISCOVER_FOR {
                        tracing::info!(answered = answered.len(), peers = peers.len(), "no established cluster among the peers: founding one");
                        return Ok(Discovered::Found);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every member (id and address) the welcomes received so far name.
    pub fn members_seen(&self) -> Vec<(u64, SocketAddr)> {
        let got = self.welcomes.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<(u64, SocketAddr)> = got.iter().flat_map(|w| w.members.iter().copied()).collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Asks `peer` to add this member, incarnation `incarnation` of `name`, every two
    /// seconds until the log names it a member (or two minutes pass).
    pub fn request(self: &Arc<Self>, name: String, incarnation: u64, peer: (u64, SocketAddr), node: NodeHandle) {
        let hs = self.clone();
        let _ = std::thread::Builder::new().name("cluster-join-request".into()).spawn(move || {
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(120) {
                if node.membership().is_ok_and(|(_, v, l)| v.contains(&hs.me) || l.contains(&hs.me)) {
                    tracing::info!("this member is now a cluster member");
                    return;
                }
                send(&hs.transport, peer.0, peer.1, &Control::Join { id: hs.me, name: name.clone(), addr: hs.listen.to_string(), incarnation, key: Some(hex::encode(hs.transport.member_public())), record_set: RECORD_SET });
                std::thread::sleep(Duration::from_secs(2));
            }
            tracing::error!("not admitted to the cluster after two minutes; check the cluster secret and the peers' logs");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::member_id;
    use crate::testutil::{free_addr, wait_until};

    /// The wire form is shared with members running other builds: keys and tags as
    /// documented above.
    #[test]
    fn control_messages_keep_their_wire_form() {
        let w = Control::Welcome { established: true, member: false, members: vec![(7, "127.0.0.1:4520".into())], fingerprint: Some("ab".into()), term: 3, record_set: 1 };
        let v: serde_json::Value = serde_json::to_value(&w).unwrap();
        assert_eq!(v, serde_json::json!({"t": "welcome", "established": true, "member": false, "members": [[7, "127.0.0.1:4520"]], "cluster_pub_sha256": "ab", "term": 3, "record_set": 1}));
        // A welcome without the fingerprint key (an older member) still parses.
        let old: Control = serde_json::from_str(r#"{"t":"welcome","established":false,"member":false,"members":[]}"#).unwrap();
        assert!(matches!(old, Control::Welcome { fingerprint: None, term: 0, record_set: 1, .. }));
        let a = serde_json::to_value(Control::App { body: serde_json::json!({"events": 1}) }).unwrap();
        assert_eq!(a, serde_json::json!({"t": "app", "body": {"events": 1}}));
        let h = serde_json::to_value(Control::Hello { id: 1, addr: "127.0.0.1:1".into() }).unwrap();
        assert_eq!(h, serde_json::json!({"t": "hello", "id": 1, "addr": "127.0.0.1:1"}));
        let j = serde_json::to_value(Control::Join { id: 2, name: "n".into(), addr: "127.0.0.2:1".into(), incarnation: 4, key: None, record_set: 1 }).unwrap();
        assert_eq!(j, serde_json::json!({"t": "join", "id": 2, "name": "n", "addr": "127.0.0.2:1", "incarnation": 4, "record_set": 1}));
        let old: Control = serde_json::from_str(r#"{"t":"join","id":2,"name":"n","addr":"127.0.0.2:1"}"#).unwrap();
        assert!(matches!(old, Control::Join { incarnation: 0, record_set: 1, .. }));
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
    fn control_messages_that_lie_or_do_not_parse_are_counted_and_change_nothing() {
        let a = member("127.0.0.1", &[], None);
        let x = member("127.0.0.5", &[&a], None);
        let key = hex::encode(x.transport.member_public());
        let send = |body: &[u8]| x.transport.send_control(a.id, a.listen, body);
        send(b"{not json");
        send(br#"{"t":"nope"}"#);
        send(format!(r#"{{"t":"hello","id":{},"addr":"{}"}}"#, a.id, x.listen).as_bytes());
        send(format!(r#"{{"t":"join","id":{},"name":"127.0.0.9","addr":"{}","incarnation":0,"key":"{key}"}}"#, x.id, x.listen).as_bytes());
        send(format!(r#"{{"t":"join","id":{},"name":"127.0.0.5","addr":"{}","incarnation":0,"key":"{}"}}"#, x.id, x.listen, "00".repeat(32)).as_bytes());
        wait_until("every lie counted", 20, || {
            (a.transport.refused("bad_control"), a.transport.refused("control_id_mismatch"), a.transport.refused("join_key_mismatch")) == (2, 2, 1)
        });
        // Nothing answered them: no welcome reached the sender.
        assert!(x.hs.members_seen().is_empty());
        a.transport.shutdown();
        x.transport.shutdown();
    }

    #[test]
    fn a_newcomer_finds_the_cluster_joins_as_a_learner_and_is_promoted() {
        let dir = tempfile::tempdir().unwrap();
        // Before any node runs, nobody is established: a newcomer would found.
        let mut a = member("127.0.0.1", &[], Some("AB12"));
        let early = member("127.0.0.4", &[&a], None);
        assert_eq!(early.hs.discover(&plan_of(&early, &[&a]), None).unwrap(), Discovered::Found);
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
            pending_below: None,
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
        assert_eq!(via, Discovered::Join(a.id, a.listen));
        let n2 = start_node(dir.path(), &mut b, vec![], true);
        b.hs.request(b.name.clone(), 0, (a.id, a.listen), n2.handle());
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

    /// A cluster whose members all recorded a newer record set than this build reads (a
    /// member's `member_release`, as a build of record set 2 writes it): a newcomer of this
    /// build does not join, saying why, and a join from one is refused all the same.
    #[test]
    fn a_build_older_than_the_clusters_record_set_does_not_join() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = member("127.0.0.1", &[], None);
        let founders = vec![a.id];
        let n1 = start_node(dir.path(), &mut a, founders, false);
        wait_until("the founder to lead", 20, || n1.leader() == Some(a.id));
        assert_eq!(n1.handle().cluster_record_set(), 1, "a member that recorded none counts as 1");
        let newer = RECORD_SET + 1;
        let rec = halite_storage::Record::MemberRelease(halite_storage::format::MemberRelease { id: a.id, record_set: newer, release: "halite 99".into(), time_ns: 1 });
        n1.propose(&[rec]).unwrap();
        wait_until("the cluster's record set to follow its members'", 20, || n1.handle().cluster_record_set() == newer);
        // This build's newcomer refuses to join, naming both record sets.
        let old = member("127.0.0.2", &[&a], None);
        match old.hs.discover(&plan_of(&old, &[&a]), None) {
            Err(e @ JoinError::NewerRecordSet { cluster, ours }) => {
                assert_eq!((cluster, ours), (newer, RECORD_SET));
                assert!(e.to_string().contains("Upgrading a cluster"), "{e}");
            }
            other => panic!("an older build went on to join: {other:?}"),
        }
        // A join sent anyway (or by a build that does not check) is refused.
        let key = hex::encode(old.transport.member_public());
        let join = format!(r#"{{"t":"join","id":{},"name":"{}","addr":"{}","incarnation":0,"key":"{key}","record_set":{}}}"#, old.id, old.name, old.listen, RECORD_SET);
        old.transport.send_control(a.id, a.listen, join.as_bytes());
        wait_until("the join refused", 20, || a.transport.refused("join_record_set") == 1);
        assert!(!n1.membership().unwrap().2.contains(&old.id), "nothing was joined");
        n1.stop();
        for m in [a, old] {
            m.transport.shutdown();
        }
    }
}
