//! `halite-bench`: storage benchmarks that need a whole node or whole processes.
//!
//! ```text
//! halite-bench commit  [--total N]            committed records/s at group sizes 1, 16, 256
//! halite-bench apply   [--total N]            state-machine apply throughput
//! halite-bench replay  [--total N]            log → state machine replay (records/s)
//! halite-bench migrate [--keys N] [--reference VENV]
//!                                              pki.migrate_to_mmap and salt-key -L, Halite's
//!                                              binaries and (with --reference) Salt 3008.5's
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

#[derive(Subcommand)]
enum Cmd {
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
    },
    Replay {
        #[arg(long, default_value_t = 1_000_000)]
        total: u64,
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
    Record::KeySet(KeySet { id: format!("minion-{i:08}"), state: KeyState::Pending, pub_key: fake_pub(i).into_bytes(), time_ns: i, expect: None })
}

/// A small record (what replay targets are stated for): a key delete.
fn small(i: u64) -> Record {
    Record::KeySet(KeySet { id: format!("m{i}"), state: KeyState::Deleted, pub_key: Vec::new(), time_ns: i, expect: None })
}

fn views(dir: &Path, kind: &str) -> Views {
    let keys: Box<dyn halite_storage::keys::KeyView> = match kind {
        "localfs" => Box::new(LocalfsKeys::open(&dir.join("pki")).expect("view")),
        _ => Box::new(MmapKeys::open(&dir.join("pki"), Geometry { size: 1_000_000, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 30 }).expect("view")),
    };
    Views::new(keys, RootsMaterialiser::new(RootsDirs::default()))
}

fn main() {
    let args = Args::parse();
    match args.cmd {
        Cmd::Commit { total, threads, view, groups } => commit(total, threads, &view, &groups),
        Cmd::Apply { total } => apply(total),
        Cmd::Replay { total } => replay(total),
        Cmd::Migrate { keys, reference } => migrate(keys, reference),
    }
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
        step("pki.migrate_to_mmap", "salt-run", &["pki.migrate_to_mmap"]);
        set_mmap(&conf);
        step("salt-key -L (mmap_key)", "salt-key", &["-L", "--out", "json"]);
    }
}
