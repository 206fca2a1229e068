//! The `salt-master` daemon: the only part of the master with sockets, tasks and
//! proposals. Everything it serves is decided elsewhere, by functions of a request and a
//! read-only view (`crate::req`, `crate::admin`); the daemon carries their outcomes out.
//!
//! | room | owns |
//! |---|---|
//! | `mod.rs` | start-up ([`run`]) and the serving loop |
//! | [`live`] | the running master's shared state, the live views |
//! | `request_port/` | the request port: [`intake`] (reading within bounds: bounded queues by class, requests started by their class's share within their limits, `request_port::shares`; [`budget`] of bytes in flight), `request_port::signins` (a sign-in sent again answered without RSA), [`requests`] (open, claim, commit, effects, reply), [`sessions`] (session keys), [`replay`] (nonces of applied requests) |
//! | `ports/` | [`listen`] (TCP listeners with Salt's keepalive and backlog), [`sockets`] (the request and publish sockets, their bounds, their refusals counted), [`files`] (descriptors kept for the master's own files) |
//! | `publishing/` | [`publish`] (the tap of applied records, the publish port), [`publish_key`] (the publish AES key kept and rotated) |
//! | `admin_socket/` | [`admin`] (plans carried out), [`lines`] (the line protocol), [`follow`] (`job.follow`: a job's returns streamed to `salt`), [`batches`] (master-driven batch runs), [`range_client`] (the range server) |
//! | `members/` | [`cluster`] (the cluster key pair and AES key every member shares), [`peer_events`] (events fanned out to the other members) |
//! | `readiness/` | [`health`] (the HTTP endpoint: `/alive`, `/ready`, `/metrics`), [`node_metrics`], [`probes`] (Salt's probe files) |
//! | `eventing/` | [`bus`] (the event bus), [`reactor`] |
//! | `upkeep/` | [`maintenance`] (job cache expiry, publish key rotation), [`trim`] (the heap's free pages given back after bursts) |
//!
//! Each room's modules are also named here (`daemon::intake`, `daemon::sessions`, ...),
//! which is how the rooms refer to each other.

pub mod admin_socket;
pub mod eventing;
pub mod ext_cmd;
pub mod live;
pub mod members;
pub mod ports;
pub mod publishing;
pub mod readiness;
pub mod request_port;
pub mod upkeep;

pub use admin_socket::{admin, batches, follow, lines, range_client};
pub use eventing::{bus, reactor};
pub use members::{cluster, peer_events};
pub use ports::{files, listen, sockets};
pub use publishing::{publish, publish_key};
pub use readiness::{health, node_metrics, probes};
pub use request_port::{budget, intake, replay, requests, sessions};
pub use upkeep::{maintenance, trim};

use std::sync::Arc;

use tokio::sync::mpsc;

use halite_storage::keys::localfs::LocalfsKeys;

use crate::config::MasterConfig;
use crate::error::{Error, IoContext, Result};
use crate::keyfiles::signing;
use crate::masterkeys::{self, PublishKey};
use crate::{start, store};
use live::Master;

/// Threads that run request handlers and admin commands (tokio's blocking pool): two per
/// core, at least four. Their work is the CPU's (RSA at sign-in, pillar rendering) or the
/// page cache's (file chunks); returns and minion events never come here
/// (light requests: `req::opened`). Each thread that allocates keeps partly used pages of the
/// heap of its own: at 8,000 simulated minions on two cores, 16 threads measured
/// 100.6 MiB RSS and a 4.0 s sign-in, 6 threads 97.4 MiB and 3.35 s, 4 threads 94.3 MiB
/// and 3.26 s (docs/benchmarks.md).
fn max_blocking_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).saturating_mul(2).max(4)
}

/// Longest wait at start for the node to catch up with the cluster before the ports
/// open (until it is ready, minions get Salt's retry answers: `req::not_ready`).
pub const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

fn mkdir_private(p: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(p).ctx(|| format!("creating {}", p.display()))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700)).ctx(|| format!("chmod {}", p.display()))
}

