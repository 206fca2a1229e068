//! The driver thread: the one thread that owns the `RawNode`, the log writer, the state
//! machine's apply and the views.
//!
//! Each turn of [`Driver::run`]:
//!
//! 1. wait for a message or the next tick; take every message already queued (up to
//!    `max_batch` records): proposals and membership changes become the **group**, raft
//!    messages from peers are stepped at once;
//! 2. queue the group as waiting proposals and hand raft those it can take now
//!    (`proposals.rs`);
//! 3. on a tick: tick raft, expire late proposals, promote caught-up learners (again
//!    if an earlier promotion was lost), compact the log if the policy says so
//!    (`compaction.rs`);
//! 4. handle raft's `Ready` ([`Driver::on_ready`]): send messages, apply what committed
//!    (`apply.rs`), append new entries and the hard state in one write with one fsync
//!    (the group commit), send the messages that had to wait for that fsync;
//! 5. make the views durable when [`VIEWS_SYNC_INTERVAL`] has passed (or when idle);
//! 6. publish the node's status, readiness, and recover dirty views when due
//!    (`health.rs`, `faults.rs`).
//!
//! While the data directory's filesystem is under its reserve the turn is cut short:
//! proposals are refused, raft messages dropped, raft neither ticked nor asked for a
//! `Ready` (`space.rs`).
//!
//! This file holds the [`Driver`], its parts ([`Core`]: raft and the log and state
//! machine, [`Derived`]: the views, [`Peers`]: the transport and the group) and its loop;
//! each other step is a file of this folder adding its methods to the driver
//! (`impl Driver`), beside the part it keeps: `apply.rs`, `compaction.rs`
//! ([`compaction::Compactor`]), `faults.rs` (the dirty views), `health.rs` (readiness
//! and the published status), `member_keys.rs` (this member's own key), `snapshots.rs`
//! ([`snapshots::Snapshots`]: sending and installing snapshots).
//!
//! A stop request, or the last sender gone, ends the loop after the group in progress;
//! an error ends it too, and every waiting proposal is answered with the reason.

pub(super) mod apply;
pub(super) mod compaction;
pub(super) mod faults;
pub(super) mod health;
pub(super) mod member_keys;
pub(super) mod member_releases;
pub(super) mod snapshots;
pub(super) mod space;
pub(super) mod state_full;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use raft::eraftpb::Message;
use raft::RawNode;

use halite_storage::log::RaftLog;
use halite_storage::snapshot::SnapshotStore;
use halite_storage::state::StateMachine;
use halite_storage::views::Views;

use self::compaction::Compactor;
use self::health::Health;
use super::membership::{MemberChange, Membership};
use super::proposals::{Payload, Proposals};
use super::{Msg, NodeConfig, NodeError, Proposal, Result};
use crate::transport::Outbox;

/// How often views are made durable while proposals keep arriving.
pub const VIEWS_SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// Everything the driver thread owns, in named parts. Each file of this folder works on
/// the parts it names; the loop (this file) on all of them.
pub(super) struct Driver {
    /// The node's configuration: its id, timings, limits, tap and own member key.
    pub(super) cfg: NodeConfig,
    /// The raft core, the log and the state machine.
    pub(super) core: Core,
    /// The views and their durability.
    pub(super) derived: Derived,
    /// The transport and the group it reaches.
    pub(super) peers: Peers,
    /// Snapshots sent to peers and the store they come from (`snapshots.rs`).
    pub(super) snapshots: snapshots::Snapshots,
    /// The compaction policy's state (`compaction.rs`).
    pub(super) compaction: Compactor,
    /// The proposals waiting to be applied (`proposals.rs`).
    pub(super) proposals: Proposals,
    /// The status readers see, readiness and dirty views (`health.rs`, `faults.rs`).
    pub(super) health: Health,
    /// The reserve of free space, and whether the node holds for want of it (`space.rs`).
    pub(super) space: space::Space,
    /// This driver's own channel: work done off the driver thread (a snapshot sent, a
    /// snapshot built for a compaction) reports its end on it.
    pub(super) self_tx: Sender<Msg>,
}

