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
//! | `runner` | `fun`: `jobs.list_jobs`, `jobs.lookup_jid` + `jid`, `cluster.members`, `cluster.ring_info`, `cluster.sync_roots` + `roots`, `cluster.remove_member` + `name`, `cluster.digest`, `pki.migrate_to_mmap`, `mine.get` + `tgt`, `mine_fun`, `tgt_type`; `jobs.list_job`, `jobs.print_job`, `jobs.exit_success`, `manage.present`, `manage.not_present`, `fileserver.*`, `git_pillar.update` + `branch`, `repo`, `pillar.show_*`, `cache.*` + `arg` (list), `kwarg` (map), bound as Salt binds them; `jobs.active` + `running` (`{minion: saltutil.running return}`); `manage.versions` + `returns` (`{minion: test.version return load or null}`); `state.orchestrate` + `arg`, `kwarg` (`mods`, `saltenv`, `pillar`), `user` (optional, the run job's; `root`) → `{master_id, jid, sls, steps}` or `{master_id, jid, sls, errors}` (`jid`: the run's own job) | `{"return": ...}` |
//! | `orchestrate.return` | `jid` (a run's), `return` (`{data, outputter, retcode}`) | `{"return": true}` |
//! | `run.start` | `client` (`runner`/`wheel`), `fun`, `fun_args` (list), `user` | `{"jid", "tag"}` (`salt/run/<jid>`, `salt/wheel/<jid>`; the job recorded, `<tag>/new` fired) |
//! | `run.return` | `jid` (a `run.start` job's), `return`, `success` | `{"return": true}` (`<tag>/ret` fired) |
//! | `events.watch` | | from then on, one `{"tag", "data"}` line per event on the master bus |
//! | `job.follow` | `jid`, `timeout` (seconds) | one `{"id", "return"}` line per return as it is committed, then `{"done": true, "missing": [ids]}`; then closed |
//!
//! Failures answer `{"error": "..."}`, with `"kind"` beside it for a refusal a caller
//! acts on (`no_minions_matched`, `unauthorized`: [`Error::kind`], read back by
//! [`Error::from_answer`]). What each verb does is in [`crate::admin`]; this
//! file is the wire protocol and the blocking client the tools use.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value as J;

use crate::error::{Error, IoContext, Result};

pub const SOCKET_NAME: &str = "halite-admin.sock";

/// What a tool says when the master took no request or gave no answer in time (a
/// stalled, stopped or overloaded master): Salt's words for its own request timeout.
pub const NOT_RESPONDING: &str = "Salt request timed out. The master is not responding. You may need to run your command with `--async` in order to bypass the congested event bus. With `--async`, the CLI tool will print the job id (jid) and exit immediately without listening for responses. You can then use `salt-run jobs.lookup_jid` to look up the results of the job in the job cache later.";

pub fn socket_path(sock_dir: &Path) -> PathBuf {
    sock_dir.join(SOCKET_NAME)
}

/// Salt's `request_channel_timeout` default: how long a request to the master waits for
/// its answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a tool waits for the master to answer one admin request when nothing
/// (such as `salt -t`) says: the config's `request_channel_timeout` (seconds, Salt's
/// option for how long a request to the master may take), [`REQUEST_TIMEOUT`] unset.
pub fn request_timeout(cfg: &crate::MasterConfig) -> Duration {
    match cfg.raw.get("request_channel_timeout") {
        Some(v) => v.as_u64().or_else(|| v.as_f64().filter(|s| s.is_finite() && *s > 0.0).map(|s| s.ceil() as u64)).map_or(REQUEST_TIMEOUT, |s| Duration::from_secs(s.max(1))),
        None => REQUEST_TIMEOUT,
    }
}

/// How long past its `-t` a tool lets a request to the master take before the master
/// is declared not responding (the master's own work first: a publish commits a record).
pub const CALL_GRACE: Duration = Duration::from_secs(5);

/// Whether a socket error is a read or write timing out (the socket's timeout, set from
/// a deadline, passed).
pub fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
}


/// The largest answer line a tool reads (1 GiB): past it the call fails instead of the
/// tool growing without bound on a peer that never ends its line. The largest real
/// answers are whole job caches (`job.returns`, `jobs.lookup_jid`: a highstate's returns
/// from 8,000 minions are a few hundred MiB); `job.follow` and `events.watch` send one
/// return or event per line.
pub const MAX_ANSWER_BYTES: usize = 1 << 30;

