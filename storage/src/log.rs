//! The log: raft entries stored by raft-engine, exposed to raft-rs as its [`Storage`].
//!
//! One raft-engine directory holds one raft group ([`GROUP_ID`]). Entries are raft-rs
//! `Entry` messages whose `data` holds one proposal's records ([`crate::entry`]). Besides
//! entries, the group keeps three small protobuf messages under fixed keys: the hard
//! state (`hard_state`), the conf state (`conf_state`) and the metadata of the last
//! snapshot (`snapshot_meta`), below which entries may have been compacted away; the
//! node's process incarnation (`incarnation`, u64 BE), see [`RaftLog::next_incarnation`];
//! and the bytes of the log's files right after its last compaction (`compacted_bytes`,
//! u64 BE), see [`RaftLog::compacted_bytes`].
//!
//! Opening is strict (raft-engine's `AbsoluteConsistency`): any checksum failure refuses
//! to open. The one thing repaired at open is a torn tail, checked by [`crate::tail`]
//! before raft-engine sees the files: the unfinished last batch of a crash, followed by
//! nothing but zeros, is cut off and logged.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};
use raft_engine::{Command, Config, Engine, LogBatch, MessageExt, ReadableSize, RecoveryMode};

use crate::entry::LogEntry;
use crate::error::{Error, Result};
use crate::format::Record;

/// The raft group id of Halite's one group inside raft-engine.
pub const GROUP_ID: u64 = 1;
const KEY_HARD_STATE: &[u8] = b"hard_state";
const KEY_CONF_STATE: &[u8] = b"conf_state";
const KEY_SNAPSHOT_META: &[u8] = b"snapshot_meta";
/// The membership entries kept from the compacted part of the log (see `members_through`).
const KEY_MEMBERS: &[u8] = b"members";
/// At most this many membership entries are kept (one per member after folding).
pub const MAX_MEMBER_ENTRIES: usize = 1024;
const KEY_INCARNATION: &[u8] = b"incarnation";
const KEY_COMPACTED_BYTES: &[u8] = b"compacted_bytes";
/// The size of the log's files when nothing says otherwise ([`RaftLog::open`]).
pub const DEFAULT_FILE_BYTES: u64 = 128 << 20;

/// Tells raft-engine how to find the index of a raft-rs entry.
#[derive(Clone, Copy)]
pub struct EntryExt;

impl MessageExt for EntryExt {
    type Entry = Entry;
    fn index(e: &Entry) -> u64 {
        e.index
    }
}

/// The raft log of one node. Cheap to clone; clones share the engine, the terms known in
/// memory (`log_terms.rs`) and the newest entries (`log_cache.rs`).
#[derive(Clone)]
pub struct RaftLog {
    engine: Arc<Engine>,
    dir: PathBuf,
    terms: Arc<Mutex<log_terms::Terms>>,
    cache: Arc<Mutex<log_cache::EntryCache>>,
}

#[path = "log_terms.rs"]
mod log_terms;

#[path = "log_cache.rs"]
mod log_cache;

#[path = "log_members.rs"]
mod log_members;
use log_members::fold_members;
pub use log_members::{decode_members, encode_members};

/// raft-engine settings Halite uses, with files of `file_bytes` each. Log recycling is
/// off, so the bytes after the last batch of the newest file are the zeros of
/// preallocation, which is what lets the tail check tell a torn write from corruption.
pub fn engine_config(dir: &Path, file_bytes: u64) -> Config {
    Config {
        dir: dir.to_string_lossy().into_owned(),
        recovery_mode: RecoveryMode::AbsoluteConsistency,
        enable_log_recycle: false,
        prefill_for_recycle: false,
        target_file_size: ReadableSize(file_bytes),
        // raft-engine deletes the files left with nothing live (`purge`, called after a
        // compaction only) once its files add up to more than this, counted as files
        // times `target_file_size`: at one file's worth, every compaction gives back
        // every file but the one being written.
        purge_threshold: ReadableSize(file_bytes),
        // Records are mostly base64 keys and msgpack: not worth lz4's CPU on the hot path.
        batch_compression_threshold: ReadableSize(0),
        ..Default::default()
    }
}

