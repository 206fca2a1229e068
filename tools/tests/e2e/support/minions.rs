//! Real salt-minion 3008.5 processes, and `halite-swarm`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::Value;

use super::*;

/// Writes a minion config under `root/<id>/` and starts an unmodified salt-minion 3008.5
/// (its output in `root/<id>/out.log`, at info level). `extra` is more config, typically
/// `master:` and `master_port:`. Stopping it kills it (with its forked helpers) at once:
/// salt-minion takes seconds to shut down on SIGTERM and no test needs it to.
pub fn start_minion(root: &Path, id: &str, extra: &str) -> Proc {
    let venv = reference_venv();
    let r = root.join(id);
    std::fs::create_dir_all(r.join("conf")).expect("minion conf dir");
    let rd = r.display();
    std::fs::write(
        r.join("conf/minion"),
        format!(
            "id: {id}\nroot_dir: {rd}\npki_dir: {rd}/pki\ncachedir: {rd}/cache\nsock_dir: {rd}/sock\npidfile: {rd}/minion.pid\n\
             log_file: {rd}/minion.log\nacceptance_wait_time: 1\nrandom_reauth_delay: 0\nmultiprocessing: False\nuser: root\nauth_timeout: 3\n\
             file_roots:\n  base:\n    - {rd}/srv/salt\npillar_roots:\n  base:\n    - {rd}/srv/pillar\nenable_fqdns_grains: False\n{extra}"
        ),
    )
    .expect("write minion config");
    Proc::spawn_logged(&format!("salt-minion {id}"), Command::new(venv.join("bin/salt-minion")).args(["-c", &r.join("conf").display().to_string(), "-l", "info"]), &r.join("out.log")).with_grace(Duration::ZERO)
}

/// A minion's output so far.
pub fn minion_log(root: &Path, id: &str) -> String {
    std::fs::read_to_string(root.join(id).join("out.log")).unwrap_or_default()
}

/// How often a minion's log holds `needle`.
pub fn minion_log_count(root: &Path, id: &str, needle: &str) -> usize {
    minion_log(root, id).matches(needle).count()
}

/// Whether `id` answers `test.ping` through `env`'s master within `secs`.
pub fn ping_via(env: &Env, id: &str, secs: u64) -> bool {
    env.salt_json(&[id, "test.ping"], secs) == serde_json::json!({ id: true })
}

/// Waits until the minion `id` under `root` says it is ready to receive requests (it has
/// signed in and subscribed to the publisher) for the `n`th time since it started.
pub fn wait_minion_ready(root: &Path, id: &str, n: usize, secs: u64) {
    wait_for(&format!("{id} to be ready to receive requests"), secs, || minion_log_count(root, id, "Minion is ready to receive requests!") >= n);
}

/// Waits until `id` answers `test.ping` through `env`'s master.
pub fn wait_ping(env: &Env, id: &str, secs: u64) {
    wait_for(&format!("{id} to answer test.ping through {}", env.root.display()), secs, || ping_via(env, id, 3));
}

/// How a [`Served`] minion's key gets accepted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// `auto_accept: True`.
    Auto,
    /// Pending first, then `salt-key -a` through the running master.
    Operator,
}

/// A master on an address of its own with one real salt-minion, `m1`, signed in and
/// answering `test.ping`; the minion's files are under `env.root/m1`. (Fields drop in
/// order: the processes are killed before their directory goes.)
pub struct Served {
    pub minion: Proc,
    pub master: Proc,
    pub env: Env,
}

pub const MINION: &str = "m1";

impl Served {
    /// `master_extra` and `minion_extra` are more config for each side.
    pub fn start(accept: Accept, master_extra: &str, minion_extra: &str) -> Served {
        Served::start_on(&one_ip(), accept, master_extra, minion_extra)
    }

    /// [`Served::start`] on `ip` (for a test that picks a free port on it first).
    pub fn start_on(ip: &str, accept: Accept, master_extra: &str, minion_extra: &str) -> Served {
        let auto = if accept == Accept::Auto { "auto_accept: True\n" } else { "" };
        let env = Env::master(ip, "localfs_key", &format!("{auto}{master_extra}"));
        let master = start_master(&env);
        let minion = start_minion(&env.root, MINION, &format!("master: {}\nmaster_port: {}\n{minion_extra}", env.ip, env.ret));
        if accept == Accept::Operator {
            wait_for("m1's key to be pending", 90, || env.ids("minions_pre") == [MINION]);
            env.ok(SALT_KEY, &["-a", MINION, "-y"]);
        }
        wait_minion_ready(&env.root, MINION, 1, 90);
        wait_ping(&env, MINION, 90);
        Served { minion, master, env }
    }

    /// The minion's directory (config, pki, cache, out.log).
    pub fn minion_root(&self) -> PathBuf {
        self.env.root.join(MINION)
    }

    /// The minion's output so far.
    pub fn minion_log(&self) -> String {
        minion_log(&self.env.root, MINION)
    }
}

// ---------------------------------------------------------------------------------------
// halite-swarm (simulated minions, built on the master's own crypto: never the only
// minion of a test that claims interoperability).

static SWARMS: AtomicU32 = AtomicU32::new(0);

/// Runs `halite-swarm` against `env`'s master until its `ready` line; returns the process
/// and the lines read up to it. Keys are cached in `env.root/swarm-keys`.
pub fn start_swarm(env: &Env, count: usize, more: &[&str]) -> (Proc, Lines) {
    let mut cmd = Command::new(SWARM);
    cmd.args(["--master", &env.ip, "--port", &env.ret.to_string(), "--count", &count.to_string()])
        .arg("--key-dir")
        .arg(env.root.join("swarm-keys"))
        .args(more);
    let n = SWARMS.fetch_add(1, Ordering::Relaxed);
    let (p, mut lines) = Proc::spawn_lines("halite-swarm", &mut cmd, &env.root.join(format!("swarm-{n}.log")));
    lines.wait("halite-swarm's ready line", 120, |l| l.iter().any(|l| l.contains("\"ready\"")));
    (p, lines)
}

/// The swarm's JSON line for `event`.
pub fn swarm_event(lines: &Lines, event: &str) -> Value {
    lines.seen().iter().map(|l| json(l)).find(|v| v["event"] == event).unwrap_or_else(|| panic!("no {event} line in {:?}", lines.seen()))
}
