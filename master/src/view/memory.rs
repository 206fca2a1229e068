//! An in-memory [`View`]: everything a request command reads, held in maps, with a fixed
//! clock and deterministic "randomness". The unit tests of `req` and `admin` drive the
//! real command code with it; nothing touches a disk or the host.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use halite_storage::format::RootsTree;
use halite_storage::keys::BankState;
use halite_storage::state::StoredKey;

use super::{Admission, Autosign, FileRef, Listing, RootsSource, Stat, View};
use crate::config::MasterConfig;
use crate::error::Result;
use crate::masterkeys::{MasterKeys, PublishKey};
use crate::wire::crypto::{clean_key, Crypticle, PrivateKey};

/// Roots trees as `(tree, saltenv, path) → (mode, bytes)`.
#[derive(Default)]
pub struct MemoryRoots {
    pub files: BTreeMap<(RootsTree, String, String), (u32, Vec<u8>)>,
}

impl MemoryRoots {
    pub fn put(&mut self, tree: RootsTree, saltenv: &str, path: &str, data: &[u8]) {
        self.files.insert((tree, saltenv.to_string(), path.to_string()), (0o644, data.to_vec()));
    }

    fn get(&self, tree: RootsTree, file: &FileRef) -> Option<&(u32, Vec<u8>)> {
        let (env, _) = file.path.split_once(':')?;
        self.files.get(&(tree, env.to_string(), file.rel.clone()))
    }
}

impl RootsSource for MemoryRoots {
    fn find(&self, tree: RootsTree, saltenv: &str, rel: &str) -> Option<FileRef> {
        self.files.contains_key(&(tree, saltenv.to_string(), rel.to_string())).then(|| FileRef { path: format!("{saltenv}:{rel}"), rel: rel.to_string() })
    }

    fn read(&self, tree: RootsTree, file: &FileRef, offset: u64, max: u64) -> Option<Vec<u8>> {
        let (_, data) = self.get(tree, file)?;
        let start = (offset as usize).min(data.len());
        let end = start.saturating_add(max.min(usize::MAX as u64) as usize).min(data.len());
        Some(data[start..end].to_vec())
    }

    fn stat(&self, tree: RootsTree, file: &FileRef) -> Option<Stat> {
        let (mode, data) = self.get(tree, file)?;
        Some([0o100000 | *mode as i64, 1, 1, 1, 0, 0, data.len() as i64, 0, 0, 0])
    }

    fn list(&self, tree: RootsTree, saltenv: &str) -> Listing {
        let mut l = Listing::default();
        for ((t, env, path), _) in &self.files {
            if *t != tree || env != saltenv {
                continue;
            }
            l.files.insert(path.clone());
            let mut dir = path.as_str();
            while let Some((parent, _)) = dir.rsplit_once('/') {
                l.dirs.insert(parent.to_string());
                dir = parent;
            }
        }
        l
    }

    fn envs(&self, tree: RootsTree) -> BTreeSet<String> {
        self.files.keys().filter(|(t, _, _)| *t == tree).map(|(_, e, _)| e.clone()).collect()
    }
}

/// A master's state in maps.
pub struct MemoryView {
    pub cfg: MasterConfig,
    pub keys: MasterKeys,
    pub publish: Arc<PublishKey>,
    pub minion_keys: HashMap<String, StoredKey>,
    pub denied: BTreeSet<String>,
    pub sessions: HashMap<String, Crypticle>,
    pub counted: BTreeSet<String>,
    pub replayed: BTreeSet<super::replay_key::ReplayKey>,
    pub autosign_file: Option<String>,
    pub autoreject_file: Option<String>,
    pub autosign_grains: HashMap<String, String>,
    pub stubs: BTreeSet<String>,
    pub roots: MemoryRoots,
    pub now_ns: u64,
    /// Each minion's mine: (function, msgpack data).
    pub mine: HashMap<String, Vec<(String, Vec<u8>)>>,
    /// What the state holds of pushed files: (minion id, path) → progress.
    pub pushed: HashMap<(String, String), halite_storage::file_recv::PushedRead>,
    counter: std::sync::atomic::AtomicU64,
    /// Successful `tok` checks remembered, as the daemon's view does.
    pub toks: crate::view::tok_memo::TokMemo,
}

impl MemoryView {
    /// A view with a config whose every path lies under `/nonexistent/halite-test` (never
    /// created: nothing here reads a disk) and a fresh 2048-bit master key.
    pub fn new() -> Self {
        let cfg = crate::config::MasterConfig::under(std::path::Path::new("/nonexistent/halite-test"));
        Self::with_config(cfg)
    }

