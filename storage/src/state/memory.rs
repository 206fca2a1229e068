//! What the state machine's RocksDB holds in memory, from RocksDB's own estimates, for
//! the `/metrics` endpoint and the memory soak: the memtables (bounded by
//! [`super::options::MEMTABLES_TOTAL_BYTES`]), the table readers (each open table file's
//! index and filter blocks, held outside the block cache; at most
//! [`super::options::MAX_OPEN_TABLES`] files are open), and the block cache (bounded by
//! [`super::options::BLOCK_CACHE_BYTES`]).

use super::{StateMachine, ALL_CFS};
use crate::error::Result;

/// Bytes of the state machine's RocksDB memory, by part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    /// Every family's memtables (`rocksdb.cur-size-all-mem-tables`).
    pub memtables: u64,
    /// Every family's table readers (`rocksdb.estimate-table-readers-mem`).
    pub table_readers: u64,
    /// The shared block cache (`rocksdb.block-cache-usage`).
    pub block_cache: u64,
}

impl StateMachine {
    /// RocksDB's estimates of what it holds in memory now.
    pub fn memory(&self) -> Result<Memory> {
        let db = self.db()?;
        let mut m = Memory::default();
        for name in ALL_CFS {
            let cf = db.cf(name)?;
            let prop = |p: &str| db.property_int_value_cf(cf, p).ok().flatten().unwrap_or(0);
            m.memtables += prop("rocksdb.cur-size-all-mem-tables");
            m.table_readers += prop("rocksdb.estimate-table-readers-mem");
        }
        // One cache shared by every family: read once.
        m.block_cache = db.property_int_value_cf(db.cf(ALL_CFS[0])?, "rocksdb.block-cache-usage").ok().flatten().unwrap_or(0);
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use crate::format::{JobReturn, Record};
    use crate::state::StateMachine;
    use crate::LogEntry;

    #[test]
    fn memtables_hold_what_was_applied_and_a_flush_moves_it_to_table_readers() {
        let d = tempfile::tempdir().unwrap();
        let sm = StateMachine::open(&d.path().join("sm")).unwrap();
        let before = sm.memory().unwrap();
        let recs: Vec<Record> = (0..500).map(|i| Record::JobReturn(JobReturn { jid: "20261125000000000001".into(), id: format!("m{i}"), load: vec![7; 200], time_ns: 1, first_only: false })).collect();
        sm.apply_entries(&[LogEntry::plain(1, recs)]).unwrap();
        let filled = sm.memory().unwrap();
        assert!(filled.memtables >= before.memtables + 500 * 200, "{before:?} {filled:?}");
        sm.flush().unwrap();
        let flushed = sm.memory().unwrap();
        assert!(flushed.memtables < filled.memtables && flushed.table_readers > before.table_readers, "{filled:?} {flushed:?}");
    }
}
