//! Snapshots between members, on the driver thread.
//!
//! **Sending.** raft-rs answers a member whose next entry is below the log's first index
//! (a joiner after a compaction, a member restarted on an empty disk, one that was away
//! long) with a `MsgSnapshot` naming the snapshot the log was compacted through
//! (`RaftLog`'s `Storage::snapshot`). The driver never sends that message itself: it
//! hands it, with the snapshot's files from the store, to the transport
//! ([`Outbox::send_snapshot`]), which streams manifest, chunks, then the message on a
//! thread and connection of their own (`snapshot_transfer.rs`), so the raft loop never
//! waits. One transfer per peer at a time; when it ends the driver tells raft
//! (`report_snapshot`: finished, or failed and tried again after raft's probe).
//!
//! **Receiving.** The transport receives a transfer into this node's snapshot store,
//! checking every byte, and only then delivers the `MsgSnapshot` to the node like any
//! raft message. raft-rs decides whether it needs it; if so its `Ready` carries the
//! snapshot and [`Driver::install_snapshot`] installs it: the log records the snapshot
//! (dropping its entries), the snapshot's checkpoint becomes the state machine's
//! directory and its database (`snapshot::install_state`: the `StateMachine` others
//! hold stays, its database is swapped under it, no byte copied), the views are
//! rebuilt from it, and the address book is read again from the log. The log's tail
//! follows from the leader as usual. An install that meets a full disk holds the node
//! and runs again once space is freed (`state_full.rs`).
//!
//! [`Outbox::send_snapshot`]: crate::transport::Outbox::send_snapshot

use std::collections::HashSet;
use std::time::Instant;

use raft::eraftpb::{Message, Snapshot as RaftSnapshot};
use raft::SnapshotStatus;

use halite_storage::snapshot::SnapshotStore;

use super::Driver;
use crate::node::membership;
use crate::node::{Msg, NodeError, Result, Tap};

/// The driver's side of snapshots between members: the store they are sent from (and
/// received into, and compactions build into), and the transfers under way.
pub(in crate::node) struct Snapshots {
    /// The node's snapshot store; `None`: a node without one (it never compacts, and
    /// cannot send or install a snapshot).
    pub(super) store: Option<SnapshotStore>,
    /// Peers a snapshot is being sent to (one transfer per peer at a time).
    pub(super) sending: HashSet<u64>,
}

impl Snapshots {
    pub(super) fn new(store: Option<SnapshotStore>) -> Self {
        Snapshots { store, sending: HashSet::new() }
    }
}

impl Driver {
    /// Hands a `MsgSnapshot` to the transport with the snapshot's files.
    pub(super) fn send_snapshot(&mut self, m: Message) {
        let to = m.to;
        if !self.snapshots.sending.insert(to) {
            return; // a transfer to that peer is under way
        }
        let index = m.get_snapshot().get_metadata().index;
        let found = match (&self.snapshots.store, &self.peers.outbox) {
            (Some(store), Some(o)) => store.get(index).map(|s| s.map(|s| (s, o.clone()))),
            _ => Ok(None),
        };
        match found {
            Ok(Some((snap, outbox))) => {
                let tx = self.self_tx.clone();
                tracing::info!(to, index, bytes = snap.manifest().total_bytes(), "peer is behind the log's first index: sending it the snapshot");
                outbox.send_snapshot(snap, m, Box::new(move |r| {
                    let _ = tx.send(Msg::SnapshotSent(to, r.is_ok()));
                }));
            }
            Ok(None) => {
                tracing::warn!(to, index, "raft asked to send snapshot {index}, which the snapshot store does not hold");
                self.snapshot_sent(to, false);
            }
            Err(e) => {
                tracing::warn!(to, index, "cannot read snapshot {index}: {e}");
                self.snapshot_sent(to, false);
            }
        }
    }

    /// A transfer to `to` ended.
    pub(super) fn snapshot_sent(&mut self, to: u64, ok: bool) {
        self.snapshots.sending.remove(&to);
        self.core.raw.report_snapshot(to, if ok { SnapshotStatus::Finish } else { SnapshotStatus::Failure });
    }

    /// Installs the snapshot raft's `Ready` carries (received before its message was
    /// delivered; see the module docs). The log records it first (written again while
    /// its filesystem is full, as every log write); then its state is put in place
    /// ([`Driver::install_state`]).
    pub(super) fn install_snapshot(&mut self, rs: &RaftSnapshot) -> Result<()> {
        let index = rs.get_metadata().index;
        let started = Instant::now();
        let snap = self.stored_snapshot(index)?;
        let (meta, members) = (snap.metadata(), snap.manifest().members()?);
        self.write_log(|log| log.install_snapshot(&meta, &members))?;
        self.install_state(snap, started)
    }

    pub(super) fn stored_snapshot(&self, index: u64) -> Result<halite_storage::snapshot::Snapshot> {
        let store = self.snapshots.store.as_ref().ok_or_else(|| NodeError::Stopped("received a snapshot but this node has no snapshot store".into()))?;
        store.get(index)?.ok_or_else(|| NodeError::Stopped(format!("raft installs snapshot {index}, which the snapshot store does not hold")))
    }

