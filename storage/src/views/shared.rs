//! Views on a shared filesystem: one writer at a time, never backwards.
//!
//! In Salt's shared-filesystem topology (`cluster_isolated_filesystem: False`) every
//! member of a cluster mounts the same `cluster_pki_dir`, `cachedir` and roots. Each
//! Halite member applies the same log to its own state machine, so each could write the
//! same views; left alone they would write every change once per member, a member that is
//! behind (restarting, catching up) would put older bytes back over newer ones, and a
//! rebuild on one member would empty the files under the others and under Salt's
//! `salt-key`.
//!
//! So a shared view carries a **mark**: the log index whose state it shows. It lives
//! beside the key view, in `cluster_pki_dir` (`.halite-view-keys-<driver>.index` for the
//! key view of `keys.cache_driver` `<driver>`, `.halite-view-roots.index`;
//! `docs/formats.md` §4), and is read and written only under its `flock`
//! (`.halite-view-<view>.lock`, held for one group of changes and waited for at most
//! [`crate::flock::LOCK_WAIT`]). A member that has applied a batch of entries
//! `from..=to` touching a view takes its turn:
//!
//! - mark ≥ `to`: another member already showed that state or a later one; nothing is
//!   written (the bytes would be the same, or older);
//! - otherwise the entries the batch touched, plus any entry between the mark and the
//!   batch that touched the view (read from the log; when the log no longer holds them,
//!   the whole view is reconciled with the state machine), are written as the state
//!   machine holds them **now** (state at `to`, never an intermediate one), then the
//!   mark becomes `to`.
//!
//! The first member to apply an entry writes it, the others skip; whoever stops, the
//! next one to apply a change picks up from the mark. A view is never cleared: a full
//! reconciliation writes what differs and removes only what the state machine does not
//! hold. The mark names the `cluster_id`; a mark of another cluster is ignored.
//!
//! Salt's `mmap_key` writers (its `salt-key`, `pki.migrate_to_mmap`) take only the
//! MmapCache's own lock, which Halite's key view takes too, inside the mark's lock.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::entry::LogEntry;
use crate::error::{Error, IoContext, Result};
use crate::flock::{Flock, LOCK_WAIT};
use crate::log::RaftLog;
use crate::state::StateMachine;
use super::{Touched, ViewKind, Views};

/// Past this many entries between the mark and a batch, the view is reconciled with the
/// state machine instead of reading them from the log.
pub const MAX_GAP_ENTRIES: u64 = 100_000;

/// A mark file is a few dozen bytes; anything larger is not ours.
const MAX_MARK_BYTES: u64 = 4096;

/// Where the marks of a shared tree live, and what this member knows of the log.
#[derive(Debug)]
pub struct SharedViews {
    dir: PathBuf,
    cluster_id: String,
    /// The key view's driver (`localfs_key`, `mmap_key`): each has its own mark, since
    /// both layouts may sit in one directory (after `pki.migrate_to_mmap`).
    key_driver: String,
    /// Per view: the index of the last entry this member applied that touched it
    /// (`None` until known: after a start, the first batch reads the log back to the mark).
    last_touch: [Option<u64>; 2],
}

/// One member's turn at a shared view: the mark's lock, held until dropped.
#[derive(Debug)]
pub struct Turn {
    _lock: Flock,
    path: PathBuf,
    cluster_id: String,
    mark: Option<u64>,
    /// A mark file was there, of another cluster or unreadable.
    foreign: bool,
}

fn slot(kind: ViewKind) -> usize {
    match kind {
        ViewKind::Keys => 0,
        ViewKind::Roots => 1,
    }
}

impl SharedViews {
    /// The marks of the shared tree whose key directory is `keys_dir`, for the key view
    /// driver `key_driver`.
    pub fn new(keys_dir: &Path, cluster_id: &str, key_driver: &str) -> Self {
        SharedViews { dir: keys_dir.to_path_buf(), cluster_id: cluster_id.to_string(), key_driver: key_driver.to_string(), last_touch: [None, None] }
    }

    fn name(&self, kind: ViewKind) -> String {
        match kind {
            ViewKind::Keys => format!("keys-{}", self.key_driver),
            ViewKind::Roots => "roots".to_string(),
        }
    }

    pub fn mark_path(&self, kind: ViewKind) -> PathBuf {
        self.dir.join(format!(".halite-view-{}.index", self.name(kind)))
    }