/// A blocking client for the tools.
///
/// Every call has a deadline ([`AdminClient::set_timeout`], or one per call with
/// [`AdminClient::call_within`]): a master that is stopped (`SIGSTOP`), wedged or
/// overloaded still accepts the connection (the kernel queues it) but never answers, and
/// a tool must not wait for ever. Past the deadline the call fails with
/// [`NOT_RESPONDING`] and the connection is unusable (a late answer would be read as the
/// next call's): the tool gives up.
pub struct AdminClient {
    stream: std::io::BufReader<std::os::unix::net::UnixStream>,
    timeout: Option<Duration>,
    max_answer: usize,
}

impl AdminClient {
    /// Connects to a running master; `None` when no master is listening. Calls have no
    /// deadline until [`AdminClient::set_timeout`].
    pub fn connect(sock_dir: &Path) -> Option<AdminClient> {
        let s = std::os::unix::net::UnixStream::connect(socket_path(sock_dir)).ok()?;
        Some(AdminClient { stream: std::io::BufReader::new(s), timeout: None, max_answer: MAX_ANSWER_BYTES })
    }

    /// How long each later [`AdminClient::call`] may take, from sending the request to
    /// the end of its answer (`None`: no bound).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// Sends one request and reads its answer, within the client's timeout.
    pub fn call(&mut self, req: &J) -> Result<J> {
        self.exchange(req, self.timeout)
    }

    /// Sends one request and reads its answer, within `within` (whatever the client's
    /// timeout).
    pub fn call_within(&mut self, req: &J, within: Duration) -> Result<J> {
        self.exchange(req, Some(within))
    }

    fn exchange(&mut self, req: &J, within: Option<Duration>) -> Result<J> {
        use std::io::Write;
        // A deadline too far to represent is no deadline.
        let deadline = within.and_then(|d| Instant::now().checked_add(d));
        let mut line = req.to_string();
        line.push('\n');
        let sock = self.stream.get_mut();
        sock.set_write_timeout(remaining(deadline)?).ctx(|| "admin socket".into())?;
        sock.write_all(line.as_bytes()).map_err(io_error)?;
        let answer = self.read_answer(deadline)?;
        if answer.is_empty() {
            return Err(Error::refused("the master closed the admin connection"));
        }
        let v: J = serde_json::from_slice(&answer).map_err(|e| Error::refused(format!("admin socket: bad answer: {e}")))?;
        if let Some(e) = v.get("error").and_then(J::as_str) {
            return Err(Error::from_answer(e, v.get("kind").and_then(J::as_str)));
        }
        Ok(v)
    }

    /// Reads one answer line (empty if the master closed first), each read bounded by
    /// what is left of `deadline`: a master that trickles bytes cannot stretch it. A line
    /// longer than the bound ([`MAX_ANSWER_BYTES`]) is an error.
    fn read_answer(&mut self, deadline: Option<Instant>) -> Result<Vec<u8>> {
        use std::io::BufRead;
        let mut out = Vec::new();
        loop {
            self.stream.get_ref().set_read_timeout(remaining(deadline)?).ctx(|| "admin socket".into())?;
            let buf = match self.stream.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_error(e)),
            };
            if buf.is_empty() {
                return Ok(out);
            }
            match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    out.extend_from_slice(&buf[..=i]);
                    self.stream.consume(i + 1);
                    return Ok(out);
                }
                None => {
                    let n = buf.len();
                    if out.len() + n > self.max_answer {
                        return Err(Error::refused(format!("admin socket: an answer longer than {} bytes", self.max_answer)));
                    }
                    out.extend_from_slice(buf);
                    self.stream.consume(n);
                }
            }
        }
    }
}

/// What is left before `deadline`, as a socket timeout (`None`: no deadline); an error
/// once it passed.
fn remaining(deadline: Option<Instant>) -> Result<Option<Duration>> {
    match deadline {
        None => Ok(None),
        Some(d) => match d.checked_duration_since(Instant::now()) {
            // A zero timeout means "none" to the socket: the smallest real one instead.
            Some(left) if !left.is_zero() => Ok(Some(left)),
            _ => Err(Error::NotResponding),
        },
    }
}

