//! Starting the node a master config describes, for the daemon and for the offline tools:
//! alone, or with `cluster_id` as a cluster member (the Salt options are checked here;
//! the plan and the join handshake are `halite_replication::{cluster, join}`, which know
//! no Salt); and adopting into the log the keys a Salt-made key view holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use halite_replication::join;
use halite_replication::{Node, NodeConfig, NodeError, NodeHandle, Tap, TcpTransport};
use halite_storage::format::{now_ns, ImportMarker, ImportPhase, KeyExpect, KeySet, KeyState, Record};
use halite_storage::keys::BankState;
use halite_storage::state::StateMachine;
use halite_storage::views::Views;

use crate::config::MasterConfig;
use crate::store::{data_dir, key_view, views};

/// The cluster plan and member ids live in [`halite_replication::cluster`] (they know no
/// Salt).
pub use halite_replication::cluster::{incarnation_id, member_id, ClusterPlan};

/// Raft id → name of this master and its `cluster_peers` (no address resolution).
fn founder_names(cfg: &MasterConfig) -> BTreeMap<u64, String> {
    halite_replication::cluster::founder_names(&cfg.interface, &cfg.cluster_peers)
}

/// The cluster plan of a config (`None` without `cluster_id`): this master is
/// `interface` (which Salt requires to equal `id` and the entries other masters list in
/// `cluster_peers`), its founding peers are `cluster_peers`, every member listens on
/// `cluster_pool_port`, and traffic is sealed with a key from `cluster_secret` (without
/// one, from the secret the members keep in their shared `cluster_pki_dir`:
/// [`crate::memberkey::kept_secret`]).
pub fn cluster_plan(cfg: &MasterConfig) -> Result<Option<ClusterPlan>, NodeError> {
    if cfg.cluster_id.is_none() {
        return Ok(None);
    }
    let refuse = |why: &str| NodeError::Refused(why.to_string());
    let kept;
    let secret = match cfg.cluster_secret.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => s,
        None => {
            kept = crate::memberkey::kept_secret(cfg)?;
            kept.as_str()
        }
    };
    if cfg.interface == "0.0.0.0" || cfg.interface == "::" {
        return Err(refuse("cluster_id is set: set interface to this master's address as the other masters list it in cluster_peers (Salt uses it as the member's identity)"));
    }
    if cfg.cluster_peers.is_empty() {
        return Err(refuse("cluster_id is set but cluster_peers is empty: list the other masters"));
    }
    halite_replication::cluster::plan(&cfg.interface, &cfg.cluster_peers, cfg.cluster_pool_port, secret).map(Some).map_err(|e| NodeError::Refused(e.to_string()))
}

/// Starts the node over this master's data directory with the given views: alone, or,
/// with `cluster_id`, with the founding members of `cluster_peers` over the sealed
/// transport on `interface:cluster_pool_port`.
pub fn start_node(cfg: &MasterConfig, views: Views) -> Result<Node, halite_replication::NodeError> {
    Ok(start_node_tapped(cfg, views, None)?.0)
}

/// How a cluster member speaks to the others outside the log: the join handshake's
/// application messages (the daemon's event fan-out, `daemon::peer_events`), and this
/// member's name (its `interface`, Salt's peer id).
#[derive(Clone)]
pub struct PeerLink {
    pub handshake: Arc<join::Handshake>,
    pub name: String,
}

