//! The record format: the bytes of one state change, as stored in each raft entry.
//!
//! (Over 600 lines on purpose: the byte format is kept in one documented file, each
//! kind's struct beside its checks; the tests are in `format_tests.rs`.)
//!
//! Every state change Halite knows is one [`Record`]. A record is framed so that it can be
//! checked on its own, whoever hands it to us (the local log, a peer, a dump file):
//!
//! ```text
//! offset  size  field
//!      0     2  magic, the ASCII bytes "HL" (0x48 0x4C)
//!      2     1  format version, currently 1
//!      3     1  kind (see RecordKind: 1 key set ... 13 roots sync, 16 mine update, 17 reaction, 18 eauth token, 19 batch run)
//!      4     4  payload length N, u32 little-endian, at most MAX_PAYLOAD_LEN
//!      8     4  CRC-32 (IEEE, as crc32fast computes it) of bytes 0..8 and the payload
//!     12     N  payload: a msgpack map with the kind's named fields (rmp-serde)
//! ```
//!
//! The payload schemas are the `*` structs below; field names are the msgpack map keys.
//! Byte strings (public keys, return loads, file contents) are msgpack `bin`. A decoder
//! checks, in this order: enough bytes for the header, the magic, the version, the kind,
//! the length bound, the CRC, the payload schema, then the record's own rules (valid
//! minion ids, safe relative paths, chunk numbering). Any failure is an
//! [`Error::BadRecord`] naming the byte offset of the field that failed; decoding never
//! panics, whatever the input (a property test feeds it random and mutated bytes).
//!
//! `docs/formats.md` repeats this table together with the raft-engine and view layouts.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::id::{validate_minion_id, validate_relative_path, validate_saltenv};
pub use crate::reaction::Reaction;
pub use crate::batch_run::BatchRun;
pub use crate::eauth_token::EauthToken;

/// The two magic bytes at the start of every record.
pub const MAGIC: [u8; 2] = *b"HL";
/// The only format version this build writes and reads.
pub const VERSION: u8 = 1;
/// Length of the fixed header before the payload.
pub const HEADER_LEN: usize = 12;
/// Upper bound of a payload. Larger roots files are split into chunks of
/// [`ROOTS_CHUNK_LEN`] bytes, so only a pathological job return could reach it.
pub const MAX_PAYLOAD_LEN: usize = 64 << 20;
/// Size of one roots blob chunk.
pub const ROOTS_CHUNK_LEN: usize = 1 << 20;
/// The longest jid accepted (Salt jids are 20 digits; custom jids are short strings).
pub const MAX_JID_LEN: usize = 128;

/// The kind byte of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(u8)]
pub enum RecordKind {
    KeySet = 1,
    JobPublished = 2,
    JobReturn = 3,
    GrainsReport = 4,
    RootsBlob = 5,
    RootsTombstone = 6,
    AesKeyRotation = 7,
    ImportMarker = 8,
    JobsExpired = 9,
    ClusterKeyPair = 10,
    MasterKeyPair = 11,
    RootsStage = 12,
    RootsSync = 13,
    PillarCache = 14,
    MemberKey = 15,
    MineUpdate = 16,
    Reaction = 17,
    EauthToken = 18,
    BatchRun = 19,
}

impl RecordKind {
    pub const ALL: [RecordKind; 19] = [
        RecordKind::KeySet,
        RecordKind::JobPublished,
        RecordKind::JobReturn,
        RecordKind::GrainsReport,
        RecordKind::RootsBlob,
        RecordKind::RootsTombstone,
        RecordKind::AesKeyRotation,
        RecordKind::ImportMarker,
        RecordKind::JobsExpired,
        RecordKind::ClusterKeyPair,
        RecordKind::MasterKeyPair,
        RecordKind::RootsStage,
        RecordKind::RootsSync,
        RecordKind::PillarCache,
        RecordKind::MemberKey,
        RecordKind::MineUpdate,
        RecordKind::Reaction,
        RecordKind::EauthToken,
        RecordKind::BatchRun,
    ];

