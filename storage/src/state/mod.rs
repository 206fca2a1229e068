//! The state machine: committed records applied, in log order, to RocksDB.
//!
//! (The column-family table and the point reads the views and handlers use stay beside
//! the type; applying, replacing, roots, tokens, job returns, the keys banks' reads, key
//! prints and member keys live in their own files. This file is a little over 600
//! lines because the column families, the key layouts and the point reads share its
//! private encoders; each other concern is a file of its own.)
//!
//! Column families (keys and values are documented in docs/formats.md):
//!
//! | cf        | key                         | value                                          |
//! |-----------|-----------------------------|------------------------------------------------|
//! | `meta`    | `applied_index`             | u64 BE: the last applied log index              |
//! | `meta`    | `views_index`               | u64 BE: the index the views reflect             |
//! | `meta`    | `cluster_key_pair`          | the `ClusterKeyPair` payload (msgpack), set once |
//! | `meta`    | `master_key_pair`           | the `MasterKeyPair` payload (msgpack), set once  |
//! | `meta`    | `member_key/`, u64 BE raft id | the member's Ed25519 public key (32 bytes): `member_keys.rs` |
//! | `keys`    | minion id                   | u8 state (1 acc, 2 pend, 3 rej), u64 BE time_ns, pub bytes |
//! | `denied`  | minion id                   | u64 BE time_ns, pub bytes (the first denied key) |
//! | `jobs`    | jid                         | the `JobPublished` payload (msgpack)            |
//! | `returns` | jid, NUL, minion id         | the `JobReturn` payload (msgpack)               |
//! | `grains`  | minion id                   | the `GrainsReport` payload (msgpack)            |
//! | `pillar`  | minion id                   | the `PillarCache` payload (msgpack)             |
//! | `roots`   | tree, NUL, saltenv, NUL, path | `RootsMeta` (msgpack)                         |
//! | `chunks`  | roots key, NUL, u32 BE chunk | chunk bytes                                    |
//! | `chunks`  | `pushed` NUL id NUL path NUL u64 BE offset | a pushed file's piece (`pushed.rs`)  |
//! | `meta`    | `pushed` NUL id NUL path    | the pushed file's `PushedMeta` (msgpack)        |
//! | `aes`     | u64 BE generation           | the `AesKeyRotation` payload (msgpack)          |
//! | `imports` | u64 BE log index [, u32 BE position] | the `ImportMarker` payload (msgpack)   |
//! | `mine`    | minion id, NUL, function    | the function's mine data (msgpack)              |
//! | `proposals` | u64 BE proposer [, u64 BE incarnation, u64 BE seq] | proposals applied (`proposals.rs`) |
//!
//! Applying is deterministic and idempotent: a batch of records and the new applied index
//! are one atomic RocksDB write, and entries at or below the applied index are skipped.
//! RocksDB's WAL is off: the log is the durable copy, memtables of all column families
//! are flushed together (`atomic_flush`), and after a crash whatever RocksDB had not
//! flushed is applied again from the log. A checkpoint flushes first.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use rocksdb::{checkpoint::Checkpoint, IteratorMode, Options, WriteOptions, DB};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

mod apply;
mod batch_runs;
mod digest;
mod eauth_tokens;
mod handle;
mod key_prints;
mod key_states;
mod member_keys;
mod member_releases;
mod memory;
pub mod options;
mod pending;
mod read;
mod replace;
mod returns;
mod roots;
#[cfg(test)]
mod tests_swap;
mod proposals;
mod pushed;

pub use apply::Applied;
pub use digest::StateDigest;
pub use key_prints::KeyPrint;
pub use member_keys::{MemberKeyChange, PublicKey};
pub use member_releases::{lowest_record_set, RecordedRelease};
pub use memory::Memory;
pub use proposals::Outcome;
pub use read::StateRead;

use crate::error::{Error, Result};
use crate::format::{KeyExpect, Record, RootsTree, ROOTS_CHUNK_LEN};
use crate::keys::BankState;