/// Starts the master and serves until SIGINT or SIGTERM.
pub fn run(cfg: MasterConfig) -> Result<()> {
    let started = std::time::Instant::now();
    trim::fix_mmap_threshold();
    // Before anything opens a file: Salt's `max_open_files`, and the descriptors kept
    // for the master's own files (`files.rs`).
    let max_open_files = cfg.raw.get("max_open_files").and_then(serde_yaml::Value::as_u64).unwrap_or(files::DEFAULT_MAX_OPEN_FILES);
    files::raise_limit(max_open_files);
    // Before anything is opened: the data directory is this master's, or it waits for an
    // offline tool that holds it (`store::hold_data_dir`).
    let _held = store::hold_data_dir(&cfg)?;
    if cfg.halite_min_free_bytes == 0 {
        tracing::warn!("halite_min_free_bytes is 0: no space is kept free on {}: writes meet a full disk, and the master refuses writes until space is freed (docs/operations.md \"A full disk\")", cfg.halite_data_dir.display());
    }
    std::fs::create_dir_all(&cfg.cachedir).ctx(|| format!("creating {}", cfg.cachedir.display()))?;
    // A probe file left by the last run must not pass a probe.
    let probes = probes::Probes::reset(&cfg);
    mkdir_private(&cfg.sock_dir)?;
    // The log holds the master's key pair and publish key: only its user may read it.
    mkdir_private(&cfg.halite_data_dir)?;
    if matches!(cfg.key_driver, halite_storage::keys::KeyDriver::Localfs) {
        LocalfsKeys::open(cfg.keys_dir()).and_then(|v| v.ensure_layout())?;
    } else {
        mkdir_private(cfg.keys_dir())?;
    }
    let clustered = cfg.cluster_id.is_some();
    // A lone master's key pair a pki dir already holds, read before the node owns the view.
    let found = if clustered { None } else { masterkeys::existing(&cfg, &*store::key_view(&cfg)?) };
    // The signing key pair (`master_sign_pubkey`), likewise read (or made) before the node owns the view.
    let signer = match cfg.master_sign_pubkey {
        true => signing::load(&signing::SignOptions::of(&cfg), &mut signing::Store::of(&cfg)?)?,
        false => None,
    };
    let (applied_tx, applied_rx) = mpsc::unbounded_channel();
    let (node, peer_link) = start::start_node_adopting_tapped(&cfg, Some(publish::tap(applied_tx)))?;
    let node = Arc::new(node);
    // The node above started with its peers exactly when `cluster_id` is set.
    let (keys, aes, generation) = if clustered {
        let s = cluster::secrets(&cfg, &node)?;
        (s.keys, s.aes, s.generation)
    } else {
        let keys = master_keys(&cfg, &node, found)?;
        let (aes, generation) = publish_key::at_start(&cfg, &node)?;
        (keys, aes, generation)
    };
    let mut keys = keys;
    if let Some(signer) = &signer {
        keys.pubkey_signature = Some(signer.sign(&keys.pub_clean)?);
    }
    let publish_key = PublishKey::new(aes, &keys)?;
    wait_ready(&node);
    let master = Arc::new(Master::new(cfg, node, keys, publish_key, generation));
    if let Some(link) = peer_link {
        peer_events::start(&master.bus, link);
    }
    // Request handlers run on the blocking pool (RSA, pillar rendering, file reads): a few
    // threads per core keep the CPU busy; more only add stacks and allocator arenas.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(max_blocking_threads())
        .enable_all()
        .build()
        .ctx(|| "starting the runtime".into())?;
    reactor::start(&master, rt.handle().clone());
    rt.block_on(serve(master, applied_rx, started, probes))
}