    pub fn from_u8(b: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|k| *k as u8 == b)
    }

    /// The name used by `halite-ctl dump --kind`.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::KeySet => "key_set",
            RecordKind::JobPublished => "job_published",
            RecordKind::JobReturn => "job_return",
            RecordKind::GrainsReport => "grains_report",
            RecordKind::RootsBlob => "roots_blob",
            RecordKind::RootsTombstone => "roots_tombstone",
            RecordKind::AesKeyRotation => "aes_key_rotation",
            RecordKind::ImportMarker => "import_marker",
            RecordKind::JobsExpired => "jobs_expired",
            RecordKind::ClusterKeyPair => "cluster_key_pair",
            RecordKind::MasterKeyPair => "master_key_pair",
            RecordKind::RootsStage => "roots_stage",
            RecordKind::RootsSync => "roots_sync",
            RecordKind::PillarCache => "pillar_cache",
            RecordKind::MemberKey => "member_key",
            RecordKind::MineUpdate => "mine_update",
            RecordKind::Reaction => "reaction",
            RecordKind::EauthToken => "eauth_token",
            RecordKind::BatchRun => "batch_run",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// What a key-set record does to the two key banks.
///
/// `Accepted`, `Pending` and `Rejected` set the `keys` bank entry of the id (one state at
/// a time, as in Salt). `Denied` records a conflicting key in the `denied_keys` bank,
/// which is orthogonal to the state; only the first denied key of an id is kept.
/// `Deleted` removes the `keys` entry, `DeniedCleared` the `denied_keys` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyState {
    Accepted,
    Pending,
    Rejected,
    Denied,
    Deleted,
    DeniedCleared,
}

impl KeyState {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Accepted => "accepted",
            KeyState::Pending => "pending",
            KeyState::Rejected => "rejected",
            KeyState::Denied => "denied",
            KeyState::Deleted => "deleted",
            KeyState::DeniedCleared => "denied_cleared",
        }
    }
}

/// A key state change. `pub_key` is the public key text exactly as presented (for
/// `Deleted`/`DeniedCleared` it is empty).
///
/// A change decided from what the proposer read names that read in `expect`, and the
/// state machine applies it only if the bank still holds exactly that when the record
/// applies (the same test on every member, at the same log position); otherwise the
/// record changes nothing. So a member that is behind (restarted, joining, cut off)
/// can never put an accepted key back to pending, nor bring a deleted one back: its
/// record names the stale state it saw, and that is no longer what the log says.
/// `expect: None` (records written before this field existed, imports, the operator's
/// own tools working on a stopped master) applies unconditionally.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySet {
    pub id: String,
    pub state: KeyState,
    #[serde(with = "serde_bytes")]
    pub pub_key: Vec<u8>,
    /// Wall clock of the proposer, nanoseconds since the epoch; views use it as mtime.
    pub time_ns: u64,
    /// What the bank this record changes must hold for `id` when it applies: the
    /// `keys` bank for `accepted`/`pending`/`rejected`/`deleted`, the `denied_keys`
    /// bank for `denied`/`denied_cleared`. Absent from the payload when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<KeyExpect>,
    /// For a new pending key: applies only if fewer than this many keys are pending
    /// when it applies (`halite_max_pending_keys`, as the proposer is configured). The
    /// count is the state machine's, at this record's log position, so the cap holds
    /// across every member of a cluster, whichever member each sign-in reached. A key
    /// already pending for the id is not counted twice. Absent when `None` (no cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_below: Option<u64>,
}

impl KeySet {
    /// An unconditional key change (no `expect`).
    pub fn new(id: impl Into<String>, state: KeyState, pub_key: Vec<u8>, time_ns: u64) -> Self {
        KeySet { id: id.into(), state, pub_key, time_ns, expect: None, pending_below: None }
    }

    /// The same change, applied only while fewer than `cap` keys are pending.
    pub fn pending_below(mut self, cap: u64) -> Self {
        self.pending_below = Some(cap);
        self
    }

    /// The same change, applied only if the bank holds `expect` for the id then.
    pub fn expecting(mut self, expect: KeyExpect) -> Self {
        self.expect = Some(expect);
        self
    }
}

/// What a conditional [`KeySet`] expects its bank to hold for the id when it applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyExpect {
    /// No entry for the id.
    Absent,
    /// An entry in `state` (`accepted`, `pending` or `rejected` in the keys bank,
    /// `denied` in the denied bank) with exactly these public key bytes.
    Holds {
        state: KeyState,
        #[serde(with = "serde_bytes")]
        pub_key: Vec<u8>,
    },
}