pub const CF_META: &str = "meta";
pub const CF_KEYS: &str = "keys";
pub const CF_DENIED: &str = "denied";
pub const CF_JOBS: &str = "jobs";
pub const CF_RETURNS: &str = "returns";
pub const CF_GRAINS: &str = "grains";
pub const CF_ROOTS: &str = "roots";
pub const CF_CHUNKS: &str = "chunks";
pub const CF_AES: &str = "aes";
pub const CF_IMPORTS: &str = "imports";
pub const CF_PROPOSALS: &str = "proposals";
pub const CF_PILLAR: &str = "pillar";
pub const CF_MINE: &str = "mine";
pub const ALL_CFS: [&str; 13] = [CF_META, CF_KEYS, CF_DENIED, CF_JOBS, CF_RETURNS, CF_GRAINS, CF_ROOTS, CF_CHUNKS, CF_AES, CF_IMPORTS, CF_PROPOSALS, CF_PILLAR, CF_MINE];
const APPLIED_INDEX: &[u8] = b"applied_index";
/// `meta` key of the cluster key pair record (set once).
const CLUSTER_KEY: &[u8] = b"cluster_key_pair";
/// `meta` key of a lone master's key pair record (set once).
const MASTER_KEY: &[u8] = b"master_key_pair";
const VIEWS_INDEX: &[u8] = b"views_index";

/// What applying a record changed that a view must mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    KeySet { id: String, state: BankState, pub_key: Vec<u8>, time_ns: u64 },
    KeyRemoved { id: String },
    DeniedSet { id: String, pub_key: Vec<u8>, time_ns: u64 },
    DeniedRemoved { id: String },
    /// A roots file is complete (all chunks, checksum verified) and can be written.
    RootsWritten { tree: RootsTree, saltenv: String, path: String },
    RootsRemoved { tree: RootsTree, saltenv: String, path: String },
    /// The master's key pair is set: `<name>.pem` / `<name>.pub` in the master bank.
    MasterKeyPair { name: String, private_pem: Vec<u8> },
    /// The cluster's key pair is set: `cluster.pem` / `cluster.pub` in the master bank.
    ClusterKeyPair { private_pem: Vec<u8> },
    /// A file a minion pushed is complete and can be written (`crate::file_recv`).
    PushedWritten { id: String, path: String },
    /// A pushed file was started again: off the disk until it is complete.
    PushedRemoved { id: String, path: String },
    /// A minion's key was deleted and its pushed files with it: `cachedir/minions/<id>`
    /// is cleared.
    PushedCleared { id: String },
}

/// Metadata of one file of a roots tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsMeta {
    pub mode: u32,
    #[serde(with = "serde_bytes")]
    pub sha256: Vec<u8>,
    pub size: u64,
    pub chunks: u32,
    /// Chunks received so far (they arrive in order).
    pub received: u32,
    /// All chunks arrived and their sha256 matched.
    pub complete: bool,
}

/// A key as the state machine holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    pub state: BankState,
    pub time_ns: u64,
    pub pub_key: Vec<u8>,
}

impl StoredKey {
    /// What a key change decided from this read of the keys bank (`None`: no entry)
    /// expects to find when it applies.
    pub fn expectation(stored: Option<&StoredKey>) -> KeyExpect {
        match stored {
            None => KeyExpect::Absent,
            Some(k) => KeyExpect::Holds { state: k.state.key_state(), pub_key: k.pub_key.clone() },
        }
    }
}

pub struct StateMachine {
    /// The RocksDB database, behind a handle a snapshot install swaps (`handle.rs`).
    db: handle::Handle,
    path: PathBuf,
    /// Keys in the `pending` state: counted once at open (and after a snapshot
    /// replaces the state), then kept by `apply` as records change the bank. Derived
    /// from the state, so every member holds the same number at the same log position;
    /// a new pending key's `pending_below` is decided on it.
    pending: AtomicU64,
    /// Each key's state and PEM digest, for the request path (`key_prints.rs`): filled
    /// on read, dropped by `apply` for the keys it changes.
    prints: key_prints::KeyPrints,
    /// The highest applied proposal of each proposer, so most checks need no read
    /// (`proposals.rs`).
    highs: proposals::AppliedHighs,
}