/// [`start_node`], showing every applied record to `tap` (the daemon publishes the jobs
/// it applies, whichever master they were proposed on); a cluster member's
/// [`PeerLink`] beside it.
pub fn start_node_tapped(cfg: &MasterConfig, views: Views, tap: Option<Tap>) -> Result<(Node, Option<PeerLink>), halite_replication::NodeError> {
    let Some(plan) = cluster_plan(cfg)? else {
        let node = Node::start(&data_dir(cfg), views, NodeConfig { tap, compaction: cfg.compaction, min_free_bytes: cfg.halite_min_free_bytes, ..Default::default() })?;
        return Ok((node, None));
    };
    // This member's raft id: that of its name, or of a later incarnation once it joined
    // again from an empty disk (`halite_replication::join`).
    let incarnation = read_incarnation(cfg)?;
    let me = incarnation_id(&cfg.interface, incarnation);
    // Refusals on the cluster port are counted and logged like every other port's.
    halite_replication::transport::refusal::set_hook(crate::metrics::refuse_cluster);
    let routes = dial_routes(cfg)?;
    // This member's identity on the cluster port (`memberkey`).
    let creds = crate::memberkey::credentials(cfg, &plan)?;
    // A member on a new data dir first asks its peers under a provisional id, the id of
    // the incarnation it would take if it has to join again: a wiped member's key is new,
    // and its peers hold its old id bound to its old key, so they would refuse a hello
    // under the old id. A founder or a first-time joiner then takes its own id.
    let fresh = log_is_new(&data_dir(cfg).log());
    if !fresh {
        // A member with a log: who may speak as a member is what that log says, which the
        // node hands to the transport as it starts; until then no raft frame is taken
        // (only the join path's control messages), so nothing a peer sends before it is
        // judged by anything but the log.
        creds.peers.set_applied(Default::default(), Default::default(), true);
    }
    let probe = fresh.then(|| now_ns().max(incarnation + 1));
    let first = probe.map_or(me, |n| incarnation_id(&cfg.interface, n));
    let (mut transport, mut mailbox) = cluster_transport(&plan, &creds, first, &routes)?;
    tracing::info!(me = %cfg.interface, id = me, incarnation, listen = %plan.listen, members = ?plan.names.values().collect::<Vec<_>>(), "cluster member");
    // The join handshake (`halite_replication::join`): a member answers hellos and joins,
    // announcing the SHA-256 of its `cluster.pub`; a new data dir first asks its peers
    // whether they already run a cluster it is not part of (or one it was part of before
    // its disk was emptied).
    let cluster_pub = cfg.keys_dir().join("cluster.pub");
    let announce: join::Fingerprint = Arc::new(move || std::fs::read(&cluster_pub).ok().map(|b| crate::wire::crypto::sha256_hex(&b)));
    let mut slot: Arc<std::sync::OnceLock<NodeHandle>> = Arc::new(std::sync::OnceLock::new());
    let mut handshake = join::serve(&transport, first, plan.listen, announce.clone(), slot.clone());
    let fingerprint = cfg.raw.get("cluster_pub_fingerprint").and_then(|v| v.as_str());
    let discover = || {
        handshake.discover(&plan, fingerprint).map_err(|e| match e {
            join::JoinError::FingerprintMismatch { announced, expected } => NodeError::Refused(format!(
                "refusing to join: the cluster's cluster.pub has SHA-256 {}, not the configured cluster_pub_fingerprint {expected}",
                announced.as_deref().unwrap_or("(not announced)")
            )),
            e @ join::JoinError::NewerRecordSet { .. } => NodeError::Refused(e.to_string()),
        })
    };
    let found = match (fresh, cfg.halite_cluster_pin_founders) {
        (false, _) => join::Discovered::Found,
        (true, true) => found_with_every_key(cfg, &plan, &creds, discover)?,
        (true, false) => discover()?,
    };
    if fresh && matches!(found, join::Discovered::Found) {
        // Founding: from now on this member is one of the founders, so its transport
        // admits only founders as members (each under its pinned key, or the key of its
        // first handshake: `memberkey`), before the node has applied anything.
        creds.peers.set_applied(Default::default(), plan.names.keys().copied().collect(), true);
    }
    let (mut me, mut incarnation) = (me, incarnation);
    let join_via = match found {
        join::Discovered::Found => None,
        join::Discovered::Join(id, addr) => Some((id, addr)),
        join::Discovered::Rejoin(id, addr) => {
            // A new incarnation, under a new raft id (the provisional one), persisted
            // before any raft message is sent under it.
            incarnation = probe.unwrap_or_else(|| now_ns().max(incarnation + 1));
            write_incarnation(cfg, incarnation)?;
            me = incarnation_id(&cfg.interface, incarnation);
            tracing::warn!(id = me, incarnation, "joining again as a new incarnation");
            Some((id, addr))
        }
    };
    if me != first {
        // The transport is started again under the member's id.
        let seen = handshake.members_seen();
        transport.shutdown();
        (transport, mailbox) = cluster_transport(&plan, &creds, me, &routes)?;
        for (id, a) in seen {
            halite_replication::Outbox::set_peer(&*transport, id, Some(a));
        }
        slot = Arc::new(std::sync::OnceLock::new());
        handshake = join::serve(&transport, me, plan.listen, announce, slot.clone());
    }
    let ncfg = NodeConfig {
        id: me,
        voters: plan.names.keys().copied().collect(),
        addrs: plan.addrs.clone(),
        tap,
        join: join_via.is_some(),
        compaction: cfg.compaction,
        election_tick: election_ticks(cfg.cluster_election_ms.0),
        max_election_tick: election_ticks(cfg.cluster_election_ms.1),
        // Recorded in the log's key book by the node if the book lacks it (`memberkey`).
        member_key: Some(creds.member.public()),
        min_free_bytes: cfg.halite_min_free_bytes,
        ..Default::default()
    };
    let node = Node::start_peered(&data_dir(cfg), views, ncfg, transport.clone(), mailbox)?;
    // Bind every known peer's member key now (`TcpTransport::introduce`).
    transport.introduce();
    let _ = slot.set(node.handle());
    if let Some(peer) = join_via {
        handshake.request(cfg.interface.clone(), incarnation, peer, node.handle());
    }
    // Events fired on this member reach the others through the handshake's messages.
    Ok((node, Some(PeerLink { handshake, name: cfg.node_id() })))
}

