//! `halite-bench`: storage benchmarks that need a whole node or whole processes.
//!
//! ```text
//! halite-bench commit  [--total N]            committed records/s at group sizes 1, 16, 256
//! halite-bench apply   [--total N]            state-machine apply throughput
//! halite-bench replay  [--total N]            log → state machine replay (records/s)
//! halite-bench migrate [--keys N] [--reference VENV]
//!                                              pki.migrate_to_mmap and salt-key -L, Halite's
//!                                              binaries and (with --reference) Salt 3008.5's
//! halite-bench snapshot [--keys N] [--roots-mib M]
//!                                              build a snapshot of N keys and M MiB of roots,
//!                                              send it through source → receiver (chunks,
//!                                              CRC, sha256), install it; digests compared
//! halite-bench restart [--total N]            node start-up time after N records, before
//!                                              and after compacting the log
//! halite-bench restart --return-bytes B [--total N] [--group G] [--per-job J] [--runs R] [--no-compaction] [--keep DIR]
//!                                              node start-up after N job returns of B bytes,
//!                                              G an entry, compacted by the node itself,
//!                                              against no history (src/restart.rs)
//! halite-bench cluster-commit [--total N] [--threads T] [--groups 1,16,256]
//!                                              committed records/s on three members over
//!                                              the sealed transport on loopback
//! halite-bench failover [--rounds R]          leader stopped abruptly → the next write
//!                                              committed through a follower (ms)
//! halite-bench join [--keys N] [--roots-mib M]
//!                                              a member joining a compacted cluster: the
//!                                              snapshot over the transport, then the tail
//! halite-bench floor [--conns N] [--rounds R] [--blast K] [--work]
//!                                              the machine's floor under the master's
//!                                              traffic: N minions' connections served by a
//!                                              process that only frames bytes (src/floor.rs);
//!                                              with --work each request a return carrying
//!                                              its whole work (src/floor_work.rs)
//! halite-bench work [--returns N] [--minions M] [--group G] [--entries-per-sync E]
//!                                              the work a job return needs beyond framing,
//!                                              inline on one thread: CPU a return by step
//!                                              (src/work.rs)
//! ```
//! Build with `cargo build --release -p halite-benches -p halite-tools` first: `migrate`
//! runs the release `salt-run` and `salt-key` next to this binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};

use halite_benches::fake_pub;
use halite_replication::{DataDir, Node, NodeConfig};
use halite_storage::format::{KeySet, KeyState, Record};
use halite_storage::keys::localfs::LocalfsKeys;
use halite_storage::keys::mmap::MmapKeys;
use halite_storage::keys::Geometry;
use halite_storage::log::RaftLog;
use halite_storage::roots::{RootsDirs, RootsMaterialiser};
use halite_storage::state::StateMachine;
use halite_storage::views::Views;

#[derive(Parser)]
#[command(name = "halite-bench")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Message sizes of the `floor` shapes (defaults: a `test.ping` job on the master).
#[derive(clap::Args, Clone, Copy)]
struct FloorSizes {
    #[arg(long, default_value_t = 260)]
    publish_bytes: usize,
    #[arg(long, default_value_t = 320)]
    request_bytes: usize,
    #[arg(long, default_value_t = 120)]
    reply_bytes: usize,
}

