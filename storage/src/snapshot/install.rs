//! Installing a snapshot: the state machine directory is replaced by the snapshot's, in
//! a way a crash at any point leaves recoverable, and [`recover_at_start`] repairs what
//! a crash left.
//!
//! With `state` the state machine directory, [`swap_in`] does, in order:
//!
//! 1. build `state.installing`: the snapshot's SST files hard-linked (they are never
//!    modified), the others (RocksDB's MANIFEST, CURRENT, OPTIONS, which RocksDB writes
//!    to) copied; opened once to check its applied index and to reset `views_index` to 0
//!    (the views must be rebuilt from it); fsynced;
//! 2. rename `state` to `state.replaced` (if there is a `state`);
//! 3. rename `state.installing` to `state`;
//! 4. remove `state.replaced`.
//!
//! So `state.replaced` exists only while a complete `state.installing` does or after it
//! became `state`: at start, a `state.replaced` means finish the swap, a lone
//! `state.installing` means an unfinished step 1 (removed). [`install`] records the
//! snapshot in the log before swapping, so a state machine found behind the log's
//! snapshot at start is simply installed again from the snapshot store.
//!
//! A running member installs with [`install_running`]: the same steps, with the state
//! machine kept open by everyone who holds it; only its database is closed between
//! step 1 and step 2 and the installed one opened after step 3 (`state/handle.rs`).

use std::path::{Path, PathBuf};

use super::store::{fsync_dir, Snapshot, SnapshotStore};
use crate::error::{Error, IoContext, Result};
use crate::log::RaftLog;
use crate::state::StateMachine;

fn sibling(state: &Path, ext: &str) -> PathBuf {
    state.with_extension(ext)
}

fn parent(p: &Path) -> &Path {
    p.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Step 1 (module docs): builds `state.installing` from `snap` and checks it. The
/// state machine at `state` may be open meanwhile.
pub(super) fn prepare(snap: &Snapshot, state: &Path) -> Result<()> {
    let inst = sibling(state, "installing");
    if inst.exists() {
        std::fs::remove_dir_all(&inst).ctx(|| format!("removing {}", inst.display()))?;
    }
    std::fs::create_dir_all(&inst).ctx(|| format!("creating {}", inst.display()))?;
    for (i, f) in snap.manifest().files.iter().enumerate() {
        let name = super::manifest::check_path(&f.path)?;
        let src = snap.file_path(i).ok_or_else(|| Error::Invalid("snapshot file missing from its manifest".into()))?;
        let dst = inst.join(name);
        let linked = name.ends_with(".sst") && std::fs::hard_link(&src, &dst).is_ok();
        if !linked {
            std::fs::copy(&src, &dst).ctx(|| format!("copying {} to {}", src.display(), dst.display()))?;
            std::fs::File::open(&dst).and_then(|f| f.sync_all()).ctx(|| format!("syncing {}", dst.display()))?;
        }
    }
    {
        let sm = StateMachine::open(&inst)?;
        let applied = sm.applied_index()?;
        if applied != snap.index() {
            return Err(Error::Invalid(format!("snapshot {} holds a state machine at applied index {applied}", snap.index())));
        }
        sm.set_views_index(0)?;
        sm.flush()?;
    }
    fsync_dir(&inst)
}

/// Steps 2 and 3: `state` (closed) becomes `state.replaced`, `state.installing` becomes
/// `state`.
pub(super) fn switch(state: &Path) -> Result<()> {
    let inst = sibling(state, "installing");
    let replaced = sibling(state, "replaced");
    if state.exists() {
        std::fs::rename(state, &replaced).ctx(|| format!("renaming {} to {}", state.display(), replaced.display()))?;
        fsync_dir(parent(state))?;
    }
    std::fs::rename(&inst, state).ctx(|| format!("renaming {} to {}", inst.display(), state.display()))?;
    fsync_dir(parent(state))
}

/// Step 4: the replaced directory goes.
fn remove_replaced(state: &Path) -> Result<()> {
    let replaced = sibling(state, "replaced");
    if replaced.exists() {
        std::fs::remove_dir_all(&replaced).ctx(|| format!("removing {}", replaced.display()))?;
    }
    Ok(())
}

/// Replaces the state machine directory `state` (which must be closed) with a copy of
/// `snap`'s (see the module docs). The log is not touched.
pub fn swap_in(snap: &Snapshot, state: &Path) -> Result<()> {
    prepare(snap, state)?;
    switch(state)?;
    remove_replaced(state)
}

/// Installs a snapshot received from the leader: the log records it (its conf state,
/// membership entries, commit; entries it covers dropped, see
/// [`RaftLog::install_snapshot`]), then the state machine directory `state` (closed by
/// the caller) is swapped for the snapshot's. The caller reopens the state machine and
/// rebuilds the views (`views_index` is 0 in the installed state).
pub fn install(snap: &Snapshot, log: &RaftLog, state: &Path) -> Result<()> {
    log.install_snapshot(&snap.metadata(), &snap.manifest().members()?)?;
    swap_in(snap, state)?;
    tracing::info!(index = snap.index(), term = snap.manifest().term, bytes = snap.manifest().total_bytes(), "snapshot installed");
    Ok(())
}

/// [`install`] into a state machine that stays open and shared: the log records the
/// snapshot, then [`install_state`] puts its state in place. The caller rebuilds the
/// views (`views_index` is 0 in the installed state).
pub fn install_running(snap: &Snapshot, log: &RaftLog, sm: &StateMachine) -> Result<()> {
    log.install_snapshot(&snap.metadata(), &snap.manifest().members()?)?;
    install_state(snap, sm)
}

/// The state step of [`install_running`], once the log records `snap`:
/// `state.installing` is prepared while `sm` still serves the old state, then `sm`
/// closes its database once no operation uses it (not flushed: it is being replaced),
/// the directories are switched (the same steps as [`swap_in`], so a crash anywhere is
/// repaired at start by [`recover_at_start`]) and `sm` opens the installed one
/// (`StateMachine::reopen_after`). No byte of the state is written again: the installed
/// SSTs are the snapshot's, hard linked.
///
/// It may be run again after it failed (a full disk, say): what an earlier run left
/// (`state.replaced`, `state.installing`) is removed first, which is safe because the
/// log already records the snapshot, and a state machine whose open failed is opened
/// again. A failure in the preparation leaves `sm` serving the old state.
pub fn install_state(snap: &Snapshot, sm: &StateMachine) -> Result<()> {
    let state = sm.path().to_path_buf();
    remove_replaced(&state)?;
    prepare(snap, &state)?;
    sm.reopen_after(|| switch(&state))?;
    remove_replaced(&state)
}

/// What [`recover_at_start`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Staging directories removed (unfinished builds or transfers).
    pub staging_removed: usize,
    /// A half-done swap that was finished (`"finished"`) or undone (`"undone"`).
    pub swap: Option<&'static str>,
    /// The index of a snapshot installed because the state machine was behind it.
    pub installed: Option<u64>,
}

