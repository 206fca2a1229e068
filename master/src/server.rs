//! The `salt-master` daemon: binds the publish (4505) and request (4506) ports and the
//! admin socket, and wires them to the handlers, the node and the publisher.
//!
//! Each request is handled on the blocking pool (RSA and AES are CPU work); records it
//! produced are committed through the node (group commit with everything else in flight)
//! before its reply is sent, so an acknowledged key change or return is durable.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value as J};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

use halite_replication::Node;
use halite_storage::format::{now_ns, JobPublished, Record};
use halite_storage::keys::localfs::LocalfsKeys;

use crate::admin;
use crate::config::MasterConfig;
use crate::crypto::{Crypticle, SigAlgo};
use crate::events::EventBus;
use crate::handlers::{self, Core};
use crate::jobs::{self, Publisher};
use crate::keyops::{self, Cmd, Include};
use crate::masterkeys::{self, PublishKey};
use crate::payload;
use crate::sessions::Sessions;
use crate::store;

/// Requests handled at once; more wait in the socket's queue.
pub const MAX_IN_FLIGHT: usize = 1024;

/// How long, without `request_server_ttl`, a side-effecting request's nonce is kept,
/// and how many are kept at most (about 150 bytes each).
const REPLAY_WINDOW_SECS: u64 = 900;
const REPLAY_CAPACITY: usize = 65_536;

/// Threads that run request handlers and admin commands (tokio's blocking pool).
const MAX_BLOCKING_THREADS: usize = 16;

/// The running master's shared state.
pub struct Master {
    pub core: Arc<Core>,
    pub node: Arc<Node>,
    pub events: EventBus,
    publisher: Mutex<Publisher>,
    pub_tx: mpsc::UnboundedSender<Vec<u8>>,
    /// The cluster AES key generation in use (0 for a lone master).
    aes_generation: std::sync::atomic::AtomicU64,
}

fn endpoint(interface: &str, port: u16) -> String {
    if interface.contains(':') {
        format!("tcp://[{interface}]:{port}")
    } else {
        format!("tcp://{interface}:{port}")
    }
}

fn mkdir_private(p: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(p).map_err(|e| format!("creating {}: {e}", p.display()))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700)).map_err(|e| format!("chmod {}: {e}", p.display()))
}

/// Starts the master and serves until SIGINT or SIGTERM.
pub fn run(cfg: MasterConfig) -> Result<(), String> {
    let started = std::time::Instant::now();
    std::fs::create_dir_all(&cfg.cachedir).map_err(|e| format!("creating {}: {e}", cfg.cachedir.display()))?;
    mkdir_private(&cfg.sock_dir)?;
    if matches!(cfg.key_driver, halite_storage::keys::KeyDriver::Localfs) {
        LocalfsKeys::open(cfg.keys_dir()).and_then(|v| v.ensure_layout()).map_err(|e| e.to_string())?;
    } else {
        mkdir_private(cfg.keys_dir())?;
    }
    let keys = {
        let mut view = store::key_view(&cfg).map_err(|e| e.to_string())?;
        masterkeys::load_or_create(&cfg, &mut *view).map_err(|e| e.to_string())?
    };
    // Every job this master applies is published to the minions connected to it, whichever
    // master it was proposed on; a cluster's AES key rotations are installed as applied.
    let (job_tx, job_rx) = mpsc::unbounded_channel::<Applied>();
    let tap = halite_replication::Tap(Arc::new(move |_, rec: &Record| match rec {
        Record::JobPublished(j) => {
            let _ = job_tx.send(Applied::Job(j.clone()));
        }
        Record::AesKeyRotation(a) => {
            let _ = job_tx.send(Applied::Aes(a.clone()));
        }
        _ => {}
    }));
    let node = Arc::new(store::start_node_adopting_tapped(&cfg, Some(tap)).map_err(|e| e.to_string())?);
    // The node above started with its peers exactly when `cluster_id` is set.
    let cluster = cfg.cluster_id.is_some();
    let (keys, aes, generation) = if cluster {
        let s = crate::cluster::secrets(&cfg, &node)?;
        (s.keys, s.aes, s.generation)
    } else {
        (keys, Crypticle::generate(), 0)
    };
    let publish_key = PublishKey::new(aes.clone(), &keys).map_err(|e| e.to_string())?;
    let core = Arc::new(Core {
        sessions: Sessions::new(cfg.cachedir.join("sessions"), std::time::Duration::from_secs(cfg.publish_session.max(1))),
        sm: node.state().clone(),
        aes: std::sync::RwLock::new(Arc::new(publish_key)),
        signed_in: Default::default(),
        nonces: std::sync::Mutex::new(crate::replay::Nonces::new(
            std::time::Duration::from_secs(if cfg.request_server_ttl > 0 { cfg.request_server_ttl } else { REPLAY_WINDOW_SECS }),
            REPLAY_CAPACITY,
        )),
        keys,
        max_request: cfg.halite_max_request_bytes,
        cluster,
        cfg,
    });
    // Request handlers run on the blocking pool (RSA, pillar rendering, file reads): a few
    // threads per core keep the CPU busy; more only add stacks and allocator arenas.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(serve(core, node, aes, generation, job_rx, started))
}

