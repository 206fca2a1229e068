//! The local admin socket: how `salt`, `salt-key` and `salt-run` talk to a running master.
//!
//! A Unix socket at `<sock_dir>/halite-admin.sock`, mode 0600 in a 0700 directory (root
//! only, like the reference's IPC sockets). One JSON object per line each way:
//!
//! | request `cmd` | fields | answer |
//! |---|---|---|
//! | `key.list` | | `{"listing": {minions_pre, minions_rejected, minions, minions_denied}}` |
//! | `key.select` | `action` (accept/reject/delete), `match`, `include_accepted`, `include_rejected`, `include_denied` | `{"selected": {bucket: [ids]}}` |
//! | `key.apply` | `action`, `selected` | `{"done": [ids]}` (after commit) |
//! | `publish` | `tgt`, `tgt_type`, `fun`, `arg` (list), `kwarg` (map) | `{"jid", "minions", "missing"}` |
//! | `job.returns` | `jid` | `{"returns": {id: return load}}` |
//! | `job.list` | | `{"jobs": {jid: {fun, tgt, minions}}}` |
//! | `runner` | `fun` (jobs.list_jobs, jobs.lookup_jid + `jid`, cluster.members, pki.migrate_to_mmap) | `{"return": ...}` |
//! | `events.watch` | | from then on, one `{"tag", "data"}` line per event on the master bus |
//!
//! Failures answer `{"error": "..."}`.

use std::path::{Path, PathBuf};

use serde_json::{json, Value as J};

pub const SOCKET_NAME: &str = "halite-admin.sock";

pub fn socket_path(sock_dir: &Path) -> PathBuf {
    sock_dir.join(SOCKET_NAME)
}

/// A blocking client for the tools.
pub struct AdminClient {
    stream: std::io::BufReader<std::os::unix::net::UnixStream>,
}

impl AdminClient {
    /// Connects to a running master; `None` when no master is listening.
    pub fn connect(sock_dir: &Path) -> Option<AdminClient> {
        let s = std::os::unix::net::UnixStream::connect(socket_path(sock_dir)).ok()?;
        Some(AdminClient { stream: std::io::BufReader::new(s) })
    }

    /// Sends one request and reads its answer.
    pub fn call(&mut self, req: &J) -> Result<J, String> {
        use std::io::{BufRead, Write};
        let mut line = req.to_string();
        line.push('\n');
        self.stream.get_mut().write_all(line.as_bytes()).map_err(|e| format!("admin socket: {e}"))?;
        let mut answer = String::new();
        self.stream.read_line(&mut answer).map_err(|e| format!("admin socket: {e}"))?;
        if answer.is_empty() {
            return Err("the master closed the admin connection".into());
        }
        let v: J = serde_json::from_str(&answer).map_err(|e| format!("admin socket: bad answer: {e}"))?;
        if let Some(e) = v.get("error").and_then(J::as_str) {
            return Err(e.to_string());
        }
        Ok(v)
    }
}

impl AdminClient {
    /// Turns this connection into an event stream: yields `{"tag", "data"}` objects until
    /// the master goes away.
    pub fn watch(mut self) -> Result<impl Iterator<Item = J>, String> {
        use std::io::{BufRead, Write};
        self.stream.get_mut().write_all(b"{\"cmd\":\"events.watch\"}\n").map_err(|e| format!("admin socket: {e}"))?;
        Ok(self.stream.lines().map_while(Result::ok).filter_map(|l| serde_json::from_str(&l).ok()))
    }
}

/// An error answer.
pub fn error(msg: impl std::fmt::Display) -> J {
    json!({ "error": msg.to_string() })
}
