//! Opening a node: from a log and a state machine on disk to a running driver thread.
//!
//! In order (the order matters; each step relies on the ones before):
//!
//! 1. **Found** a new log: unless the node is joining, a log with no entries gets the
//!    founding membership: one committed `AddNode` entry per founding voter, at term 1,
//!    each carrying the voter's address in its [entry context](super::context). Every
//!    founder writes the same entries, and a node that joins later learns the members,
//!    and where they listen, by replaying the log from index 1.
//! 2. **Check** the log: every entry and record is read and checked before serving, and a
//!    state machine that has applied more than the log holds is refused (committed
//!    records would be missing; `halite-ctl verify` says more).
//! 3. **Recover the views** (a view that cannot be written is left dirty, not fatal:
//!    `faults.rs`): views are derived from the state machine and synced lazily
//!    (see `driver.rs`), so after a crash they can be behind. Entries touched since their
//!    last sync are resynced from the state machine, or, if the log no longer holds those
//!    entries, the views are rebuilt. Views pointed at empty places (a wiped cache, a
//!    shared filesystem left for local directories) are rebuilt too: the log, not the
//!    files, is the truth. After a crash whose state machine is behind what its log had
//!    committed (it keeps no WAL), the views are ahead of it instead: they are left as
//!    they are until the driver has applied that commit again, then recovered.
//! 4. Start a new **incarnation** (persisted in the log's directory, larger than any
//!    before: part of every proposal's identity), and **build** raft-rs's `RawNode`
//!    over the log, starting from the applied index.
//! 5. Read the member **address book** from the log (`membership.rs`), hand it to the
//!    transport, and start the driver thread (`driver.rs`).

use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, ConfState, Entry, EntryType, HardState};
use raft::{Config as RaftConfig, RawNode, Storage};

use halite_storage::log::RaftLog;
use halite_storage::snapshot::SnapshotStore;
use halite_storage::state::StateMachine;
use halite_storage::views::{Touched, Views};
use halite_storage::Error as StorageError;

use super::context::{self, EntryContext};
use super::driver::{self, Core, Driver, Parts, Peers};
use super::membership::{self, Membership};
use super::driver::faults;
use super::driver::health::Health;
use super::status::NodeStatus;
use super::{Mailbox, Node, NodeConfig, Result};
use crate::transport::Outbox;

