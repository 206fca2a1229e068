//! The running master's shared state, and the live views over it: [`Master`] is the
//! [`View`] the request commands read and the [`AdminView`] the admin verbs read. What
//! changes it (session keys, counted minions, remembered nonces, the publish key) is
//! changed only here, by the daemon, after the commits that call for it.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

use halite_replication::Node;
use halite_storage::format::{Record, RootsTree};
use halite_storage::import::{read_localfs_pki, read_roots_dir, PkiCounts};
use halite_storage::state::{StateMachine, StoredKey};

use super::bus::EventBus;
use super::replay::Nonces;
use super::sessions::Sessions;
use crate::admin::{AdminView, Members};
use crate::config::MasterConfig;
use crate::error::Result;
use crate::masterkeys::{MasterKeys, PublishKey};
use crate::req::{Claim, Effect};
use crate::view::fs::{stub_dir, FsAutosign, FsRoots};
use crate::view::{Admission, Autosign, RootsSource, View};
use crate::wire::crypto::Crypticle;
use crate::wire::publish::Publisher;

/// How long, without `request_server_ttl`, a side-effecting request's nonce is kept,
/// unless this many newer ones came in meanwhile (`replay.rs`: at most twice as many are
/// kept, 4.5 MiB).
const REPLAY_WINDOW_SECS: u64 = 900;
const REPLAY_KEEP: usize = 65_536;

/// The running master.
pub struct Master {
    pub cfg: MasterConfig,
    pub node: Arc<Node>,
    pub keys: MasterKeys,
    /// The publish (AES) key, handed to minions at sign-in.
    pub aes: RwLock<Arc<PublishKey>>,
    /// The cluster AES key generation in use (0 for a lone master).
    pub aes_generation: AtomicU64,
    pub publisher: Mutex<Publisher>,
    pub sessions: Sessions,
    /// Nonces of side-effecting requests already applied (replay protection).
    pub nonces: Mutex<Nonces>,
    /// Minions counted against `max_minions`: accepted at sign-in since this master
    /// started, until their key is rejected or deleted.
    pub counted: Mutex<HashSet<String>>,
    /// New pending keys granted a place under `halite_max_pending_keys` and not yet
    /// released (their request is in flight; [`Claim::Pending`]).
    pub pending_claims: Mutex<HashSet<String>>,
    pub roots: FsRoots,
    /// The gitfs options, and the applied gitfs tree minions are served.
    pub gitfs: crate::gitfs::GitfsConfig,
    pub gitfs_roots: crate::gitfs::serve::GitfsRoots,
    /// `fileserver_backend`, in order.
    pub backends: Vec<crate::gitfs::Backend>,
    pub autosign: FsAutosign,
    pub bus: EventBus,
    /// A cluster member: every minion's session key is the cluster AES key.
    pub cluster: bool,
    /// `tok` checks that succeeded (an RSA operation saved per AES request).
    pub toks: crate::view::tok_memo::TokMemo,
}

impl Master {
    pub fn new(cfg: MasterConfig, node: Arc<Node>, keys: MasterKeys, publish: PublishKey, generation: u64) -> Self {
        let cluster = cfg.cluster_id.is_some();
        let aes = publish.aes.clone();
        let window = if cfg.request_server_ttl > 0 { cfg.request_server_ttl } else { REPLAY_WINDOW_SECS };
        let gitfs = crate::gitfs::GitfsConfig::from_raw(&cfg.raw);
        Master {
            // A cluster member hands out the cluster's AES key as every session key and
            // keeps no journal (members may share a cachedir).
            sessions: if cluster { Sessions::none() } else { Sessions::new(cfg.cachedir.join("sessions"), std::time::Duration::from_secs(cfg.publish_session.max(1))) },
            nonces: Mutex::new(Nonces::new(std::time::Duration::from_secs(window), REPLAY_KEEP)),
            counted: Default::default(),
            pending_claims: Default::default(),
            toks: Default::default(),
            roots: FsRoots::new(&cfg),
            gitfs_roots: crate::gitfs::serve::GitfsRoots::of(node.state().clone(), &gitfs),
            backends: crate::gitfs::backends::backends(&cfg.raw),
            gitfs,
            autosign: FsAutosign::new(&cfg),
            bus: EventBus::default(),
            publisher: Mutex::new(if cluster { Publisher::unnumbered(aes) } else { Publisher::new(aes) }),
            aes: RwLock::new(Arc::new(publish)),
            aes_generation: AtomicU64::new(generation),
            keys,
            node,
            cluster,
            cfg,
        }
    }

