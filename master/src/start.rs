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
pub use halite_replication::cluster::{member_id, ClusterPlan};

/// Raft id → name of this master and its `cluster_peers` (no address resolution).
fn founder_names(cfg: &MasterConfig) -> BTreeMap<u64, String> {
    halite_replication::cluster::founder_names(&cfg.interface, &cfg.cluster_peers)
}

/// The cluster plan of a config (`None` without `cluster_id`): this master is
/// `interface` (which Salt requires to equal `id` and the entries other masters list in
/// `cluster_peers`), its founding peers are `cluster_peers`, every member listens on
/// `cluster_pool_port`, and traffic is sealed with a key from `cluster_secret`.
pub fn cluster_plan(cfg: &MasterConfig) -> Result<Option<ClusterPlan>, NodeError> {
    if cfg.cluster_id.is_none() {
        return Ok(None);
    }
    let refuse = |why: &str| NodeError::Refused(why.to_string());
    let secret = cfg.cluster_secret.as_deref().filter(|s| !s.is_empty()).ok_or_else(|| {
        refuse("cluster_id is set but cluster_secret is not: Halite seals all traffic between masters with a key derived from cluster_secret, so every member needs the same one")
    })?;
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
    start_node_tapped(cfg, views, None)
}

/// [`start_node`], showing every applied record to `tap` (the daemon publishes the jobs
/// it applies, whichever master they were proposed on).
pub fn start_node_tapped(cfg: &MasterConfig, views: Views, tap: Option<Tap>) -> Result<Node, halite_replication::NodeError> {
    let Some(plan) = cluster_plan(cfg)? else {
        return Node::start(&data_dir(cfg), views, NodeConfig { tap, compaction: cfg.compaction, ..Default::default() });
    };
    let (inbox, mailbox) = halite_replication::node::mailbox();
    let peers = plan.addrs.iter().filter(|(id, _)| **id != plan.me).map(|(id, a)| (*id, *a)).collect();
    // Refusals on the cluster port are counted and logged like every other port's.
    halite_replication::transport::refusal::set_hook(|source, reason, detail| crate::metrics::refuse(crate::metrics::Port::Cluster, source, reason, detail));
    let transport: Arc<TcpTransport> = TcpTransport::start(plan.me, plan.listen, peers, plan.key.clone(), Arc::new(move |m| inbox.deliver(m)))
        .map_err(|e| NodeError::Refused(format!("binding the cluster port {}: {e}", plan.listen)))?;
    tracing::info!(me = %cfg.interface, id = plan.me, listen = %plan.listen, members = ?plan.names.values().collect::<Vec<_>>(), "cluster member");
    // The join handshake (`halite_replication::join`): a member answers hellos and joins,
    // announcing the SHA-256 of its `cluster.pub`; a new data dir first asks its peers
    // whether they already run a cluster it is not part of.
    let slot: Arc<std::sync::OnceLock<NodeHandle>> = Arc::new(std::sync::OnceLock::new());
    let cluster_pub = cfg.keys_dir().join("cluster.pub");
    let announce: join::Fingerprint = Arc::new(move || std::fs::read(&cluster_pub).ok().map(|b| crate::wire::crypto::sha256_hex(&b)));
    let handshake = join::serve(&transport, plan.me, plan.listen, announce, slot.clone());
    let fingerprint = cfg.raw.get("cluster_pub_fingerprint").and_then(|v| v.as_str());
    let join_via = if log_is_new(&data_dir(cfg).log()) {
        handshake.discover(&plan, fingerprint).map_err(|e| match e {
            join::JoinError::FingerprintMismatch { announced, expected } => NodeError::Refused(format!(
                "refusing to join: the cluster's cluster.pub has SHA-256 {}, not the configured cluster_pub_fingerprint {expected}",
                announced.as_deref().unwrap_or("(not announced)")
            )),
        })?
    } else {
        None
    };
    let ncfg = NodeConfig {
        id: plan.me,
        voters: plan.names.keys().copied().collect(),
        addrs: plan.addrs.clone(),
        tap,
        join: join_via.is_some(),
        compaction: cfg.compaction,
        ..Default::default()
    };
    let node = Node::start_peered(&data_dir(cfg), views, ncfg, transport.clone(), mailbox)?;
    let _ = slot.set(node.handle());
    if let Some(peer) = join_via {
        handshake.request(cfg.interface.clone(), peer, node.handle());
    }
    Ok(node)
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
    start_node_adopting_tapped(cfg, None)
}

/// [`start_node_adopting`] with a tap (see [`start_node_tapped`]).
pub fn start_node_adopting_tapped(cfg: &MasterConfig, tap: Option<Tap>) -> Result<Node, NodeError> {
    let (keys, denied) = key_view(cfg)?.entries()?;
    let node = start_node_tapped(cfg, views(cfg, key_view(cfg)?), tap)?;
    let source = format!("{}:{}", cfg.key_driver_name(), cfg.keys_dir().display());
    let groups = adoption(node.state(), keys, denied, &source, now_ns())?;
    if !groups.is_empty() {
        tracing::info!(entries = groups.iter().map(Vec::len).sum::<usize>() - 2, "importing keys found in {source} that the log does not hold yet");
    }
    node.propose_all(&groups, 1, &mut |_, _| {})?;
    Ok(node)
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