/// The raft core and where its state goes (this file, `apply.rs`): raft-rs's node over
/// the log, and the state machine the committed entries apply to.
pub(super) struct Core {
    pub(super) raw: RawNode<RaftLog>,
    pub(super) log: RaftLog,
    pub(super) sm: Arc<StateMachine>,
    /// The leader this node last knew (0: none), shared with the public face.
    pub(super) leader: Arc<AtomicU64>,
    /// The only voter: campaign as soon as raft allows (once committed membership
    /// entries are applied) instead of waiting for an election timeout.
    pub(super) solo: bool,
}

/// The views derived from the state machine (the key view, the roots trees) and when
/// they were last made durable (this file, `apply.rs`, `faults.rs`).
pub(super) struct Derived {
    pub(super) views: Views,
    /// Highest index applied to the views but not yet synced.
    pub(super) dirty_to: Option<u64>,
    /// When the views were last synced.
    pub(super) synced_at: Instant,
    /// Set after a crash (`boot.rs`): the commit the views already show; entries up to
    /// it are applied to the state machine only, then the views are recovered.
    pub(super) recover_after: Option<u64>,
    /// The last entry whose effects beside the state machine's applied index are
    /// complete (views, tap, membership, answer): applied again after the state machine
    /// met a full disk, such an entry goes to the state machine only (`state_full.rs`).
    pub(super) effected: u64,
}

/// The transport and the group it reaches: who the members are and where they listen
/// (`membership.rs`), and the member key book as the transport last heard it
/// (`member_keys.rs`).
pub(super) struct Peers {
    /// Where raft messages and snapshots go; `None`: a node without peers (its messages
    /// are dropped).
    pub(super) outbox: Option<Arc<dyn Outbox>>,
    pub(super) membership: Membership,
    /// The member key book or the group may have changed since the transport last
    /// heard.
    pub(super) keys_dirty: bool,
    pub(super) own_key: member_keys::OwnKey,
    pub(super) own_release: member_releases::OwnRelease,
    /// The cluster's record set, shared with the public face (`member_releases.rs`).
    pub(super) record_set: Arc<AtomicU32>,
}

impl Peers {
    pub(super) fn new(outbox: Option<Arc<dyn Outbox>>, membership: Membership, record_set: Arc<AtomicU32>) -> Self {
        Peers { outbox, membership, keys_dirty: true, own_key: Default::default(), own_release: Default::default(), record_set }
    }
}

/// What a driver is started with (`boot.rs` opens or builds each part).
pub(super) struct Parts {
    pub(super) cfg: NodeConfig,
    pub(super) core: Core,
    pub(super) views: Views,
    /// See [`Derived::recover_after`].
    pub(super) views_after: Option<u64>,
    pub(super) peers: Peers,
    /// This run's incarnation, part of every proposal's identity.
    pub(super) incarnation: u64,
    pub(super) health: Health,
    /// The node's snapshot store; `None` for a node started over a log and state
    /// machine without their data directory: it never compacts, sends nor installs a
    /// snapshot.
    pub(super) snapshots: Option<SnapshotStore>,
    /// The sending side of the driver's own channel.
    pub(super) self_tx: Sender<Msg>,
}

/// Starts the driver thread. If the loop fails, the error is logged and every waiting
/// proposal is answered with it.
pub(super) fn spawn(mut d: Driver, rx: Receiver<Msg>) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("raft-node-{}", d.cfg.id))
        .spawn(move || {
            if let Err(e) = d.run(rx) {
                tracing::error!("raft node stopped: {e}");
                d.proposals.fail_all(&e.to_string());
            }
        })
        .map_err(|e| NodeError::Stopped(format!("cannot start the node thread: {e}")))
}

