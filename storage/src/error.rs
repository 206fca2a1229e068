//! Errors of the storage layer. Every error that can be caused by bytes from outside (a
//! file, a peer, a minion) is a value here, never a panic.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("minion id {id:?} refused: {why}")]
    InvalidId { id: String, why: String },

    #[error("path {path:?} refused: {why}")]
    InvalidPath { path: String, why: String },

    #[error("bad record at byte offset {offset}: {why}")]
    BadRecord { offset: u64, why: String },

    #[error("corrupt log: {0}")]
    CorruptLog(String),

    /// The state machine has applied an index past the end of its log (the log restored
    /// from an older backup, or lost); the text names both indexes and the recovery.
    #[error("state machine ahead of its log: {0}")]
    StateAheadOfLog(String),

    #[error("corrupt view {path}: {why}")]
    CorruptView { path: PathBuf, why: String },

    #[error("{0}")]
    Invalid(String),

    /// Snapshot bytes from outside (a manifest, a chunk) that the receiver refused: the
    /// transfer must start over. The text says what was wrong, for `refuse()`.
    #[error("snapshot refused: {0}")]
    SnapshotRefused(String),

    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },

    #[error("raft-engine: {0}")]
    RaftEngine(#[from] raft_engine::Error),

    #[error("raft: {0}")]
    Raft(#[from] raft::Error),

    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    /// Whether the error is a full filesystem (or a spent quota): a write that may
    /// succeed once space is freed.
    pub fn is_no_space(&self) -> bool {
        match self {
            Error::Io { source, .. } => crate::space::is_no_space(source),
            Error::RaftEngine(raft_engine::Error::TryAgain(_)) => true,
            Error::RaftEngine(raft_engine::Error::Io(e)) => crate::space::is_no_space(e),
            // RocksDB's status text (its `NoSpace` subcode, or the errno's text): after a
            // flush or write met a full disk it refuses every write with that error until
            // the database is opened again (`state::StateMachine::reopen_unflushed`).
            Error::Rocks(e) => ["No space left on device", "Disk quota exceeded"].iter().any(|t| e.as_ref().contains(t)),
            _ => false,
        }
    }
}

/// Adds a description of what was being done to an I/O error.
pub trait IoContext<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io(what(), e))
    }
}