/// Waits up to [`READY_WAIT`] for the node to be caught up with the cluster, so a member
/// restarted behind does not open its ports only to answer retries (a lone master is
/// ready as soon as its log is applied).
fn wait_ready(node: &halite_replication::Node) {
    let end = std::time::Instant::now() + READY_WAIT;
    let mut said = false;
    while !node.status().ready() && std::time::Instant::now() < end {
        if !said {
            let s = node.status().get();
            tracing::info!(applied = s.applied, commit = s.commit, leader = ?s.leader, "catching up with the cluster before serving");
            said = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let s = node.status().get();
    if s.ready {
        tracing::info!(applied = s.applied, "caught up with the cluster");
    } else {
        tracing::warn!(applied = s.applied, commit = s.commit, leader = ?s.leader, "not caught up after {READY_WAIT:?}: serving; minions get Salt's retry answers until this member is ready");
    }
}

/// A lone master's key pair, from its log; recorded first if the log has none (the pair
/// `found` in the pki dir, or a new one). The key view's files follow from the record.
fn master_keys(cfg: &MasterConfig, node: &halite_replication::Node, found: Option<Vec<u8>>) -> Result<masterkeys::MasterKeys> {
    if node.state().master_key_pair()?.is_none() {
        node.propose(&[masterkeys::record(cfg, found, halite_storage::format::now_ns())?])?;
    }
    // Set once: whatever was applied first is the key, on this and every later start.
    match node.state().master_key_pair()? {
        Some(k) => {
            tracing::info!(key = %format!("{}.pem", k.name), "master key loaded");
            masterkeys::MasterKeys::from_pem(&k.private_pem)
        }
        None => Err(Error::refused("the master key pair was proposed but is not applied")),
    }
}

async fn serve(master: Arc<Master>, applied_rx: mpsc::UnboundedReceiver<publish::Applied>, started: std::time::Instant, probes: probes::Probes) -> Result<()> {
    let cfg = &master.cfg;
    let (router, ret_ep) = sockets::request(cfg).await?;
    let (publisher_sock, pub_ep) = sockets::publish(cfg).await?;
    // Before the admin socket: once that answers, everything else is served.
    if let Some(port) = cfg.halite_health_port {
        let addr = if cfg.interface.contains(':') { format!("[{}]:{port}", cfg.interface) } else { format!("{}:{port}", cfg.interface) };
        let l = tokio::net::TcpListener::bind(&addr).await.map_err(|e| sockets::bind_err(&addr, &e))?;
        tracing::info!(addr = %addr, "health endpoint: /alive, /ready, /metrics");
        tokio::spawn(health::serve(master.clone(), l));
    }
    let sock_path = crate::admin::client::socket_path(&cfg.sock_dir);
    let _ = std::fs::remove_file(&sock_path);
    let admin_listener = tokio::net::UnixListener::bind(&sock_path).ctx(|| format!("binding {}", sock_path.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        // publisher_acl: other users reach the socket (the directory traversable, not
        // listable, as Salt opens its cachedir to them); SO_PEERCRED decides what they
        // may ask (`admin::restrict`).
        let open = admin::acl_enabled(&master);
        let _ = std::fs::set_permissions(&sock_path, std::fs::Permissions::from_mode(if open { 0o666 } else { 0o600 }));
        if open {
            let _ = std::fs::set_permissions(&cfg.sock_dir, std::fs::Permissions::from_mode(0o711));
        }
    }
    write_pidfile(&cfg.pidfile);
    probes.startup();
    let m = master.clone();
    tokio::spawn(probes::run(probes, move || m.node.status().ready()));
    tracing::info!(ret = %ret_ep, publish = %pub_ep, admin = %sock_path.display(), ms = started.elapsed().as_millis() as u64, "salt-master serving");

    let (pub_tx, pub_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(publish::send(publisher_sock, pub_rx));
    tokio::spawn(publish::applied(master.clone(), applied_rx, pub_tx, master.node.last_index_at_start()));
    let m = master.clone();
    tokio::spawn(async move {
        loop {
            match admin_listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(admin::connection(m.clone(), stream));
                }
                Err(e) => {
                    // Out of descriptors, accept fails at once until some are freed:
                    // pause rather than spin (and flood the log).
                    tracing::error!("admin socket: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    });
    tokio::spawn(maintenance::run(master.clone()));
    let schedule = crate::schedule::Schedule::from_option(master.cfg.raw.get("schedule"));
    for w in &schedule.warnings {
        tracing::warn!("{w}");
    }
    tokio::spawn(upkeep::schedule::run(master.clone(), schedule));
    tokio::spawn(upkeep::gitfs::run(master.clone()));
    tokio::spawn(upkeep::git_pillar::run(master.clone()));
    tokio::spawn(batches::run(master.clone()));
    tokio::spawn(trim::run());
    let (send, recv) = router.split();
    // Requests in flight, bounded by count and by bytes (`budget.rs`); `intake.rs` keeps
    // reading (and seeing closed connections) while they are at their bounds.
    let limits = intake::Limits {
        in_flight: Arc::new(tokio::sync::Semaphore::new(requests::MAX_IN_FLIGHT)),
        budget: budget::Budget::new(master.cfg.halite_max_inflight_bytes),
        fifo: master.cfg.halite_request_fifo,
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ctx(|| "installing the SIGTERM handler".into())?;
    let m = master.clone();
    let router_peers = send.clone();
    let present = move |msg: &zeromq::ZmqMessage| msg.get(0).is_some_and(|id| router_peers.has_peer(id));
    let signins = Arc::new(request_port::signins::SignIns::default());
    tokio::spawn(sweep_signins(signins.clone()));
    let start = move |msg, opened, permit: intake::Permit, charge| {
        let (m, s, si) = (m.clone(), send.clone(), signins.clone());
        async move {
            requests::request(m, si, s, msg, opened, permit.class(), permit.arrived()).await;
            drop(charge);
            drop(permit);
        }
    };
    let stop = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    let m = master.clone();
    let classify = move |msg: &zeromq::ZmqMessage| requests::class_of(&m, msg);
    intake::run(recv, limits, classify, start, stop, present).await;
    tracing::info!("salt-master stopping");
    let _ = std::fs::remove_file(&sock_path);
    let _ = std::fs::remove_file(&master.cfg.pidfile);
    Ok(())
}

/// Drops the sign-in answers that are due every second (`request_port::signins`).
async fn sweep_signins(signins: Arc<request_port::signins::SignIns>) {
    let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        signins.sweep(std::time::Instant::now());
    }
}

fn write_pidfile(p: &std::path::Path) {
    if let Some(d) = p.parent() {
        let _ = std::fs::create_dir_all(d);
    }
    if let Err(e) = std::fs::write(p, format!("{}\n", std::process::id())) {
        tracing::warn!(pidfile = %p.display(), "cannot write the pidfile: {e}");
    }
}