/// A job as published to minions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPublished {
    pub jid: String,
    /// The publish load, msgpack as sent to minions (before encryption).
    #[serde(with = "serde_bytes")]
    pub load: Vec<u8>,
    /// Minions expected to answer.
    pub minions: Vec<String>,
    pub time_ns: u64,
    /// The minion that started this job itself (a return with jid `req`: its
    /// scheduler, `salt-call` with `return_job`). Such a job is stored as Salt stores
    /// it (`jobs.lookup_jid` finds it) and is never published: a master publishes
    /// only what its operator asked for. Absent from the payload when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<String>,
    /// Another group of minions for a job already stored (a `--batch` run's next start,
    /// published under the run's one jid, as Salt 3008 does). Decided at apply: when the
    /// job exists its `minions` gain these (in order, each once) and its load and time
    /// stay; when it does not, this record is stored as it is. The load is still what
    /// this group is sent. Absent from the payload when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub joins: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One minion's return for a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobReturn {
    pub jid: String,
    pub id: String,
    /// The return load, msgpack as received (after decryption).
    #[serde(with = "serde_bytes")]
    pub load: Vec<u8>,
    pub time_ns: u64,
    /// Applies only if no return for (`jid`, `id`) is stored yet: a return that must be
    /// the first and only one (an orchestration run's end), decided at apply. Absent from
    /// the payload when false (a minion's return, which replaces an earlier one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first_only: bool,
}

/// The grains a minion reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrainsReport {
    pub id: String,
    #[serde(with = "serde_bytes")]
    pub grains: Vec<u8>,
    pub time_ns: u64,
}

/// The largest pillar kept in the pillar cache (msgpack bytes); a larger one is not
/// cached (pillar targeting then does not see that minion, as Salt without a cache entry).
pub const MAX_PILLAR_CACHE_LEN: usize = 4 << 20;

/// The largest grains report recorded (msgpack bytes; a minion's grains are tens of
/// KiB): larger ones are used for that request's pillar and not recorded, so a minion
/// cannot write a request's size (up to 64 MiB) into the log with every pillar refresh.
/// The bound the handler keeps, not a check of stored records (a log written before it
/// still reads).
pub const MAX_GRAINS_LEN: usize = 4 << 20;

/// The pillar last compiled for a minion, kept so the master can resolve pillar targets
/// (`-I`, `I@`, `-J`, `J@`) as Salt's minion data cache does. Replaces the previous one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PillarCache {
    pub id: String,
    /// The compiled pillar, msgpack (a map), at most [`MAX_PILLAR_CACHE_LEN`] bytes.
    #[serde(with = "serde_bytes")]
    pub pillar: Vec<u8>,
    pub time_ns: u64,
}

/// Which roots tree a blob belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RootsTree {
    File,
    Pillar,
    /// The gitfs backend's files, as fetched from its remotes (`master/src/gitfs`):
    /// served from the state machine, never materialised in a directory.
    Gitfs,
}

impl RootsTree {
    pub fn as_str(self) -> &'static str {
        match self {
            RootsTree::File => "file",
            RootsTree::Pillar => "pillar",
            RootsTree::Gitfs => "gitfs",
        }
    }
}

/// One chunk of a file under `file_roots` or `pillar_roots`. A file of `size` bytes is
/// `chunks` records, chunk `i` holding bytes `i*ROOTS_CHUNK_LEN ..`; an empty file is one
/// chunk of zero bytes. `sha256` is of the whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsBlob {
    pub tree: RootsTree,
    pub saltenv: String,
    pub path: String,
    pub mode: u32,
    #[serde(with = "serde_bytes")]
    pub sha256: Vec<u8>,
    pub size: u64,
    pub chunk: u32,
    pub chunks: u32,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// The deletion of a file under a roots tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsTombstone {
    pub tree: RootsTree,
    pub saltenv: String,
    pub path: String,
}

/// Length of a roots sync's id (random bytes the proposer draws).
pub const SYNC_ID_LEN: usize = 16;

/// One chunk of a file that a `cluster.sync_roots` brings, staged apart from the live
/// roots under the sync's id until the sync's [`RootsSync`] applies (or is dropped when
/// another sync applies first). Nothing reads staged content but that record's apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsStage {
    #[serde(with = "serde_bytes")]
    pub sync: Vec<u8>,
    pub blob: RootsBlob,
}

/// A file as a [`RootsSync`] names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsSyncFile {
    pub tree: RootsTree,
    pub saltenv: String,
    pub path: String,
    pub mode: u32,
    pub size: u64,
    #[serde(with = "serde_bytes")]
    pub sha256: Vec<u8>,
}