impl Driver {
    pub(super) fn new(parts: Parts) -> Self {
        let Parts { cfg, core, views, views_after, peers, incarnation, health, snapshots, self_tx } = parts;
        // A forward the leader dropped is handed over again after three election
        // timeouts (the state machine applies a proposal at most once).
        let resubmit_after = cfg.tick * (3 * cfg.election_tick.max(1)) as u32;
        // The state machine's directory is replaced by a snapshot's install: its parent
        // is watched.
        let state_parent = core.sm.path().parent().map(|p| p.to_path_buf()).filter(|p| !p.as_os_str().is_empty());
        let space = space::Space::new(std::iter::once(core.log.dir().to_path_buf()).chain(state_parent).collect(), cfg.min_free_bytes);
        Driver {
            space,
            proposals: Proposals::new(cfg.id, incarnation, cfg.propose_timeout, resubmit_after),
            core,
            derived: Derived { views, dirty_to: None, synced_at: Instant::now(), recover_after: views_after, effected: 0 },
            peers,
            snapshots: snapshots::Snapshots::new(snapshots),
            compaction: Compactor::default(),
            health,
            self_tx,
            cfg,
        }
    }

    fn run(&mut self, rx: Receiver<Msg>) -> Result<()> {
        let mut next_tick = Instant::now() + self.cfg.tick;
        self.on_ready()?;
        self.publish_member_keys();
        self.campaign_if_solo()?;
        loop {
            let holding = self.space_holds()?;
            let timeout = next_tick.saturating_duration_since(Instant::now());
            let first = match rx.recv_timeout(timeout) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => {
                    // Idle: make the views durable now.
                    if !holding {
                        self.sync_views(true)?;
                    }
                    None
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.sync_views(true)?;
                    return Ok(());
                }
            };
            let mut group = Vec::new();
            let mut members = Vec::new();
            let mut stop = false;
            let mut n = 0;
            let mut sent = Vec::new();
            let mut built = Vec::new();
            let raw = &mut self.core.raw;
            let mut push = |m: Msg, group: &mut Vec<Proposal>, members: &mut Vec<MemberChange>, stop: &mut bool, n: &mut usize| match m {
                Msg::Propose(p) => {
                    *n += p.records;
                    group.push(p);
                }
                Msg::Member(c) => members.push(c),
                // Holding for want of space: cut off from the group (`space.rs`).
                Msg::Raft(_) if holding => {}
                Msg::Raft(m) => {
                    if let Err(e) = raw.step(*m) {
                        tracing::debug!("raft message not stepped: {e}");
                    }
                }
                Msg::SnapshotSent(to, ok) => sent.push((to, ok)),
                Msg::Compacted(b) => built.push(b),
                Msg::Stop => *stop = true,
            };
            if let Some(m) = first {
                push(m, &mut group, &mut members, &mut stop, &mut n);
                while n < self.cfg.max_batch && !stop {
                    match rx.try_recv() {
                        Ok(m) => push(m, &mut group, &mut members, &mut stop, &mut n),
                        Err(_) => break,
                    }
                }
            }
            for (to, ok) in sent {
                self.snapshot_sent(to, ok);
            }
            for b in built {
                self.compacted(*b)?;
            }
            if holding {
                for p in group {
                    let _ = p.reply.send(Err(self.disk_full()));
                }
                for c in members {
                    let _ = c.into_proposal().1.send(Err(self.disk_full()));
                }
                self.proposals.expire();
                next_tick = Instant::now() + self.cfg.tick;
                self.end_turn();
                if stop {
                    self.proposals.fail_all("the node is stopping");
                    return Ok(());
                }
                continue;
            }
            for p in group {
                self.proposals.enqueue(Payload::Records(p.data), p.reply, p.pipeline);
            }
            for c in members.into_iter().chain(self.peers.membership.take_announce()) {
                self.propose_member(c);
            }
            self.proposals.submit(&mut self.core.raw);
            if Instant::now() >= next_tick {
                self.core.raw.tick();
                next_tick = Instant::now() + self.cfg.tick;
                self.proposals.expire();
                let proposals = &self.proposals;
                let promote = self.peers.membership.promotions(&self.core.raw, |id| proposals.member_change_waiting(id));
                for c in promote {
                    self.propose_member(c);
                }
                self.record_own_key();
                self.record_own_release();
                self.maybe_compact()?;
            }
            self.on_ready()?;
            self.campaign_if_solo()?;
            self.proposals.submit(&mut self.core.raw);
            self.on_ready()?;
            self.publish_member_keys();
            self.sync_views(false)?;
            self.end_turn();
            if stop {
                self.sync_views(true)?;
                self.proposals.fail_all("the node is stopping");
                return Ok(());
            }
        }
    }

    /// Queues a membership change until it applies.
    fn propose_member(&mut self, c: MemberChange) {
        let (payload, reply) = c.into_proposal();
        self.proposals.enqueue(payload, reply, None);
    }

    /// A node that is the only voter elects itself without waiting for a timeout.
    fn campaign_if_solo(&mut self) -> Result<()> {
        if self.core.solo && self.core.raw.raft.state != raft::StateRole::Leader {
            self.core.solo = self.core.raw.raft.prs().conf().voters().ids().iter().eq([self.cfg.id]);
            if self.core.solo {
                self.core.raw.campaign()?;
                self.on_ready()?;
            }
        }
        Ok(())
    }

    /// Hands raft's outgoing messages to the transport (dropped without peers); a
    /// snapshot goes its own way (`snapshots.rs`).
    fn send(&mut self, mut msgs: Vec<Message>) {
        if msgs.is_empty() {
            return;
        }
        if msgs.iter().any(|m| m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot) {
            let (snaps, rest): (Vec<Message>, Vec<Message>) = msgs.into_iter().partition(|m| m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot);
            for m in snaps {
                self.send_snapshot(m);
            }
            msgs = rest;
        }
        match &self.peers.outbox {
            Some(o) => o.send(msgs),
            None => tracing::debug!(n = msgs.len(), "dropping raft messages (no peers)"),
        }
    }

    /// Handles one raft `Ready`, if there is one: role changes, messages, committed
    /// entries, and the group commit of new entries (one log write, one fsync).
    fn on_ready(&mut self) -> Result<()> {
        if !self.core.raw.has_ready() {
            return Ok(());
        }
        let mut rd = self.core.raw.ready();
        self.health.readiness.answers(rd.read_states());
        if let Some(ss) = rd.ss() {
            let leader = if ss.leader_id == raft::INVALID_ID { 0 } else { ss.leader_id };
            self.core.leader.store(leader, Ordering::Relaxed);
            tracing::info!(id = self.cfg.id, leader, role = ?ss.raft_state, "raft role changed");
            if ss.raft_state == raft::StateRole::Leader {
                self.peers.membership.announce_when_leading();
            }
        }
        self.send(rd.take_messages());
        if !rd.snapshot().is_empty() {
            // A snapshot received from the leader, that raft wants installed.
            self.install_snapshot(rd.snapshot())?;
        }
        self.apply(rd.take_committed_entries())?;
        self.persist(rd.entries(), rd.hs(), None, rd.must_sync())?;
        self.send(rd.take_persisted_messages());
        let mut light = self.core.raw.advance(rd);
        if let Some(commit) = light.commit_index() {
            let mut hs = self.core.log.hard_state()?;
            hs.commit = commit;
            self.persist(&[], Some(&hs), None, false)?;
        }
        self.send(light.take_messages());
        self.apply(light.take_committed_entries())?;
        self.core.raw.advance_apply();
        Ok(())
    }

    /// Makes the views durable and records the index they reflect, at most every
    /// [`VIEWS_SYNC_INTERVAL`] under load (views are rebuilt from the state machine, so
    /// their durability never holds up an answer), or now with `force`.
    fn sync_views(&mut self, force: bool) -> Result<()> {
        let Some(to) = self.derived.dirty_to else { return Ok(()) };
        if !force && self.derived.synced_at.elapsed() < VIEWS_SYNC_INTERVAL {
            return Ok(());
        }
        // A view that cannot be made durable is dirty; its index waits for its recovery.
        if let Err(e) = self.derived.views.sync() {
            self.view_sync_failed(halite_storage::views::ViewKind::Keys, &e);
        }
        if !self.health.faults.any() {
            match self.core.sm.set_views_index(to) {
                Err(e) if e.is_no_space() => {
                    // Recorded again once the state machine is opened again.
                    self.state_failed(&e);
                    return Ok(());
                }
                r => r?,
            }
        }
        self.derived.dirty_to = None;
        self.derived.synced_at = Instant::now();
        Ok(())
    }
}