/// Repairs what a crash during a build, a transfer or an install left, before the state
/// machine is opened: removes staging directories, finishes or undoes a half-done swap
/// (module docs), and if the log was compacted through a snapshot the state machine has
/// not reached (or there is no state machine), installs that snapshot from `store`.
pub fn recover_at_start(store: &SnapshotStore, log: &RaftLog, state: &Path) -> Result<Recovered> {
    let mut rec = Recovered { staging_removed: store.clean_staging()?, ..Default::default() };
    let inst = sibling(state, "installing");
    let replaced = sibling(state, "replaced");
    if replaced.exists() {
        if !state.exists() && inst.exists() {
            std::fs::rename(&inst, state).ctx(|| format!("renaming {} to {}", inst.display(), state.display()))?;
        } else if !state.exists() {
            std::fs::rename(&replaced, state).ctx(|| format!("renaming {} to {}", replaced.display(), state.display()))?;
        }
        if replaced.exists() {
            std::fs::remove_dir_all(&replaced).ctx(|| format!("removing {}", replaced.display()))?;
        }
        fsync_dir(parent(state))?;
        rec.swap = Some("finished");
    }
    if inst.exists() {
        std::fs::remove_dir_all(&inst).ctx(|| format!("removing {}", inst.display()))?;
        rec.swap = Some("undone");
    }
    let snap_index = log.snapshot_meta()?.index;
    if snap_index > 0 {
        let applied = if state.exists() { StateMachine::open(state)?.applied_index()? } else { 0 };
        if applied < snap_index {
            let snap = store.get(snap_index)?.ok_or_else(|| {
                Error::CorruptLog(format!(
                    "the log is compacted through index {snap_index} but the state machine has applied {applied} and snapshot {snap_index} is missing from {}; restore the data dir from a backup or join again from a peer",
                    store.dir().display()
                ))
            })?;
            tracing::warn!(applied, snapshot = snap_index, "the state machine is behind the log's snapshot: installing the snapshot");
            swap_in(&snap, state)?;
            rec.installed = Some(snap_index);
        }
    }
    if rec != Recovered::default() {
        tracing::info!(?rec, "snapshot recovery at start");
    }
    Ok(rec)
}