/// The commit of a `cluster.sync_roots`: after it applies, the roots `trees` hold exactly
/// `files`, or nothing changed. Decided at apply, the same way on every member: each file
/// must be live already with that content and mode, or staged complete under `sync`
/// with that content; every live file of those trees that is not in `files` must be in
/// `remove` (what the proposer expected to remove). Anything else (content staged by
/// nobody, a file another sync added since the proposer read its state) fails the whole
/// sync. The staging area is cleared either way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsSync {
    #[serde(with = "serde_bytes")]
    pub sync: Vec<u8>,
    pub trees: Vec<RootsTree>,
    pub files: Vec<RootsSyncFile>,
    pub remove: Vec<RootsTombstone>,
    /// The git commits the files come from (a gitfs update, `trees` = `[gitfs]`);
    /// absent (never empty when written) for `cluster.sync_roots`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commits: Vec<crate::roots_commit::RootsCommit>,
}

/// Most functions one mine update names.
pub const MAX_MINE_FUNS: usize = 1000;
/// Longest mine function name.
pub const MAX_MINE_FUN_LEN: usize = 1024;
/// Most bytes of data one mine update carries (all its functions together).
pub const MAX_MINE_BYTES: usize = 4 << 20;

/// What a [`MineUpdate`] does to one minion's mine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MineOp {
    /// `_mine`: store each entry's data under its function (after removing every
    /// function first when `clear`).
    Send,
    /// `_mine_delete`: remove the entries' functions (their data is empty).
    Delete,
    /// `_mine_flush`: remove the whole mine (no entries).
    Flush,
}

/// One function of a mine update: its name and, for a send, its data (msgpack).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MineEntry {
    pub fun: String,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// A change to one minion's mine (Salt's `mine` cache bank). The id is the minion that
/// sent the request (authenticated), never a field of its load. It does not depend on
/// the state it applies to: applied in log order, every member holds the same mine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MineUpdate {
    pub id: String,
    pub op: MineOp,
    pub clear: bool,
    pub entries: Vec<MineEntry>,
    pub time_ns: u64,
}

fn check_mine(m: &MineUpdate) -> Result<()> {
    validate_minion_id(&m.id)?;
    if m.entries.len() > MAX_MINE_FUNS {
        return Err(Error::Invalid(format!("mine update of {:?} names {} functions, more than {MAX_MINE_FUNS}", m.id, m.entries.len())));
    }
    let mut bytes = 0usize;
    for e in &m.entries {
        if e.fun.is_empty() || e.fun.len() > MAX_MINE_FUN_LEN || e.fun.contains('\0') {
            return Err(Error::Invalid(format!("mine update of {:?}: function name empty, longer than {MAX_MINE_FUN_LEN} bytes or with a NUL", m.id)));
        }
        if m.op != MineOp::Send && !e.data.is_empty() {
            return Err(Error::Invalid(format!("mine update of {:?}: a delete carries no data", m.id)));
        }
        bytes += e.data.len();
    }
    if bytes > MAX_MINE_BYTES {
        return Err(Error::Invalid(format!("mine update of {:?} carries {bytes} bytes, more than {MAX_MINE_BYTES}", m.id)));
    }
    if (m.op == MineOp::Flush && !m.entries.is_empty()) || (m.op != MineOp::Send && m.clear) {
        return Err(Error::Invalid(format!("mine update of {:?}: a flush names no function, only a send clears", m.id)));
    }
    Ok(())
}

/// A new cluster AES key (the key that encrypts publishes), by generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AesKeyRotation {
    pub generation: u64,
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    pub time_ns: u64,
}

/// Begin or end of an import (migration) of outside state into the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImportPhase {
    Begin,
    End,
}

/// Marks the start and end of an import, so that `dump` and recovery can see where an
/// import began and whether it finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportMarker {
    /// What was imported, e.g. `localfs_key:/etc/salt/pki/master`.
    pub source: String,
    pub phase: ImportPhase,
    /// Counts per category (only meaningful at `End`).
    pub counts: BTreeMap<String, u64>,
    pub time_ns: u64,
}

/// The job cache's expiry (`keep_jobs_seconds`): every job whose jid sorts before
/// `before_jid`, and all its returns, is removed. The cutoff is decided once, by the
/// master that proposes the record, so every replica removes exactly the same jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobsExpired {
    /// A 20-digit jid (`YYYYMMDDhhmmssffffff`, UTC): the first one kept.
    pub before_jid: String,
    pub time_ns: u64,
}