/// What the node's tap hands the daemon.
enum Applied {
    Job(JobPublished),
    Aes(halite_storage::format::AesKeyRotation),
}

/// Applied jobs older than this are not published (a master catching up on a long log
/// must not replay old jobs to its minions).
const PUBLISH_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(30);

async fn serve(core: Arc<Core>, node: Arc<Node>, aes: Crypticle, generation: u64, mut job_rx: mpsc::UnboundedReceiver<Applied>, started: std::time::Instant) -> Result<(), String> {
    let cfg = &core.cfg;
    let mut router = zeromq::RouterSocket::new();
    let ret_ep = endpoint(&cfg.interface, cfg.ret_port);
    let ret_listener = crate::listen::bind(&cfg.interface, cfg.ret_port, cfg.ipv6, crate::listen::ListenOptions::request(crate::listen::backlog(cfg)))
        .map_err(|e| format!("binding {ret_ep}: {e}"))?;
    router.bind_listener(ret_listener).await.map_err(|e| format!("binding {ret_ep}: {e}"))?;
    let mut publisher_sock = zeromq::PubSocket::new();
    let pub_ep = endpoint(&cfg.interface, cfg.publish_port);
    let pub_listener = crate::listen::bind(&cfg.interface, cfg.publish_port, cfg.ipv6, crate::listen::ListenOptions::publish(cfg))
        .map_err(|e| format!("binding {pub_ep}: {e}"))?;
    publisher_sock.bind_listener(pub_listener).await.map_err(|e| format!("binding {pub_ep}: {e}"))?;
    let sock_path = admin::socket_path(&cfg.sock_dir);
    let _ = std::fs::remove_file(&sock_path);
    let admin_listener = tokio::net::UnixListener::bind(&sock_path).map_err(|e| format!("binding {}: {e}", sock_path.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&sock_path, std::fs::Permissions::from_mode(0o600));
    }
    write_pidfile(&cfg.pidfile);
    let (pub_tx, mut pub_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let publisher = if core.cluster { Publisher::unnumbered(aes) } else { Publisher::new(aes) };
    let master = Arc::new(Master {
        core: core.clone(),
        node,
        events: EventBus::default(),
        publisher: Mutex::new(publisher),
        pub_tx,
        aes_generation: std::sync::atomic::AtomicU64::new(generation),
    });
    tracing::info!(ret = %ret_ep, publish = %pub_ep, admin = %sock_path.display(), ms = started.elapsed().as_millis() as u64, "salt-master serving");

    tokio::spawn(async move {
        while let Some(frame) = pub_rx.recv().await {
            if let Err(e) = publisher_sock.send(ZmqMessage::from(frame)).await {
                tracing::error!("publish failed: {e}");
            }
        }
    });
    let mp = master.clone();
    tokio::spawn(async move {
        while let Some(applied) = job_rx.recv().await {
            let j = match applied {
                Applied::Job(j) => j,
                Applied::Aes(a) => {
                    mp.install_cluster_aes(&a);
                    continue;
                }
            };
            let age = std::time::Duration::from_nanos(now_ns().saturating_sub(j.time_ns));
            if age > PUBLISH_MAX_AGE {
                tracing::info!(jid = %j.jid, age_s = age.as_secs(), "not publishing an old job found while catching up");
                continue;
            }
            let load = match payload::decode(&j.load) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(jid = %j.jid, "job load does not decode: {e}");
                    continue;
                }
            };
            let frame = {
                let mut p = mp.publisher.lock().unwrap_or_else(|p| p.into_inner());
                p.envelope(&load, &mp.core.keys.private, SigAlgo::Pkcs1v15Sha1)
            };
            match frame {
                Ok(f) => {
                    let _ = mp.pub_tx.send(f);
                }
                Err(e) => tracing::error!(jid = %j.jid, "cannot seal the publish: {e}"),
            }
        }
    });
    let m2 = master.clone();
    tokio::spawn(async move {
        loop {
            match admin_listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(admin_connection(m2.clone(), stream));
                }
                Err(e) => tracing::error!("admin socket: {e}"),
            }
        }
    });
    // Salt's maintenance loop: every `loop_interval` seconds, expire the job cache.
    let m3 = master.clone();
    tokio::spawn(async move {
        let every = std::time::Duration::from_secs(loop_interval(&m3.core.cfg));
        loop {
            tokio::time::sleep(every).await;
            let Some(rec) = jobs::expiry_due(&m3.core.sm, m3.core.cfg.keep_jobs_seconds) else { continue };
            let node = m3.node.clone();
            match node.propose_async(std::slice::from_ref(&rec)) {
                Ok(p) => match p.committed().await {
                    Ok(_) => tracing::info!(?rec, "job cache expired"),
                    Err(e) => tracing::warn!("job cache expiry not committed: {e}"),
                },
                Err(e) => tracing::warn!("job cache expiry not proposed: {e}"),
            }
        }
    });
    let (send, mut recv) = router.split();
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            msg = recv.recv() => match msg {
                Ok(msg) => {
                    // Bounded: a flood of requests queues here instead of spawning without
                    // limit; each request holds its permit until it has been answered.
                    let permit = match in_flight.clone().acquire_owned().await {
                        Ok(p) => p,
                        Err(_) => break,
                    };
                    let (m, s) = (master.clone(), send.clone());
                    tokio::spawn(async move {
                        request(m, s, msg).await;
                        drop(permit);
                    });
                }
                Err(e) => tracing::warn!("request socket: {e}"),
            },
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
        }
    }
    tracing::info!("salt-master stopping");
    let _ = std::fs::remove_file(&sock_path);
    let _ = std::fs::remove_file(&master.core.cfg.pidfile);
    Ok(())
}

