//! How the state machine's RocksDB is opened for writing: no WAL of its own (the raft
//! log is the durable copy), and memory and descriptors bounded rather than left to
//! RocksDB's defaults (docs/operations.md "Memory" and "Open files").

use rocksdb::Options;

/// One column family's memtable is flushed when it holds this much.
pub const MEMTABLE_BYTES: usize = 8 << 20;
/// All memtables together: past this, RocksDB flushes (all families at once, as
/// `atomic_flush` keeps them consistent with `applied_index`).
pub const MEMTABLES_TOTAL_BYTES: usize = 16 << 20;
/// Table files kept open at most (RocksDB's default: all, for ever; the master counts its
/// descriptors, master/src/daemon/files.rs); others are closed and reopened on use.
pub const MAX_OPEN_TABLES: i32 = 256;

/// The options of [`super::StateMachine::open`].
pub fn read_write() -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_max_background_jobs(2);
    // No WAL (the raft log is the durable copy), so column families must be flushed
    // together to stay consistent with `applied_index`.
    opts.set_atomic_flush(true);
    // Memory is bounded, not left to RocksDB's defaults (a 64 MiB memtable per column
    // family, two of them per family before writes stall): returns arrive all the time,
    // and a master's memory would otherwise grow by the size of that family's memtables
    // before the first flush.
    opts.set_write_buffer_size(MEMTABLE_BYTES);
    opts.set_db_write_buffer_size(MEMTABLES_TOTAL_BYTES);
    opts.set_max_open_files(MAX_OPEN_TABLES);
    opts
}