/// The cluster's key pair (Salt's `cluster.pem`): what every member signs and presents to
/// minions with, so that a minion may talk to any of them. PKCS#1 PEM of the private key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterKeyPair {
    #[serde(with = "serde_bytes")]
    pub private_pem: Vec<u8>,
    pub time_ns: u64,
}

/// A lone master's own key pair (Salt's `<master_id>.pem`): what it signs with and what
/// minions know it by. Set once; the key view's master bank is materialised from it
/// (`<name>.pem`, `<name>.pub`, and with `localfs_key` the `master.pem` / `master.pub`
/// links). A cluster member presents the cluster's pair instead, and never puts a
/// private key of its own into the replicated log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MasterKeyPair {
    /// `master_id`: the master's `id` without a trailing `_master`.
    pub name: String,
    #[serde(with = "serde_bytes")]
    pub private_pem: Vec<u8>,
    pub time_ns: u64,
}

/// A cluster member's transport key (`replication::transport::identity`), recorded by
/// the member itself: which Ed25519 public key speaks for raft id `id`. Decided at apply
/// (`state/member_keys.rs`): set once per id, by an entry that member proposed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberKey {
    pub id: u64,
    #[serde(with = "serde_bytes")]
    pub public: Vec<u8>,
    pub time_ns: u64,
}

/// Length of a member public key (Ed25519).
pub const MEMBER_KEY_LEN: usize = 32;

/// One state change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Record {
    KeySet(KeySet),
    JobPublished(JobPublished),
    JobReturn(JobReturn),
    GrainsReport(GrainsReport),
    RootsBlob(RootsBlob),
    RootsTombstone(RootsTombstone),
    AesKeyRotation(AesKeyRotation),
    ImportMarker(ImportMarker),
    JobsExpired(JobsExpired),
    ClusterKeyPair(ClusterKeyPair),
    MasterKeyPair(MasterKeyPair),
    RootsStage(RootsStage),
    RootsSync(RootsSync),
    PillarCache(PillarCache),
    MemberKey(MemberKey),
    MineUpdate(MineUpdate),
    Reaction(Reaction),
    EauthToken(EauthToken),
    BatchRun(BatchRun),
}

/// The checks of one roots blob (live or staged).
fn check_blob(b: &RootsBlob) -> Result<()> {
    validate_saltenv(&b.saltenv)?;
    validate_relative_path(&b.path)?;
    if b.sha256.len() != 32 {
        return Err(Error::Invalid("roots blob sha256 is not 32 bytes".into()));
    }
    let expect_chunks = (b.size.div_ceil(ROOTS_CHUNK_LEN as u64)).max(1);
    if b.chunks as u64 != expect_chunks || b.chunk >= b.chunks {
        return Err(Error::Invalid(format!("roots blob {}: chunk {}/{} does not fit size {}", b.path, b.chunk, b.chunks, b.size)));
    }
    let start = b.chunk as u64 * ROOTS_CHUNK_LEN as u64;
    let expect_len = (b.size - start).min(ROOTS_CHUNK_LEN as u64);
    if b.data.len() as u64 != expect_len {
        return Err(Error::Invalid(format!("roots blob {}: chunk {} holds {} bytes, expected {}", b.path, b.chunk, b.data.len(), expect_len)));
    }
    if b.mode & !0o7777 != 0 {
        return Err(Error::Invalid(format!("roots blob {}: mode {:o} refused", b.path, b.mode)));
    }
    Ok(())
}

fn check_sync_id(sync: &[u8]) -> Result<()> {
    if sync.len() != SYNC_ID_LEN {
        return Err(Error::Invalid(format!("roots sync id of {} bytes, not {SYNC_ID_LEN}", sync.len())));
    }
    Ok(())
}

fn check_sync(s: &RootsSync) -> Result<()> {
    check_sync_id(&s.sync)?;
    let distinct: std::collections::BTreeSet<RootsTree> = s.trees.iter().copied().collect();
    if s.trees.is_empty() || distinct.len() != s.trees.len() {
        return Err(Error::Invalid("roots sync: trees must be file, pillar or gitfs, once each".into()));
    }
    crate::roots_commit::check_commits(s)?;
    let mut seen = std::collections::HashSet::new();
    for f in &s.files {
        validate_saltenv(&f.saltenv)?;
        validate_relative_path(&f.path)?;
        if !s.trees.contains(&f.tree) || f.sha256.len() != 32 || f.mode & !0o7777 != 0 {
            return Err(Error::Invalid(format!("roots sync: file {} outside its trees, with a bad sha256 or mode", f.path)));
        }
        if !seen.insert((f.tree, f.saltenv.as_str(), f.path.as_str())) {
            return Err(Error::Invalid(format!("roots sync: file {} named twice", f.path)));
        }
    }
    for t in &s.remove {
        validate_saltenv(&t.saltenv)?;
        validate_relative_path(&t.path)?;
        if !s.trees.contains(&t.tree) || seen.contains(&(t.tree, t.saltenv.as_str(), t.path.as_str())) {
            return Err(Error::Invalid(format!("roots sync: removal of {} outside its trees or of a file it keeps", t.path)));
        }
    }
    Ok(())
}