impl From<FloorSizes> for halite_benches::floor::Sizes {
    fn from(s: FloorSizes) -> Self {
        Self { publish: s.publish_bytes, request: s.request_bytes, reply: s.reply_bytes }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// The machine's floor under the master's traffic (src/floor.rs).
    Floor {
        /// Simulated minions (each a publish and a request connection).
        #[arg(long, default_value_t = 8000)]
        conns: usize,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Requests each minion sends for the blast shape (0: no blast).
        #[arg(long, default_value_t = 5)]
        blast: u32,
        /// Runtime workers of the server and of the client (the master's: 2).
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[command(flatten)]
        sizes: FloorSizes,
        /// Each request a real return carrying a return's work (src/floor_work.rs).
        #[arg(long)]
        work: bool,
    },
    /// The floor's server, started by `floor` itself.
    #[command(hide = true)]
    FloorServe {
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[command(flatten)]
        sizes: FloorSizes,
        #[arg(long)]
        work: bool,
    },
    /// The work a job return needs beyond framing bytes, inline on one thread
    /// (src/work.rs).
    Work {
        #[arg(long, default_value_t = 200_000)]
        returns: usize,
        /// Minions the returns come from (each its own session key).
        #[arg(long, default_value_t = 8000)]
        minions: usize,
        /// Proposals to a log entry (a loaded master: about 100).
        #[arg(long, default_value_t = 100)]
        group: usize,
        /// Entries appended between two syncs of the log.
        #[arg(long, default_value_t = 4)]
        entries_per_sync: usize,
    },
    Commit {
        #[arg(long, default_value_t = 200_000)]
        total: u64,
        /// Concurrent proposers per group size run (each proposes groups of that size).
        #[arg(long, default_value_t = 1)]
        threads: u64,
        /// Key view the node applies to: mmap or localfs.
        #[arg(long, default_value = "mmap")]
        view: String,
        /// Group sizes to run.
        #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
        groups: Vec<u64>,
    },
    Apply {
        #[arg(long, default_value_t = 1_000_000)]
        total: u64,
        /// Apply job returns as a master does (proposals of one proposer, `group` to an
        /// entry, each tracked for exactly-once apply) instead of untracked key sets.
        #[arg(long)]
        returns: bool,
        /// Proposals to an entry with `--returns` (a loaded master: about 100).
        #[arg(long, default_value_t = 100)]
        group: u64,
    },
    Replay {
        #[arg(long, default_value_t = 1_000_000)]
        total: u64,
    },
    Snapshot {
        #[arg(long, default_value_t = 100_000)]
        keys: u64,
        /// MiB of roots files (16 MiB files of random bytes) in the state machine.
        #[arg(long, default_value_t = 1024)]
        roots_mib: u64,
    },
    Restart {
        #[arg(long, default_value_t = 1_000_000)]
        total: u64,
        /// A history of job returns of this many bytes instead of small records.
        #[arg(long, default_value_t = 0)]
        return_bytes: usize,
        /// Returns to an entry (with `--return-bytes`).
        #[arg(long, default_value_t = 100)]
        group: u64,
        /// Returns to a job (with `--return-bytes`).
        #[arg(long, default_value_t = 500)]
        per_job: u64,
        /// Starts timed of each node (with `--return-bytes`).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Both compaction limits off: the node keeps the whole log (with `--return-bytes`).
        #[arg(long)]
        no_compaction: bool,
        /// Keep the history's data dir in `<DIR>/data` (with `--return-bytes`).
        #[arg(long)]
        keep: Option<PathBuf>,
    },
    ClusterCommit {
        #[arg(long, default_value_t = 200_000)]
        total: u64,
        #[arg(long, default_value_t = 8)]
        threads: u64,
        #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
        groups: Vec<u64>,
    },
    Failover {
        #[arg(long, default_value_t = 10)]
        rounds: u64,
    },
    Join {
        #[arg(long, default_value_t = 100_000)]
        keys: u64,
        #[arg(long, default_value_t = 1024)]
        roots_mib: u64,
    },
    /// Serving files through gitfs against roots alone (src/gitfs_serve.rs).
    GitfsServe {
        #[arg(long, default_value_t = 2000)]
        files: usize,
        /// Bytes a file.
        #[arg(long, default_value_t = 4096)]
        size: usize,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    Migrate {
        #[arg(long, default_value_t = 100_000)]
        keys: u64,
        /// A venv holding Salt 3008.5 (scripts/setup-reference.sh) to run side by side.
        #[arg(long)]
        reference: Option<PathBuf>,
    },
}

fn key(i: u64) -> Record {
    Record::KeySet(KeySet { id: format!("minion-{i:08}"), state: KeyState::Pending, pub_key: fake_pub(i).into_bytes(), time_ns: i, expect: None, pending_below: None })
}

/// A small record (what replay targets are stated for): a key delete.
fn small(i: u64) -> Record {
    Record::KeySet(KeySet { id: format!("m{i}"), state: KeyState::Deleted, pub_key: Vec::new(), time_ns: i, expect: None, pending_below: None })
}

fn views(dir: &Path, kind: &str) -> Views {
    let keys: Box<dyn halite_storage::keys::KeyView> = match kind {
        "localfs" => Box::new(LocalfsKeys::open(&dir.join("pki")).expect("view")),
        _ => Box::new(MmapKeys::open(&dir.join("pki"), Geometry { size: 1_000_000, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 30 }).expect("view")),
    };
    Views::new(keys, RootsMaterialiser::new(RootsDirs::default()))
}

fn main() {
    // Logs only when asked (`RUST_LOG=halite_replication=debug,raft=debug`): the
    // figures are what the benchmark prints.
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).with_writer(std::io::stderr).try_init();
    }
    let args = Args::parse();
    match args.cmd {
        Cmd::Commit { total, threads, view, groups } => commit(total, threads, &view, &groups),
        Cmd::Apply { total, returns: false, .. } => apply(total),
        Cmd::Apply { total, returns: true, group } => apply_returns(total, group),
        Cmd::Replay { total } => replay(total),
        Cmd::Migrate { keys, reference } => migrate(keys, reference),
        Cmd::GitfsServe { files, size, rounds } => halite_benches::gitfs_serve::run(files, size, rounds),
        Cmd::Snapshot { keys, roots_mib } => snapshot(keys, roots_mib),
        Cmd::Restart { total, return_bytes: 0, .. } => restart(total),
        Cmd::Restart { total, return_bytes, group, per_job, runs, no_compaction, keep } => {
            halite_benches::restart::returns(halite_benches::restart::Opts { total, bytes: return_bytes, group: group.max(1), per_job, runs: runs.max(1), no_compaction, keep })
        }
        Cmd::ClusterCommit { total, threads, groups } => halite_benches::cluster::commit(total, threads, &groups),
        Cmd::Failover { rounds } => halite_benches::cluster::failover(rounds),
        Cmd::Join { keys, roots_mib } => halite_benches::cluster::join(keys, roots_mib),
        Cmd::Floor { conns, rounds, blast, threads, sizes, work } => {
            let opts = halite_benches::floor::Opts { conns, rounds, blast, threads, sizes: sizes.into(), work };
            if let Err(e) = halite_benches::floor::run(opts) {
                eprintln!("floor: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Work { returns, minions, group, entries_per_sync } => halite_benches::work::run(&halite_benches::work::Opts { returns, minions, group, entries_per_sync }),
        Cmd::FloorServe { threads, sizes, work } => {
            if let Err(e) = halite_benches::floor::serve(threads, sizes.into(), work) {
                eprintln!("floor-serve: {e}");
                std::process::exit(1);
            }
        }
    }
}

/// Start-up time of a node over `total` records: fresh, with the whole log, and after
/// the log is compacted (snapshot + empty tail).
fn restart(total: u64) {
    use halite_storage::snapshot::SnapshotStore;
    let dir = tempfile::tempdir().expect("tmp");
    let data = DataDir::new(&dir.path().join("data"));
    let start = || {
        let t = Instant::now();
        let node = Node::start(&data, views(dir.path(), "mmap"), NodeConfig::default()).expect("node");
        let s = t.elapsed().as_secs_f64();
        (node, s)
    };
    let (node, fresh_s) = start();
    let mut i = 0;
    while i < total {
        let g: Vec<Record> = (i..(i + 8192).min(total)).map(small).collect();
        node.propose(&g).expect("propose");
        i += 8192;
    }
    drop(node);
    let (node, full_s) = start();
    drop(node);
    let t = Instant::now();
    {
        let log = RaftLog::open(&data.log()).expect("log");
        let sm = StateMachine::open(&data.state()).expect("sm");
        let store = SnapshotStore::open(&data.snapshots()).expect("store");
        halite_storage::compaction::compact(&log, &sm, &store, |_, _| {}).expect("compact");
    }
    let compact_s = t.elapsed().as_secs_f64();
    let (node, compacted_s) = start();
    drop(node);
    println!("| node start-up ({total} records of history) | seconds |");
    println!("|---|---|");
    println!("| fresh data dir | {fresh_s:.2} |");
    println!("| whole log ({total} records) | {full_s:.2} |");
    println!("| compaction (snapshot + compact, offline) | {compact_s:.2} |");
    println!("| after compaction (snapshot + empty tail) | {compacted_s:.2} |");
}

fn snapshot(keys: u64, roots_mib: u64) {
    use halite_storage::format::RootsTree;
    use halite_storage::snapshot::{swap_in, ReceiveLimits, Receiver, SnapshotSource, SnapshotStore};
    let dir = tempfile::tempdir().expect("tmp");
    let a = dir.path().join("a");
    let sm = StateMachine::open(&a.join("state")).expect("sm");
    let mut index = 0u64;
    let t = Instant::now();
    while index < keys {
        let recs: Vec<(u64, Record)> = (index + 1..=(index + 4096).min(keys)).map(|j| (j, key(j))).collect();
        index += recs.len() as u64;
        sm.apply(&recs).expect("apply");
    }
    for f in 0..roots_mib.div_ceil(16) {
        let content = halite_benches::noise(16 << 20, f + 1);
        let recs = halite_storage::state::roots_records(RootsTree::File, "base", &format!("blob/{f:04}.bin"), 0o644, &content);
        let numbered: Vec<(u64, Record)> = recs.into_iter().map(|r| {
            index += 1;
            (index, r)
        }).collect();
        sm.apply(&numbered).expect("apply roots");
    }
    sm.flush().expect("flush");
    eprintln!("state machine: {keys} keys, {roots_mib} MiB of roots, {index} records applied in {:.1} s", t.elapsed().as_secs_f64());
    let store = SnapshotStore::open(&a.join("snapshots")).expect("store");
    let cs = raft::eraftpb::ConfState { voters: vec![1], ..Default::default() };
    let t = Instant::now();
    let snap = store.begin_build(&sm).expect("build").finish(1, &cs, &[]).expect("finish");
    let build_s = t.elapsed().as_secs_f64();
    let bytes = snap.manifest().total_bytes();
    let mib = bytes as f64 / (1 << 20) as f64;
    let b = dir.path().join("b");
    let rx_store = SnapshotStore::open(&b.join("snapshots")).expect("rx store");
    let t = Instant::now();
    let mut src = SnapshotSource::new(&snap);
    let mut rx = Receiver::begin(&rx_store, &src.manifest_bytes(), ReceiveLimits::default()).expect("begin");
    let mut chunks = 0u64;
    while let Some(c) = src.next_chunk().expect("chunk") {
        rx.accept(&c).expect("accept");
        chunks += 1;
    }
    let got = rx.finish().expect("finish");
    let transfer_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    swap_in(&got, &b.join("state")).expect("install");
    let install_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let da = sm.digest().expect("digest");
    let db = StateMachine::open(&b.join("state")).expect("sm b").digest().expect("digest b");
    let digest_s = t.elapsed().as_secs_f64() / 2.0;
    assert_eq!(da.sha256, db.sha256, "installed state differs");
    println!("| step ({keys} keys + {roots_mib} MiB roots; snapshot {mib:.0} MiB in {} files, {chunks} chunks) | seconds | MiB/s |", snap.manifest().files.len());
    println!("|---|---|---|");
    println!("| build (checkpoint + sha256 of every file) | {build_s:.2} | {:.0} |", mib / build_s);
    println!("| transfer in process (read, CRC, write, sha256 check, fsync) | {transfer_s:.2} | {:.0} |", mib / transfer_s);
    println!("| install (hard links + copies, open, swap) | {install_s:.2} | {:.0} |", mib / install_s);
    println!("| digest of one member's state ({} items) | {digest_s:.2} | {:.0} |", da.items, mib / digest_s);
}

fn commit(total: u64, threads: u64, view: &str, groups: &[u64]) {
    println!("| view | group size | proposers | records | seconds | committed records/s | groups/s |");
    println!("|---|---|---|---|---|---|---|");
    for &group in groups {
        let dir = tempfile::tempdir().expect("tmp");
        let node = Arc::new(Node::start(&DataDir::new(&dir.path().join("data")), views(dir.path(), view), NodeConfig::default()).expect("node"));
        // Warm up: the first key creates the view's files (a 96 MB zero-filled index).
        node.propose(&[key(u64::MAX / 2)]).expect("warm-up");
        let n = if group == 1 { total.min(20_000) } else { total };
        let per = n / threads;
        let t = Instant::now();
        let hs: Vec<_> = (0..threads)
            .map(|th| {
                let node = node.clone();
                std::thread::spawn(move || {
                    let mut i = th * per;
                    while i < (th + 1) * per {
                        let g: Vec<Record> = (i..(i + group).min((th + 1) * per)).map(key).collect();
                        node.propose(&g).expect("propose");
                        i += group;
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().expect("join");
        }
        let s = t.elapsed().as_secs_f64();
        let calls = (n as f64 / group as f64).ceil();
        println!("| {view} | {group} | {threads} | {n} | {s:.2} | {:.0} | {:.0} |", n as f64 / s, calls / s);
    }
}

fn apply(total: u64) {
    let dir = tempfile::tempdir().expect("tmp");
    let sm = StateMachine::open(&dir.path().join("state")).expect("sm");
    let batch = 4096u64;
    let t = Instant::now();
    let mut i = 1;
    while i <= total {
        let recs: Vec<(u64, Record)> = (i..(i + batch).min(total + 1)).map(|j| (j, key(j))).collect();
        sm.apply(&recs).expect("apply");
        i += batch;
    }
    let s = t.elapsed().as_secs_f64();
    println!("| apply (key sets, 450-byte keys, batches of {batch}) | {total} | {s:.2} s | {:.0} records/s |", total as f64 / s);
}

/// Job returns applied as the node applies them: a group entry of `group` proposals
/// (one proposer, its sequence numbers in order, the mark at the group's first) per
/// index, 64 entries a batch, each proposal a 150-byte return of 8,000 minions' job.
fn apply_returns(total: u64, group: u64) {
    use halite_storage::context::ProposalId;
    use halite_storage::entry::LogEntry;
    use halite_storage::format::JobReturn;
    let dir = tempfile::tempdir().expect("tmp");
    let sm = StateMachine::open(&dir.path().join("state")).expect("sm");
    let group = group.max(1);
    let per_batch = 64 * group;
    // Minions answer in no particular order: the n-th return of a job is minion
    // `n * 2,897 mod 8,000`'s (2,897 is prime to 8,000, so every minion once a job), and
    // ids in that order are far from sorted, as a fleet's returns are.
    let ret = |seq: u64| {
        let jid = format!("2026112700000000{:04}", seq / 8000);
        Record::JobReturn(JobReturn { jid, id: format!("swarm-{}", (seq % 8000) * 2897 % 8000), load: vec![0x82; 150], time_ns: seq, first_only: false })
    };
    let t = Instant::now();
    let mut seq = 1u64;
    while seq <= total {
        let mut batch = Vec::with_capacity(per_batch as usize);
        while seq <= total && (batch.len() as u64) < per_batch {
            let index = 1 + (seq - 1) / group;
            let first = (index - 1) * group + 1;
            batch.push(LogEntry { index, id: Some(ProposalId { proposer: 1, incarnation: 1, seq }), settled_below: first, records: vec![ret(seq)] });
            seq += 1;
        }
        sm.apply_entries(&batch).expect("apply");
    }
    let s = t.elapsed().as_secs_f64();
    println!("| apply (job returns, tracked proposals, {group} an entry) | {total} | {s:.2} s | {:.0} returns/s |", total as f64 / s);
}

fn replay(total: u64) {
    let dir = tempfile::tempdir().expect("tmp");
    let data = DataDir::new(&dir.path().join("data"));
    {
        let node = Node::start(&data, views(dir.path(), "mmap"), NodeConfig::default()).expect("node");
        let mut i = 0;
        let t = Instant::now();
        while i < total {
            let g: Vec<Record> = (i..(i + 8192).min(total)).map(small).collect();
            node.propose(&g).expect("propose");
            i += 8192;
        }
        eprintln!("wrote {total} records in {:.2} s", t.elapsed().as_secs_f64());
    }
    let log = RaftLog::open(&data.log()).expect("log");
    let sm = StateMachine::open(&dir.path().join("replayed")).expect("sm");
    let t = Instant::now();
    let mut batch = Vec::with_capacity(65536);
    let mut n = 0u64;
    log.for_each_record(1, None, |index, rec| {
        batch.push((index, rec?));
        if batch.len() == 65536 {
            sm.apply(&batch)?;
            n += batch.len() as u64;
            batch.clear();
        }
        Ok(())
    })
    .expect("replay");
    sm.apply(&batch).expect("apply");
    n += batch.len() as u64;
    sm.flush().expect("flush");
    let s = t.elapsed().as_secs_f64();
    println!("| replay (read + check + decode + apply) | {n} records | {s:.2} s | {:.0} records/s |", n as f64 / s);
}

fn time_cmd(cmd: &mut Command) -> f64 {
    let t = Instant::now();
    let o = cmd.output().expect("run");
    let s = t.elapsed().as_secs_f64();
    if !o.status.success() {
        panic!("{:?} failed: {}{}", cmd, String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    }
    s
}

fn make_tree(root: &Path, keys: u64) -> PathBuf {
    let pki = root.join("pki");
    for d in ["minions", "minions_pre", "minions_rejected", "minions_denied"] {
        std::fs::create_dir_all(pki.join(d)).expect("mkdir");
    }
    for i in 0..keys {
        let d = match i % 10 {
            0..=6 => "minions",
            7 | 8 => "minions_pre",
            _ => "minions_rejected",
        };
        std::fs::write(pki.join(d).join(format!("minion-{i:08}")), fake_pub(i)).expect("write");
    }
    let conf = root.join("conf");
    std::fs::create_dir_all(&conf).expect("mkdir");
    // The reference's runner client writes job files under cachedir/proc.
    std::fs::create_dir_all(root.join("cache/proc")).expect("mkdir");
    let r = root.display();
    // Salt's default mmap geometry (1,000,000 slots) fits 100k keys as Salt sizes it.
    std::fs::write(
        conf.join("master"),
        format!("root_dir: {r}\npki_dir: {r}/pki\ncachedir: {r}/cache\nsock_dir: {r}/sock\nhalite_data_dir: {r}/data\nlog_file: {r}/log\nuser: root\nkeys.cache_driver: localfs_key\n"),
    )
    .expect("conf");
    conf
}

fn set_mmap(conf: &Path) {
    let p = conf.join("master");
    let s = std::fs::read_to_string(&p).expect("read").replace("keys.cache_driver: localfs_key", "keys.cache_driver: mmap_key");
    std::fs::write(p, s).expect("write");
}

fn migrate(keys: u64, reference: Option<PathBuf>) {
    let halite = std::env::current_exe().expect("exe").parent().expect("dir").to_path_buf();
    println!("| implementation | operation | keys | seconds |");
    println!("|---|---|---|---|");
    let mut runs = vec![("Halite", halite)];
    if let Some(venv) = reference {
        runs.push(("Salt 3008.5", venv.join("bin")));
    }
    for (name, bin) in runs {
        // Each implementation gets its own copy of the same tree.
        let dir = tempfile::tempdir().expect("tmp");
        let conf = make_tree(dir.path(), keys);
        let c = conf.display().to_string();
        let step = |label: &str, tool: &str, args: &[&str]| {
            let s = time_cmd(Command::new(bin.join(tool)).arg("-c").arg(&c).args(args));
            println!("| {name} | {label} | {keys} | {s:.3} |");
        };
        step("salt-key -L (localfs_key)", "salt-key", &["-L", "--out", "json"]);
        // Halite's salt-run changes a stopped master's log only when told (`--offline`).
        let migrate: &[&str] = if name == "Halite" { &["--offline", "pki.migrate_to_mmap"] } else { &["pki.migrate_to_mmap"] };
        step("pki.migrate_to_mmap", "salt-run", migrate);
        set_mmap(&conf);
        step("salt-key -L (mmap_key)", "salt-key", &["-L", "--out", "json"]);
    }
}