    pub fn sm(&self) -> &Arc<StateMachine> {
        self.node.state()
    }

    /// Grants the claims of a request; all or none.
    pub fn claim(&self, claims: &[Claim]) -> bool {
        // Nonces first: taking them back is exact (only those this call took).
        let nonces = || claims.iter().filter_map(|c| if let Claim::Nonce(k) = c { Some(k) } else { None });
        let mut took = 0;
        if nonces().next().is_some() {
            let mut n = self.nonces.lock().unwrap_or_else(|p| p.into_inner());
            for k in nonces() {
                if !n.claim(k) {
                    nonces().take(took).for_each(|t| n.forget(t));
                    return false;
                }
                took += 1;
            }
        }
        if took == claims.len() || self.claim_places(claims) {
            return true;
        }
        let mut n = self.nonces.lock().unwrap_or_else(|p| p.into_inner());
        nonces().for_each(|t| n.forget(t));
        false
    }

    /// Grants the places a request claims (`max_minions`, pending keys); all or none.
    fn claim_places(&self, claims: &[Claim]) -> bool {
        let mut counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        let mut pending = self.pending_claims.lock().unwrap_or_else(|p| p.into_inner());
        let (mut taken, mut taken_pending) = (Vec::new(), Vec::new());
        let mut full = false;
        for c in claims {
            match c {
                Claim::Count(id) => match Admission::of(self.cfg.max_minions, counted.contains(id), counted.len()) {
                    Admission::Counted => {}
                    Admission::Room => {
                        counted.insert(id.clone());
                        taken.push(id.clone());
                    }
                    Admission::Full => full = true,
                },
                Claim::Pending(id) if pending.contains(id) => {}
                Claim::Nonce(_) => {}
                Claim::Pending(id) => {
                    let cap = self.cfg.halite_max_pending_keys;
                    if cap > 0 && self.sm().pending_keys() + pending.len() as u64 >= cap {
                        full = true;
                    } else {
                        pending.insert(id.clone());
                        taken_pending.push(id.clone());
                    }
                }
            }
            if full {
                for t in taken {
                    counted.remove(&t);
                }
                for t in taken_pending {
                    pending.remove(&t);
                }
                return false;
            }
        }
        true
    }

    /// Gives claims back: their request was not committed, or (pending places) it is
    /// done and the state machine now counts what it committed.
    pub fn release(&self, claims: &[Claim]) {
        for c in claims {
            match c {
                Claim::Count(id) => {
                    self.counted.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
                }
                Claim::Pending(id) => {
                    self.pending_claims.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
                }
                Claim::Nonce(k) => self.nonces.lock().unwrap_or_else(|p| p.into_inner()).forget(k),
            }
        }
    }

    /// Carries out a committed request's effects.
    pub fn apply_effects(&self, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::SessionKey { id, key } => self.sessions.install(&id, &key),
                Effect::ConsumeAutosignStub { id } => {
                    let stub = stub_dir(self.cfg.keys_dir()).join(&id);
                    match std::fs::remove_file(&stub) {
                        Ok(()) => tracing::info!(id = %id, "one-shot autosign stub used"),
                        Err(e) => tracing::warn!(id = %id, "cannot remove the autosign stub {}: {e}", stub.display()),
                    }
                }
            }
        }
    }

    /// Stops counting these minions against `max_minions`.
    pub fn uncount(&self, ids: &[String]) {
        let mut counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        for id in ids {
            counted.remove(id);
        }
    }

    /// Installs a new publish key (and the publisher's key) locally.
    pub fn install_publish_key(&self, aes: Crypticle) -> Result<()> {
        let key = PublishKey::new(aes.clone(), &self.keys)?;
        // Publisher first: from here on publishes use the new key, and a minion that
        // re-authenticates because of one gets the same key from `_auth`.
        let mut publisher = self.publisher.lock().unwrap_or_else(|p| p.into_inner());
        publisher.rotate(aes);
        *self.aes.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
        Ok(())
    }
}

