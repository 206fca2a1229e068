//! Halite's storage: the log-centred core.
//!
//! Every state change is a [`format::Record`]. Records are raft entries in the
//! [`log::RaftLog`] (raft-engine), applied in order to the [`state::StateMachine`]
//! (RocksDB), and mirrored into [`views::Views`]: the key view Salt's tools read
//! ([`keys::localfs`] or [`keys::mmap`], byte-compatible with Salt 3008.5) and the
//! materialised roots trees ([`roots`]). This crate knows nothing of networks.
//!
//! | module        | owns                                                      |
//! |---------------|-----------------------------------------------------------|
//! | [`format`]    | the record byte format (header, CRC, kind table, [`format::Record`]) |
//! | [`record`]    | one file per record kind: its payload schema and rules    |
//! | [`entry`]     | a raft entry's data: one proposal's records (batches), [`entry::LogEntry`] |
//! | [`context`]   | a raft entry's context: the proposal's identity across restarts |
//! | [`id`]        | minion id and relative path validation                    |
//! | [`log`]       | raft-engine storage behind raft-rs's `Storage` trait      |
//! | [`framing`]   | raft-engine's file framing (for the tail repair and `verify`) |
//! | [`tail`]      | torn-tail detection and repair before the log opens       |
//! | [`state`]     | the RocksDB state machine, apply, checkpoints, digest     |
//! | [`snapshot`]  | snapshots: build, transfer chunks, receive, install, recover |
//! | [`space`]     | free space on the data directory's filesystem              |
//! | [`compaction`]| the compaction policy and compacting the log through a snapshot |
//! | [`flock`]     | Salt's `flock` writer lock, taken with a bounded wait        |
//! | [`dirlock`]   | the data directory's owner lock (the master, or one offline tool) |
//! | [`data_format`] | the data directory's format stamp, checked before anything is opened |
//! | [`mmap_cache`]| the MmapCache file engine (Salt's `mmap_cache.py` format) |
//! | [`keys`]      | key view drivers `localfs_key` and `mmap_key`             |
//! | [`roots`]     | the roots materialiser                                    |
//! | [`views`]     | applying effects to views, rebuilding them; on a shared filesystem one writer at a time, by a mark (`views::shared`) |
//! | [`import`]    | reading outside trees (localfs pki, shared cluster dirs) into records |

pub mod compaction;
pub mod context;
pub mod data_format;
pub mod dirlock;
pub mod entry;
pub mod error;
pub mod flock;
pub mod format;
pub mod framing;
pub mod id;
pub mod import;
pub mod keys;
pub mod log;
pub mod mmap_cache;
pub mod record;
pub mod roots;
pub mod roots_pushed;
pub mod snapshot;
pub mod space;
pub mod state;
pub mod tail;
pub mod views;

pub use error::{Error, Result};
// The kinds whose files also define the `meta` keys of their state, by the paths the
// other crates name them with (`halite_storage::reaction`, ...).
pub use record::{batch_run, eauth_token, file_recv, reaction};
pub use entry::LogEntry;
pub use format::{KeyState, Record, RecordKind};

#[cfg(test)]
mod noise_tests;
#[cfg(test)]
mod vectors_tests;

#[cfg(test)]
mod state_tests;

#[cfg(test)]
mod state_keys_tests;

#[cfg(test)]
mod proposals_tests;

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod fuzz_roots_tests;
#[cfg(test)]
mod fuzz_log_files_tests;

#[cfg(test)]
mod mine_tests;

#[cfg(test)]
mod full_disk_tests;