    /// Puts the state of snapshot `snap`, which the log records, in place of the state
    /// machine's, then rebuilds what derives from it. A filesystem too full for it holds
    /// the node like a state-machine write that met a full disk (`state_full.rs`), the
    /// old state still served; once space is back this runs again
    /// ([`Driver::reopen_state`]). A restart in between installs it at start.
    pub(super) fn install_state(&mut self, snap: halite_storage::snapshot::Snapshot, started: Instant) -> Result<()> {
        let index = snap.index();
        match halite_storage::snapshot::install_state(&snap, &self.core.sm) {
            Ok(()) => self.space.install = None,
            Err(e) if e.is_no_space() => {
                if self.space.install.is_none() {
                    tracing::error!(id = self.cfg.id, index, "snapshot {index} cannot be installed, the state machine's filesystem is full ({e}): writes are refused and the old state served until space is freed, then it is installed");
                }
                self.space.install = Some(index);
                self.hold_for_state();
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        self.derived.effected = self.derived.effected.max(index);
        let items = self.core.sm.estimated_items()?;
        // Salt's line for a joiner's state transfer, in Halite's terms (session: the
        // snapshot, channel: the state machine).
        tracing::info!("state-sync snapshot-{index}/state seq=0 installed {items} items");
        // The views are rebuilt from the new state (key pairs included); one that cannot
        // be written is dirty.
        if self.derived.views.is_shared() {
            // Shared with other members: caught up from the mark, never cleared.
            for kind in halite_storage::views::ViewKind::ALL {
                if let Err(e) = self.derived.views.catch_up_shared(&self.core.sm, None, kind, index) {
                    self.view_sync_failed(kind, &e);
                }
            }
        } else {
            if let Err(e) = self.derived.views.rebuild_keys(&self.core.sm, |_, _| {}).and_then(|_| self.derived.views.write_pairs(&self.core.sm)) {
                self.view_sync_failed(halite_storage::views::ViewKind::Keys, &e);
            }
            if let Err(e) = self.derived.views.roots.rebuild(&self.core.sm) {
                self.view_sync_failed(halite_storage::views::ViewKind::Roots, &e);
            }
        }
        if !self.health.faults.any() {
            match self.core.sm.set_views_index(index) {
                // Recorded again once the state machine is opened again.
                Err(e) if e.is_no_space() => self.state_failed(&e),
                r => r?,
            }
        }
        // The members and their addresses, as the snapshot knows them.
        let book = membership::address_book(&self.core.log)?;
        if let Some(o) = &self.peers.outbox {
            for (id, addr) in &book {
                o.set_peer(*id, Some(*addr));
            }
        }
        *self.peers.membership.book.write().unwrap_or_else(|p| p.into_inner()) = book;
        // The member key book came with the state (`member_keys.rs`).
        self.peers.keys_dirty = true;
        // The tap saw none of the records the snapshot covers (old jobs are not to be
        // published again); the one a running member must not miss is the current AES
        // key, shown again (a generation already installed is ignored by the daemon).
        if let (Some(Tap(tap)), Some(a)) = (&self.cfg.tap, self.core.sm.latest_aes()?) {
            tap(index, &halite_storage::Record::AesKeyRotation(a));
        }
        let pruned = self.snapshots.store.as_ref().map(|store| store.prune(index)).transpose()?.unwrap_or(0);
        tracing::info!(index, term = snap.manifest().term, items, bytes = snap.manifest().total_bytes(), pruned, ms = started.elapsed().as_millis() as u64, "snapshot installed; the log's tail follows");
        Ok(())
    }
}

/// What the transport receives snapshots with: this node's store, and its channel for
/// the `MsgSnapshot` once the files are complete.
struct NodeSnapshots {
    store: halite_storage::snapshot::SnapshotStore,
    tx: std::sync::Mutex<std::sync::mpsc::Sender<Msg>>,
}

impl crate::snapshot_transfer::SnapshotInbox for NodeSnapshots {
    fn store(&self, _from: u64) -> Option<halite_storage::snapshot::SnapshotStore> {
        Some(self.store.clone())
    }

    fn received(&self, _from: u64, _snap: halite_storage::snapshot::Snapshot, msg: Message) {
        let _ = self.tx.lock().unwrap_or_else(|p| p.into_inner()).send(Msg::Raft(Box::new(msg)));
    }
}

/// The inbox the transport hands received snapshots to (`boot.rs` registers it).
pub(in crate::node) fn inbox(store: halite_storage::snapshot::SnapshotStore, tx: std::sync::mpsc::Sender<Msg>) -> std::sync::Arc<dyn crate::snapshot_transfer::SnapshotInbox> {
    std::sync::Arc::new(NodeSnapshots { store, tx: std::sync::Mutex::new(tx) })
}