/// What `discover` finds, once it may be acted on, with `halite_cluster_pin_founders`: a
/// member about to found a cluster (nobody runs one yet) does so only with every
/// founder's key pinned ([`crate::memberkey::pin_founders`]: the founding configuration
/// carries the keys, so no founder is ever bound by whoever completes a handshake
/// first). Until the files are there it waits, saying which, reading them again and
/// asking its peers again every few seconds (a cluster founded meanwhile by members that
/// had every key is joined).
fn found_with_every_key(cfg: &MasterConfig, plan: &ClusterPlan, creds: &halite_replication::Credentials, discover: impl Fn() -> Result<join::Discovered, NodeError>) -> Result<join::Discovered, NodeError> {
    let mut said: Option<(Vec<String>, std::time::Instant)> = None;
    loop {
        let found = discover()?;
        if !matches!(found, join::Discovered::Found) {
            return Ok(found);
        }
        let missing = crate::memberkey::pin_founders(cfg, plan, &creds.peers);
        if missing.is_empty() {
            return Ok(found);
        }
        if said.as_ref().is_none_or(|(m, at)| *m != missing || at.elapsed() >= std::time::Duration::from_secs(60)) {
            let dir = cfg.keys_dir().join("peers");
            tracing::warn!(
                missing = ?missing,
                dir = %dir.display(),
                "not founding the cluster yet: halite_cluster_pin_founders is set, so the public key of every founding member must be in the peers directory first (a shared cluster_pki_dir gets each founder's as it starts; otherwise copy each founder's `halite-ctl member-key` output there with `halite-ctl peer-key NAME FILE`, or unset halite_cluster_pin_founders to let cluster_secret authenticate the founders)"
            );
            said = Some((missing, std::time::Instant::now()));
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// `halite_cluster_dial` resolved: a member's address on the pool port → where this
/// member connects to reach it.
fn dial_routes(cfg: &MasterConfig) -> Result<std::collections::HashMap<std::net::SocketAddr, std::net::SocketAddr>, NodeError> {
    use std::net::ToSocketAddrs;
    let first = |what: &str, s: (&str, u16)| -> Result<std::net::SocketAddr, NodeError> {
        s.to_socket_addrs()
            .map_err(|e| NodeError::Refused(format!("halite_cluster_dial: {what} {}: {e}", s.0)))?
            .next()
            .ok_or_else(|| NodeError::Refused(format!("halite_cluster_dial: {what} {} has no address", s.0)))
    };
    let mut routes = std::collections::HashMap::new();
    for (name, target) in &cfg.halite_cluster_dial {
        let (host, port) = target
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.trim_start_matches('[').trim_end_matches(']'), p.parse::<u16>().ok()?)))
            .ok_or_else(|| NodeError::Refused(format!("halite_cluster_dial: {name}: {target:?} is not host:port")))?;
        routes.insert(first("member", (name, cfg.cluster_pool_port))?, first("target", (host, port))?);
    }
    if !routes.is_empty() {
        tracing::info!(?routes, "reaching cluster members through halite_cluster_dial");
    }
    Ok(routes)
}