fn check_private_pem(what: &str, pem: &[u8]) -> Result<()> {
    if pem.is_empty() || pem.len() > 16 << 10 || !pem.starts_with(b"-----BEGIN") {
        return Err(Error::Invalid(format!("{what}: not a PEM private key of at most 16 KiB")));
    }
    Ok(())
}

fn check_jid(jid: &str) -> Result<()> {
    if jid.is_empty() || jid.len() > MAX_JID_LEN || jid.contains(['/', '\\', '\0']) || jid == "." || jid == ".." {
        return Err(Error::Invalid(format!("jid {:?} refused", jid.escape_debug().to_string())));
    }
    Ok(())
}

impl Record {
    pub fn kind(&self) -> RecordKind {
        match self {
            Record::KeySet(_) => RecordKind::KeySet,
            Record::JobPublished(_) => RecordKind::JobPublished,
            Record::JobReturn(_) => RecordKind::JobReturn,
            Record::GrainsReport(_) => RecordKind::GrainsReport,
            Record::RootsBlob(_) => RecordKind::RootsBlob,
            Record::RootsTombstone(_) => RecordKind::RootsTombstone,
            Record::AesKeyRotation(_) => RecordKind::AesKeyRotation,
            Record::ImportMarker(_) => RecordKind::ImportMarker,
            Record::JobsExpired(_) => RecordKind::JobsExpired,
            Record::ClusterKeyPair(_) => RecordKind::ClusterKeyPair,
            Record::MasterKeyPair(_) => RecordKind::MasterKeyPair,
            Record::RootsStage(_) => RecordKind::RootsStage,
            Record::RootsSync(_) => RecordKind::RootsSync,
            Record::PillarCache(_) => RecordKind::PillarCache,
            Record::MemberKey(_) => RecordKind::MemberKey,
            Record::MineUpdate(_) => RecordKind::MineUpdate,
            Record::Reaction(_) => RecordKind::Reaction,
            Record::EauthToken(_) => RecordKind::EauthToken,
            Record::BatchRun(_) => RecordKind::BatchRun,
        }
    }

