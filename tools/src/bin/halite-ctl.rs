//! `halite-ctl`: Halite's recovery tool. Works on a stopped master's data directory
//! (`halite_data_dir` of the config given with `-c`), under its lock: refused while a
//! master runs or starts there (`halite_tools::offline`); a master started meanwhile
//! waits for it. `member-key` and `peer-key` touch only key files, never the directory.

use std::io::Read as _;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use halite_storage::format::RecordKind;
use halite_tools::common::{init_logging, load_config, run, Failure, Result};
use halite_tools::ctl;

#[derive(Parser, Debug)]
#[command(name = "halite-ctl", about = "Halite recovery tool: dump, verify, replay, rebuild views, snapshot, compact, import", version)]
struct Args {
    /// The Salt configuration directory (the master's `halite_data_dir` is used).
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    config_dir: PathBuf,
    #[arg(short = 'l', long = "log-level", default_value = "info")]
    log_level: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Print log records.
    Dump {
        /// First log index.
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// Last log index (inclusive).
        #[arg(long)]
        to: Option<u64>,
        /// Only records of this kind (key_set, job_published, job_return, grains_report,
        /// roots_blob, roots_tombstone, roots_stage, roots_sync, aes_key_rotation, import_marker, ...
        #[arg(long)]
        kind: Option<String>,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check every checksum of the log and the state machine; with --views, the key view too.
    Verify {
        #[arg(long)]
        views: bool,
    },
    /// Rebuild the state machine from the log, then the views.
    Replay,
    /// Rebuild the key view and the roots trees from the state machine.
    RebuildViews,
    /// Build a snapshot of the state machine at its applied index (the log is kept).
    Snapshot,
    /// Snapshot the state machine at its applied index and compact the log through it.
    Compact {
        /// Only if the log exceeds cluster_max_log_size or halite_log_max_bytes.
        #[arg(long)]
        if_needed: bool,
    },
    /// Print this cluster member's public key (PEM), making its key pair
    /// (`pki_dir/member.pem`) and its own `cluster_pki_dir/peers/<interface>.pub` if need
    /// be: what the other founders of a cluster on isolated filesystems install with
    /// `peer-key`.
    MemberKey,
    /// Install founding member NAME's public key (a PEM file, `-` for stdin, as
    /// `member-key` prints it) as `cluster_pki_dir/peers/NAME.pub`. A cluster is founded
    /// only once every founder's key is there.
    PeerKey {
        /// The member's name, as `cluster_peers` lists it.
        name: String,
        /// The PEM file (`-`: stdin).
        file: PathBuf,
    },
    /// Import a shared-filesystem cluster tree (cluster_pki_dir, cachedir jobs, file_roots,
    /// pillar_roots from the config, or the paths given) as records.
    ImportShared {
        #[arg(long)]
        pki_dir: Option<PathBuf>,
        #[arg(long)]
        cachedir: Option<PathBuf>,
        /// A shared file_roots directory, `ENV=DIR` (repeatable; replaces the config's).
        #[arg(long = "file-root", value_name = "ENV=DIR")]
        file_roots: Vec<String>,
        /// A shared pillar_roots directory, `ENV=DIR` (repeatable; replaces the config's).
        #[arg(long = "pillar-root", value_name = "ENV=DIR")]
        pillar_roots: Vec<String>,
    },
}

fn main() {
    let args = Args::parse();
    init_logging(&args.log_level);
    run(|| real_main(args))
}

/// A member key file refused (its own words, without the node's "record refused").
fn key_failure(e: halite_replication::NodeError) -> Failure {
    match e {
        halite_replication::NodeError::Refused(why) => Failure::new(format!("Error: {why}"), 1),
        e => Failure::new(format!("Error: {e}"), 1),
    }
}

/// The verb's name, for a verb that opens the data directory.
fn data_verb(cmd: &Cmd) -> Option<&'static str> {
    Some(match cmd {
        Cmd::Dump { .. } => "dump",
        Cmd::Verify { .. } => "verify",
        Cmd::Replay => "replay",
        Cmd::RebuildViews => "rebuild-views",
        Cmd::Snapshot => "snapshot",
        Cmd::Compact { .. } => "compact",
        Cmd::ImportShared { .. } => "import-shared",
        Cmd::MemberKey | Cmd::PeerKey { .. } => return None,
    })
}