impl RaftLog {
    /// Opens (or creates) the log in `dir`, writing files of [`DEFAULT_FILE_BYTES`]. A
    /// torn tail is cut back first; any other damage is an error that names the recovery
    /// tool.
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_with(dir, DEFAULT_FILE_BYTES)
    }

    /// [`RaftLog::open`], writing files of `file_bytes` (a node's:
    /// `CompactionLimits::file_bytes`). Files already there are read whatever their size.
    pub fn open_with(dir: &Path, file_bytes: u64) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating log dir {}", dir.display()), e))?;
        crate::tail::repair_torn_tail(dir)?;
        let engine = Engine::open(engine_config(dir, file_bytes.max(1 << 20))).map_err(|e| {
            let msg = e.to_string();
            if msg.contains("Failed to lock file") {
                return Error::Invalid(format!(
                    "the log in {} is in use by another process (is salt-master running?)",
                    dir.display()
                ));
            }
            Error::CorruptLog(format!(
                "cannot open the log in {}: {e}. Run `halite-ctl verify --log {}` to find the damaged record",
                dir.display(),
                dir.display()
            ))
        })?;
        Ok(RaftLog { engine: Arc::new(engine), dir: dir.to_path_buf(), terms: Arc::default(), cache: Arc::default() })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// True when nothing has ever been written (no hard state, no entries).
    pub fn is_new(&self) -> Result<bool> {
        Ok(self.engine.get_message::<HardState>(GROUP_ID, KEY_HARD_STATE)?.is_none()
            && self.engine.last_index(GROUP_ID).is_none())
    }

    pub fn hard_state(&self) -> Result<HardState> {
        Ok(self.engine.get_message::<HardState>(GROUP_ID, KEY_HARD_STATE)?.unwrap_or_default())
    }

    pub fn conf_state(&self) -> Result<ConfState> {
        Ok(self.engine.get_message::<ConfState>(GROUP_ID, KEY_CONF_STATE)?.unwrap_or_default())
    }

    pub fn snapshot_meta(&self) -> Result<SnapshotMetadata> {
        Ok(self.engine.get_message::<SnapshotMetadata>(GROUP_ID, KEY_SNAPSHOT_META)?.unwrap_or_default())
    }

    /// Writes entries, and optionally hard and conf state, in one batch; fsyncs when
    /// `sync` is set. This is the group-commit write: everything in one call shares
    /// one fsync.
    pub fn append(&self, entries: &[Entry], hs: Option<&HardState>, cs: Option<&ConfState>, sync: bool) -> Result<()> {
        let mut batch = LogBatch::with_capacity(entries.len());
        if !entries.is_empty() {
            // raft-engine replaces a conflicting suffix when earlier indexes are re-appended.
            batch.add_entries::<EntryExt>(GROUP_ID, entries)?;
        }
        if let Some(hs) = hs {
            batch.put_message(GROUP_ID, KEY_HARD_STATE.to_vec(), hs)?;
        }
        if let Some(cs) = cs {
            batch.put_message(GROUP_ID, KEY_CONF_STATE.to_vec(), cs)?;
        }
        if batch.is_empty() {
            return Ok(());
        }
        let (mut terms, mut cache) = (self.terms(), self.cache());
        self.engine.write(&mut batch, sync)?;
        terms.appended(entries);
        cache.appended(entries);
        Ok(())
    }

    /// Entries through `index` are applied: the cache of the newest entries lets most
    /// of them go (`log_cache.rs`).
    pub fn applied_through(&self, index: u64) {
        self.cache().applied(index);
    }

    fn terms(&self) -> std::sync::MutexGuard<'_, log_terms::Terms> {
        self.terms.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, log_cache::EntryCache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a new incarnation of this node's process and returns it: `max(previous + 1,
    /// now_ns)`, written (fsynced) before it is used. Proposals are named by (node,
    /// incarnation, sequence number) and sequence numbers restart with the process, so
    /// an incarnation must never repeat: it grows with every start even if the clock
    /// went back, and a node restarted on an empty disk starts from the clock.
    pub fn next_incarnation(&self, now_ns: u64) -> Result<u64> {
        let prev = match self.engine.get(GROUP_ID, KEY_INCARNATION) {
            None => 0,
            Some(v) => u64::from_be_bytes(v.as_slice().try_into().map_err(|_| Error::CorruptLog(format!("the incarnation in the log in {} is damaged ({} bytes)", self.dir.display(), v.len())))?),
        };
        let next = prev.saturating_add(1).max(now_ns);
        let mut batch = LogBatch::default();
        batch.put(GROUP_ID, KEY_INCARNATION.to_vec(), next.to_be_bytes().to_vec())?;
        self.engine.write(&mut batch, true)?;
        Ok(next)
    }

    /// The membership entries kept from the compacted part of the log (see
    /// [`RaftLog::members_through`]); empty when nothing was compacted.
    pub fn retained_members(&self) -> Result<Vec<Entry>> {
        match self.engine.get(GROUP_ID, KEY_MEMBERS) {
            None => Ok(Vec::new()),
            Some(b) => decode_members(&b),
        }
    }

    /// The membership entries a snapshot at `index` must carry so that the address book
    /// can still be read once the entries up to `index` are gone: those retained from
    /// earlier compactions and the conf-change entries in `[first, index]`, folded to the
    /// last one per node (a node whose last change removed it is dropped).
    pub fn members_through(&self, index: u64) -> Result<Vec<Entry>> {
        let mut out = self.retained_members()?;
        if let Some(first) = self.first_entry_index() {
            let end = index.min(self.last_entry_index().unwrap_or(0)) + 1;
            let mut at = first;
            while at < end {
                let hi = (at + 4096).min(end);
                let es = self.read_entries(at, hi, None)?;
                if es.is_empty() {
                    break;
                }
                for e in es {
                    at = e.index + 1;
                    if e.get_entry_type() != EntryType::EntryNormal {
                        out.push(e);
                    }
                }
            }
        }
        Ok(fold_members(out))
    }

    /// The bytes the log's files hold on disk. (raft-engine's `get_used_size` counts
    /// whole files of `target_file_size` each, 128 MiB, so a tiny log reads as 256 MiB;
    /// the policy needs what is really there.) A file that cannot be read counts as 0.
    pub fn disk_bytes(&self) -> u64 {
        let Ok(dir) = std::fs::read_dir(&self.dir) else { return 0 };
        dir.filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "raftlog" || x == "rewrite"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    }

    /// Compaction after a local snapshot: records that the snapshot `meta` exists (with
    /// the membership entries it carries) and drops entries up to and including
    /// `meta.index`, in one synced write; then lets raft-engine delete the files that hold
    /// nothing live any more. The conf state of the log is left as it is (it is the
    /// newest one; the snapshot's is older or the same). `meta.index` must be an entry
    /// this log holds, or the current snapshot index.
    pub fn compact_through(&self, meta: &SnapshotMetadata, members: &[Entry]) -> Result<u64> {
        let current = self.snapshot_meta()?;
        if meta.index <= current.index {
            return Ok(0);
        }
        let last = self.last_entry_index().unwrap_or(current.index);
        if meta.index > last {
            return Err(Error::Invalid(format!("cannot compact through {}: the log ends at {last}", meta.index)));
        }
        let before = self.first_entry_index().unwrap_or(meta.index + 1);
        let mut batch = LogBatch::default();
        self.carry_small_values(&mut batch, &[KEY_HARD_STATE, KEY_CONF_STATE, KEY_INCARNATION])?;
        batch.put_message(GROUP_ID, KEY_SNAPSHOT_META.to_vec(), meta)?;
        batch.put(GROUP_ID, KEY_MEMBERS.to_vec(), encode_members(members))?;
        batch.add_command(GROUP_ID, Command::Compact { index: meta.index + 1 });
        let mut cache = self.cache();
        self.engine.write(&mut batch, true)?;
        cache.compacted(meta.index + 1);
        drop(cache);
        self.purge()?;
        self.record_compacted_bytes()?;
        Ok((meta.index + 1).saturating_sub(before))
    }

    /// Puts the values under `keys` again, as they are, into `batch` (a compaction's): a
    /// value written long ago would otherwise keep the oldest file, which raft-engine
    /// deletes only once nothing live is in it and does not always move such values out
    /// by itself (not when many entries are left before its newest files).
    fn carry_small_values(&self, batch: &mut LogBatch, keys: &[&[u8]]) -> Result<()> {
        for key in keys {
            if let Some(v) = self.engine.get(GROUP_ID, key) {
                batch.put(GROUP_ID, key.to_vec(), v)?;
            }
        }
        Ok(())
    }

    /// The bytes of the log's files right after its last compaction or snapshot install
    /// (0: never), against which the policy measures what a compaction can give back.
    pub fn compacted_bytes(&self) -> Result<u64> {
        match self.engine.get(GROUP_ID, KEY_COMPACTED_BYTES) {
            None => Ok(0),
            Some(v) => Ok(u64::from_be_bytes(v.as_slice().try_into().map_err(|_| Error::CorruptLog(format!("compacted_bytes in the log in {} is damaged ({} bytes)", self.dir.display(), v.len())))?)),
        }
    }

    /// Writes [`RaftLog::disk_bytes`] as `compacted_bytes` (not synced: a figure lost in
    /// a crash reads as 0, which at worst allows one compaction more).
    fn record_compacted_bytes(&self) -> Result<()> {
        let mut batch = LogBatch::default();
        batch.put(GROUP_ID, KEY_COMPACTED_BYTES.to_vec(), self.disk_bytes().to_be_bytes().to_vec())?;
        self.engine.write(&mut batch, false)?;
        Ok(())
    }

    /// Installing a snapshot received from the leader: records `meta` (its conf state
    /// becomes the log's) and its membership entries, moves the hard state's commit (and
    /// term) up to it, and drops entries: up to `meta.index` when the log holds that
    /// entry with the snapshot's term (the tail after it agrees with the leader), every
    /// entry otherwise. One synced write.
    pub fn install_snapshot(&self, meta: &SnapshotMetadata, members: &[Entry]) -> Result<()> {
        let mut hs = self.hard_state()?;
        hs.commit = hs.commit.max(meta.index);
        hs.term = hs.term.max(meta.term);
        let agrees = matches!(self.engine.get_entry::<EntryExt>(GROUP_ID, meta.index), Ok(Some(e)) if e.term == meta.term);
        let through = if agrees { meta.index } else { self.last_entry_index().unwrap_or(0).max(meta.index) };
        let mut batch = LogBatch::default();
        self.carry_small_values(&mut batch, &[KEY_INCARNATION])?;
        batch.put_message(GROUP_ID, KEY_SNAPSHOT_META.to_vec(), meta)?;
        batch.put_message(GROUP_ID, KEY_CONF_STATE.to_vec(), meta.get_conf_state())?;
        batch.put_message(GROUP_ID, KEY_HARD_STATE.to_vec(), &hs)?;
        batch.put(GROUP_ID, KEY_MEMBERS.to_vec(), encode_members(members))?;
        if self.first_entry_index().is_some() {
            batch.add_command(GROUP_ID, Command::Compact { index: through + 1 });
        }
        let (mut terms, mut cache) = (self.terms(), self.cache());
        self.engine.write(&mut batch, true)?;
        terms.clear();
        cache.clear();
        drop((terms, cache));
        self.purge()?;
        self.record_compacted_bytes()?;
        Ok(())
    }

    /// Deletes log files that hold no live entry any more (after a compaction).
    pub fn purge(&self) -> Result<()> {
        self.engine.purge_expired_files()?;
        Ok(())
    }

    /// Drops entries below `index` (they must be covered by a snapshot).
    pub fn compact_to(&self, index: u64) -> u64 {
        let mut cache = self.cache();
        cache.compacted(index);
        self.engine.compact_to(GROUP_ID, index)
    }

    pub fn first_entry_index(&self) -> Option<u64> {
        self.engine.first_index(GROUP_ID)
    }

    pub fn last_entry_index(&self) -> Option<u64> {
        self.engine.last_index(GROUP_ID)
    }

    /// Whether an entry carries records (a normal entry with data). The others are
    /// raft's own: a new leader's empty entry, and membership changes (protobuf
    /// `ConfChange`, whose context names the node's transport address).
    pub fn is_record_entry(e: &Entry) -> bool {
        !e.data.is_empty() && e.get_entry_type() == raft::eraftpb::EntryType::EntryNormal
    }

    /// Reads entries `[low, high)`.
    pub fn read_entries(&self, low: u64, high: u64, max_size: Option<usize>) -> Result<Vec<Entry>> {
        let mut out = Vec::with_capacity((high.saturating_sub(low)).min(4096) as usize);
        if low >= high {
            return Ok(out);
        }
        self.engine.fetch_entries_to::<EntryExt>(GROUP_ID, low, high, max_size, &mut out)?;
        Ok(out)
    }

    /// Reads the entries that carry records from `low` to `high` (exclusive; the end
    /// when `None`) in chunks and calls `f` with each proposal they carry (a group
    /// entry's several, each with the entry's index), decoded ([`LogEntry::from_raft`]),
    /// or the decode error with its index. Stops at the first error of `f`.
    pub fn for_each_entry(&self, low: u64, high: Option<u64>, mut f: impl FnMut(u64, Result<LogEntry>) -> Result<()>) -> Result<()> {
        let Some(last) = self.last_entry_index() else { return Ok(()) };
        let first = self.first_entry_index().unwrap_or(1);
        let end = high.unwrap_or(last + 1).min(last + 1);
        let mut at = low.max(first);
        while at < end {
            let hi = (at + 4096).min(end);
            let entries = self.read_entries(at, hi, None).map_err(|e| Error::CorruptLog(format!("reading entries {at}..{hi}: {e}")))?;
            if entries.is_empty() {
                break;
            }
            for e in entries {
                at = e.index + 1;
                match LogEntry::from_raft(&e) {
                    // A group's proposals one by one, with the entry's index.
                    Ok(proposals) => proposals.into_iter().try_for_each(|le| f(e.index, Ok(le)))?,
                    Err(err) => f(e.index, Err(err))?,
                }
            }
        }
        Ok(())
    }

    /// [`RaftLog::for_each_entry`], record by record: `f` sees each record of an entry
    /// with the entry's index (or the entry's decode error).
    pub fn for_each_record(&self, low: u64, high: Option<u64>, mut f: impl FnMut(u64, Result<Record>) -> Result<()>) -> Result<()> {
        self.for_each_entry(low, high, |index, e| match e {
            Ok(e) => e.records.into_iter().try_for_each(|r| f(index, Ok(r))),
            Err(err) => f(index, Err(err)),
        })
    }

    /// Reads every entry and checks every record's checksum; the first failure is a
    /// [`Error::CorruptLog`] naming the entry and the recovery tool. Start-up runs this
    /// so that a master never serves from a damaged log.
    pub fn check_all(&self) -> Result<u64> {
        let mut n = 0;
        let first = self.first_entry_index().unwrap_or(1);
        self.for_each_record(first, None, |index, rec| match rec {
            Ok(_) => {
                n += 1;
                Ok(())
            }
            Err(e) => Err(Error::CorruptLog(format!(
                "entry {index} of the log in {} is damaged: {e}. Refusing to start; run `halite-ctl verify` to see the damage",
                self.dir.display()
            ))),
        })
        .map_err(|e| match e {
            Error::CorruptLog(m) if !m.contains("halite-ctl") => Error::CorruptLog(format!(
                "{m}. Refusing to start; run `halite-ctl verify` to see the damage"
            )),
            other => other,
        })?;
        Ok(n)
    }

    pub fn sync(&self) -> Result<()> {
        self.engine.sync()?;
        Ok(())
    }
}