/// Opens a node over `log` and `sm` and starts its driver thread (see the module docs).
pub(super) fn start(log: RaftLog, sm: Arc<StateMachine>, mut views: Views, cfg: NodeConfig, outbox: Option<Arc<dyn Outbox>>, mailbox: Mailbox, snapshots: Option<SnapshotStore>) -> Result<Node> {
    // Before anything is written: a new (empty) log under a state machine that has
    // applied entries is a lost or replaced log directory, not a new member.
    state_not_ahead(&log, &sm)?;
    if log.is_new()? && cfg.join {
        tracing::info!(id = cfg.id, "new log: joining; waiting for the leader to replicate the group's log");
    } else if log.is_new()? {
        found(&log, &cfg)?;
    }
    log.check_all()?;
    state_not_ahead(&log, &sm)?;
    let last_at_start = log.last_entry_index().unwrap_or(0);
    let applied = sm.applied_index()?;
    // After a crash the state machine (no WAL) is behind what its log had committed,
    // which the views already show: repaired from it now, or written entry by entry as
    // the tail is applied again, the views would pass through older states (a deleted
    // key back, an accepted one pending). They are recovered once the state machine has
    // applied that commit again (`driver/apply.rs`).
    let commit = Storage::initial_state(&log)?.hard_state.commit;
    let views_after = (!views.is_shared() && commit > applied).then_some(commit);
    let faults = match views_after {
        Some(commit) => {
            tracing::info!(applied, commit, "applying the log's committed tail again before the views are recovered");
            faults::ViewFaults::default()
        }
        None => match recover_views(&log, &sm, &mut views, applied) {
            Ok(()) => faults::ViewFaults::default(),
            // A view that cannot be written does not keep the node from starting: it is
            // dirty from the start and recovered once it can be written (`faults.rs`).
            Err(e) => faults::ViewFaults::at_start(&log, &sm, &e),
        },
    };
    // Never below what the log has already seen of this node (a disk restored from an
    // older copy, a clock that went back), so no proposal identity repeats.
    let seen = sm.proposer_mark(cfg.id)?.map_or(0, |(inc, _)| inc.saturating_add(1));
    let incarnation = log.next_incarnation(halite_storage::format::now_ns().max(seen))?;
    tracing::info!(id = cfg.id, incarnation, "node incarnation");
    let raw = raft_node(&cfg, &log, applied)?;
    let solo = log.conf_state()?.voters == vec![cfg.id];
    let book = membership::address_book(&log)?;
    if let Some(o) = &outbox {
        for (id, addr) in &book {
            o.set_peer(*id, Some(*addr));
        }
    }
    // A log made before membership entries existed (or a founder whose address was not
    // known) does not name this node's address: announce it once when leader.
    let announce = cfg.addrs.get(&cfg.id).copied().filter(|_| !book.contains_key(&cfg.id));
    let book: membership::AddressBook = Arc::new(std::sync::RwLock::new(book));
    let Mailbox(tx, rx) = mailbox;
    let id = cfg.id;
    let leader = Arc::new(AtomicU64::new(0));
    let record_set = Arc::new(AtomicU32::new(1));
    let status = NodeStatus::new(id);
    let health = Health { status: status.clone(), readiness: Default::default(), faults };
    if let (Some(o), Some(s)) = (&outbox, &snapshots) {
        o.take_snapshots(driver::snapshots::inbox(s.clone(), tx.clone()));
    }
    let membership = Membership::new(cfg.id, cfg.auto_promote, announce, book.clone());
    let min_free_bytes = cfg.min_free_bytes;
    let gated = cfg.member_key.is_some();
    let d = Driver::new(Parts {
        core: Core { raw, log: log.clone(), sm: sm.clone(), leader: leader.clone(), solo },
        views,
        views_after,
        peers: Peers::new(outbox, membership, record_set.clone()),
        incarnation,
        health,
        snapshots,
        self_tx: tx.clone(),
        cfg,
    });
    let thread = driver::spawn(d, rx)?;
    Ok(Node { tx, thread: Some(thread), sm, log, leader, record_set, gated, id, book, incarnation, status, min_free_bytes, last_at_start })
}

/// Refuses a state machine **ahead of its log**: one that has applied an index the log
/// does not hold (the log directory restored from an older backup than the state, or
/// lost). Serving from it would answer from records no member can replay, and raft
/// would hand this member's indexes to new entries: the error names both indexes and
/// the ways back. A new log counts as ending at 0.
pub(super) fn state_not_ahead(log: &RaftLog, sm: &StateMachine) -> Result<()> {
    let applied = sm.applied_index()?;
    let last = if log.is_new()? { 0 } else { Storage::last_index(log)? };
    if applied <= last {
        return Ok(());
    }
    Err(StorageError::StateAheadOfLog(format!(
        "the state machine in {} has applied log index {applied} but the log in {} ends at index {last}: \
         the log is older than the state (restored from an older backup, or lost), so committed records are missing. \
         Refusing to start. `halite-ctl verify` shows both; to recover, restore the log and the state from the same backup, \
         or on a cluster member move the data dir away and start again to rejoin from the others, \
         or run `halite-ctl replay` to rebuild the state machine from this log (what was applied after index {last} is lost)",
        sm.path().display(),
        log.dir().display()
    ))
    .into())
}

/// Writes the founding membership into a new log: the configured voters (this node
/// alone if none), this node always among them.
fn found(log: &RaftLog, cfg: &NodeConfig) -> Result<()> {
    let mut voters = if cfg.voters.is_empty() { vec![cfg.id] } else { cfg.voters.clone() };
    if !voters.contains(&cfg.id) {
        voters.push(cfg.id);
    }
    voters.sort_unstable();
    voters.dedup();
    // The founding membership goes into the log itself, as committed "add voter"
    // entries at term 1 (identical on every founder), not only into the persisted conf
    // state: a node that joins later replays the log from index 1 and must learn every
    // voter, and where it listens, from it.
    let entries: Vec<Entry> = voters
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut cc = ConfChange::default();
            cc.set_change_type(ConfChangeType::AddNode);
            cc.node_id = *v;
            let mut e = Entry::default();
            e.set_entry_type(EntryType::EntryConfChange);
            e.term = 1;
            e.index = i as u64 + 1;
            e.data = cc.write_to_bytes().unwrap_or_default().into();
            e.context = context::encode(&EntryContext::founding(cfg.addrs.get(v).copied())).into();
            e
        })
        .collect();
    let hs = HardState { term: 1, commit: entries.len() as u64, ..Default::default() };
    let cs = ConfState { voters: voters.clone(), ..Default::default() };
    log.append(&entries, Some(&hs), Some(&cs), true)?;
    tracing::info!(id = cfg.id, ?voters, "new log: bootstrapped with its founding voters");
    Ok(())
}

