//! What a request handler may read: the [`View`] trait.
//!
//! The request commands (`crate::req`) are functions of a request and a read-only view:
//! they never write a file, a record or a map, never read the clock or the RNG directly,
//! and so can be driven in a unit test by [`memory::MemoryView`] exactly as the daemon
//! drives them with its live view (`crate::daemon`). Everything a command wants to
//! change comes back as data in its outcome (records to commit, effects to apply after
//! the commit, events to fire), which the daemon carries out.
//!
//! | source            | live (daemon)                           | in tests        |
//! |-------------------|-----------------------------------------|-----------------|
//! | keys, denied keys | the state machine                       | a map           |
//! | session keys      | memory and `cachedir/sessions/journal`  | a map           |
//! | roots (files, pillar) | [`fs::FsRoots`] over `file_roots`/`pillar_roots` | [`memory::MemoryRoots`] |
//!
//! The admin verbs read the roots through `crate::admin::AdminView::roots`: the same
//! [`fs::FsRoots`] minions are served from, except on an isolated-filesystem cluster
//! member, where they read the applied state's roots records ([`state`]).
//! | autosign sources  | [`fs::FsAutosign`] (files Salt's way)   | strings         |
//! | clock, randomness | the system                              | fixed / counter |
//! | `tok` checks made | [`tok_memo::TokMemo`] (a memo of a pure check) | the same |

pub mod chained;
pub mod fs;
#[cfg(test)]
pub mod memory;
pub mod replay_key;
pub mod state;
pub mod tok_memo;

use std::sync::Arc;

use halite_storage::format::RootsTree;
use halite_storage::state::{KeyPrint, StoredKey};

use crate::config::MasterConfig;
use crate::error::Result;
use crate::masterkeys::{MasterKeys, PublishKey};
use crate::wire::crypto::Crypticle;

/// Whether a minion may be counted against `max_minions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// No limit, or the minion is already counted.
    Counted,
    /// It is not counted yet and there is room.
    Room,
    /// It is not counted and the limit is reached: the answer is `full`.
    Full,
}

impl Admission {
    /// Salt's `max_minions` rule (0: no limit) for an id that is or is not `counted`
    /// already, with `count` minions counted.
    pub fn of(max: u64, counted: bool, count: usize) -> Self {
        if max == 0 || counted {
            Admission::Counted
        } else if count as u64 >= max {
            Admission::Full
        } else {
            Admission::Room
        }
    }
}

/// One of Salt's autosign inputs, read as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Autosign<'a> {
    /// `autosign_file`: globs or regexes of ids to accept.
    File,
    /// `autoreject_file`: ids to reject.
    Reject,
    /// `autosign_grains_dir/<grain>`: values of that grain to accept.
    Grain(&'a str),
}