/// A socket error; a read or write that timed out is [`NOT_RESPONDING`].
fn io_error(e: std::io::Error) -> Error {
    if is_timeout(&e) {
        Error::NotResponding
    } else {
        Error::io("admin socket", e)
    }
}

impl AdminClient {
    /// Turns this connection into an event stream: yields `{"tag", "data"}` objects until
    /// the master goes away (no deadline: a watch waits for events as long as it runs).
    /// Each line is bounded as an answer is; a line that is not JSON is skipped.
    pub fn watch(mut self) -> Result<impl Iterator<Item = J>> {
        use std::io::Write;
        let sock = self.stream.get_mut();
        sock.set_write_timeout(self.timeout).ctx(|| "admin socket".into())?;
        sock.write_all(b"{\"cmd\":\"events.watch\"}\n").map_err(io_error)?;
        Ok(std::iter::from_fn(move || loop {
            match self.read_answer(None) {
                Ok(line) if line.is_empty() => return None,
                Ok(line) => {
                    if let Ok(v) = serde_json::from_slice(&line) {
                        return Some(v);
                    }
                }
                Err(_) => return None,
            }
        }))
    }
}

/// The orchestrate driver's way to the master ([`crate::orchestrate::run`]).
impl crate::orchestrate::run::Caller for AdminClient {
    fn call(&mut self, req: &J) -> Result<J> {
        AdminClient::call(self, req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, Write};
    use std::os::unix::net::UnixListener;

    /// A peer that accepts and reads but never answers (a stopped master) makes a call
    /// fail with `NOT_RESPONDING` at its deadline; one that answers is read as before,
    /// also when the answer comes in pieces.
    #[test]
    fn calls_end_at_their_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(socket_path(dir.path())).unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut rd = std::io::BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            let mut line = String::new();
            rd.read_line(&mut line).unwrap();
            w.write_all(b"{\"ok\":").unwrap();
            // The answer in two pieces, apart in time: the split is what is tested.
            std::thread::sleep(Duration::from_millis(50));
            w.write_all(b"1}\n").unwrap();
            line.clear();
            rd.read_line(&mut line).unwrap(); // the second request: never answered
            line.clear();
            let _ = rd.read_line(&mut line); // until the client gives up and closes
        });
        let mut c = AdminClient::connect(dir.path()).expect("connects");
        c.set_timeout(Some(Duration::from_secs(30)));
        assert_eq!(c.call(&serde_json::json!({"cmd": "key.list"})).unwrap(), serde_json::json!({"ok": 1}));
        let e = c.call_within(&serde_json::json!({"cmd": "key.list"}), Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, Error::NotResponding), "{e}");
        drop(c);
        server.join().unwrap();
    }

    /// A peer that never ends its answer line (or an event line) makes the call fail at
    /// the bound, with the memory it read no larger than that.
    #[test]
    fn answers_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(socket_path(dir.path())).unwrap();
        let server = std::thread::spawn(move || {
            for _ in 0..2 {
                let (s, _) = listener.accept().unwrap();
                let mut rd = std::io::BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                let mut line = String::new();
                rd.read_line(&mut line).unwrap();
                w.write_all(b"{\"tag\":\"a\",\"data\":{}}\n").unwrap();
                // Then a line that never ends, until the client hangs up.
                while w.write_all(&[b'x'; 4096]).is_ok() {}
            }
        });
        let mut c = AdminClient::connect(dir.path()).expect("connects");
        c.max_answer = 64 << 10;
        assert_eq!(c.call(&serde_json::json!({"cmd": "key.list"})).unwrap(), serde_json::json!({"tag": "a", "data": {}}));
        let e = c.call(&serde_json::json!({"cmd": "key.list"})).unwrap_err();
        assert!(e.to_string().contains("an answer longer than 65536 bytes"), "{e}");
        drop(c);
        let mut c = AdminClient::connect(dir.path()).expect("connects");
        c.max_answer = 64 << 10;
        let events: Vec<J> = c.watch().unwrap().collect();
        assert_eq!(events, vec![serde_json::json!({"tag": "a", "data": {}})], "the watch ends at the unbounded line");
        server.join().unwrap();
    }
}