/// Brings the views up to the state machine's `applied` index (see the module docs).
pub(super) fn recover_views(log: &RaftLog, sm: &StateMachine, views: &mut Views, applied: u64) -> Result<()> {
    if views.is_shared() {
        // Shared with other members: their mark, not this member's views index, says
        // what the files show; a member behind it writes nothing
        // (`halite_storage::views::shared`).
        for kind in halite_storage::views::ViewKind::ALL {
            views.catch_up_shared(sm, Some(log), kind, applied)?;
        }
        sm.set_views_index(applied)?;
        return Ok(());
    }
    let mut views_at = sm.views_index()?;
    // Files copied from a shared tree show at least their mark's state, maybe less than
    // this member's views index: resync from the lower of the two.
    let left = views.left_shared.take().filter(|l| l.has_marks());
    if let Some(m) = left.as_ref().and_then(|l| l.left_mark()) {
        if m < views_at {
            tracing::info!(mark = m, views_at, "views copied from a shared tree: resyncing from its mark");
            views_at = m;
        }
    } else if left.is_some() {
        // Marks of another cluster, or unreadable: the copy's state is unknown.
        views_at = 0;
    }
    if views_at < applied {
        // The views missed the end of what was applied (a crash between apply and the
        // views' periodic sync): bring the touched entries up to date from the state
        // machine, or rebuild everything if the log no longer has those records.
        // A compacted log with no tail holds nothing after its snapshot.
        let first = log.first_entry_index().unwrap_or(log.snapshot_meta()?.index + 1);
        if views_at + 1 >= first {
            let mut touched = Touched::default();
            log.for_each_record(views_at + 1, Some(applied + 1), |_, r| {
                touched.add(&r?);
                Ok(())
            })?;
            tracing::warn!(views_at, applied, entries = touched.len(), "views behind the state machine: resyncing the entries touched since");
            views.resync(sm, &touched)?;
        } else {
            tracing::warn!(views_at, applied, "views behind the state machine and the log is compacted: rebuilding them");
            views.rebuild_keys(sm, |_, _| {})?;
            views.roots.rebuild(sm)?;
        }
        sm.set_views_index(applied)?;
    }
    // Views pointed at new, empty places (a shared filesystem left for local
    // directories, a wiped cache) are rebuilt from the state machine: the log, not the
    // files, is the truth, so moving the files is never needed.
    if sm.count("keys")? > 0 && views.keys.entries()?.0.is_empty() {
        tracing::warn!(driver = views.keys.driver(), "the key view is empty but the state machine holds keys: rebuilding it");
        views.rebuild_keys(sm, |_, _| {})?;
    }
    if views.missing_pairs(sm)? {
        tracing::warn!(driver = views.keys.driver(), "the key view lacks a key pair the state machine holds: writing it");
        views.write_pairs(sm)?;
    }
    if views.roots.missing_any(sm)? {
        tracing::warn!("roots files the state machine holds are missing from their directories: rewriting them");
        views.roots.rebuild(sm)?;
    }
    if let Some(l) = left {
        views.keys.sync()?;
        l.remove_marks()?;
    }
    Ok(())
}

/// raft-rs's node over the log, resuming after the `applied` index.
fn raft_node(cfg: &NodeConfig, log: &RaftLog, applied: u64) -> Result<RawNode<RaftLog>> {
    let logger = slog::Logger::root(crate::logging::TracingDrain, slog::o!());
    let rc = RaftConfig {
        id: cfg.id,
        election_tick: cfg.election_tick,
        min_election_tick: cfg.election_tick,
        max_election_tick: cfg.max_election_tick,
        heartbeat_tick: cfg.heartbeat_tick,
        applied,
        max_size_per_msg: 4 << 20,
        max_inflight_msgs: 256,
        check_quorum: true,
        pre_vote: true,
        ..Default::default()
    };
    rc.validate()?;
    Ok(RawNode::new(&rc, log.clone(), &logger)?)
}
