//! `salt-master -c CONFIG_DIR [-l LEVEL] [-d]`: the Halite master daemon;
//! `salt-master -c CONFIG_DIR --check-config [--out json]`: what it does with each option.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Parser;

/// The Rust heap is mimalloc's (why, and its settings: `halite_master::alloc`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(name = "salt-master", about = "The Halite Salt master", version)]
struct Args {
    /// The Salt configuration directory (holding `master` and `master.d/`).
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    config_dir: PathBuf,
    /// Console log level (garbage, trace, debug, info, warning, error, critical, quiet).
    #[arg(short = 'l', long = "log-level")]
    log_level: Option<String>,
    /// Run in the background.
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// Print what Halite does with each option of the config and exit (1 when an option
    /// is set to a value Halite does not implement); opens no log and binds no port.
    #[arg(long = "check-config")]
    check_config: bool,
    /// The outputter of `--check-config`: nested (Salt's default) or json.
    #[arg(long = "out", value_parser = ["nested", "json"], default_value = "nested")]
    out: String,
}

fn main() {
    halite_master::alloc::configure();
    // Two malloc arenas instead of glibc's 8 per core: the handler threads allocate
    // little and briefly, and every extra arena keeps its own free memory resident.
    // SAFETY: mallopt only tunes the allocator; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    let args = Args::parse();
    let cfg = match halite_master::MasterConfig::load(&args.config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("Error: {e}");
            std::process::exit(2);
        }
    };
    if args.check_config {
        let report = halite_master::config_keys::Report::of(&cfg, halite_master::config_keys::current_user());
        match args.out.as_str() {
            "json" => println!("{}", serde_json::to_string_pretty(&report.json()).unwrap_or_default()),
            _ => print!("{}", report.text()),
        }
        std::process::exit(if report.not_implemented().next().is_some() { 1 } else { 0 });
    }
    let lvl = halite_master::config::tracing_level(args.log_level.as_deref().unwrap_or(&cfg.log_level));
    let filter = std::env::var("HALITE_LOG").unwrap_or_else(|_| format!("{lvl},raft=warn"));
    if args.daemon {
        // SAFETY: daemon(3) before any thread exists; it forks and detaches.
        if unsafe { libc::daemon(0, 0) } != 0 {
            eprintln!("Error: cannot daemonize: {}", std::io::Error::last_os_error());
            std::process::exit(1);
        }
    }
    let log_to_file = args.daemon || !std::io::stderr().is_terminal();
    let file = if log_to_file && !cfg.log_file.contains("://") {
        if let Some(d) = std::path::Path::new(&cfg.log_file).parent() {
            let _ = std::fs::create_dir_all(d);
        }
        std::fs::OpenOptions::new().create(true).append(true).open(&cfg.log_file).ok()
    } else {
        None
    };
    let builder = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::new(filter)).with_target(false);
    match file {
        Some(f) if args.daemon => builder.with_ansi(false).with_writer(std::sync::Mutex::new(f)).init(),
        _ => builder.with_writer(std::io::stderr).with_ansi(std::io::stderr().is_terminal()).init(),
    }
    // Each option set to a value Halite does not implement, or unknown, is named once.
    halite_master::config_keys::warn_at_start(&cfg);
    if let Err(e) = halite_master::daemon::run(cfg) {
        tracing::error!("{e}");
        eprintln!("Error: {e}");
        std::process::exit(1);
    }
}
