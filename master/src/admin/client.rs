//! The local admin socket: how `salt`, `salt-key` and `salt-run` talk to a running master.
//!
//! A Unix socket at `<sock_dir>/halite-admin.sock`, mode 0600 in a 0700 directory (root
//! only, like the reference's IPC sockets; 0666 in 0711 when `publisher_acl` names
//! users, who may then only publish: `crate::daemon::admin`). A publish's `user` (the
//! job's, default `root`) is taken from trusted callers such as salt-api only. One JSON object per line each way:
//!
//! | request `cmd` | fields | answer |
//! |---|---|---|
//! | `key.list` | | `{"listing": {minions_pre, minions_rejected, minions, minions_denied}}` |
//! | `key.select` | `action` (accept/reject/delete), `match`, `include_accepted`, `include_rejected`, `include_denied` | `{"selected": {bucket: [ids]}}` |
//! | `key.apply` | `action`, `selected` | `{"done": [ids], "invalid": [ids]}` (after commit) |
//! | `publish` | `tgt`, `tgt_type` (`range` and `R@` words expanded first, `crate::range`), `fun`, `arg` (list), `kwarg` (map) | `{"jid", "minions", "missing", "unresolved"}` (`unresolved`: every accepted minion expected, `minion_data_cache: False`) |
//! | `job.returns` | `jid` | `{"returns": {id: return load}}` |
//! | `job.list` | | `{"jobs": {jid: {fun, tgt, minions}}}` |
//! | `runner` | `fun`: `jobs.list_jobs`, `jobs.lookup_jid` + `jid`, `cluster.members`, `cluster.ring_info`, `cluster.sync_roots` + `roots`, `cluster.remove_member` + `name`, `cluster.digest`, `pki.migrate_to_mmap`, `mine.get` + `tgt`, `mine_fun`, `tgt_type`; `jobs.list_job`, `jobs.print_job`, `jobs.exit_success`, `manage.present`, `manage.not_present`, `fileserver.*`, `pillar.show_*`, `cache.*` + `arg` (list), `kwarg` (map), bound as Salt binds them; `jobs.active` + `running` (`{minion: saltutil.running return}`); `manage.versions` + `returns` (`{minion: test.version return load or null}`); `state.orchestrate` + `arg`, `kwarg` (`mods`, `saltenv`, `pillar`) → `{master_id, jid, sls, steps}` or `{master_id, jid, sls, errors}` (`jid`: the run's own job) | `{"return": ...}` |
//! | `orchestrate.return` | `jid` (a run's), `return` (`{data, outputter, retcode}`) | `{"return": true}` |
//! | `events.watch` | | from then on, one `{"tag", "data"}` line per event on the master bus |
//! | `job.follow` | `jid`, `timeout` (seconds) | one `{"id", "return"}` line per return as it is committed, then `{"done": true, "missing": [ids]}`; then closed |
//!
//! Failures answer `{"error": "..."}`. What each verb does is in [`crate::admin`]; this
//! file is the wire protocol and the blocking client the tools use.

use std::path::{Path, PathBuf};

use serde_json::Value as J;

use crate::error::{Error, IoContext, Result};

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
    pub fn call(&mut self, req: &J) -> Result<J> {
        use std::io::{BufRead, Write};
        let mut line = req.to_string();
        line.push('\n');
        self.stream.get_mut().write_all(line.as_bytes()).ctx(|| "admin socket".into())?;
        let mut answer = String::new();
        self.stream.read_line(&mut answer).ctx(|| "admin socket".into())?;
        if answer.is_empty() {
            return Err(Error::refused("the master closed the admin connection"));
        }
        let v: J = serde_json::from_str(&answer).map_err(|e| Error::refused(format!("admin socket: bad answer: {e}")))?;
        if let Some(e) = v.get("error").and_then(J::as_str) {
            return Err(Error::refused(e));
        }
        Ok(v)
    }
}

impl AdminClient {
    /// Turns this connection into an event stream: yields `{"tag", "data"}` objects until
    /// the master goes away.
    pub fn watch(mut self) -> Result<impl Iterator<Item = J>> {
        use std::io::{BufRead, Write};
        self.stream.get_mut().write_all(b"{\"cmd\":\"events.watch\"}\n").ctx(|| "admin socket".into())?;
        Ok(self.stream.lines().map_while(Result::ok).filter_map(|l| serde_json::from_str(&l).ok()))
    }
}
