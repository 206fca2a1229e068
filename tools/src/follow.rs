//! Following jobs from the tools: each job's returns read from its own `job.follow`
//! connection to the admin socket (protocol in `halite_master::admin::follow`) by a
//! thread, and handed to the caller on one channel, so a caller can follow several jobs
//! at once (a batch run does) and print each return as it comes.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::Sender;
use std::time::Duration;

use serde_json::{json, Value};

use halite_master::admin::client::{is_timeout, socket_path, NOT_RESPONDING};

/// Longest answer line read from the master (a return is bounded by the master's own
/// request limits; this only keeps a confused peer from filling memory).
const MAX_LINE: u64 = 256 << 20;

/// How long past the follow's own timeout an answer may take: the master ends a follow
/// at its timeout and sends the done line then; one that is silent longer than this
/// (stopped, wedged) is given up on with [`NOT_RESPONDING`].
pub const GRACE: Duration = Duration::from_secs(10);

/// What a follow reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Arrival {
    /// `id` returned to `jid`; `load` is its stored return (`return`, `retcode`, ...).
    Return { jid: String, id: String, load: Value },
    /// The follow of `jid` ended; `missing` did not return in time.
    Done { jid: String, missing: Vec<String> },
    /// The follow of `jid` failed (the master refused it or went away).
    Failed { jid: String, error: String },
}

/// Starts following `jid` for `timeout` (`only`: those of its minions only, a batch
/// run's group): its returns, then its end, arrive on `tx`.
pub fn follow(sock_dir: &Path, jid: &str, only: Option<&[String]>, timeout: Duration, tx: Sender<Arrival>) -> std::io::Result<()> {
    let mut s = UnixStream::connect(socket_path(sock_dir))?;
    // The master ends the follow at the timeout; this only guards against a master
    // that hangs without closing (no read waits longer).
    s.set_read_timeout(Some(timeout.saturating_add(GRACE)))?;
    s.set_write_timeout(Some(GRACE))?;
    let mut req = json!({ "cmd": "job.follow", "jid": jid, "timeout": timeout.as_secs_f64() });
    if let Some(m) = only {
        req["minions"] = json!(m);
    }
    let mut line = req.to_string();
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let jid = jid.to_string();
    std::thread::spawn(move || {
        let end = read_all(BufReader::new(s), &jid, &tx);
        let _ = tx.send(end);
    });
    Ok(())
}

/// Reads answer lines until the follow ends; returns the last arrival.
fn read_all(mut rd: BufReader<UnixStream>, jid: &str, tx: &Sender<Arrival>) -> Arrival {
    let failed = |error: String| Arrival::Failed { jid: jid.to_string(), error };
    // One line buffer for the whole follow: a big job's returns are thousands of lines.
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match (&mut rd).take(MAX_LINE).read_until(b'\n', &mut buf) {
            Ok(0) => return failed("the master closed the connection before the job's end".into()),
            Ok(_) if buf.last() != Some(&b'\n') => return failed("the master's answer was cut short".into()),
            Ok(_) => {}
            Err(e) if is_timeout(&e) => return failed(NOT_RESPONDING.into()),
            Err(e) => return failed(format!("admin socket: {e}")),
        }
        let mut v: Value = match serde_json::from_slice(&buf) {
            Ok(v) => v,
            Err(e) => return failed(format!("admin socket: bad answer: {e}")),
        };
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            return failed(e.to_string());
        }
        if v.get("done").is_some() {
            let missing = v["missing"].as_array().into_iter().flatten().filter_map(|m| m.as_str().map(String::from)).collect();
            return Arrival::Done { jid: jid.to_string(), missing };
        }
        let Some(id) = v.get("id").and_then(Value::as_str) else { continue };
        let id = id.to_string();
        // Moved out, not copied: a return's load can be large.
        let load = v.get_mut("return").map(Value::take).unwrap_or(Value::Null);
        let arrival = Arrival::Return { jid: jid.to_string(), id, load };
        if tx.send(arrival).is_err() {
            return failed("nobody is listening".into());
        }
    }
}