fn roots_key(tree: RootsTree, env: &str, path: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(env.len() + path.len() + 8);
    k.extend_from_slice(tree.as_str().as_bytes());
    k.push(0);
    k.extend_from_slice(env.as_bytes());
    k.push(0);
    k.extend_from_slice(path.as_bytes());
    k
}

fn chunk_key(rk: &[u8], chunk: u32) -> Vec<u8> {
    let mut k = rk.to_vec();
    k.push(0);
    k.extend_from_slice(&chunk.to_be_bytes());
    k
}

fn to_msgpack<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    to_msgpack_sized(v, 0)
}

/// [`to_msgpack`] into a buffer that starts with room for `hint` bytes (a value whose size
/// is known about, such as a return: one allocation instead of a doubling from nothing).
fn to_msgpack_sized<T: Serialize>(v: &T, hint: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(hint);
    rmp_serde::encode::write_named(&mut out, v).map_err(|e| Error::Invalid(format!("encoding state value: {e}")))?;
    Ok(out)
}

fn from_msgpack<'a, T: Deserialize<'a>>(what: &str, b: &'a [u8]) -> Result<T> {
    rmp_serde::from_slice(b).map_err(|e| Error::Invalid(format!("state machine value for {what} is damaged: {e}")))
}

impl StateMachine {
    /// Opens (or creates) the state machine at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let db = DB::open_cf_descriptors(&options::read_write(), path, options::descriptors(ALL_CFS)?)?;
        Self::of(db, path.to_path_buf())
    }

    fn of(db: DB, path: PathBuf) -> Result<Self> {
        let sm = StateMachine { db: handle::Handle::new(db), path, pending: AtomicU64::new(0), prints: key_prints::KeyPrints::new(key_prints::DEFAULT_CAPACITY), highs: Default::default() };
        sm.recount_pending()?;
        Ok(sm)
    }

    /// Opens a state machine read-only (a snapshot's checkpoint, to look inside). A
    /// checkpoint written before a column family existed opens without it; readers see
    /// that family as empty.
    pub fn open_read_only(path: &Path) -> Result<Self> {
        let opts = Options::default();
        let present = DB::list_cf(&opts, path).unwrap_or_else(|_| ALL_CFS.iter().map(|s| s.to_string()).collect());
        let cfs: Vec<&str> = ALL_CFS.iter().copied().filter(|c| present.iter().any(|p| p == c)).collect();
        let db = DB::open_cf_descriptors_read_only(&opts, path, options::descriptors(cfs)?, false)?;
        Self::of(db, path.to_path_buf())
    }

    /// A state machine held in memory (RocksDB's memory environment): the same code as
    /// on disk, for unit tests of what reads it. `name` keeps separate instances apart.
    pub fn open_in_memory(name: &str) -> Result<Self> {
        let env = rocksdb::Env::mem_env()?;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_atomic_flush(true);
        opts.set_env(&env);
        let path = PathBuf::from(format!("/halite-memory/{name}"));
        let db = DB::open_cf(&opts, &path, ALL_CFS)?;
        Self::of(db, path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The database, for one operation (`handle.rs`: a snapshot install may swap it;
    /// keep neither the guard nor a column family beyond the operation).
    fn db(&self) -> Result<handle::Db<'_>> {
        self.db.get()
    }

    pub fn applied_index(&self) -> Result<u64> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_META)?, APPLIED_INDEX)? {
            None => Ok(0),
            Some(v) if v.len() == 8 => Ok(u64::from_be_bytes(v[..8].try_into().unwrap_or([0; 8]))),
            Some(_) => Err(Error::Invalid("applied_index in the state machine is damaged".into())),
        }
    }

    /// The index the views reflect (set by the applier after the views are synced).
    pub fn views_index(&self) -> Result<u64> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_META)?, VIEWS_INDEX)? {
            None => Ok(0),
            Some(v) if v.len() == 8 => Ok(u64::from_be_bytes(v[..8].try_into().unwrap_or([0; 8]))),
            Some(_) => Err(Error::Invalid("views_index in the state machine is damaged".into())),
        }
    }

    pub fn set_views_index(&self, index: u64) -> Result<()> {
        let db = self.db()?;
        db.put_cf_opt(db.cf(CF_META)?, VIEWS_INDEX, index.to_be_bytes(), &no_wal())?;
        Ok(())
    }

    /// Moves the applied index forward over entries that carry no record (raft's own
    /// empty and configuration entries).
    pub fn advance_applied(&self, index: u64) -> Result<()> {
        let db = self.db()?;
        if index > self.applied_index()? {
            db.put_cf_opt(db.cf(CF_META)?, APPLIED_INDEX, index.to_be_bytes(), &no_wal())?;
        }
        Ok(())
    }

    /// Flushes memtables to disk (after a bulk apply).
    /// Flushes memtables to disk, the `meta` family (with `applied_index`) last; since
    /// applying is idempotent per record, a crash between two families only means some
    /// records are applied again.
    pub fn flush(&self) -> Result<()> {
        let db = self.db()?;
        for cf in ALL_CFS.iter().filter(|c| **c != CF_META).chain(std::iter::once(&CF_META)) {
            db.flush_cf(db.cf(cf)?)?;
        }
        Ok(())
    }

    /// Every complete roots file: (tree, saltenv, path, meta).
    pub fn roots_files(&self) -> Result<Vec<(RootsTree, String, String, RootsMeta)>> {
        self.roots_files_from(b"")
    }

    /// Every complete roots file of one tree: (tree, saltenv, path, meta).
    pub fn roots_files_of(&self, tree: RootsTree) -> Result<Vec<(RootsTree, String, String, RootsMeta)>> {
        let mut prefix = tree.as_str().as_bytes().to_vec();
        prefix.push(0);
        self.roots_files_from(&prefix)
    }

    /// The metadata of one complete roots file (its content is not read).
    pub fn roots_file_meta(&self, tree: RootsTree, env: &str, path: &str) -> Result<Option<RootsMeta>> {
        let db = self.db()?;
        let Some(v) = db.get_cf(db.cf(CF_ROOTS)?, roots_key(tree, env, path))? else { return Ok(None) };
        let meta: RootsMeta = from_msgpack("roots", &v)?;
        Ok(meta.complete.then_some(meta))
    }

    /// Whether a saltenv of a tree holds a complete file whose path starts with
    /// `path_prefix` (stops at the first).
    pub fn roots_has_prefix(&self, tree: RootsTree, env: &str, path_prefix: &str) -> Result<bool> {
        let db = self.db()?;
        let prefix = roots_key(tree, env, path_prefix);
        for item in db.iterator_cf(db.cf(CF_ROOTS)?, IteratorMode::From(&prefix, rocksdb::Direction::Forward)) {
            let (k, v) = item?;
            if !k.starts_with(&prefix) {
                break;
            }
            if from_msgpack::<RootsMeta>("roots", &v)?.complete {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn roots_files_from(&self, prefix: &[u8]) -> Result<Vec<(RootsTree, String, String, RootsMeta)>> {
        let db = self.db()?;
        let mut out = Vec::new();
        for item in db.iterator_cf(db.cf(CF_ROOTS)?, IteratorMode::From(prefix, rocksdb::Direction::Forward)) {
            let (k, v) = item?;
            if !k.starts_with(prefix) {
                break;
            }
            if k.starts_with(roots::STAGE_PREFIX) {
                continue; // a sync's staged files are not live
            }
            let meta: RootsMeta = from_msgpack("roots", &v)?;
            if !meta.complete {
                continue;
            }
            let mut parts = k.splitn(3, |b| *b == 0);
            let (Some(t), Some(e), Some(p)) = (parts.next(), parts.next(), parts.next()) else {
                return Err(Error::Invalid("damaged roots key in the state machine".into()));
            };
            let tree = match t {
                b"file" => RootsTree::File,
                b"pillar" => RootsTree::Pillar,
                b"gitfs" => RootsTree::Gitfs,
                b"git_pillar" => RootsTree::GitPillar,
                _ => return Err(Error::Invalid("unknown roots tree in the state machine".into())),
            };
            let s = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| Error::Invalid("non-UTF-8 roots key".into()));
            out.push((tree, s(e)?, s(p)?, meta));
        }
        Ok(out)
    }

    /// Up to `max` bytes of one complete roots file from `offset` (empty past its end),
    /// reading only the chunks that hold them.
    pub fn roots_file_range(&self, tree: RootsTree, env: &str, path: &str, offset: u64, max: u64) -> Result<Option<Vec<u8>>> {
        let Some(meta) = self.roots_file_meta(tree, env, path)? else { return Ok(None) };
        let end = offset.saturating_add(max).min(meta.size);
        if offset >= end {
            return Ok(Some(Vec::new()));
        }
        let db = self.db()?;
        let rk = roots_key(tree, env, path);
        let len = crate::format::ROOTS_CHUNK_LEN as u64;
        let mut out = Vec::with_capacity((end - offset).min(crate::format::MAX_PAYLOAD_LEN as u64) as usize);
        for c in offset / len..=(end - 1) / len {
            let Some(d) = db.get_pinned_cf(db.cf(CF_CHUNKS)?, chunk_key(&rk, c as u32))? else {
                return Err(Error::Invalid(format!("roots file {path}: chunk {c} missing")));
            };
            let start = c * len;
            let from = (offset.saturating_sub(start) as usize).min(d.len());
            let to = ((end - start) as usize).min(d.len());
            out.extend_from_slice(&d[from..to.max(from)]);
        }
        Ok(Some(out))
    }

    /// The metadata and content of one complete roots file.
    pub fn roots_file(&self, tree: RootsTree, env: &str, path: &str) -> Result<Option<(RootsMeta, Vec<u8>)>> {
        let db = self.db()?;
        let rk = roots_key(tree, env, path);
        let Some(v) = db.get_cf(db.cf(CF_ROOTS)?, &rk)? else { return Ok(None) };
        let meta: RootsMeta = from_msgpack("roots", &v)?;
        if !meta.complete {
            return Ok(None);
        }
        // `size` is read from disk: reserve no more than the chunks can hold, and at
        // most one payload up front (the chunks themselves are each bounded).
        let reserve = meta.size.min(meta.chunks as u64 * crate::format::ROOTS_CHUNK_LEN as u64).min(crate::format::MAX_PAYLOAD_LEN as u64);
        let mut data = Vec::with_capacity(reserve as usize);
        for c in 0..meta.chunks {
            match db.get_pinned_cf(db.cf(CF_CHUNKS)?, chunk_key(&rk, c))? {
                Some(d) => data.extend_from_slice(&d),
                None => return Err(Error::Invalid(format!("roots file {path}: chunk {c} missing"))),
            }
        }
        if data.len() as u64 != meta.size || Sha256::digest(&data).as_slice() != meta.sha256.as_slice() {
            return Err(Error::Invalid(format!("roots file {path} in the state machine does not match its sha256")));
        }
        Ok(Some((meta, data)))
    }

    /// A minion's mine: each function it sent with its data (msgpack), by name.
    pub fn mine(&self, id: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let mut prefix = id.as_bytes().to_vec();
        prefix.push(0);
        Ok(self
            .scan(CF_MINE, &prefix)?
            .into_iter()
            .map(|(k, v)| (String::from_utf8_lossy(&k[prefix.len()..]).into_owned(), v))
            .collect())
    }

    /// The grains a minion last reported (msgpack).
    pub fn grains(&self, id: &str) -> Result<Option<Vec<u8>>> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_GRAINS)?, id.as_bytes())? {
            Some(v) => Ok(Some(from_msgpack::<crate::format::GrainsReport>("grains", &v)?.grains)),
            None => Ok(None),
        }
    }

    /// When a minion last reported its grains (ns since the epoch).
    pub fn grains_time_ns(&self, id: &str) -> Result<Option<u64>> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_GRAINS)?, id.as_bytes())? {
            Some(v) => Ok(Some(from_msgpack::<crate::format::GrainsReport>("grains", &v)?.time_ns)),
            None => Ok(None),
        }
    }

    /// The pillar last compiled for a minion (msgpack), from the pillar cache.
    pub fn pillar(&self, id: &str) -> Result<Option<Vec<u8>>> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_PILLAR)?, id.as_bytes())? {
            Some(v) => Ok(Some(from_msgpack::<crate::format::PillarCache>("pillar", &v)?.pillar)),
            None => Ok(None),
        }
    }

    /// A published job.
    pub fn job(&self, jid: &str) -> Result<Option<crate::format::JobPublished>> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_JOBS)?, jid.as_bytes())? {
            Some(v) => Ok(Some(from_msgpack("jobs", &v)?)),
            None => Ok(None),
        }
    }

    /// Every published job, in jid order.
    pub fn jobs(&self) -> Result<Vec<crate::format::JobPublished>> {
        self.scan(CF_JOBS, b"")?.into_iter().map(|(_, v)| from_msgpack("jobs", &v)).collect()
    }

    /// Number of entries in a column family (for status output and tests).
    pub fn count(&self, cf: &str) -> Result<u64> {
        let db = self.db()?;
        let mut n = 0;
        for item in db.iterator_cf(db.cf(cf)?, IteratorMode::Start) {
            item?;
            n += 1;
        }
        Ok(n)
    }

    /// A lone master's own key pair, once set.
    pub fn master_key_pair(&self) -> Result<Option<crate::format::MasterKeyPair>> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_META)?, MASTER_KEY)? {
            Some(v) => Ok(Some(from_msgpack("master_key_pair", &v)?)),
            None => Ok(None),
        }
    }

    /// The cluster key pair, if one was committed.
    pub fn cluster_key_pair(&self) -> Result<Option<crate::format::ClusterKeyPair>> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_META)?, CLUSTER_KEY)? {
            Some(v) => Ok(Some(from_msgpack("meta", &v)?)),
            None => Ok(None),
        }
    }

    /// The newest publish key rotation (highest generation), if any.
    pub fn latest_aes(&self) -> Result<Option<crate::format::AesKeyRotation>> {
        let db = self.db()?;
        let newest = db.iterator_cf(db.cf(CF_AES)?, IteratorMode::End).next().transpose()?;
        match newest {
            Some(item) => Ok(Some(from_msgpack("aes", &item.1)?)),
            None => Ok(None),
        }
    }

    /// Whether the job cache holds a job whose jid sorts before `jid` (what a
    /// [`Record::JobsExpired`] with that cutoff would remove).
    pub fn has_job_before(&self, jid: &str) -> Result<bool> {
        let db = self.db()?;
        let mode = IteratorMode::From(b"0", rocksdb::Direction::Forward);
        let first = db.iterator_cf(db.cf(CF_JOBS)?, mode).next().transpose()?;
        Ok(first.is_some_and(|item| item.0.as_ref() < jid.as_bytes()))
    }

    /// Raw iteration over a column family from `prefix` on (for dumps and jobs queries).
    pub fn scan(&self, cf: &str, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let db = self.db()?;
        let mut out = Vec::new();
        let mode = IteratorMode::From(prefix, rocksdb::Direction::Forward);
        for item in db.iterator_cf(db.cf(cf)?, mode) {
            let (k, v) = item?;
            if !k.starts_with(prefix) {
                break;
            }
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// Writes a consistent snapshot (a RocksDB checkpoint, which carries the applied
    /// index) into `dir`, which must not exist. Returns the applied index it holds.
    pub fn checkpoint(&self, dir: &Path) -> Result<u64> {
        let db = self.db()?;
        self.flush()?;
        let idx = self.applied_index()?;
        Checkpoint::new(&*db)?.create_checkpoint(dir)?;
        Ok(idx)
    }

    /// Replaces the state machine at `path` with a copy of the checkpoint at `snapshot`.
    /// The state machine at `path` must be closed.
    pub fn restore(snapshot: &Path, path: &Path) -> Result<()> {
        let tmp = path.with_extension("restore-tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        copy_dir(snapshot, &tmp)?;
        if path.exists() {
            std::fs::remove_dir_all(path).map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
        }
        std::fs::rename(&tmp, path).map_err(|e| Error::io(format!("renaming {} to {}", tmp.display(), path.display()), e))?;
        Ok(())
    }
}

/// Writes skip RocksDB's WAL: whatever a crash loses is applied again from the log.
fn no_wal() -> WriteOptions {
    let mut wo = WriteOptions::default();
    wo.disable_wal(true);
    wo
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(|e| Error::io(format!("creating {}", to.display()), e))?;
    let rd = std::fs::read_dir(from).map_err(|e| Error::io(format!("listing {}", from.display()), e))?;
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(format!("listing {}", from.display()), e))?;
        let dst = to.join(ent.file_name());
        if ent.path().is_dir() {
            copy_dir(&ent.path(), &dst)?;
        } else {
            std::fs::copy(ent.path(), &dst).map_err(|e| Error::io(format!("copying {}", ent.path().display()), e))?;
        }
    }
    Ok(())
}

