//! Snapshots: the state machine at one applied index, as files, so the log before that
//! index can be dropped and a member far behind can be given the state instead of the
//! history.
//!
//! A snapshot is a directory `<halite_data_dir>/snapshots/<index, 20 digits>/` holding
//! a RocksDB checkpoint of the state machine (`state/`) and a [`Manifest`]
//! (`manifest.json`): the index, its term, the conf state, the membership entries the
//! address book needs, and every file with its size and sha256. Everything the views
//! need is in the state machine (keys, denied keys, roots files with their chunks), so
//! the views are rebuilt from it after an install. Layout, manifest and chunk bytes are
//! specified in docs/formats.md §5.
//!
//! | file          | concept                                                          |
//! |---------------|------------------------------------------------------------------|
//! | [`manifest`]  | what a snapshot holds, and the checks a manifest from outside passes |
//! | [`store`]     | the snapshots directory: building one (staging dir, then one rename), finding them, pruning |
//! | [`hashes`]  | reusing the previous snapshot's sha256 of an SST both share (same inode) |
//! | [`chunk`]     | the bytes of one transfer chunk (≤ 1 MiB, CRC-32)                |
//! | [`source`]    | reading a snapshot as chunks (the sending side)                  |
//! | [`receiver`]  | writing chunks from a peer into a new snapshot, refusing anything hostile |
//! | [`install`]   | swapping the state machine directory for a snapshot's, and repairing a half-done swap at start |
//!
//! The order that keeps every crash recoverable: a snapshot is complete before anything
//! refers to it (it appears by a rename); the log records it (`RaftLog::compact_through`
//! or `RaftLog::install_snapshot`) before the state machine directory is swapped; and at
//! start [`recover_at_start`] finishes or undoes a swap and installs the log's snapshot
//! if the state machine is behind it.

mod chunk;
mod hashes;
mod install;
mod manifest;
mod receiver;
mod source;
mod store;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_hashes;
#[cfg(test)]
mod tests_running;

pub use chunk::{Chunk, ChunkRef, CHUNK_HEADER_LEN, CHUNK_MAX};
pub use install::{install, install_running, install_state, recover_at_start, swap_in, Recovered};
pub use manifest::{ConfStateJson, FileEntry, Manifest, FORMAT, MAX_FILES, MAX_MANIFEST_BYTES};
pub use receiver::{ReceiveLimits, Receiver, Received};
pub use source::SnapshotSource;
pub use store::{Build, Snapshot, SnapshotStore};
