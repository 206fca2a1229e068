//! `halite-bench restart --return-bytes B`: a node's start-up after a history of large
//! job returns, against the start-up of a node with no history, several runs each.
//!
//! The history is `total` returns of `bytes` bytes each (random, so that nothing
//! compresses them), `per_job` to a job, proposed `group` to an entry as a loaded master
//! proposes them, through a node with the default compaction limits
//! (`cluster_max_log_size`, `halite_log_max_bytes`; both off with `--no-compaction`):
//! the node compacts its log by itself while the returns come in. Then the node is stopped and started `runs` times; each
//! start is timed from the call to the node running (`open`: log opened and checked,
//! state machine and views up to date) and to its first write committed (`first write`).

use std::path::Path;
use std::time::Instant;

use halite_replication::{DataDir, Node, NodeConfig};
use halite_storage::format::{JobReturn, Record};
use halite_storage::keys::mmap::MmapKeys;
use halite_storage::keys::Geometry;
use halite_storage::log::RaftLog;
use halite_storage::roots::{RootsDirs, RootsMaterialiser};
use halite_storage::views::Views;

/// What `returns` is asked for.
pub struct Opts {
    pub total: u64,
    pub bytes: usize,
    pub group: u64,
    pub per_job: u64,
    pub runs: usize,
    /// Both limits off: the node keeps the whole log.
    pub no_compaction: bool,
    /// Where to write the history's data dir (`<keep>/data`, kept for a master to
    /// start on: `benches/scripts/start_after_returns.py`); a temporary dir otherwise.
    pub keep: Option<std::path::PathBuf>,
}

fn views(dir: &Path) -> Views {
    let keys = MmapKeys::open(&dir.join("pki"), Geometry { size: 100_000, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 30 }).expect("view");
    Views::new(Box::new(keys), RootsMaterialiser::new(RootsDirs::default()))
}

/// Starts the node in `root` `runs` times: seconds to open and to the first write.
fn starts(root: &Path, runs: usize, cfg: &NodeConfig) -> Vec<(f64, f64)> {
    let data = DataDir::new(&root.join("data"));
    (0..runs)
        .map(|i| {
            let t = Instant::now();
            let node = Node::start(&data, views(root), cfg.clone()).expect("node");
            let open = t.elapsed().as_secs_f64();
            node.propose(&[ret(u64::MAX - i as u64, 1, 1)]).expect("first write");
            let first = t.elapsed().as_secs_f64();
            drop(node);
            (open, first)
        })
        .collect()
}

fn ret(seq: u64, bytes: usize, per_job: u64) -> Record {
    Record::JobReturn(JobReturn {
        jid: format!("2026112900{:010}", seq / per_job.max(1)),
        id: format!("minion-{:05}", seq % per_job.max(1)),
        load: crate::noise(bytes, seq.wrapping_add(1)),
        time_ns: seq,
        first_only: false,
    })
}

/// min / median / max of `xs`, in ms.
fn spread(mut xs: Vec<f64>) -> String {
    xs.sort_by(|a, b| a.total_cmp(b));
    format!("{:.0} / {:.0} / {:.0}", xs[0] * 1e3, xs[xs.len() / 2] * 1e3, xs[xs.len() - 1] * 1e3)
}

/// Describes the log in `root`: entries held, bytes of its files, snapshot index.
fn log_line(root: &Path) -> String {
    let log = RaftLog::open(&DataDir::new(&root.join("data")).log()).expect("log");
    let snap = log.snapshot_meta().expect("meta").index;
    let first = log.first_entry_index().unwrap_or(snap + 1);
    let last = log.last_entry_index().unwrap_or(snap);
    format!("entries {first}..={last}, {:.1} MiB of files, compacted through {snap}", log.disk_bytes() as f64 / (1 << 20) as f64)
}

pub fn returns(o: Opts) {
    let empty = tempfile::tempdir().expect("tmp");
    let tmp = tempfile::tempdir().expect("tmp");
    let full_root = o.keep.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let full = full_root.as_path();
    // The empty node: founded once, then started again and again.
    drop(Node::start(&DataDir::new(&empty.path().join("data")), views(empty.path()), NodeConfig::default()).expect("node"));
    let mut cfg = NodeConfig::default();
    if o.no_compaction {
        cfg.compaction = halite_storage::compaction::CompactionLimits { max_entries: None, max_bytes: None, ..Default::default() };
    }
    let t = Instant::now();
    let node = Node::start(&DataDir::new(&full.join("data")), views(full), cfg.clone()).expect("node");
    let mut seq = 0;
    while seq < o.total {
        // 64 entries at a time, so the returns are not all in memory at once.
        let end = (seq + 64 * o.group).min(o.total);
        let groups: Vec<Vec<Record>> = (seq..end).step_by(o.group as usize).map(|g| (g..(g + o.group).min(end)).map(|s| ret(s, o.bytes, o.per_job)).collect()).collect();
        node.propose_all(&groups, 4, &mut |_, _| {}).expect("propose");
        seq = end;
    }
    drop(node);
    eprintln!("{} returns of {} bytes, {} an entry, written in {:.1} s", o.total, o.bytes, o.group, t.elapsed().as_secs_f64());
    let log = log_line(full);
    let e = starts(empty.path(), o.runs, &NodeConfig::default());
    let f = starts(full, o.runs, &cfg);
    println!("history: {log}");
    println!("| node start ({} runs; ms min / median / max) | open | first write |", o.runs);
    println!("|---|---|---|");
    println!("| no history | {} | {} |", spread(e.iter().map(|x| x.0).collect()), spread(e.iter().map(|x| x.1).collect()));
    let limits = if o.no_compaction { "compaction off" } else { "default limits" };
    println!("| {} returns of {} bytes, {limits} | {} | {} |", o.total, o.bytes, spread(f.iter().map(|x| x.0).collect()), spread(f.iter().map(|x| x.1).collect()));
}