/// Salt's `loop_interval` (seconds between maintenance rounds, default 60).
fn loop_interval(cfg: &MasterConfig) -> u64 {
    cfg.raw.get("loop_interval").and_then(serde_yaml::Value::as_u64).unwrap_or(60).max(1)
}

/// Salt's `rotate_aes_key` (default True): deleting or rejecting a key replaces the
/// publish key, so the minion that lost its key stops understanding publishes.
fn rotate_aes_key(cfg: &MasterConfig) -> bool {
    !matches!(cfg.raw.get("rotate_aes_key"), Some(serde_yaml::Value::Bool(false)))
}

impl Master {
    /// Installs a cluster AES key generation once applied (every member does the same).
    fn install_cluster_aes(&self, a: &halite_storage::format::AesKeyRotation) {
        use std::sync::atomic::Ordering;
        if !self.core.cluster || a.generation <= self.aes_generation.load(Ordering::SeqCst) {
            return;
        }
        let installed = crate::cluster::aes_of(a).and_then(|aes| PublishKey::new(aes.clone(), &self.core.keys).map(|k| (aes, k)).map_err(|e| e.to_string()));
        match installed {
            Ok((aes, key)) => {
                let mut publisher = self.publisher.lock().unwrap_or_else(|p| p.into_inner());
                publisher.rotate(aes);
                *self.core.aes.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
                self.aes_generation.store(a.generation, Ordering::SeqCst);
                tracing::info!(generation = a.generation, "cluster AES key rotated");
            }
            Err(e) => tracing::error!(generation = a.generation, "cluster AES key not installed: {e}"),
        }
    }