fn store_err(e: Error) -> raft::Error {
    raft::Error::Store(StorageError::Other(Box::new(e)))
}

impl Storage for RaftLog {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let hs = self.hard_state().map_err(store_err)?;
        let cs = self.conf_state().map_err(store_err)?;
        Ok(RaftState { hard_state: hs, conf_state: cs })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let first = self.first_index()?;
        if low < first {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        let last = self.last_index()?;
        if high > last + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let max = max_size.into().map(|m| m as usize);
        let cached = self.cache().get(low, high);
        let mut out = match cached {
            Some(out) => out,
            None => self.read_entries(low, high, max).map_err(store_err)?,
        };
        if out.is_empty() && low < high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        // raft-rs requires at least one entry even if it alone exceeds max_size.
        if let Some(m) = max {
            let mut size = 0usize;
            let mut keep = 0;
            for e in &out {
                size += e.compute_size() as usize;
                if keep > 0 && size > m {
                    break;
                }
                keep += 1;
            }
            out.truncate(keep);
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let meta = self.snapshot_meta().map_err(store_err)?;
        if idx == meta.index {
            return Ok(meta.term);
        }
        let first = self.first_index()?;
        if idx < first {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        // Known without reading the entry back (`log_terms.rs`).
        if let Some(term) = self.terms().get(idx) {
            return Ok(term);
        }
        match self.engine.get_entry::<EntryExt>(GROUP_ID, idx) {
            Ok(Some(e)) => Ok(e.term),
            Ok(None) => Err(raft::Error::Store(StorageError::Unavailable)),
            Err(e) => Err(store_err(e.into())),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        match self.engine.first_index(GROUP_ID) {
            Some(i) => Ok(i),
            None => Ok(self.snapshot_meta().map_err(store_err)?.index + 1),
        }
    }

    fn last_index(&self) -> raft::Result<u64> {
        match self.engine.last_index(GROUP_ID) {
            Some(i) => Ok(i),
            None => Ok(self.snapshot_meta().map_err(store_err)?.index),
        }
    }

    fn snapshot(&self, _request_index: u64, to: u64) -> raft::Result<Snapshot> {
        // The metadata of the newest snapshot (the one the log was compacted through).
        // raft-rs puts it in the `MsgSnapshot` it sends to a follower that needs entries
        // below `first_index`; the files themselves travel separately, in chunks, from
        // `crate::snapshot::SnapshotStore::get(meta.index)`. Index 0: no snapshot yet.
        // A member added after that snapshot is not in its conf state, and raft-rs on
        // its side would refuse it: "not yet", until the node snapshots again (the
        // replication driver does when a peer waits for one).
        let meta = self.snapshot_meta().map_err(store_err)?;
        let cs = meta.get_conf_state();
        if to != 0 && meta.index > 0 && !cs.voters.contains(&to) && !cs.learners.contains(&to) {
            return Err(raft::Error::Store(raft::StorageError::SnapshotTemporarilyUnavailable));
        }
        let mut snap = Snapshot::default();
        snap.set_metadata(meta);
        Ok(snap)
    }
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