/// The sealed transport of member `me` on the plan's listen address, connecting to
/// peers through `routes` (`halite_cluster_dial`), and the mailbox its messages go to.
fn cluster_transport(plan: &ClusterPlan, creds: &halite_replication::Credentials, me: u64, routes: &std::collections::HashMap<std::net::SocketAddr, std::net::SocketAddr>) -> Result<(Arc<TcpTransport>, halite_replication::node::Mailbox), NodeError> {
    let (inbox, mailbox) = halite_replication::node::mailbox();
    let peers = plan.addrs.iter().filter(|(_, a)| **a != plan.listen).map(|(id, a)| (*id, *a)).collect();
    let transport = TcpTransport::start(me, plan.listen, peers, creds.clone(), Arc::new(move |m| inbox.deliver(m)))
        .map_err(|e| NodeError::Refused(format!("binding the cluster port {}: {e}", plan.listen)))?;
    transport.dial_via(routes.clone());
    Ok((transport, mailbox))
}

/// Where a member that joined again from an empty disk keeps its member incarnation
/// number (not the node's process incarnation, which the log keeps)
/// (absent: the first incarnation, 0), beside its log.
fn incarnation_file(cfg: &MasterConfig) -> std::path::PathBuf {
    data_dir(cfg).root.join("member_incarnation")
}

