//! The byte limit in a running node: large returns, many to an entry (as a loaded master
//! proposes them), keep the log's files within a bound of `halite_log_max_bytes` however
//! few entries they make, and a restart reads the snapshot and the tail only.

use std::path::Path;

use halite_storage::compaction::{decide, CompactionLimits, Decision, LogFacts};
use halite_storage::format::JobReturn;
use halite_storage::keys::{mmap::MmapKeys, Geometry};
use halite_storage::log::RaftLog;
use halite_storage::roots::{RootsDirs, RootsMaterialiser};
use halite_storage::snapshot::SnapshotStore;
use halite_storage::views::Views;
use halite_storage::Record;

use super::{DataDir, Node, NodeConfig};
use crate::testutil::wait_until;

fn views(pki: &Path) -> Views {
    let geo = Geometry { size: 4096, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 20 };
    Views::new(Box::new(MmapKeys::open(pki, geo).unwrap()), RootsMaterialiser::new(RootsDirs::default()))
}

/// Entry `g`'s 32 returns of 8 KiB of random bytes (nothing compresses them).
fn returns(g: u64) -> Vec<Record> {
    let mut x = g.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..32)
        .map(|k| {
            let load = (0..8 << 10)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            Record::JobReturn(JobReturn { jid: format!("2026112900{g:010}"), id: format!("minion-{k}"), load, time_ns: g, first_only: false })
        })
        .collect()
}

/// 64 MiB of returns in 256 entries of 256 KiB (far under the 1000 entries a count
/// would want) through a node whose byte limit is 16 MiB: the node compacts by itself,
/// and once the policy has nothing more to do the log's files hold at most twice the
/// limit (what the last compaction left: the file being written and what was appended
/// while its snapshot was built; plus less than half a limit appended since, decide's
/// guard). Started again, the node reads the snapshot and that tail, and has the same
/// state.
#[test]
fn large_grouped_returns_keep_the_log_within_its_byte_limit() {
    let limit = 16u64 << 20;
    let cfg = NodeConfig { compaction: CompactionLimits { max_entries: None, max_bytes: Some(limit), ..Default::default() }, ..Default::default() };
    let dir = tempfile::tempdir().unwrap();
    let data = DataDir::new(&dir.path().join("data"));
    let pki = dir.path().join("pki");
    let node = Node::start(&data, views(&pki), cfg.clone()).unwrap();
    let groups: Vec<Vec<Record>> = (0..256).map(returns).collect();
    let mut snapshots = std::collections::BTreeSet::new();
    for chunk in groups.chunks(16) {
        node.propose_all(chunk, 4, &mut |_, _| {}).unwrap();
        snapshots.insert(node.log.snapshot_meta().unwrap().index);
    }
    // Settled: the policy has nothing more to do, and the last compaction is done (the
    // log holds nothing its snapshot covers: a snapshot is published before the log is
    // compacted through it).
    let settled = || {
        let facts = LogFacts::of(&node.log, node.state().applied_index().unwrap()).unwrap();
        let compacted = node.log.first_entry_index().is_none_or(|f| f == facts.snapshot_index + 1);
        decide(facts, cfg.compaction) == Decision::Keep && facts.log_bytes <= 2 * limit && compacted
    };
    wait_until("the policy done, the log's files within twice the byte limit", 60, settled);
    snapshots.insert(node.log.snapshot_meta().unwrap().index);
    snapshots.remove(&0);
    assert!(snapshots.len() >= 2, "the log was compacted through {snapshots:?} only");
    let before = node.state().digest().unwrap();
    let snap = node.log.snapshot_meta().unwrap().index;
    drop(node);

    let log = RaftLog::open(&data.log()).unwrap();
    let (bytes, first, last) = (log.disk_bytes(), log.first_entry_index(), log.last_entry_index().unwrap_or(snap));
    assert!(bytes <= 2 * limit, "{bytes} bytes of log files after a clean stop");
    // No entry is missing between the snapshot and the log. (Entries the snapshot covers
    // are sometimes still found after a stop right after a compaction; the next
    // compaction drops them.)
    assert!(first.is_none_or(|f| f <= snap + 1), "the log starts at {first:?}, after the snapshot at {snap}");
    assert!(last >= snap);
    assert_eq!(SnapshotStore::open(&data.snapshots()).unwrap().list().unwrap(), vec![snap]);
    drop(log);
    // A restart reads the snapshot and the tail: the same state. (It elects itself in a
    // new term, whose empty entry moves the applied index by one.)
    let node = Node::start(&data, views(&pki), cfg).unwrap();
    let after = node.state().digest().unwrap();
    assert_eq!((after.items, after.sha256), (before.items, before.sha256));
    assert!(node.log.first_entry_index().is_none_or(|f| f <= snap + 1));
}