    /// Replaces the publish AES key. Connected minions learn the new one by
    /// re-authenticating when a publish fails to decrypt (spec §10). In a cluster the new
    /// key is a record every member installs when it applies it.
    pub fn rotate_aes(&self) {
        if self.core.cluster {
            let current = self.aes_generation.load(std::sync::atomic::Ordering::SeqCst);
            if let Err(e) = self.node.propose(&[crate::cluster::rotation(current)]) {
                tracing::error!("cluster AES key rotation not committed: {e}");
            }
            return;
        }
        let aes = Crypticle::generate();
        let key = match PublishKey::new(aes.clone(), &self.core.keys) {
            Ok(k) => k,
            Err(e) => {
                tracing::error!("publish AES key not rotated: {e}");
                return;
            }
        };
        // Publisher first: from here on publishes use the new key, and a minion that
        // re-authenticates because of one gets the same key from `_auth`.
        let mut publisher = self.publisher.lock().unwrap_or_else(|p| p.into_inner());
        publisher.rotate(aes);
        *self.core.aes.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
        drop(publisher);
        tracing::info!("publish AES key rotated");
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

/// One request: handle, commit what it produced, reply on its own routing envelope.
async fn request(master: Arc<Master>, mut send: zeromq::RouterSendHalf, msg: ZmqMessage) {
    let mut frames = msg.into_vec();
    let Some(body) = frames.pop() else { return };
    let core = master.core.clone();
    let handled = match tokio::task::spawn_blocking(move || handlers::handle(&core, &body)).await {
        Ok(h) => h,
        Err(e) => {
            tracing::error!("request handler panicked: {e}");
            return;
        }
    };
    let mut reply = handled.reply;
    let mut committed_ok = true;
    let had_records = !handled.records.is_empty();
    if !handled.records.is_empty() {
        // Awaited, not waited for on a thread: hundreds of sign-ins share one group commit
        // without holding hundreds of blocking threads.
        let committed = match master.node.propose_async(&handled.records) {
            Ok(pending) => pending.committed().await,
            Err(e) => Err(e),
        };
        if committed.is_err() {
            tracing::error!(cmd = %handled.cmd, id = %handled.id, "records not committed: {committed:?}; answering bad load");
            reply = payload::encode(&rmpv::Value::from("bad load"));
            committed_ok = false;
        }
    }
    if committed_ok {
        if let Some(nonce) = &handled.nonce {
            if had_records || !handled.events.is_empty() {
                master.core.nonces.lock().unwrap_or_else(|p| p.into_inner()).remember(&handled.id, nonce);
            }
        }
        for e in handled.events {
            master.events.fire(e);
        }
    }
    frames.push(reply.into());
    match ZmqMessage::try_from(frames) {
        Ok(m) => {
            if let Err(e) = send.send(m).await {
                tracing::debug!("reply not delivered: {e}");
            }
        }
        Err(e) => tracing::warn!("cannot build a reply: {e}"),
    }
}

async fn admin_connection(master: Arc<Master>, stream: tokio::net::UnixStream) {
    let (rd, mut wr) = stream.into_split();
    let mut lines = BufReader::new(rd).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if serde_json::from_str::<J>(&line).ok().and_then(|r| r.get("cmd").and_then(J::as_str).map(String::from)).as_deref() == Some("events.watch") {
            // From here on the connection streams events, one JSON object per line.
            let mut rx = master.events.subscribe();
            loop {
                match rx.recv().await {
                    Ok(e) => {
                        let mut out = json!({ "tag": e.tag, "data": e.data }).to_string();
                        out.push('\n');
                        if wr.write_all(out.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => tracing::warn!(n, "an event watcher fell behind; events dropped"),
                    Err(_) => return,
                }
            }
        }
        let m = master.clone();
        let answer = match serde_json::from_str::<J>(&line) {
            Ok(req) => tokio::task::spawn_blocking(move || admin_request(&m, &req)).await.unwrap_or_else(admin::error),
            Err(e) => admin::error(format!("bad request: {e}")),
        };
        let mut out = answer.to_string();
        out.push('\n');
        if wr.write_all(out.as_bytes()).await.is_err() {
            break;
        }
    }
}

fn admin_request(m: &Master, req: &J) -> J {
    match admin_request_inner(m, req) {
        Ok(v) => v,
        Err(e) => admin::error(e),
    }
}

fn action(req: &J) -> Result<Cmd, String> {
    match req.get("action").and_then(J::as_str) {
        Some("accept") => Ok(Cmd::Accept),
        Some("reject") => Ok(Cmd::Reject),
        Some("delete") => Ok(Cmd::Delete),
        other => Err(format!("unknown key action {other:?}")),
    }
}

fn admin_request_inner(m: &Master, req: &J) -> Result<J, String> {
    let sm = &m.core.sm;
    let flag = |k: &str| req.get(k).and_then(J::as_bool).unwrap_or(false);
    match req.get("cmd").and_then(J::as_str).unwrap_or("") {
        "key.list" => {
            let l = keyops::state_listing(sm).map_err(|e| e.to_string())?;
            Ok(json!({ "listing": { "minions_pre": l.minions_pre, "minions_rejected": l.minions_rejected, "minions": l.minions, "minions_denied": l.minions_denied } }))
        }
        "key.select" => {
            let cmd = action(req)?;
            let inc = Include { accepted: flag("include_accepted"), rejected: flag("include_rejected"), denied: flag("include_denied") };
            let l = keyops::state_listing(sm).map_err(|e| e.to_string())?;
            let pattern = req.get("match").and_then(J::as_str).unwrap_or("");
            Ok(json!({ "selected": keyops::select(&l, cmd, pattern, inc) }))
        }
        "key.apply" => {
            let cmd = action(req)?;
            let selected = req.get("selected").and_then(J::as_object).cloned().unwrap_or_default();
            let done = keyops::apply(&m.node, cmd, &selected).map_err(|e| e.to_string())?;
            let act = match cmd {
                Cmd::Accept => "accept",
                Cmd::Reject => "reject",
                Cmd::Delete => "delete",
            };
            for id in &done {
                m.events.fire(crate::events::event("salt/key", json!({ "result": true, "act": act, "id": id })));
            }
            if cmd != Cmd::Accept {
                let mut s = m.core.signed_in.lock().unwrap_or_else(|p| p.into_inner());
                for id in &done {
                    s.remove(id);
                }
            }
            if cmd != Cmd::Accept && !done.is_empty() && rotate_aes_key(&m.core.cfg) {
                m.rotate_aes();
            }
            Ok(json!({ "done": done }))
        }
        "publish" => publish(m, req),
        "job.returns" => {
            let jid = req.get("jid").and_then(J::as_str).ok_or("no jid")?;
            let mut out = serde_json::Map::new();
            for r in sm.job_returns(jid).map_err(|e| e.to_string())? {
                let load = payload::decode(&r.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
                out.insert(r.id, load);
            }
            Ok(json!({ "returns": out }))
        }
        "job.list" => {
            let mut out = serde_json::Map::new();
            for j in sm.jobs().map_err(|e| e.to_string())? {
                let load = payload::decode(&j.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
                out.insert(j.jid.clone(), json!({ "load": load, "minions": j.minions }));
            }
            Ok(json!({ "jobs": out }))
        }
        "runner" => {
            let ret = match req.get("fun").and_then(J::as_str).unwrap_or("") {
                "jobs.list_jobs" => crate::runners::list_jobs(sm).map_err(|e| e.to_string())?,
                "jobs.lookup_jid" => crate::runners::lookup_jid(sm, req.get("jid").and_then(J::as_str).ok_or("jobs.lookup_jid needs a jid")?).map_err(|e| e.to_string())?,
                "pki.migrate_to_mmap" => J::String(crate::pki::migrate_online(&m.core.cfg, &m.node)?),
                "cluster.sync_roots" => {
                    let roots = req.get("roots").and_then(J::as_str).unwrap_or("both");
                    let trees = crate::sync_roots::trees(roots)?;
                    let plan = crate::sync_roots::plan(&m.core.cfg, sm, &trees)?;
                    // Chunks stay in order; at most 32 records (32 MiB) per proposal.
                    for group in plan.records.chunks(32) {
                        m.node.propose(group).map_err(|e| e.to_string())?;
                    }
                    tracing::info!(written = plan.written, removed = plan.removed, unchanged = plan.unchanged, "cluster.sync_roots committed");
                    json!({
                        "status": "committed",
                        "channels": trees.iter().map(|t| format!("{}_roots", t.as_str())).collect::<Vec<_>>(),
                        "cluster_id": m.core.cfg.cluster_id,
                        "written": plan.written,
                        "removed": plan.removed,
                        "unchanged": plan.unchanged,
                    })
                }
                "cluster.remove_member" => {
                    // Halite's explicit removal (the reference has none: a removed master
                    // keeps counting toward its quorum). The name is the member's address.
                    if !m.core.cluster {
                        return Err("cluster.remove_member: this master is not a cluster member".into());
                    }
                    let name = req.get("name").and_then(J::as_str).ok_or("cluster.remove_member needs the member's name (its interface address)")?;
                    let id = crate::store::member_id(name);
                    let (_, voters, learners) = m.node.membership().map_err(|e| e.to_string())?;
                    if !voters.contains(&id) && !learners.contains(&id) {
                        return Err(format!("{name} is not a member"));
                    }
                    m.node.remove_member(id).map_err(|e| e.to_string())?;
                    let (_, voters, learners) = m.node.membership().map_err(|e| e.to_string())?;
                    let names = crate::store::member_names(&m.core.cfg, Some(&m.node.handle()));
                    let name_of = |i: &u64| names.get(i).cloned().unwrap_or_else(|| i.to_string());
                    let sorted = |ids: &[u64]| {
                        let mut v: Vec<String> = ids.iter().map(name_of).collect();
                        v.sort();
                        v
                    };
                    json!({"removed": name, "voters": sorted(&voters), "learners": sorted(&learners)})
                }
                "cluster.ring_info" => {
                    let (_, voters, _) = m.node.membership().map_err(|e| e.to_string())?;
                    crate::runners::ring_info(m.core.cluster, &voters, &crate::store::member_names(&m.core.cfg, Some(&m.node.handle())))
                }
                "cluster.members" => {
                    let (term, voters, learners) = m.node.membership().map_err(|e| e.to_string())?;
                    crate::runners::cluster_members(&node_id(&m.core.cfg), term, &voters, &learners, m.node.leader(), &crate::store::member_names(&m.core.cfg, Some(&m.node.handle())))
                }
                other => return Err(format!("'{other}' is not available.")),
            };
            Ok(json!({ "return": ret }))
        }
        other => Err(format!("unknown admin command {other:?}")),
    }
}

/// Publishes a job: commit it, then send it on the publish port.
fn publish(m: &Master, req: &J) -> Result<J, String> {
    let fun = req.get("fun").and_then(J::as_str).ok_or("no fun")?.to_string();
    let tgt = req.get("tgt").cloned().unwrap_or(J::String("*".into()));
    let tgt_type = req.get("tgt_type").and_then(J::as_str).unwrap_or("glob").to_string();
    let mut args: Vec<J> = req.get("arg").and_then(J::as_array).cloned().unwrap_or_default();
    if let Some(kw) = req.get("kwarg").and_then(J::as_object) {
        if !kw.is_empty() {
            let mut k = kw.clone();
            k.insert("__kwarg__".into(), J::Bool(true));
            args.push(J::Object(k));
        }
    }
    let jid = jobs::new_jid();
    let (minions, missing) = jobs::expected_minions(&m.core.sm, &tgt, &tgt_type).map_err(|e| e.to_string())?;
    if minions.is_empty() {
        return Err("No minions matched the target. No command was sent, no jid was assigned.".into());
    }
    let load = payload::from_json(&json!({
        "fun": fun, "arg": args, "tgt": tgt, "jid": jid, "ret": "", "tgt_type": tgt_type, "user": "root",
    }));
    let rec = Record::JobPublished(JobPublished { jid: jid.clone(), load: payload::encode(&load), minions: minions.clone(), time_ns: now_ns() });
    // Committed, applied, and thereby published (the node's tap, on every master).
    m.node.propose(&[rec]).map_err(|e| e.to_string())?;
    m.events.fire(crate::events::event(
        format!("salt/job/{jid}/new"),
        json!({ "jid": jid, "tgt_type": tgt_type, "tgt": tgt, "user": "root", "fun": fun, "arg": payload::to_json(crate::payload::get(&load, "arg").unwrap_or(&rmpv::Value::Nil)), "minions": minions, "missing": missing }),
    ));
    tracing::info!(jid = %jid, fun = %fun, minions = minions.len(), "published");
    Ok(json!({ "jid": jid, "minions": minions, "missing": missing }))
}

/// The node id Salt's cluster runners report: `id`, falling back to `interface`.
pub fn node_id(cfg: &MasterConfig) -> String {
    if cfg.id.is_empty() {
        cfg.interface.clone()
    } else {
        cfg.id.clone()
    }
}