fn now_ns() -> u64 {
    halite_storage::format::now_ns()
}

impl View for Master {
    fn config(&self) -> &MasterConfig {
        &self.cfg
    }
    fn master_keys(&self) -> &MasterKeys {
        &self.keys
    }
    fn publish_key(&self) -> Arc<PublishKey> {
        self.aes.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
    fn session_key(&self, id: &str) -> Option<Crypticle> {
        if self.cluster {
            return Some(self.publish_key().aes.clone());
        }
        self.sessions.fresh(id)
    }
    fn key(&self, id: &str) -> Result<Option<StoredKey>> {
        Ok(self.sm().get_key(id)?)
    }
    fn key_print(&self, id: &str) -> Result<Option<halite_storage::state::KeyPrint>> {
        Ok(self.sm().key_print(id)?)
    }
    fn denied(&self, id: &str) -> Result<bool> {
        Ok(self.sm().get_denied(id)?.is_some())
    }
    fn cached_pillar(&self, id: &str) -> Option<Vec<u8>> {
        self.sm().pillar(id).ok().flatten()
    }
    fn admission(&self, id: &str) -> Admission {
        let counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        Admission::of(self.cfg.max_minions, counted.contains(id), counted.len())
    }
    fn pending_keys(&self) -> u64 {
        // The state machine's count and the places held by new pending keys in flight.
        let held = self.pending_claims.lock().unwrap_or_else(|p| p.into_inner()).len() as u64;
        self.sm().pending_keys() + held
    }
    fn replayed(&self, key: &crate::view::replay_key::ReplayKey) -> bool {
        self.nonces.lock().unwrap_or_else(|p| p.into_inner()).seen(key)
    }
    fn autosign_text(&self, which: Autosign) -> Option<String> {
        self.autosign.text(which)
    }
    fn autosign_stub(&self, id: &str) -> bool {
        self.autosign.stub(id)
    }
    fn roots(&self) -> &dyn RootsSource {
        &self.roots
    }
    fn file_backends(&self) -> Vec<(crate::gitfs::Backend, &dyn RootsSource)> {
        self.backend_sources()
    }
    fn git_pillar_roots(&self) -> Option<&dyn RootsSource> {
        Some(&**self.sm())
    }
    fn ext_run(&self) -> &dyn crate::pillar::ext::ExtRun {
        &super::ext_cmd::CmdRunner
    }
    fn now_ns(&self) -> u64 {
        now_ns()
    }
    fn pushed(&self, id: &str, path: &str) -> Result<halite_storage::file_recv::PushedRead> {
        Ok(self.sm().pushed_read(id, path)?)
    }
    fn fresh_key(&self) -> Crypticle {
        Crypticle::generate()
    }
    fn new_jid(&self) -> String {
        crate::jobs::new_jid()
    }
    fn mine_read(&self) -> &dyn crate::mine::MineRead {
        &**self.sm()
    }
    fn tok_memo(&self) -> Option<&crate::view::tok_memo::TokMemo> {
        Some(&self.toks)
    }
}

impl Master {
    /// The backends of `fileserver_backend` with their sources, in order.
    fn backend_sources(&self) -> Vec<(crate::gitfs::Backend, &dyn RootsSource)> {
        self.backends
            .iter()
            .map(|b| match b {
                crate::gitfs::Backend::Roots => (*b, &self.roots as &dyn RootsSource),
                crate::gitfs::Backend::Gitfs => (*b, &self.gitfs_roots as &dyn RootsSource),
            })
            .collect()
    }
}

impl AdminView for Master {
    fn config(&self) -> &MasterConfig {
        &self.cfg
    }
    fn state(&self) -> &dyn halite_storage::state::StateRead {
        &**self.sm()
    }
    fn members(&self) -> Result<Members> {
        let (term, voters, learners) = self.node.membership()?;
        let releases = self.sm().member_releases()?;
        Ok(Members { term, voters, learners, leader: self.node.leader(), names: crate::start::member_names(&self.cfg, Some(&self.node.handle())), progress: progress(&self.node.status().get()), releases })
    }
    fn new_jid(&self) -> String {
        crate::jobs::new_jid()
    }
    fn now_ns(&self) -> u64 {
        now_ns()
    }
    fn roots(&self) -> &dyn RootsSource {
        if self.cfg.roots_from_log() {
            &**self.sm()
        } else {
            &self.roots
        }
    }
    fn file_server(&self) -> crate::view::chained::Chained<'_> {
        crate::view::chained::Chained(
            self.backends
                .iter()
                .map(|b| match b {
                    crate::gitfs::Backend::Roots => AdminView::roots(self),
                    crate::gitfs::Backend::Gitfs => &self.gitfs_roots as &dyn RootsSource,
                })
                .collect(),
        )
    }
    fn local_roots(&self, tree: RootsTree, saltenv: &str) -> Result<Vec<Record>> {
        local_roots(&self.cfg, tree, saltenv)
    }
    fn gitfs(&self) -> Option<(&crate::gitfs::GitfsConfig, &dyn RootsSource)> {
        self.backends.contains(&crate::gitfs::Backend::Gitfs).then_some((&self.gitfs, &self.gitfs_roots as &dyn RootsSource))
    }
    fn gitfs_fetch(&self, only: Option<&[String]>) -> Result<crate::gitfs::fetch::Fetched> {
        Ok(crate::gitfs::fetch(&self.gitfs, only))
    }
    fn git_pillar_roots(&self) -> Option<&dyn RootsSource> {
        Some(&**self.sm())
    }
    fn git_pillar_fetch(&self, cfg: &crate::gitfs::GitfsConfig) -> Result<crate::gitfs::fetch::Fetched> {
        Ok(crate::gitfs::fetch(cfg, None))
    }
    fn ext_run(&self) -> &dyn crate::pillar::ext::ExtRun {
        &super::ext_cmd::CmdRunner
    }
    fn localfs_pki(&self) -> Result<(Vec<Record>, PkiCounts)> {
        Ok(read_localfs_pki(self.cfg.keys_dir())?)
    }
}

