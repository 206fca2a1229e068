//! The fixtures every end-to-end test shares.
//!
//! - [`Proc`]: a child process that leads its own process group. Dropping it kills the
//!   whole group, also when the test panics (a test that needs a clean shutdown calls
//!   [`Proc::stop`]: SIGTERM, then SIGKILL); a failing test prints the tail of each of its
//!   processes' logs. It is the only way a test starts a long-running process.
//! - [`run`]: one tool invocation with a time limit. An invocation past its limit is
//!   killed (with anything it started) and the test fails with what it printed. It is the
//!   only way a test runs a command to completion.
//! - [`Env`]: a temp root holding one master's config, keys, data, roots and logs. Every
//!   path the master or a tool could resolve lies inside it, so no test reads or writes
//!   the host's `/etc/salt`, `/var/...` or `/srv/...`.
//! - [`loopback`]: addresses on 127.0.0.0/8 that belong to one test alone, with
//!   [`port_free_on`] for ports: tests run in parallel (one thread per core) and never
//!   share an address, a port or a directory.
//! - Starting masters, real salt-minion 3008.5 processes (the reference venv from
//!   `scripts/setup-reference.sh`) and `halite-swarm`, and [`wait_for`] a condition.
//!
//! Children are also given `PR_SET_PDEATHSIG`, so they die with the thread that started
//! them if the test binary itself is killed: start processes from the test's own thread.
//! Values that own processes drop them before their directories (fields drop first to
//! last, but the bindings of a destructured tuple last to first).
//!
//! | file | holds |
//! |---|---|
//! | `process.rs` | [`Proc`], [`run`], [`Lines`], [`wait_for`] |
//! | `net.rs` | [`loopback`], [`port_free_on`] |
//! | `env.rs` | [`Env`] and the files a test places in it |
//! | `masters.rs` | starting masters, [`Running`], [`Cluster`] |
//! | `minions.rs` | real salt-minions, [`Served`], `halite-swarm` |
//! | `hand.rs` | [`WireMinion`]: requests made by hand over the wire |
//! | `proxy.rs` | [`Proxy`], [`Mesh`]: fault-injecting forwarders between cluster members |
//! | `history.rs` | [`history::History`]: a run's client operations and faults, as JSON lines |
//! | `checker.rs` | [`checker::check`]: the verdict on a history (pure, unit-tested) |

#![allow(dead_code, unused_imports)] // each test module uses a part of the fixtures

pub mod checker;
mod env;
mod hand;
pub mod history;
mod masters;
mod minions;
mod net;
mod process;
mod disk;
mod proxy;

pub use env::*;
pub use hand::*;
pub use masters::*;
pub use minions::*;
pub use net::*;
pub use process::*;
pub use disk::*;
pub use proxy::*;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub const SALT: &str = env!("CARGO_BIN_EXE_salt");
pub const SALT_KEY: &str = env!("CARGO_BIN_EXE_salt-key");
pub const SALT_RUN: &str = env!("CARGO_BIN_EXE_salt-run");
pub const CTL: &str = env!("CARGO_BIN_EXE_halite-ctl");
pub const SWARM: &str = env!("CARGO_BIN_EXE_halite-swarm");

/// How long one tool invocation may take unless the test says otherwise.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// Files written by the real Salt 3008.5.
pub fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/salt-3008.5")
}

/// The workspace's binaries of other packages (`salt-master`), next to ours.
pub fn sibling_bin(name: &str) -> PathBuf {
    let p = Path::new(SALT_KEY).parent().expect("bin dir").join(name);
    assert!(p.exists(), "{} is not built: build the workspace's binaries first (cargo build --workspace --bins; scripts/test.sh does)", p.display());
    p
}

/// The `salt-api` binary (package `halite-api`, built by `cargo build --workspace --bins`).
pub fn salt_api() -> PathBuf {
    sibling_bin("salt-api")
}

/// The reference Salt 3008.5 venv (`scripts/setup-reference.sh` prints its path).
pub fn reference_venv() -> PathBuf {
    let p = std::env::var_os("HALITE_SALT_VENV").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("HALITE_CACHE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/halite"));
        cache.join("venv-salt-3008.5")
    });
    assert!(p.join(".halite-ready").exists(), "the reference Salt 3008.5 venv is missing at {}: run scripts/setup-reference.sh (scripts/test.sh does)", p.display());
    p
}
