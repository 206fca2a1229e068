//! The options the state machine asks for are the ones RocksDB runs with, on every open
//! path: read back from the `OPTIONS-*` file RocksDB writes at each read-write open, and
//! from the block cache's own properties for a read-only open (which writes no file).

use std::collections::HashMap;
use std::path::Path;

use super::{BLOCK_CACHE_BYTES, MEMTABLES_TOTAL_BYTES, MEMTABLE_BYTES};
use crate::state::{StateMachine, ALL_CFS, CF_JOBS, CF_KEYS};

/// The newest `OPTIONS-<number>` file in `dir`, parsed: each section's `key=value` lines,
/// by section header (`DBOptions`, `CFOptions "keys"`, ...).
fn written_options(dir: &Path) -> HashMap<String, HashMap<String, String>> {
    let newest = newest_options_file(dir).1;
    let mut sections: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut current = String::new();
    for line in std::fs::read_to_string(dir.join(newest)).unwrap().lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = header.to_string();
        } else if let Some((k, v)) = line.split_once('=') {
            sections.entry(current.clone()).or_default().insert(k.to_string(), v.to_string());
        }
    }
    sections
}

/// The number and name of the newest `OPTIONS-<number>` file in `dir`.
fn newest_options_file(dir: &Path) -> (u64, String) {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let n: u64 = name.strip_prefix("OPTIONS-")?.parse().ok()?;
            Some((n, name))
        })
        .max()
        .expect("RocksDB wrote an OPTIONS file")
}

/// Every family (RocksDB's `default` too) has the memtable size asked for, and the
/// database its total.
fn assert_bounded(dir: &Path) {
    let written = written_options(dir);
    assert_eq!(written["DBOptions"]["db_write_buffer_size"], MEMTABLES_TOTAL_BYTES.to_string());
    for name in ALL_CFS.iter().chain(std::iter::once(&"default")) {
        let family = written.get(&format!("CFOptions \"{name}\"")).unwrap_or_else(|| panic!("no options for family {name}"));
        assert_eq!(family["write_buffer_size"], MEMTABLE_BYTES.to_string(), "family {name}");
    }
}

#[test]
fn every_family_gets_the_bounded_memtable_when_opened_and_when_swapped() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("sm");
    let sm = StateMachine::open(&path).unwrap();
    assert_bounded(&path);
    // A snapshot install reopens the database through its own path (`replace.rs`);
    // RocksDB writes a new, higher-numbered OPTIONS file at that open.
    let before = newest_options_file(&path).0;
    sm.reopen_after(|| Ok(())).unwrap();
    assert!(newest_options_file(&path).0 > before, "the reopen wrote its own OPTIONS file");
    assert_bounded(&path);
}

#[test]
fn the_families_share_one_block_cache_also_when_opened_read_only() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("sm");
    {
        let sm = StateMachine::open(&path).unwrap();
        let db = sm.db().unwrap();
        for i in 0..1000u32 {
            db.put_cf(db.cf(CF_KEYS).unwrap(), format!("minion-{i:05}"), vec![7u8; 200]).unwrap();
        }
        db.put_cf(db.cf(CF_JOBS).unwrap(), b"20261124000000000000", b"job").unwrap();
        drop(db);
        sm.flush().unwrap();
    }
    let sm = StateMachine::open_read_only(&path).unwrap();
    let db = sm.db().unwrap();
    let usage = |name: &str| db.property_int_value_cf(db.cf(name).unwrap(), "rocksdb.block-cache-usage").unwrap().unwrap();
    let capacity = |name: &str| db.property_int_value_cf(db.cf(name).unwrap(), "rocksdb.block-cache-capacity").unwrap().unwrap();
    // Read only from `keys`: its blocks are in the cache `jobs` reports too, so the two
    // families have one cache (with a cache each, `jobs` would still report 0).
    for i in (0..1000u32).step_by(97) {
        assert!(db.get_cf(db.cf(CF_KEYS).unwrap(), format!("minion-{i:05}")).unwrap().is_some());
    }
    assert!(usage(CF_KEYS) > 0);
    assert_eq!(usage(CF_JOBS), usage(CF_KEYS));
    for name in ALL_CFS.iter().chain(std::iter::once(&"default")) {
        if db.cf(name).is_ok() {
            assert_eq!(capacity(name), BLOCK_CACHE_BYTES as u64, "family {name}");
        }
    }
}