    /// The record's own rules, checked before encoding and after decoding.
    pub fn validate(&self) -> Result<()> {
        match self {
            Record::KeySet(k) => {
                validate_minion_id(&k.id)?;
                let needs_key = !matches!(k.state, KeyState::Deleted | KeyState::DeniedCleared);
                if needs_key && k.pub_key.is_empty() {
                    return Err(Error::Invalid(format!("key set for {:?} to {} has no public key", k.id, k.state.as_str())));
                }
                if k.pub_key.len() > 64 << 10 {
                    return Err(Error::Invalid(format!("public key of {:?} is larger than 64 KiB", k.id)));
                }
                match &k.expect {
                    Some(KeyExpect::Holds { state, pub_key }) => {
                        let denied_bank = matches!(k.state, KeyState::Denied | KeyState::DeniedCleared);
                        let fits = if denied_bank { *state == KeyState::Denied } else { matches!(state, KeyState::Accepted | KeyState::Pending | KeyState::Rejected) };
                        if !fits {
                            return Err(Error::Invalid(format!("key set for {:?} to {} cannot expect a {} key", k.id, k.state.as_str(), state.as_str())));
                        }
                        if pub_key.len() > 64 << 10 {
                            return Err(Error::Invalid(format!("expected public key of {:?} is larger than 64 KiB", k.id)));
                        }
                    }
                    Some(KeyExpect::Absent) | None => {}
                }
            }
            Record::JobPublished(j) => {
                check_jid(&j.jid)?;
                for m in &j.minions {
                    validate_minion_id(m)?;
                }
                if let Some(id) = &j.started_by {
                    validate_minion_id(id)?;
                }
            }
            Record::JobReturn(r) => {
                check_jid(&r.jid)?;
                validate_minion_id(&r.id)?;
            }
            Record::GrainsReport(g) => {
                validate_minion_id(&g.id)?;
            }
            Record::PillarCache(p) => {
                validate_minion_id(&p.id)?;
                if p.pillar.len() > MAX_PILLAR_CACHE_LEN {
                    return Err(Error::Invalid(format!("pillar cache of {:?}: {} bytes, more than {MAX_PILLAR_CACHE_LEN}", p.id, p.pillar.len())));
                }
            }
            Record::RootsBlob(b) => check_blob(b)?,
            Record::RootsStage(st) => {
                check_sync_id(&st.sync)?;
                check_blob(&st.blob)?;
            }
            Record::RootsSync(sy) => check_sync(sy)?,
            Record::MineUpdate(m) => check_mine(m)?,
            Record::Reaction(r) => crate::reaction::check(r)?,
            Record::EauthToken(t) => crate::eauth_token::check(t)?,
            Record::BatchRun(r) => {
                check_jid(&r.jid)?;
                crate::batch_run::check(r)?;
            }
            Record::MemberKey(k) => {
                if k.id == 0 || k.public.len() != MEMBER_KEY_LEN {
                    return Err(Error::Invalid(format!("member key for raft id {}: {} bytes (a raft id is non-zero and a member key {MEMBER_KEY_LEN} bytes)", k.id, k.public.len())));
                }
            }
            Record::RootsTombstone(t) => {
                validate_saltenv(&t.saltenv)?;
                validate_relative_path(&t.path)?;
            }
            Record::AesKeyRotation(a) => {
                if a.key.is_empty() || a.key.len() > 1024 {
                    return Err(Error::Invalid("AES key rotation with an empty or oversized key".into()));
                }
            }
            Record::ImportMarker(m) => {
                if m.source.len() > 4096 {
                    return Err(Error::Invalid("import marker source longer than 4096 bytes".into()));
                }
            }
            Record::ClusterKeyPair(k) => check_private_pem("cluster key pair", &k.private_pem)?,
            Record::MasterKeyPair(k) => {
                validate_minion_id(&k.name).map_err(|e| Error::Invalid(format!("master key pair name: {e}")))?;
                check_private_pem("master key pair", &k.private_pem)?;
            }
            Record::JobsExpired(e) => {
                if e.before_jid.len() != 20 || !e.before_jid.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(Error::Invalid(format!("jobs expiry cutoff {:?} is not a 20-digit jid", e.before_jid.escape_debug().to_string())));
                }
            }
        }
        Ok(())
    }

    /// About how many bytes the record's payload encodes to: its large fields' lengths
    /// plus room for the field names and small values. Only a capacity to start the
    /// output with (a return of a few hundred bytes then takes one allocation, not the
    /// five or six of a buffer that doubles from nothing); never a bound.
    pub fn payload_len_hint(&self) -> usize {
        const SMALL: usize = 128;
        SMALL
            + match self {
                Record::JobReturn(r) => r.jid.len() + r.id.len() + r.load.len(),
                Record::JobPublished(j) => j.jid.len() + j.load.len() + j.minions.iter().map(|m| m.len() + 1).sum::<usize>(),
                Record::GrainsReport(g) => g.id.len() + g.grains.len(),
                Record::PillarCache(p) => p.id.len() + p.pillar.len(),
                _ => 0,
            }
    }

    /// Encodes the record into its framed bytes. Fails only if the record breaks its own
    /// rules or is larger than [`MAX_PAYLOAD_LEN`].
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut out = Vec::with_capacity(HEADER_LEN + self.payload_len_hint().min(MAX_PAYLOAD_LEN));
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(self.kind() as u8);
        out.extend_from_slice(&[0; 8]);
        rmp_serde::encode::write_named(&mut out, self)
            .map_err(|e| Error::Invalid(format!("cannot encode {} record: {e}", self.kind().name())))?;
        let len = out.len() - HEADER_LEN;
        if len > MAX_PAYLOAD_LEN {
            return Err(Error::Invalid(format!("{} record of {len} bytes exceeds the {MAX_PAYLOAD_LEN}-byte limit", self.kind().name())));
        }
        out[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        let crc = frame_crc(&out[..8], &out[HEADER_LEN..]);
        out[8..12].copy_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Decodes one framed record that must span `buf` exactly.
    pub fn decode(buf: &[u8]) -> Result<Record> {
        let (rec, used) = Self::decode_prefix(buf)?;
        if used != buf.len() {
            return Err(bad(used, format!("{} trailing bytes after the record", buf.len() - used)));
        }
        Ok(rec)
    }

    /// Decodes the record at the start of `buf`; returns it and the bytes it used.
    pub fn decode_prefix(buf: &[u8]) -> Result<(Record, usize)> {
        let header = read_header(buf)?;
        let payload = &buf[HEADER_LEN..HEADER_LEN + header.len];
        let rec = decode_payload(header.kind, payload).map_err(|why| bad(HEADER_LEN, why))?;
        rec.validate().map_err(|e| bad(HEADER_LEN, e.to_string()))?;
        Ok((rec, HEADER_LEN + header.len))
    }
}