    fn lock_path(&self, kind: ViewKind) -> PathBuf {
        self.dir.join(format!(".halite-view-{}.lock", self.name(kind)))
    }

    /// Whether any mark (of any driver) exists: the tree's views are maintained by
    /// Halite members.
    pub fn maintained(&self) -> bool {
        std::fs::read_dir(&self.dir)
            .map(|rd| rd.flatten().any(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.starts_with(".halite-view-") && n.ends_with(".index")
            }))
            .unwrap_or(false)
    }

    /// Takes the view's lock (bounded wait) and reads its mark.
    pub fn turn(&self, kind: ViewKind) -> Result<Turn> {
        std::fs::create_dir_all(&self.dir).ctx(|| format!("creating {}", self.dir.display()))?;
        let lock = Flock::acquire(&self.lock_path(kind), LOCK_WAIT)?;
        let path = self.mark_path(kind);
        let mark = read_mark(&path, &self.cluster_id)?;
        let foreign = mark.is_none() && path.exists();
        Ok(Turn { _lock: lock, path, cluster_id: self.cluster_id.clone(), mark, foreign })
    }
}

impl SharedViews {
    /// For a member whose views are its own now (`cluster_isolated_filesystem: True`) but
    /// were copied from a shared tree (Salt's shared → isolated procedure): the lowest
    /// mark left in the copy, i.e. the state the copied files show at least. The member
    /// resyncs from there at start (its own views index may be later than the copy).
    /// `None` unless both views (this driver's key view and the roots) carry a mark of
    /// this cluster.
    pub fn left_mark(&self) -> Option<u64> {
        let marks: Option<Vec<u64>> = ViewKind::ALL.iter().map(|k| read_mark(&self.mark_path(*k), &self.cluster_id).ok().flatten()).collect();
        marks.and_then(|m| m.into_iter().min())
    }

    /// Whether a copied tree carries marks at all (of any cluster).
    pub fn has_marks(&self) -> bool {
        self.maintained()
    }

    /// Removes every mark and mark lock file, of any driver (the tree is no longer
    /// shared).
    pub fn remove_marks(&self) -> Result<()> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(format!("listing {}", self.dir.display()), e)),
        };
        for e in rd.flatten() {
            let n = e.file_name();
            let n = n.to_string_lossy();
            if n.starts_with(".halite-view-") && (n.ends_with(".index") || n.ends_with(".lock")) {
                match std::fs::remove_file(e.path()) {
                    Ok(()) => {}
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                    Err(err) => return Err(Error::io(format!("removing {}", e.path().display()), err)),
                }
            }
        }
        Ok(())
    }
}

/// Reads a mark: `<index> <cluster_id>\n`. A missing, oversized, unreadable or foreign
/// mark is no mark (logged): the view is then reconciled before it is marked again.
fn read_mark(path: &Path, cluster_id: &str) -> Result<Option<u64>> {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
    };
    let mut text = String::new();
    f.take(MAX_MARK_BYTES).read_to_string(&mut text).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let mut it = text.split_whitespace();
    let parsed = match (it.next().map(str::parse::<u64>), it.next(), it.next()) {
        (Some(Ok(index)), Some(id), None) if id == cluster_id => Some(index),
        _ => None,
    };
    if parsed.is_none() {
        tracing::warn!(file = %path.display(), "shared view mark is not this cluster's (or not a mark); the view will be reconciled with the state machine");
    }
    Ok(parsed)
}

impl Turn {
    /// The index whose state the view shows (`None`: unknown).
    pub fn mark(&self) -> Option<u64> {
        self.mark
    }

    /// Whether a member (of this cluster or another) has written the view before: then
    /// entries the state machine does not hold are removed when reconciling.
    pub fn written_before(&self) -> bool {
        self.mark.is_some() || self.foreign
    }

    /// Records that the view shows the state at `index` (temp file, fsync, rename).
    pub fn set(&mut self, index: u64) -> Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let (tmp, mut f) = crate::mmap_cache::tempfile_in(dir, ".halite-view-mark-")?;
        let r = (|| -> Result<()> {
            f.write_all(format!("{index} {}\n", self.cluster_id).as_bytes()).ctx(|| format!("writing {}", tmp.display()))?;
            f.sync_all().ctx(|| format!("syncing {}", tmp.display()))?;
            std::fs::rename(&tmp, &self.path).ctx(|| format!("renaming to {}", self.path.display()))
        })();
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r?;
        self.mark = Some(index);
        Ok(())
    }
}