/// This member's incarnation (see [`incarnation_file`]).
pub fn read_incarnation(cfg: &MasterConfig) -> Result<u64, NodeError> {
    let path = incarnation_file(cfg);
    match std::fs::read_to_string(&path) {
        Ok(s) => s.trim().parse().map_err(|_| NodeError::Refused(format!("{}: not an incarnation number: {:?}", path.display(), s.trim()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(NodeError::Refused(format!("reading {}: {e}", path.display()))),
    }
}

fn write_incarnation(cfg: &MasterConfig, incarnation: u64) -> Result<(), NodeError> {
    let path = incarnation_file(cfg);
    let io = |e: std::io::Error| NodeError::Refused(format!("writing {}: {e}", path.display()));
    std::fs::create_dir_all(&data_dir(cfg).root).map_err(io)?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{incarnation}\n")).map_err(io)?;
    std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(io)?;
    Ok(())
}

/// Whether a log directory holds no log yet (absent, or no raft-engine file in it).
fn log_is_new(dir: &std::path::Path) -> bool {
    match std::fs::read_dir(dir) {
        Ok(d) => !d.flatten().any(|e| e.file_name().to_string_lossy().ends_with(".raftlog")),
        Err(_) => true,
    }
}

/// Raft id → member name, for reports (`cluster.members`): the founding members of the
/// plan, members that joined later by the address the log names for them (Salt's
/// identity is the address), or this master alone as id 1.
pub fn member_names(cfg: &MasterConfig, node: Option<&NodeHandle>) -> BTreeMap<u64, String> {
    match cfg.cluster_id {
        Some(_) => {
            let mut names = founder_names(cfg);
            if let Ok(n) = read_incarnation(cfg) {
                names.insert(incarnation_id(&cfg.interface, n), cfg.interface.clone());
            }
            for (id, a) in node.map(|n| n.addresses()).unwrap_or_default() {
                names.entry(id).or_insert_with(|| a.ip().to_string());
            }
            names
        }
        None => [(NodeConfig::default().id, cfg.node_id())].into(),
    }
}

/// Starts the node over the configured view, first importing into the log any key the
/// view holds that the state machine does not: on the first use of Halite on a pki dir a
/// Salt master filled, that is every key; later, keys an operator placed by hand (Salt's
/// way of pre-seeding a minion key into `minions/`). The log is the truth from then on.
pub fn start_node_adopting(cfg: &MasterConfig) -> Result<Node, NodeError> {
    Ok(start_node_adopting_tapped(cfg, None)?.0)
}

/// [`start_node_adopting`] with a tap (see [`start_node_tapped`]).
pub fn start_node_adopting_tapped(cfg: &MasterConfig, tap: Option<Tap>) -> Result<(Node, Option<PeerLink>), NodeError> {
    // A shared tree other Halite members already maintain (it carries their marks) holds
    // what their logs hold: a member that is behind must not take it for keys to import.
    let maintained = cfg.shared_filesystem() && cfg.cluster_id.as_deref().is_some_and(|c| halite_storage::views::shared::SharedViews::new(cfg.keys_dir(), c, cfg.key_driver_name()).maintained());
    let (keys, denied) = if maintained { Default::default() } else { key_view(cfg)?.entries()? };
    let (node, link) = start_node_tapped(cfg, views(cfg, key_view(cfg)?), tap)?;
    // After a crash the state machine replays the tail of this member's own log while
    // the view already shows it: a key that tail names is the log's, never one to import
    // (imported, a key the cluster deleted since would come back).
    let tail = keys_in_tail(&node)?;
    let keys = keys.into_iter().filter(|e| !tail.contains(&e.id)).collect();
    let denied = denied.into_iter().filter(|(id, _)| !tail.contains(id)).collect();
    let source = format!("{}:{}", cfg.key_driver_name(), cfg.keys_dir().display());
    let groups = adoption(node.state(), keys, denied, &source, now_ns())?;
    if !groups.is_empty() {
        tracing::info!(entries = groups.iter().map(Vec::len).sum::<usize>() - 2, "importing keys found in {source} that the log does not hold yet");
    }
    node.propose_all(&groups, 1, &mut |_, _| {})?;
    Ok((node, link))
}

/// The ids of the key records in this member's log after what its state machine has
/// applied (read before the state machine is asked about any key, so a record applied
/// meanwhile is in one or the other).
fn keys_in_tail(node: &Node) -> halite_storage::Result<std::collections::HashSet<String>> {
    let mut ids = std::collections::HashSet::new();
    let applied = node.state().applied_index()?;
    node.log().for_each_record(applied + 1, None, |_, r| {
        if let Ok(Record::KeySet(k)) = r {
            ids.insert(k.id);
        }
        Ok(())
    })?;
    Ok(ids)
}

/// The proposals that import the view's keys the state machine does not hold, between
/// import markers (none when there is nothing to import).
pub fn adoption(sm: &StateMachine, keys: Vec<halite_storage::keys::KeyEntry>, denied: Vec<halite_storage::keys::DeniedEntry>, source: &str, time_ns: u64) -> halite_storage::Result<Vec<Vec<Record>>> {
    let mut recs = Vec::new();
    for e in keys {
        if sm.get_key(&e.id)?.is_some() {
            continue;
        }
        let state = match e.state {
            BankState::Accepted => KeyState::Accepted,
            BankState::Pending => KeyState::Pending,
            BankState::Rejected => KeyState::Rejected,
        };
        // Only if the log still holds nothing for the id when this applies: a member
        // that is behind never overrides what the cluster decided meanwhile.
        recs.push(Record::KeySet(KeySet::new(e.id, state, e.pub_key, time_ns).expecting(KeyExpect::Absent)));
    }
    for (id, p) in denied {
        if sm.get_denied(&id)?.is_none() {
            recs.push(Record::KeySet(KeySet::new(id, KeyState::Denied, p, time_ns)));
        }
    }
    if recs.is_empty() {
        return Ok(Vec::new());
    }
    let marker = |phase| Record::ImportMarker(ImportMarker { source: source.to_string(), phase, counts: Default::default(), time_ns });
    let mut groups = vec![vec![marker(ImportPhase::Begin)]];
    groups.extend(Record::fit_groups(recs, 4096, halite_storage::entry::MAX_ENTRY_LEN)?);
    groups.push(vec![marker(ImportPhase::End)]);
    Ok(groups)
}


/// Milliseconds of an election timeout as raft ticks of the node's default interval.
fn election_ticks(ms: u64) -> usize {
    let tick = NodeConfig::default().tick.as_millis().max(1) as u64;
    ms.div_ceil(tick) as usize
}