/// Each member's progress as the node's status shows it: this member's applied index,
/// lag and readiness; on the leader, every peer's matched index and lag.
fn progress(s: &halite_replication::node::Status) -> std::collections::BTreeMap<u64, crate::admin::MemberProgress> {
    let mut out = std::collections::BTreeMap::new();
    out.insert(s.id, crate::admin::MemberProgress { applied: Some(s.applied), matched: None, lag: Some(s.lag()), ready: Some(s.ready) });
    for p in &s.peers {
        out.insert(p.id, crate::admin::MemberProgress { applied: None, matched: Some(p.matched), lag: Some(s.commit.saturating_sub(p.matched)), ready: None });
    }
    out
}

/// This master's directory of a saltenv's roots, read as records.
pub fn local_roots(cfg: &MasterConfig, tree: RootsTree, saltenv: &str) -> Result<Vec<Record>> {
    let dirs = cfg.roots_dirs();
    let m = match tree {
        RootsTree::File => &dirs.file,
        RootsTree::Pillar => &dirs.pillar,
        RootsTree::Gitfs | RootsTree::GitPillar => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    if let Some(dir) = m.get(saltenv) {
        read_roots_dir(tree, saltenv, dir, &mut out, &mut Default::default())?;
    }
    Ok(out)
}
