//! `halite-swarm`: simulated minions for the end-to-end benchmarks (see
//! `halite_tools::swarm`). JSON lines on stdout, logs on stderr.
//!
//! ```text
//! halite-swarm --master 127.0.0.1 --port 4506 --count 500 --master-pid $(cat master.pid)
//! ```

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use halite_tools::common::{init_logging, run, Failure};
use halite_tools::swarm::{self, Options};

/// mimalloc, as the master: with glibc's heap, `malloc` and `free` were a fifth of the
/// swarm's CPU in a `test.ping` loop, CPU the master it measures shares the machine
/// with (docs/benchmarks.md, "Returns"). mimalloc's
/// own defaults: the swarm's memory is not what is measured.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(name = "halite-swarm", about = "Many simulated salt-minions in one process, for load tests", version)]
struct Args {
    /// The master's address; several, comma separated (cluster members): minion n
    /// signs in to the (n mod count)-th.
    #[arg(long, default_value = "127.0.0.1", value_delimiter = ',')]
    master: Vec<String>,
    /// The master's request port (`ret_port`).
    #[arg(long, default_value_t = 4506)]
    port: u16,
    /// How many minions.
    #[arg(long, default_value_t = 50)]
    count: usize,
    /// Minion ids are PREFIX0, PREFIX1, ...
    #[arg(long, default_value = "swarm-")]
    prefix: String,
    /// The first minion's number (ids PREFIX<first>...): several swarm processes, each
    /// under the open-file limit, make one fleet.
    #[arg(long, default_value_t = 0)]
    first: usize,
    /// Use only this many key pairs (minion n takes key n mod N): the master does the
    /// same work per sign-in, and tens of thousands of keys need not be generated.
    #[arg(long)]
    distinct_keys: Option<usize>,
    /// Where the minion key pairs are cached (default: ~/.cache/halite/swarm-keys).
    #[arg(long)]
    key_dir: Option<PathBuf>,
    /// The master's PID: report the CPU time and memory of its process tree.
    #[arg(long)]
    master_pid: Option<u32>,
    /// Seconds to wait for an `_auth` reply before resending (salt-minion: 5).
    #[arg(long, default_value_t = 5)]
    auth_timeout: u64,
    /// `_auth` sends per sign-in before giving up (salt-minion: 7).
    #[arg(long, default_value_t = 7)]
    auth_tries: u32,
    /// Seconds between sign-ins while the key is pending (salt-minion: 10).
    #[arg(long, default_value_t = 10)]
    acceptance_wait: u64,
    /// Upper bound, in seconds, of the random wait before a minion starts over after a
    /// failed sign-in (salt-minion's `random_reauth_delay`: 10).
    #[arg(long, default_value_t = 10)]
    random_reauth_delay: u64,
    /// Exit after this many publishes were answered by every minion.
    #[arg(long)]
    jobs: Option<usize>,
    /// Hold the first N publishes each minion matches, then send all their returns at
    /// once and print a `blast` line: the master's rate of acknowledged returns without
    /// the swarm's own work on the publishes in the window. Exits after it.
    #[arg(long)]
    blast: Option<usize>,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    #[arg(long = "log-level", default_value = "warning")]
    log_level: String,
}

fn main() {
    let args = Args::parse();
    init_logging(&args.log_level);
    run(|| {
        let key_dir = match args.key_dir {
            Some(d) => d,
            None => PathBuf::from(std::env::var_os("HOME").ok_or_else(|| Failure::new("HOME is not set; pass --key-dir", 2))?).join(".cache/halite/swarm-keys"),
        };
        let opts = Options {
            masters: args.master,
            ret_port: args.port,
            count: args.count,
            first: args.first,
            distinct_keys: args.distinct_keys,
            prefix: args.prefix,
            key_dir,
            master_pid: args.master_pid,
            auth_timeout: Duration::from_secs(args.auth_timeout.max(1)),
            auth_tries: args.auth_tries.max(1),
            acceptance_wait: Duration::from_secs(args.acceptance_wait),
            random_reauth_delay: Duration::from_secs(args.random_reauth_delay.max(1)),
            jobs: args.jobs,
            blast: args.blast,
        };
        let mut rt = tokio::runtime::Builder::new_multi_thread();
        if let Some(t) = args.threads {
            rt.worker_threads(t.max(1));
        }
        let rt = rt.enable_all().build().map_err(|e| Failure::new(e.to_string(), 1))?;
        rt.block_on(swarm::run(opts))
    })
}