fn real_main(args: Args) -> Result<()> {
    let cfg = load_config(&args.config_dir)?;
    // Held until the verb is done (the last binding dropped).
    let _held = match data_verb(&args.cmd) {
        Some(v) => Some(halite_tools::offline::hold(&cfg, &format!("halite-ctl {v}"), None)?),
        None => None,
    };
    match args.cmd {
        Cmd::Dump { from, to, kind, json } => {
            let kind = match kind {
                None => None,
                Some(k) => Some(RecordKind::from_name(&k).ok_or_else(|| Failure::new(format!("unknown record kind {k:?}"), 2))?),
            };
            let stdout = std::io::stdout();
            let mut lock = stdout.lock();
            ctl::dump(&halite_master::store::data_dir(&cfg).log(), from, to, kind, json, &mut lock)?;
        }
        Cmd::Verify { views } => {
            let rep = ctl::verify(&cfg, views)?;
            for n in &rep.notes {
                println!("note: {n}");
            }
            println!("{} entries, {} records checked", rep.entries, rep.records);
            if rep.problems.is_empty() {
                println!("OK");
            } else {
                for p in &rep.problems {
                    println!("BAD: {p}");
                }
                return Err(Failure::new(format!("verify found {} problem(s)", rep.problems.len()), 1));
            }
        }
        Cmd::Replay => {
            let n = ctl::replay(&cfg)?;
            println!("Replayed {n} records; views rebuilt.");
        }
        Cmd::RebuildViews => println!("{}", ctl::rebuild_views(&cfg)?),
        Cmd::Snapshot => println!("{}", halite_tools::snapshots::snapshot(&cfg)?),
        Cmd::Compact { if_needed } => println!("{}", halite_tools::snapshots::compact(&cfg, if_needed)?),
        Cmd::MemberKey => {
            let pem = halite_master::memberkey::own_public_pem(&cfg).map_err(key_failure)?;
            print!("{}", String::from_utf8_lossy(&pem));
        }
        Cmd::PeerKey { name, file } => {
            let mut pem = Vec::new();
            let read = if file.as_os_str() == "-" {
                std::io::Read::take(std::io::stdin(), 64 << 10).read_to_end(&mut pem)
            } else {
                std::fs::File::open(&file).and_then(|f| std::io::Read::take(f, 64 << 10).read_to_end(&mut pem))
            };
            read.map_err(|e| Failure::new(format!("Error: reading {}: {e}", file.display()), 2))?;
            let path = halite_master::memberkey::install_peer_key(&cfg, &name, &pem).map_err(key_failure)?;
            println!("{name}: {}", path.display());
        }
        Cmd::ImportShared { pki_dir, cachedir, file_roots, pillar_roots } => {
            let mut tree = ctl::SharedTree::from_config(&cfg);
            let parse = |list: &[String]| -> Result<std::collections::BTreeMap<String, Vec<PathBuf>>> {
                let mut m: std::collections::BTreeMap<String, Vec<PathBuf>> = Default::default();
                for s in list {
                    let (env, dir) = s.split_once('=').ok_or_else(|| Failure::new(format!("expected ENV=DIR, got {s:?}"), 2))?;
                    m.entry(env.to_string()).or_default().push(PathBuf::from(dir));
                }
                Ok(m)
            };
            if !file_roots.is_empty() {
                tree.file_roots = parse(&file_roots)?;
            }
            if !pillar_roots.is_empty() {
                tree.pillar_roots = parse(&pillar_roots)?;
            }
            if let Some(p) = pki_dir {
                tree.pki_dir = p;
            }
            if let Some(c) = cachedir {
                tree.cachedir = Some(c);
            }
            let counts = ctl::import_shared(&cfg, &tree)?;
            println!("Imported from {}:", tree.pki_dir.display());
            for (k, v) in counts {
                println!("  {k}: {v}");
            }
        }
    }
    Ok(())
}
