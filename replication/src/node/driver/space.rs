//! A full disk: the node keeps `NodeConfig::min_free_bytes` free on its log's
//! filesystem and the state machine's (the least free of the two counts) and writes
//! nothing while the free space is under it.
//!
//! The log (raft-engine) reports a full disk as an error and can be written again once
//! space is freed; RocksDB reports one as an error too (its own log, whose file writer
//! would abort the process once written after a failed write in Debian's build, which
//! keeps its assertions, gets fatal lines only: `halite_storage::state::options`), but
//! then refuses every write until it is opened again. So neither is allowed to meet one:
//! the driver samples the free space every [`SAMPLE_EVERY`] and, under the reserve,
//! **holds**:
//!
//! - every proposal is refused with [`NodeError::DiskFull`] (by [`crate::Node`] at once,
//!   through [`crate::NodeStatus::disk_full`], and by the driver for those already
//!   queued); a request handler answers its minion with Salt's retry answer;
//! - raft is frozen: no tick, no `Ready` (nothing appended, applied or sent), raft
//!   messages from peers are dropped. To the other members this one is cut off: a
//!   leader's followers elect another leader, a follower falls behind; the group goes on
//!   without it if a majority has space;
//! - in a cluster the member is not ready (its state falls behind the group's); a lone
//!   master stays ready: nobody else writes, what it holds is current.
//!
//! Once the free space is back above the reserve plus [`RESUME_MARGIN`] (so a disk at
//! the edge does not flap), the node takes up where it stopped: raft's messages bring it
//! up to date, readiness is asked again. Nothing acknowledged is lost: an entry is
//! acknowledged only once written, and nothing is written while held.
//!
//! Should the disk fill between two samples and a log write fail for want of space, the
//! driver writes the same entries again ([`Driver::persist`]) until they are written or
//! the node is stopped; any other write error stops the node, as before it was
//! written the outcome is unknown. Should a state-machine write fail for want of space
//! (the disk filled between two samples, or no reserve is kept), the node holds the same
//! way, also with no reserve, until the free space is back above the reserve plus
//! [`RESUME_MARGIN`] plus [`super::state_full::STATE_ROOM`]; then the state machine is
//! opened again and the log applied to it (`state_full.rs`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use raft::eraftpb::{ConfState, Entry, HardState};

use super::Driver;
use crate::node::status::{NodeStatus, Readiness};
use crate::node::{NodeError, Result};

/// How often the free space is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Free space above the reserve before a held node writes again.
pub const RESUME_MARGIN: u64 = 4 << 20;

/// Longest pause between two tries of a log write that failed for want of space.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// The reserve, and whether the node is holding.
pub(in crate::node) struct Space {
    /// The directories whose filesystems are watched (the log's, and the one the state
    /// machine and its snapshot installs are in); the least free space counts.
    dirs: Vec<PathBuf>,
    /// Bytes kept free; 0: never hold.
    pub(in crate::node) reserve: u64,
    /// Free bytes when last sampled, while holding.
    held: Option<u64>,
    /// A state-machine write failed for want of space: it is opened again once space is
    /// freed (`state_full.rs`).
    pub(in crate::node) state_failed: bool,
    /// A snapshot whose install met a full disk: it is installed once space is freed
    /// (`snapshots.rs`; `state_failed` is set too).
    pub(in crate::node) install: Option<u64>,
    sampled_at: Option<Instant>,
    /// When a failed sample was last logged (at most once a minute).
    warned_at: Option<Instant>,
}

impl Space {
    pub(in crate::node) fn new(dirs: Vec<PathBuf>, reserve: u64) -> Self {
        Space { dirs, reserve, held: None, state_failed: false, install: None, sampled_at: None, warned_at: None }
    }

    /// The least free space among the watched filesystems.
    pub(in crate::node) fn available(&self) -> std::io::Result<u64> {
        let mut least = u64::MAX;
        for d in &self.dirs {
            least = least.min(halite_storage::space::available(d)?);
        }
        Ok(least)
    }

    /// Free bytes while holding (`None`: writing).
    pub(in crate::node) fn held(&self) -> Option<u64> {
        self.held
    }