/// The master's read-only state, as a request command sees it.
pub trait View: Send + Sync {
    fn config(&self) -> &MasterConfig;
    /// The key pair minions know this master by (the cluster's in a cluster).
    fn master_keys(&self) -> &MasterKeys;
    /// The publish AES key (and its signature) handed out at sign-in.
    fn publish_key(&self) -> Arc<PublishKey>;
    /// A minion's session key if it has one that is still fresh (younger than
    /// `publish_session`). In a cluster every minion's session key is the publish key.
    fn session_key(&self, id: &str) -> Option<Crypticle>;
    /// The id's entry in the keys bank.
    fn key(&self, id: &str) -> Result<Option<StoredKey>>;
    /// The id's key state and the SHA-256 of its PEM: [`View::key`] without the PEM, for
    /// the request path (the live view answers from memory: `halite_storage`'s
    /// `state/key_prints.rs`).
    fn key_print(&self, id: &str) -> Result<Option<KeyPrint>> {
        Ok(self.key(id)?.map(|k| KeyPrint::of(&k)))
    }
    /// Whether the id already has a denied key (only the first is kept).
    fn denied(&self, id: &str) -> Result<bool>;
    /// The pillar cached for a minion (msgpack, `pillar_cache` records), to propose a new
    /// one only when it changed. `None` when there is none.
    fn cached_pillar(&self, _id: &str) -> Option<Vec<u8>> {
        None
    }
    /// Whether the id may be counted against `max_minions`.
    fn admission(&self, id: &str) -> Admission;
    /// How many keys are pending (for `halite_max_pending_keys`; may be up to a second old).
    fn pending_keys(&self) -> u64;
    /// Whether the request `key` stands for (its id and nonce) already changed something.
    fn replayed(&self, key: &replay_key::ReplayKey) -> bool;
    /// The text of an autosign input, if it exists and is safe to trust (Salt ignores
    /// files writable by group or others).
    fn autosign_text(&self, which: Autosign) -> Option<String>;
    /// Whether a one-shot stub `minions_autosign/<id>` is waiting.
    fn autosign_stub(&self, id: &str) -> bool;
    /// The file and pillar roots.
    fn roots(&self) -> &dyn RootsSource;
    /// The file server backends minions are served from, in `fileserver_backend` order
    /// (the first holding a path serves it).
    fn file_backends(&self) -> Vec<(crate::gitfs::Backend, &dyn RootsSource)> {
        vec![(crate::gitfs::Backend::Roots, self.roots())]
    }
    /// Nanoseconds since the epoch.
    fn now_ns(&self) -> u64;
    /// What the applied state holds of a file `id` pushed (`file_recv`), and whether
    /// another of its pushed files is in the way of `path`.
    fn pushed(&self, id: &str, path: &str) -> Result<halite_storage::file_recv::PushedRead>;
    /// A fresh random AES key.
    fn fresh_key(&self) -> Crypticle;
    /// A new jid, unique on this master.
    fn new_jid(&self) -> String;
    /// The mine and the targets it is read by (the applied state).
    fn mine_read(&self) -> &dyn crate::mine::MineRead;
    /// The applied `git_pillar` tree (`None`: git_pillar is not compiled here).
    fn git_pillar_roots(&self) -> Option<&dyn RootsSource> {
        None
    }
    /// Who runs `ext_pillar` commands (bounded; on the request's blocking thread).
    fn ext_run(&self) -> &dyn crate::pillar::ext::ExtRun {
        &crate::pillar::ext::NoRun
    }
    /// Successful `tok` checks remembered (`None`: check every time).
    fn tok_memo(&self) -> Option<&tok_memo::TokMemo> {
        None
    }
}

/// A file found in a roots tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    /// Where it is, as Salt reports it in `_file_find` (an absolute path on the master).
    pub path: String,
    /// The path relative to its saltenv.
    pub rel: String,
}

/// `os.stat` fields in Salt's order: mode, ino, dev, nlink, uid, gid, size, atime,
/// mtime, ctime.
pub type Stat = [i64; 10];

/// What a walk of a saltenv finds: files, empty dirs, dirs, symlinks (rel → target).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Listing {
    pub files: std::collections::BTreeSet<String>,
    pub empty_dirs: std::collections::BTreeSet<String>,
    pub dirs: std::collections::BTreeSet<String>,
    pub links: std::collections::BTreeMap<String, String>,
}

/// Read access to the `file_roots` and `pillar_roots` trees. `rel` is always a safe
/// relative path (checked by the caller): no empty, `.` or `..` component.
pub trait RootsSource: Send + Sync {
    /// The first directory of `saltenv` (in configured order) holding a regular file at
    /// `rel` that stays inside that directory.
    fn find(&self, tree: RootsTree, saltenv: &str, rel: &str) -> Option<FileRef>;
    /// Up to `max` bytes of a found file from `offset` (empty at the end).
    fn read(&self, tree: RootsTree, file: &FileRef, offset: u64, max: u64) -> Option<Vec<u8>>;
    /// The whole file.
    fn read_all(&self, tree: RootsTree, file: &FileRef) -> Option<Vec<u8>> {
        self.read(tree, file, 0, u64::MAX)
    }
    fn stat(&self, tree: RootsTree, file: &FileRef) -> Option<Stat>;
    /// Every entry of a saltenv.
    fn list(&self, tree: RootsTree, saltenv: &str) -> Listing;
    /// The saltenvs of a tree.
    fn envs(&self, tree: RootsTree) -> std::collections::BTreeSet<String>;
}
