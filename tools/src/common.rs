//! What every tool shares: logging, loading the config, errors and exit codes.

use std::fmt::Display;
use std::io::IsTerminal;
use std::path::Path;

use halite_master::MasterConfig;

/// A failure to report on stderr with an exit code (Salt's tools exit non-zero with a
/// one-line message).
#[derive(Debug)]
pub struct Failure {
    pub msg: String,
    pub code: i32,
}

impl Failure {
    pub fn new(msg: impl Into<String>, code: i32) -> Self {
        Failure { msg: msg.into(), code }
    }
}

impl<E: Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure { msg: e.to_string(), code: 1 }
    }
}

pub type Result<T, E = Failure> = std::result::Result<T, E>;

/// Logs to stderr at `level` (Salt's names: garbage, trace, debug, info, warning, error,
/// critical, quiet). `HALITE_LOG` overrides it with a tracing filter.
pub fn init_logging(level: &str) {
    let lvl = halite_master::config::tracing_level(level);
    let filter = std::env::var("HALITE_LOG").unwrap_or_else(|_| format!("{lvl},raft=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

/// Loads the master config from `-c CONFIG_DIR`.
pub fn load_config(dir: &Path) -> Result<MasterConfig> {
    MasterConfig::load(dir).map_err(|e| Failure::new(format!("Error: {e}"), 2))
}

/// Runs a tool's main, printing a failure and exiting with its code.
pub fn run(f: impl FnOnce() -> Result<()>) -> ! {
    // Like any Unix filter: `salt-key -L | head` ends quietly instead of panicking.
    // SAFETY: setting the default disposition of SIGPIPE before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    match f() {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            if !e.msg.is_empty() {
                eprintln!("{}", e.msg);
            }
            std::process::exit(e.code)
        }
    }
}

pub use halite_master::pki::thousands;

/// Progress of a long operation: a bar on a terminal, log lines otherwise.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    label: String,
    total: u64,
    last_logged: u64,
}

impl Progress {
    pub fn new(label: &str, total: u64) -> Self {
        let bar = if std::io::stderr().is_terminal() {
            let b = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})") {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_message(label.to_string());
            Some(b)
        } else {
            None
        };
        tracing::info!(total, "{label}: starting");
        Progress { bar, label: label.to_string(), total, last_logged: 0 }
    }

    pub fn set(&mut self, done: u64) {
        if let Some(b) = &self.bar {
            b.set_position(done);
        } else if self.total > 0 && done > self.last_logged && (done >= self.total || (done - self.last_logged) * 10 >= self.total) {
            self.last_logged = done;
            tracing::info!(done, total = self.total, "{}: {}%", self.label, done * 100 / self.total);
        }
    }

    pub fn finish(self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        tracing::info!(total = self.total, "{}: done", self.label);
    }
}


