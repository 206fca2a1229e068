//! Runs `ext_pillar` commands (`cmd_yaml`, `cmd_json`) for the pillar compiler
//! ([`crate::pillar::ext::ExtRun`]): `/bin/sh -c <command> sh <minion id>` in a process
//! group of its own, standard input empty, on the calling (blocking) thread. It is
//! bounded by [`CMD_TIMEOUT`] and [`MAX_CMD_OUTPUT`] bytes of standard output: past
//! either, the whole process group is killed and the run fails. At most
//! [`MAX_RUNNING`] commands run at once on a master; a run waits for a place within the
//! same time bound. Standard error is read (its last bytes name a failure) and otherwise
//! dropped, as Salt's `cmd.run_stdout`.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::pillar::ext::{shell_text, ExtCmdError, ExtRun, CMD_TIMEOUT, MAX_CMD_OUTPUT};

/// The most standard error kept for a failure's message.
const ERR_TAIL: usize = 512;

/// The most commands running at once (a burst of minions asking for their pillar does
/// not become a burst of processes).
pub const MAX_RUNNING: usize = 16;

static RUNNING: Mutex<usize> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

/// A place among the [`MAX_RUNNING`], given back on drop.
struct Place;

impl Place {
    fn take(until: Instant) -> Option<Place> {
        let mut n = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
        while *n >= MAX_RUNNING {
            let left = until.checked_duration_since(Instant::now())?;
            n = FREED.wait_timeout(n, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        *n += 1;
        Some(Place)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        *RUNNING.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        FREED.notify_one();
    }
}

/// The daemon's command runner.
pub struct CmdRunner;

/// Reads `r` to its end, keeping at most `max` bytes; `true` when there was more.
fn read_bounded(mut r: impl Read, max: usize) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => return (out, false),
            Ok(n) if out.len() + n > max => {
                out.extend_from_slice(&buf[..max - out.len()]);
                return (out, true);
            }
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

impl ExtRun for CmdRunner {
    fn run(&self, command: &str, id: &str) -> Result<Vec<u8>, ExtCmdError> {
        run_bounded(command, id, CMD_TIMEOUT, MAX_CMD_OUTPUT)
    }
}

/// [`CmdRunner::run`] with its bounds given.
pub fn run_bounded(command: &str, id: &str, timeout: Duration, max: usize) -> Result<Vec<u8>, ExtCmdError> {
    let deadline = Instant::now() + timeout;
    let Some(_place) = Place::take(deadline) else {
        return Err(ExtCmdError::Busy { running: MAX_RUNNING, secs: timeout.as_secs() });
    };
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(shell_text(command))
        .arg("sh")
        .arg(id)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(ExtCmdError::Spawn)?;
    let pgid = child.id() as libc::pid_t;
    let kill = || {
        // SAFETY: kill(2) on the process group this call created.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    };
    let (out_tx, out_rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let out_thread = std::thread::Builder::new().name("ext-cmd-out".into()).spawn(move || {
        let r = read_bounded(stdout, max);
        let _ = out_tx.send(r.1);
        r
    });
    let err_thread = std::thread::Builder::new().name("ext-cmd-err".into()).spawn(move || {
        let (e, _) = read_bounded(stderr, 1 << 20);
        e[e.len().saturating_sub(ERR_TAIL)..].to_vec()
    });
    let (Ok(out_thread), Ok(err_thread)) = (out_thread, err_thread) else {
        kill();
        let _ = child.wait();
        return Err(ExtCmdError::Thread);
    };
    // Waits for the output to end (or overflow), then for the exit, within the deadline.
    let mut failure = None;
    match out_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(true) => failure = Some(ExtCmdError::TooMuchOutput(max)),
        Ok(false) => {}
        Err(_) => failure = Some(ExtCmdError::TooLong(timeout.as_secs())),
    }
    let status = if failure.is_none() {
        loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() >= deadline => {
                    failure = Some(ExtCmdError::TooLong(timeout.as_secs()));
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => {
                    failure = Some(ExtCmdError::Wait(e));
                    break None;
                }
            }
        }
    } else {
        None
    };
    // Whatever the outcome, nothing of the group outlives the run.
    kill();
    let _ = child.wait();
    let (out, _) = out_thread.join().unwrap_or_default();
    let err = err_thread.join().unwrap_or_default();
    if let Some(f) = failure {
        return Err(f);
    }
    match status {
        Some(s) if s.success() => Ok(out),
        Some(status) => Err(ExtCmdError::Exited { status, stderr: String::from_utf8_lossy(&err).trim().to_string() }),
        None => Err(ExtCmdError::Unfinished),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_runs() {
        assert_eq!(run_bounded("echo id: %s", "web-1", Duration::from_secs(10), 1024).unwrap(), b"id: web-1\n");
        // The id is an argument, never shell text.
        assert_eq!(run_bounded("echo %s", "a;exit 7 $(id)", Duration::from_secs(10), 1024).unwrap(), b"a;exit 7 $(id)\n");
        let e = run_bounded("echo oops >&2; exit 3", "m", Duration::from_secs(10), 1024).unwrap_err().to_string();
        assert!(e.contains("exit status: 3") && e.contains("oops"), "{e}");
        let e = run_bounded("yes", "m", Duration::from_secs(10), 4096).unwrap_err().to_string();
        assert!(e.contains("more than 4096 bytes"), "{e}");
        let t = Instant::now();
        let e = run_bounded("sleep 30; echo late", "m", Duration::from_millis(300), 1024).unwrap_err().to_string();
        assert!(e.contains("longer than"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10), "the group was killed at the deadline");
        // A background child holding the output open is killed with its group at the deadline.
        let t = Instant::now();
        let e = run_bounded("(sleep 30 &) ; echo a: 1", "m", Duration::from_millis(500), 1024).unwrap_err().to_string();
        assert!(e.contains("longer than"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10));
        // With every place taken, a run waits for one within its bound, then fails.
        let held: Vec<Place> = (0..MAX_RUNNING).map(|_| Place::take(Instant::now() + Duration::from_secs(10)).unwrap()).collect();
        let e = run_bounded("echo x", "m", Duration::from_millis(200), 1024).unwrap_err().to_string();
        assert!(e.contains("did not start"), "{e}");
        drop(held);
        assert_eq!(run_bounded("echo x", "m", Duration::from_secs(10), 1024).unwrap(), b"x\n");
    }
}
