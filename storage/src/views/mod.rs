//! Views: everything derived from the state machine that lives outside it — the key view
//! (`localfs_key` or `mmap_key`, with the master bank's key pairs) and the roots trees.
//!
//! Views are disposable. The applier mirrors each batch's [`Effect`]s into them and then
//! records the index they reflect (`views_index` in the state machine's `meta` family);
//! if a crash leaves them behind the state machine, the next start rebuilds them from it.

pub mod shared;
#[cfg(test)]
mod shared_tests;

use std::collections::BTreeSet;

use crate::error::Result;
use crate::format::{KeyState, Record, RootsTree};
use crate::keys::{pair, KeyEntry, KeyView};
use crate::roots::RootsMaterialiser;
use crate::state::{Effect, StateMachine};

/// One view, as far as faults go: each fails, is marked dirty and is recovered on its
/// own, while the state machine and the other view go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViewKind {
    /// The key view (`localfs_key` or `mmap_key`) with the master bank's key pairs.
    Keys,
    /// The `file_roots` / `pillar_roots` trees, and the files minions pushed
    /// (`cachedir/minions/<id>/files`).
    Roots,
}

impl ViewKind {
    pub const ALL: [ViewKind; 2] = [ViewKind::Keys, ViewKind::Roots];

    /// The view an effect writes.
    pub fn of(fx: &Effect) -> ViewKind {
        match fx {
            Effect::RootsWritten { .. } | Effect::RootsRemoved { .. } | Effect::PushedWritten { .. } | Effect::PushedRemoved { .. } | Effect::PushedCleared { .. } => ViewKind::Roots,
            _ => ViewKind::Keys,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ViewKind::Keys => "keys",
            ViewKind::Roots => "roots",
        }
    }
}

/// A view that could not be written (a full disk, a directory replaced by a file).
#[derive(Debug)]
pub struct ViewFault {
    pub view: ViewKind,
    pub error: crate::error::Error,
}

pub struct Views {
    pub keys: Box<dyn KeyView>,
    pub roots: RootsMaterialiser,
    /// Set when the views are on a filesystem other members write too
    /// (`cluster_isolated_filesystem: False`): see [`shared`].
    pub shared: Option<shared::SharedViews>,
    /// Set for views of its own (isolated) whose files may have been copied from a
    /// shared tree: the marks found there, read and removed at start.
    pub left_shared: Option<shared::SharedViews>,
}

/// Counts of a key-view rebuild.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RebuildCounts {
    pub accepted: u64,
    pub pending: u64,
    pub rejected: u64,
    pub denied: u64,
    /// Entries the view could not hold (e.g. ids longer than `mmap_key_id_size`).
    pub refused: u64,
}

/// What a run of records touched, so that a view left behind by a crash can be brought
/// up to date from the state machine without a full rebuild.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Touched {
    pub key_ids: BTreeSet<String>,
    pub denied_ids: BTreeSet<String>,
    pub roots: BTreeSet<(RootsTree, String, String)>,
    /// Pushed files: (minion id, path).
    pub pushed: BTreeSet<(String, String)>,
    /// Minions whose key was deleted (their pushed files with it).
    pub cleared: BTreeSet<String>,
    /// A master or cluster key pair was set.
    pub pairs: bool,
}

impl Touched {
    pub fn add(&mut self, r: &Record) {
        match r {
            Record::KeySet(k) => match k.state {
                KeyState::Denied | KeyState::DeniedCleared => {
                    self.denied_ids.insert(k.id.clone());
                }
                KeyState::Deleted => {
                    self.key_ids.insert(k.id.clone());
                    self.cleared.insert(k.id.clone());
                }
                _ => {
                    self.key_ids.insert(k.id.clone());
                }
            },
            Record::RootsBlob(b) => {
                self.roots.insert((b.tree, b.saltenv.clone(), b.path.clone()));
            }
            Record::RootsTombstone(t) => {
                self.roots.insert((t.tree, t.saltenv.clone(), t.path.clone()));
            }
            // A sync's commit names every file it can write and every one it can remove
            // (what its apply decided is in the state machine; the view is made equal).
            Record::RootsSync(sy) => {
                self.roots.extend(sy.files.iter().map(|f| (f.tree, f.saltenv.clone(), f.path.clone())));
                self.roots.extend(sy.remove.iter().map(|t| (t.tree, t.saltenv.clone(), t.path.clone())));
            }
            Record::MasterKeyPair(_) | Record::ClusterKeyPair(_) => self.pairs = true,
            Record::FileRecv(f) => {
                self.pushed.insert((f.id.clone(), f.path.clone()));
            }
            _ => {}
        }
    }