impl Views {
    /// Whether the views are on a shared filesystem (written by one member at a time).
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Writes one view of a batch of applied entries `entries` (their state-machine
    /// state is current) under the shared protocol (module docs). `log` is read for the
    /// entries between the mark and the batch, when there are any.
    pub(crate) fn apply_shared(&mut self, sm: &StateMachine, log: Option<&RaftLog>, entries: &[LogEntry], kind: ViewKind, write: bool) -> Result<()> {
        let Some(shared) = self.shared.as_mut() else { return Ok(()) };
        let (Some(from), Some(to)) = (entries.first().map(|e| e.index), entries.last().map(|e| e.index)) else { return Ok(()) };
        let mut touched = Touched::default();
        let mut touched_at = None;
        for e in entries {
            for r in e.records.iter().filter(|r| touches(r, kind)) {
                touched.add(r);
                touched_at = Some(e.index);
            }
        }
        let Some(touched_at) = touched_at else { return Ok(()) };
        let last_before = shared.last_touch[slot(kind)].replace(touched_at);
        if !write {
            return Ok(());
        }
        let mut turn = shared.turn(kind)?;
        let mark = turn.mark();
        if mark.is_some_and(|m| m >= to) {
            return Ok(());
        }
        // Did an entry between the mark and this batch touch the view? Unknown after a
        // start (no last touch) or with no mark: look.
        let gap = match (mark, last_before) {
            (Some(m), Some(l)) => l > m,
            _ => true,
        };
        if gap {
            match (mark, log) {
                // The batch starts right after the mark: nothing in between.
                (Some(m), _) if m + 1 >= from => {}
                (Some(m), Some(log)) if from - m <= MAX_GAP_ENTRIES && log.first_entry_index().is_some_and(|f| f <= m + 1) => {
                    log.for_each_record(m + 1, Some(from), |_, r| {
                        let r = r?;
                        if touches(&r, kind) {
                            touched.add(&r);
                        }
                        Ok(())
                    })?;
                }
                _ => {
                    tracing::info!(view = kind.as_str(), ?mark, to, "shared view: reconciling it with the state machine");
                    self.reconcile(sm, kind, turn.written_before())?;
                    return turn.set(to);
                }
            }
        }
        self.resync_kind(sm, kind, &touched)?;
        turn.set(to)
    }

    /// Brings a shared view to the state machine's `applied` state: at start, after a
    /// snapshot install, when recovering a dirty view. Nothing is written when the mark
    /// is already there. With `log`, the entries since the mark are resynced; without
    /// it, or when the log no longer holds them, the view is reconciled.
    pub fn catch_up_shared(&mut self, sm: &StateMachine, log: Option<&RaftLog>, kind: ViewKind, applied: u64) -> Result<()> {
        let Some(shared) = self.shared.as_mut() else { return Ok(()) };
        shared.last_touch[slot(kind)] = None;
        let mut turn = shared.turn(kind)?;
        let mark = turn.mark();
        if mark.is_some_and(|m| m >= applied) {
            return Ok(());
        }
        let from_log = match (mark, log) {
            (Some(m), Some(log)) if applied - m <= MAX_GAP_ENTRIES && log.first_entry_index().is_some_and(|f| f <= m + 1) => {
                let mut touched = Touched::default();
                log.for_each_record(m + 1, Some(applied + 1), |_, r| {
                    let r = r?;
                    if touches(&r, kind) {
                        touched.add(&r);
                    }
                    Ok(())
                })?;
                Some(touched)
            }
            _ => None,
        };
        match from_log {
            Some(t) => {
                tracing::info!(view = kind.as_str(), ?mark, applied, entries = t.len(), "shared view behind this member: resyncing what changed since its mark");
                self.resync_kind(sm, kind, &t)?;
                if kind == ViewKind::Keys && self.missing_pairs(sm)? {
                    self.write_pairs(sm)?;
                    self.keys.sync()?;
                }
            }
            None => {
                tracing::info!(view = kind.as_str(), ?mark, applied, "shared view: reconciling it with the state machine");
                self.reconcile(sm, kind, turn.written_before())?;
            }
        }
        turn.set(applied)
    }

    /// Makes a view equal to the state machine without ever emptying it: writes what
    /// differs and, with `remove_extras`, removes key entries the state machine does not
    /// hold (a roots tree keeps files it does not know: they may be an operator's).
    /// Without a mark the tree has never been written by a member (a tree Salt filled,
    /// whose keys the members import at start): nothing is removed then.
    pub fn reconcile(&mut self, sm: &StateMachine, kind: ViewKind, remove_extras: bool) -> Result<()> {
        match kind {
            ViewKind::Keys => {
                let (view_keys, view_denied) = self.keys.entries()?;
                let mut vk: std::collections::BTreeMap<String, crate::keys::KeyEntry> = view_keys.into_iter().map(|e| (e.id.clone(), e)).collect();
                for (id, k) in sm.keys()? {
                    let want = crate::keys::KeyEntry { id: id.clone(), state: k.state, pub_key: k.pub_key.clone() };
                    if vk.remove(&id).as_ref() != Some(&want) {
                        skip_invalid(self.keys.set_key(&id, k.state, &k.pub_key, k.time_ns))?;
                    }
                }
                for id in vk.keys().filter(|_| remove_extras) {
                    self.keys.remove_key(id)?;
                }
                let mut vd: std::collections::BTreeMap<String, Vec<u8>> = view_denied.into_iter().collect();
                for (id, t, p) in sm.denied()? {
                    if vd.remove(&id).as_deref() != Some(&p[..]) {
                        skip_invalid(self.keys.set_denied(&id, &p, t))?;
                    }
                }
                for id in vd.keys().filter(|_| remove_extras) {
                    self.keys.remove_denied(id)?;
                }
                if self.missing_pairs(sm)? {
                    self.write_pairs(sm)?;
                }
                self.keys.sync()
            }
            ViewKind::Roots => self.roots.rebuild(sm).map(|_| ()),
        }
    }

    /// [`Views::resync`] for one view, skipping (and logging) entries the view can never
    /// hold, as applying does.
    fn resync_kind(&mut self, sm: &StateMachine, kind: ViewKind, touched: &Touched) -> Result<()> {
        match kind {
            ViewKind::Keys => {
                for id in &touched.key_ids {
                    match sm.get_key(id)? {
                        Some(k) => skip_invalid(self.keys.set_key(id, k.state, &k.pub_key, k.time_ns))?,
                        None => {
                            skip_invalid(self.keys.remove_key(id).map(|_| ()))?;
                        }
                    }
                }
                for id in &touched.denied_ids {
                    match sm.get_denied(id)? {
                        Some((t, p)) => skip_invalid(self.keys.set_denied(id, &p, t))?,
                        None => {
                            skip_invalid(self.keys.remove_denied(id).map(|_| ()))?;
                        }
                    }
                }
                if touched.pairs {
                    self.write_pairs(sm)?;
                }
                self.keys.sync()
            }
            ViewKind::Roots => {
                for (tree, env, path) in &touched.roots {
                    let r = match sm.roots_file(*tree, env, path)? {
                        Some((meta, data)) => self.roots.write(*tree, env, path, meta.mode, &data),
                        None => self.roots.remove(*tree, env, path),
                    };
                    skip_invalid(r)?;
                }
                skip_invalid(self.roots.resync_cleared(sm, &touched.cleared))?;
                for (id, path) in &touched.pushed {
                    skip_invalid(self.roots.write_pushed(sm, id, path))?;
                }
                Ok(())
            }
        }
    }
}

/// Whether a record touches the view `kind`: a deleted key touches both (its pushed
/// files go with it).
fn touches(r: &crate::format::Record, kind: ViewKind) -> bool {
    use crate::format::{KeyState, Record};
    match r {
        Record::KeySet(k) if k.state == KeyState::Deleted => true,
        Record::KeySet(_) | Record::MasterKeyPair(_) | Record::ClusterKeyPair(_) => kind == ViewKind::Keys,
        Record::RootsBlob(_) | Record::RootsTombstone(_) | Record::RootsSync(_) | Record::FileRecv(_) => kind == ViewKind::Roots,
        _ => false,
    }
}

/// An entry a view can never hold (an id too long for the mmap geometry, a symlink in a
/// roots tree) is logged and skipped, as applying does; any other error is the view's.
fn skip_invalid(r: Result<()>) -> Result<()> {
    match r {
        Err(e @ (Error::Invalid(_) | Error::InvalidId { .. } | Error::InvalidPath { .. })) => {
            tracing::error!("view not updated: {e}");
            Ok(())
        }
        r => r,
    }
}