    pub fn with_config(cfg: MasterConfig) -> Self {
        let private = match PrivateKey::generate(2048) {
            Ok(k) => k,
            Err(e) => panic!("cannot generate a test key: {e}"),
        };
        let pub_clean = clean_key(&private.public_pem().unwrap_or_default());
        let keys = MasterKeys { private, pub_clean, pubkey_signature: None };
        let publish = match PublishKey::new(Crypticle::generate(), &keys) {
            Ok(p) => Arc::new(p),
            Err(e) => panic!("cannot sign a test publish key: {e}"),
        };
        MemoryView {
            cfg,
            keys,
            publish,
            minion_keys: HashMap::new(),
            denied: BTreeSet::new(),
            sessions: HashMap::new(),
            counted: BTreeSet::new(),
            replayed: BTreeSet::new(),
            autosign_file: None,
            autoreject_file: None,
            autosign_grains: HashMap::new(),
            stubs: BTreeSet::new(),
            roots: MemoryRoots::default(),
            now_ns: 1_795_000_000_000_000_000,
            mine: HashMap::new(),
            pushed: HashMap::new(),
            counter: Default::default(),
            toks: Default::default(),
        }
    }

    /// Puts a minion key in a bank.
    pub fn set_key(&mut self, id: &str, state: BankState, pub_pem: &[u8]) {
        self.minion_keys.insert(id.to_string(), StoredKey { state, time_ns: 1, pub_key: clean_key(pub_pem) });
    }
}

impl Default for MemoryView {
    fn default() -> Self {
        Self::new()
    }
}

impl View for MemoryView {
    fn config(&self) -> &MasterConfig {
        &self.cfg
    }
    fn master_keys(&self) -> &MasterKeys {
        &self.keys
    }
    fn publish_key(&self) -> Arc<PublishKey> {
        self.publish.clone()
    }
    fn session_key(&self, id: &str) -> Option<Crypticle> {
        if self.cfg.cluster_id.is_some() {
            return Some(self.publish.aes.clone());
        }
        self.sessions.get(id).cloned()
    }
    fn key(&self, id: &str) -> Result<Option<StoredKey>> {
        Ok(self.minion_keys.get(id).cloned())
    }
    fn denied(&self, id: &str) -> Result<bool> {
        Ok(self.denied.contains(id))
    }
    fn admission(&self, id: &str) -> Admission {
        Admission::of(self.cfg.max_minions, self.counted.contains(id), self.counted.len())
    }
    fn pending_keys(&self) -> u64 {
        self.minion_keys.values().filter(|k| k.state == BankState::Pending).count() as u64
    }
    fn replayed(&self, key: &super::replay_key::ReplayKey) -> bool {
        self.replayed.contains(key)
    }
    fn autosign_text(&self, which: Autosign) -> Option<String> {
        match which {
            Autosign::File => self.autosign_file.clone(),
            Autosign::Reject => self.autoreject_file.clone(),
            Autosign::Grain(g) => self.autosign_grains.get(g).cloned(),
        }
    }
    fn autosign_stub(&self, id: &str) -> bool {
        self.stubs.contains(id)
    }
    fn roots(&self) -> &dyn RootsSource {
        &self.roots
    }
    fn now_ns(&self) -> u64 {
        self.now_ns
    }
    fn pushed(&self, id: &str, path: &str) -> Result<halite_storage::file_recv::PushedRead> {
        Ok(self.pushed.get(&(id.to_string(), path.to_string())).copied().unwrap_or_default())
    }
    fn fresh_key(&self) -> Crypticle {
        Crypticle::generate()
    }
    fn new_jid(&self) -> String {
        let n = self.counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("2026112300000000{n:04}")
    }
    fn mine_read(&self) -> &dyn crate::mine::MineRead {
        self
    }
    fn tok_memo(&self) -> Option<&crate::view::tok_memo::TokMemo> {
        Some(&self.toks)
    }
}

/// Targets match the accepted keys by id only (no grains are kept here).
impl crate::mine::MineRead for MemoryView {
    fn mine(&self, id: &str) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(self.mine.get(id).cloned().unwrap_or_default())
    }
    fn target(&self, tgt: &serde_json::Value, tgt_type: &str) -> Result<Vec<String>> {
        let empty = serde_json::json!({});
        let pattern = match tgt {
            serde_json::Value::Array(a) => a.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(","),
            other => other.as_str().map(String::from).unwrap_or_else(|| other.to_string()),
        };
        let mut ids: Vec<String> = self
            .minion_keys
            .iter()
            .filter(|(id, k)| k.state == BankState::Accepted && crate::matcher::matches(&crate::matcher::Subject { id, grains: &empty, pillar: &empty }, &pattern, tgt_type))
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        Ok(ids)
    }
}