/// Splits file content into roots blob records (what `sync_roots` and imports propose).
pub fn roots_records(tree: RootsTree, saltenv: &str, path: &str, mode: u32, content: &[u8]) -> Vec<Record> {
    let sha = Sha256::digest(content).to_vec();
    let chunks = content.len().div_ceil(ROOTS_CHUNK_LEN).max(1) as u32;
    (0..chunks)
        .map(|c| {
            let start = c as usize * ROOTS_CHUNK_LEN;
            let end = (start + ROOTS_CHUNK_LEN).min(content.len());
            Record::RootsBlob(crate::format::RootsBlob {
                tree,
                saltenv: saltenv.to_string(),
                path: path.to_string(),
                mode,
                sha256: sha.clone(),
                size: content.len() as u64,
                chunk: c,
                chunks,
                data: content[start..end].to_vec(),
            })
        })
        .collect()
}

/// A file's content as the staged records of sync `sync` (what `cluster.sync_roots`
/// and a gitfs update propose before their [`crate::format::RootsSync`]).
pub fn staged_records(sync: &[u8], tree: RootsTree, saltenv: &str, path: &str, mode: u32, content: &[u8]) -> Vec<Record> {
    roots_records(tree, saltenv, path, mode, content)
        .into_iter()
        .filter_map(|r| match r {
            Record::RootsBlob(blob) => Some(Record::RootsStage(crate::format::RootsStage { sync: sync.to_vec(), blob })),
            _ => None,
        })
        .collect()
}

/// How a [`crate::format::RootsSync`] names a file of this content.
#[cfg(test)]
pub(crate) fn sync_file(tree: RootsTree, saltenv: &str, path: &str, mode: u32, content: &[u8]) -> crate::format::RootsSyncFile {
    crate::format::RootsSyncFile { tree, saltenv: saltenv.to_string(), path: path.to_string(), mode, size: content.len() as u64, sha256: Sha256::digest(content).to_vec() }
}