    pub fn len(&self) -> usize {
        self.key_ids.len() + self.denied_ids.len() + self.roots.len() + self.pushed.len() + self.cleared.len() + usize::from(self.pairs)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Views {
    /// Makes the view entries of everything in `touched` equal to the state machine's.
    pub fn resync(&mut self, sm: &StateMachine, touched: &Touched) -> Result<()> {
        for id in &touched.key_ids {
            match sm.get_key(id)? {
                Some(k) => self.keys.set_key(id, k.state, &k.pub_key, k.time_ns)?,
                None => {
                    self.keys.remove_key(id)?;
                }
            }
        }
        for id in &touched.denied_ids {
            match sm.get_denied(id)? {
                Some((t, p)) => self.keys.set_denied(id, &p, t)?,
                None => {
                    self.keys.remove_denied(id)?;
                }
            }
        }
        for (tree, env, path) in &touched.roots {
            match sm.roots_file(*tree, env, path)? {
                Some((meta, data)) => self.roots.write(*tree, env, path, meta.mode, &data)?,
                None => self.roots.remove(*tree, env, path)?,
            }
        }
        self.roots.resync_cleared(sm, &touched.cleared)?;
        for (id, path) in &touched.pushed {
            self.roots.write_pushed(sm, id, path)?;
        }
        if touched.pairs {
            self.write_pairs(sm)?;
        }
        self.keys.sync()
    }

    /// Writes the key pairs the state machine holds into the key view's master bank.
    pub fn write_pairs(&mut self, sm: &StateMachine) -> Result<()> {
        if let Some(k) = sm.master_key_pair()? {
            self.write_master_pair(&k.name, &k.private_pem)?;
        }
        if let Some(k) = sm.cluster_key_pair()? {
            self.write_cluster_pair(&k.private_pem)?;
        }
        Ok(())
    }

    /// Whether the key view lacks a key pair the state machine holds (a wiped or new
    /// keys directory).
    pub fn missing_pairs(&self, sm: &StateMachine) -> Result<bool> {
        if let Some(k) = sm.master_key_pair()? {
            if self.keys.get_master_key(&format!("{}.pem", k.name))?.as_deref() != Some(&k.private_pem[..]) {
                return Ok(true);
            }
        }
        if let Some(k) = sm.cluster_key_pair()? {
            if self.keys.get_master_key(pair::CLUSTER_PEM)?.as_deref() != Some(&k.private_pem[..]) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn write_master_pair(&mut self, name: &str, private_pem: &[u8]) -> Result<()> {
        let public = pair::public_pem_of(private_pem)?;
        self.keys.set_master_pair(name, private_pem, &public)
    }

    fn write_cluster_pair(&mut self, private_pem: &[u8]) -> Result<()> {
        let public = pair::public_pem_of(private_pem)?;
        for (name, data) in [(pair::CLUSTER_PEM, private_pem), (pair::CLUSTER_PUB, &public[..])] {
            if self.keys.get_master_key(name)?.as_deref() != Some(data) {
                self.keys.set_master_key(name, data)?;
            }
        }
        Ok(())
    }

    pub fn new(keys: Box<dyn KeyView>, roots: RootsMaterialiser) -> Self {
        Views { keys, roots, shared: None, left_shared: None }
    }

    /// These views are shared with other members (see [`shared`]).
    pub fn shared_with(mut self, shared: shared::SharedViews) -> Self {
        self.shared = Some(shared);
        self
    }

    /// Mirrors a batch of applied entries (their effects `effects`) into the views
    /// `skip` does not name, and returns what failed (as [`Views::apply_each`]). Shared
    /// views follow [`shared`]: one member writes each change, from the
    /// state machine, under the view's mark; `log` supplies the entries between the
    /// mark and the batch.
    pub fn apply_entries(&mut self, sm: &StateMachine, log: Option<&crate::log::RaftLog>, entries: &[crate::entry::LogEntry], effects: &[Effect], skip: &mut dyn FnMut(ViewKind) -> bool) -> Vec<ViewFault> {
        if self.shared.is_none() {
            return self.apply_each(sm, effects, skip);
        }
        let mut faults = Vec::new();
        for view in ViewKind::ALL {
            let write = !skip(view);
            if let Err(error) = self.apply_shared(sm, log, entries, view, write) {
                faults.push(ViewFault { view, error });
                if view == ViewKind::Keys {
                    // A view that failed must not keep others out.
                    let _ = self.keys.release();
                }
            }
        }
        faults
    }

    /// Mirrors one applied batch; the first failure is the error (for callers that stop
    /// on it: the offline tools and the tests). The node uses [`Views::apply_each`].
    pub fn apply(&mut self, sm: &StateMachine, effects: &[Effect]) -> Result<()> {
        match self.apply_each(sm, effects, &mut |_| false).into_iter().next() {
            Some(f) => Err(f.error),
            None => Ok(()),
        }
    }

    /// Mirrors one applied batch into every view that `skip` does not name, and returns
    /// what failed: at most one [`ViewFault`] per view, whose remaining effects in the
    /// batch are then skipped (the caller marks it dirty and rebuilds it later). A view
    /// entry that can never be written (an id too long for the mmap geometry, a symlink
    /// in a roots tree) is logged and skipped: the state machine still holds it, and it
    /// is not a fault of the view.
    pub fn apply_each(&mut self, sm: &StateMachine, effects: &[Effect], skip: &mut dyn FnMut(ViewKind) -> bool) -> Vec<ViewFault> {
        let mut faults: Vec<ViewFault> = Vec::new();
        for fx in effects {
            let view = ViewKind::of(fx);
            if faults.iter().any(|f| f.view == view) || skip(view) {
                continue;
            }
            let r = match fx {
                Effect::KeySet { id, state, pub_key, time_ns } => self.keys.set_key(id, *state, pub_key, *time_ns),
                Effect::KeyRemoved { id } => self.keys.remove_key(id).map(|_| ()),
                Effect::DeniedSet { id, pub_key, time_ns } => self.keys.set_denied(id, pub_key, *time_ns),
                Effect::DeniedRemoved { id } => self.keys.remove_denied(id).map(|_| ()),
                Effect::RootsWritten { tree, saltenv, path } => self.roots.materialise(sm, *tree, saltenv, path),
                Effect::RootsRemoved { tree, saltenv, path } => self.roots.remove(*tree, saltenv, path),
                Effect::MasterKeyPair { name, private_pem } => self.write_master_pair(name, private_pem),
                Effect::ClusterKeyPair { private_pem } => self.write_cluster_pair(private_pem),
                Effect::PushedWritten { id, path } => self.roots.write_pushed(sm, id, path),
                Effect::PushedRemoved { id, path } => self.roots.remove_pushed(id, path),
                Effect::PushedCleared { id } => self.roots.clear_pushed(id),
            };
            match r {
                Ok(()) => {}
                Err(e @ (crate::error::Error::Invalid(_) | crate::error::Error::InvalidId { .. } | crate::error::Error::InvalidPath { .. })) => {
                    tracing::error!(driver = self.keys.driver(), "view not updated: {e}");
                }
                Err(error) => faults.push(ViewFault { view, error }),
            }
        }
        // The key view keeps its writer locks until it is next made durable (`sync`:
        // the node does it at least once a second while it applies, at once when idle),
        // so batches under load share one lock and one fsync. A view that failed must
        // not keep others out: its locks go now.
        if faults.iter().any(|f| f.view == ViewKind::Keys) {
            let _ = self.keys.release();
        }
        faults
    }

    /// Brings a view that failed back to the state machine: the key view is cleared and
    /// written again (with its key pairs); the roots trees get every file the state
    /// holds, and the `touched` paths (changed while the view was failing, removals
    /// included) are made equal to the state.
    pub fn recover(&mut self, sm: &StateMachine, view: ViewKind, touched: &Touched) -> Result<()> {
        match view {
            ViewKind::Keys => {
                self.rebuild_keys(sm, |_, _| {})?;
            }
            ViewKind::Roots => {
                for (tree, env, path) in &touched.roots {
                    match sm.roots_file(*tree, env, path)? {
                        Some((meta, data)) => self.roots.write(*tree, env, path, meta.mode, &data)?,
                        None => self.roots.remove(*tree, env, path)?,
                    }
                }
                self.roots.resync_cleared(sm, &touched.cleared)?;
                for (id, path) in &touched.pushed {
                    self.roots.write_pushed(sm, id, path)?;
                }
                self.roots.rebuild(sm)?;
            }
        }
        Ok(())
    }

    pub fn sync(&mut self) -> Result<()> {
        self.keys.sync()
    }

    /// Deletes the key view and writes it again from the state machine, in id order, so
    /// that the same state always gives the same bytes.
    pub fn rebuild_keys(&mut self, sm: &StateMachine, mut progress: impl FnMut(u64, u64)) -> Result<RebuildCounts> {
        self.keys.clear()?;
        let keys = sm.keys()?;
        let denied = sm.denied()?;
        let total = (keys.len() + denied.len()) as u64;
        let mut c = RebuildCounts::default();
        let mut done = 0;
        for (id, k) in keys {
            match self.keys.set_key(&id, k.state, &k.pub_key, k.time_ns) {
                Ok(()) => match k.state {
                    crate::keys::BankState::Accepted => c.accepted += 1,
                    crate::keys::BankState::Pending => c.pending += 1,
                    crate::keys::BankState::Rejected => c.rejected += 1,
                },
                Err(e) => {
                    tracing::error!("{e}");
                    c.refused += 1;
                }
            }
            done += 1;
            if done % 1024 == 0 {
                progress(done, total);
            }
        }
        for (id, t, pub_key) in denied {
            match self.keys.set_denied(&id, &pub_key, t) {
                Ok(()) => c.denied += 1,
                Err(e) => {
                    tracing::error!("{e}");
                    c.refused += 1;
                }
            }
            done += 1;
        }
        progress(done, total);
        self.write_pairs(sm)?;
        self.keys.sync()?;
        Ok(c)
    }

    /// Compares the key view with the state machine; returns the differences (empty when
    /// the view is faithful).
    pub fn diff_keys(&self, sm: &StateMachine) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let (view_keys, view_denied) = self.keys.entries()?;
        let mut vk: std::collections::BTreeMap<String, KeyEntry> = view_keys.into_iter().map(|e| (e.id.clone(), e)).collect();
        for e in sm.key_entries()? {
            match vk.remove(&e.id) {
                None => out.push(format!("{}: {} in the state machine, missing from the view", e.id, e.state.as_str())),
                Some(v) if v != e => out.push(format!("{}: view has {} with a {}-byte key, state machine {} with {} bytes", e.id, v.state.as_str(), v.pub_key.len(), e.state.as_str(), e.pub_key.len())),
                _ => {}
            }
        }
        for id in vk.keys() {
            out.push(format!("{id}: in the view, not in the state machine"));
        }
        let mut vd: std::collections::BTreeMap<String, Vec<u8>> = view_denied.into_iter().collect();
        for (id, _, p) in sm.denied()? {
            match vd.remove(&id) {
                None => out.push(format!("{id}: denied in the state machine, missing from the view")),
                Some(v) if v != p => out.push(format!("{id}: denied key differs between view and state machine")),
                _ => {}
            }
        }
        for id in vd.keys() {
            out.push(format!("{id}: denied in the view, not in the state machine"));
        }
        Ok(out)
    }
}
