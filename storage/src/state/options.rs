//! How the state machine's RocksDB is opened: no WAL of its own (the raft log is the
//! durable copy), and memory and descriptors bounded rather than left to RocksDB's
//! defaults (docs/operations.md "Memory" and "Open files").
//!
//! RocksDB's options come in two parts: the database's (background jobs, open files, the
//! memtable budget shared by every family) and each column family's (its memtable size,
//! its table format and block cache). The family part must be given per family, in a
//! [`ColumnFamilyDescriptor`]: `DB::open_cf(&opts, path, names)` gives every family
//! `Options::default()` whatever `opts` holds, so a memtable size set on `opts` reached
//! none of them (each had RocksDB's 64 MiB memtable and an 8 MiB block cache of its own,
//! fourteen of them). Every open path (read-write, read-only, the swap of a snapshot
//! install) therefore goes through [`descriptors`]; `tests` reads back the options
//! RocksDB wrote to prove it.

use rocksdb::{BlockBasedOptions, Cache, ColumnFamilyDescriptor, Options, DEFAULT_COLUMN_FAMILY_NAME};

use crate::error::Result;

/// One column family's memtable is flushed when it holds this much.
pub const MEMTABLE_BYTES: usize = 4 << 20;
/// All memtables together: past this, RocksDB flushes (all families at once, as
/// `atomic_flush` keeps them consistent with `applied_index`). 4 MiB: with 16 the
/// memtables are the largest single part of a master's heap at 8,000 minions, and the
/// group commit rate is the same with 8 (`halite-bench commit`); with 4 the master's RSS
/// after 30 `test.ping`s to 8,000 minions is about 3 MiB lower than with 8 and its CPU
/// per ping no higher (a flush about every ping).
pub const MEMTABLES_TOTAL_BYTES: usize = 4 << 20;
/// Table files kept open at most (RocksDB's default: all, for ever; the master counts its
/// descriptors, master/src/daemon/ports/files.rs); others are closed and reopened on use.
pub const MAX_OPEN_TABLES: i32 = 256;
/// The block cache (data blocks read back from table files, uncompressed, and every
/// table's index blocks), one for all the families of a database (RocksDB's default is a
/// cache of 8 MiB for each family). Small: the table files stay in the kernel's page
/// cache, which is not the master's memory, so a block read again costs a copy and a
/// decompression, not a disk read; at 8,000 minions an 8 MiB cache held 6.9 MiB of keys
/// and returns (heaptrack). 4 MiB, as the index blocks live here too.
pub const BLOCK_CACHE_BYTES: usize = 4 << 20;

/// The database-wide options of [`super::StateMachine::open`] (the families' own are
/// [`descriptors`]).
pub fn read_write() -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_max_background_jobs(2);
    // No WAL (the raft log is the durable copy), so column families must be flushed
    // together to stay consistent with `applied_index`.
    opts.set_atomic_flush(true);
    // Memory is bounded, not left to RocksDB's defaults: returns arrive all the time, and
    // a master's memory would otherwise grow by the size of the memtables before the first
    // flush. The per-family size is in `family` (it has no effect here).
    opts.set_db_write_buffer_size(MEMTABLES_TOTAL_BYTES);
    opts.set_max_open_files(MAX_OPEN_TABLES);
    // RocksDB's own log (`LOG` here) gets fatal lines only. Debian's build keeps its
    // assertions, and that log's file writer aborts the process when it is written again
    // after a write of it failed: a full disk would end the master at the next line
    // (tests/full_disk.rs). Errors reach the master as the results of its calls.
    opts.set_log_level(rocksdb::LogLevel::Fatal);
    opts
}

/// The options every column family is opened with: a memtable of [`MEMTABLE_BYTES`]
/// (RocksDB's default is 64 MiB, two of them per family before writes stall) and the
/// database's one block cache, which also holds the tables' index and filter blocks
/// (RocksDB's default keeps them in each open table's reader, outside any bound: they
/// grow with the job cache, docs/benchmarks.md "Memory"); the
/// level-0 tables' stay pinned there, as the newest returns are read from them.
fn family(cache: &Cache) -> Options {
    let mut opts = Options::default();
    opts.set_write_buffer_size(MEMTABLE_BYTES);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    opts.set_block_based_table_factory(&table);
    opts
}

/// The column families `names` (and RocksDB's `default`, which every database has),
/// each with [`family`]'s options and one block cache of [`BLOCK_CACHE_BYTES`] shared by
/// them all.
pub fn descriptors<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Vec<ColumnFamilyDescriptor>> {
    let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES)?;
    let mut out: Vec<ColumnFamilyDescriptor> = Vec::new();
    for name in std::iter::once(DEFAULT_COLUMN_FAMILY_NAME).chain(names) {
        if !out.iter().any(|d| d.name() == name) {
            out.push(ColumnFamilyDescriptor::new(name, family(&cache)));
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "options_tests.rs"]
mod tests;