/// The checked fixed header of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: RecordKind,
    pub len: usize,
}

/// Reads and checks the header and CRC of the record at the start of `buf`, without
/// decoding the payload (what `verify` and `dump --kind` need).
pub fn read_header(buf: &[u8]) -> Result<Header> {
    if buf.len() < HEADER_LEN {
        return Err(bad(0, format!("{} bytes, shorter than the {HEADER_LEN}-byte header", buf.len())));
    }
    if buf[0..2] != MAGIC {
        return Err(bad(0, format!("magic {:02x}{:02x}, expected 484c (\"HL\")", buf[0], buf[1])));
    }
    if buf[2] != VERSION {
        return Err(bad(2, format!("unknown format version {} (this build reads version {VERSION})", buf[2])));
    }
    let kind = RecordKind::from_u8(buf[3]).ok_or_else(|| bad(3, format!("unknown record kind {}", buf[3])))?;
    let len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    if len > MAX_PAYLOAD_LEN {
        return Err(bad(4, format!("payload length {len} exceeds the {MAX_PAYLOAD_LEN}-byte limit")));
    }
    if buf.len() - HEADER_LEN < len {
        return Err(bad(4, format!("payload length {len} but only {} bytes follow the header", buf.len() - HEADER_LEN)));
    }
    let stored = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]);
    let actual = frame_crc(&buf[..8], &buf[HEADER_LEN..HEADER_LEN + len]);
    if stored != actual {
        return Err(bad(8, format!("checksum mismatch: stored {stored:08x}, computed {actual:08x}")));
    }
    Ok(Header { kind, len })
}

fn frame_crc(header8: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(header8);
    h.update(payload);
    h.finalize()
}

fn bad(offset: usize, why: impl Into<String>) -> Error {
    Error::BadRecord { offset: offset as u64, why: why.into() }
}

fn decode_payload(kind: RecordKind, payload: &[u8]) -> std::result::Result<Record, String> {
    fn de<'a, T: Deserialize<'a>>(p: &'a [u8]) -> std::result::Result<T, String> {
        rmp_serde::from_slice(p).map_err(|e| format!("payload does not match its kind: {e}"))
    }
    Ok(match kind {
        RecordKind::KeySet => Record::KeySet(de(payload)?),
        RecordKind::JobPublished => Record::JobPublished(de(payload)?),
        RecordKind::JobReturn => Record::JobReturn(de(payload)?),
        RecordKind::GrainsReport => Record::GrainsReport(de(payload)?),
        RecordKind::RootsBlob => Record::RootsBlob(de(payload)?),
        RecordKind::RootsTombstone => Record::RootsTombstone(de(payload)?),
        RecordKind::AesKeyRotation => Record::AesKeyRotation(de(payload)?),
        RecordKind::ImportMarker => Record::ImportMarker(de(payload)?),
        RecordKind::JobsExpired => Record::JobsExpired(de(payload)?),
        RecordKind::ClusterKeyPair => Record::ClusterKeyPair(de(payload)?),
        RecordKind::MasterKeyPair => Record::MasterKeyPair(de(payload)?),
        RecordKind::RootsStage => Record::RootsStage(de(payload)?),
        RecordKind::RootsSync => Record::RootsSync(de(payload)?),
        RecordKind::PillarCache => Record::PillarCache(de(payload)?),
        RecordKind::MemberKey => Record::MemberKey(de(payload)?),
        RecordKind::MineUpdate => Record::MineUpdate(de(payload)?),
        RecordKind::Reaction => Record::Reaction(de(payload)?),
        RecordKind::EauthToken => Record::EauthToken(de(payload)?),
        RecordKind::BatchRun => Record::BatchRun(de(payload)?),
    })
}

/// Nanoseconds since the Unix epoch, the timestamp records carry.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
#[path = "format_tests.rs"]
pub(crate) mod tests;