    /// Samples the free space when due and moves between writing and holding; returns
    /// whether the node holds, and whether it just stopped holding.
    fn sample(&mut self, status: &NodeStatus, id: u64) -> (bool, bool) {
        if (self.reserve == 0 && self.held.is_none()) || self.sampled_at.is_some_and(|t| t.elapsed() < SAMPLE_EVERY) {
            return (self.held.is_some(), false);
        }
        self.sampled_at = Some(Instant::now());
        let free = match self.available() {
            Ok(f) => f,
            Err(e) => {
                if self.warned_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    tracing::warn!(id, dirs = ?self.dirs, "cannot read the free space of the data directory: {e}");
                    self.warned_at = Some(Instant::now());
                }
                return (self.held.is_some(), false);
            }
        };
        match self.held {
            None if free < self.reserve => {
                tracing::error!(id, free, reserve = self.reserve, dirs = ?self.dirs, "the data directory's filesystem is under its reserve (halite_min_free_bytes): writes are refused and raft is paused until space is freed");
                self.hold(free, status);
                (true, false)
            }
            Some(_) if free >= self.reserve.saturating_add(RESUME_MARGIN).saturating_add(if self.state_failed { super::state_full::STATE_ROOM } else { 0 }) => {
                tracing::warn!(id, free, reserve = self.reserve, "space freed on the data directory's filesystem: writing again");
                self.held = None;
                status.set_disk_full(None);
                (false, true)
            }
            Some(_) => {
                self.hold(free, status);
                (true, false)
            }
            None => (false, false),
        }
    }

    pub(in crate::node) fn hold(&mut self, free: u64, status: &NodeStatus) {
        self.held = Some(free);
        status.set_disk_full(Some(free));
    }
}

impl Driver {
    /// Samples the free space when due; returns whether the node holds this turn. On
    /// leaving the hold, a state machine that met a full disk is opened again
    /// (`state_full.rs`) and readiness is asked again (the group went on meanwhile).
    pub(super) fn space_holds(&mut self) -> Result<bool> {
        let (holds, resumed) = self.space.sample(&self.health.status, self.cfg.id);
        if resumed && self.space.state_failed && self.reopen_state()? {
            return Ok(true);
        }
        if resumed {
            self.health.readiness = Readiness::default();
        }
        Ok(holds)
    }

    /// The error a proposal gets while the node holds.
    pub(super) fn disk_full(&self) -> NodeError {
        NodeError::DiskFull { free: self.space.held().unwrap_or(0), reserve: self.space.reserve }
    }

    /// Writes entries and state to the log ([`Driver::write_log`]).
    pub(super) fn persist(&mut self, entries: &[Entry], hs: Option<&HardState>, cs: Option<&ConfState>, sync: bool) -> Result<()> {
        self.write_log(|log| log.append(entries, hs, cs, sync))
    }

    /// Runs a write to the log, again and again while it fails for want of space (the
    /// proposal path already refuses meanwhile, `halite_disk_full` says so), until it is
    /// written or the node is asked to stop. Any other error is returned.
    pub(super) fn write_log<T>(&mut self, mut write: impl FnMut(&halite_storage::log::RaftLog) -> halite_storage::Result<T>) -> Result<T> {
        let mut pause = Duration::from_millis(50);
        let mut failed_at: Option<Instant> = None;
        loop {
            match write(&self.core.log) {
                Ok(t) => {
                    if failed_at.is_some() {
                        tracing::warn!(id = self.cfg.id, "the log is written again");
                        if self.space.held().is_none() {
                            self.health.status.set_disk_full(None);
                        }
                    }
                    return Ok(t);
                }
                Err(e) if e.is_no_space() && !self.health.status.stop_asked() => {
                    if failed_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                        tracing::error!(id = self.cfg.id, "the log cannot be written, its filesystem is full ({e}): writing it again until space is freed");
                        failed_at = Some(Instant::now());
                    }
                    self.health.status.set_disk_full(Some(self.space.available().unwrap_or(0)));
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(RETRY_MAX);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}
