//! Child processes under guard: every one in a process group of its own, killed with its
//! group, within a time limit.

use std::io::{BufRead, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Makes `cmd` start as the leader of a new process group that dies with this thread.
fn own_group(cmd: &mut Command) -> &mut Command {
    cmd.process_group(0);
    // SAFETY: prctl only sets the forked child's own parent-death signal; it is
    // async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

/// Whether our child `pid` has exited, without reaping it: until it is reaped its PID,
/// and so its process group's ID, cannot be reused, which makes signalling the group
/// after the leader exited safe.
fn has_exited(pid: i32) -> bool {
    loop {
        // SAFETY: waitid on our own child, with a zeroed out-parameter it fills.
        let (r, exited) = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
            (r, info.si_pid() != 0)
        };
        if r == 0 {
            return exited;
        }
        // ECHILD: already reaped.
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return true;
        }
    }
}

fn signal_group(pid: i32, sig: libc::c_int) {
    // SAFETY: signals the process group our child leads (its ID stays reserved until the
    // child is reaped, see `has_exited`).
    unsafe {
        libc::kill(-pid, sig);
    }
}

fn read_all(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        b
    })
}

/// Runs `cmd` to completion (stdin empty, stdout and stderr captured) in a process group
/// of its own. Past `timeout` the group is killed and the test fails with the output.
/// Whatever the command left running is killed when it exits.
pub fn run(cmd: &mut Command, timeout: Duration) -> Output {
    let what = format!("{cmd:?}");
    try_run(cmd, timeout).unwrap_or_else(|o| panic!("{what} did not finish within {timeout:?} and was killed; it printed:\n{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// [`run`] for a caller that records a command past its limit instead of failing: `Err`
/// holds what the command printed before it was killed.
pub fn try_run(cmd: &mut Command, timeout: Duration) -> Result<Output, Output> {
    let what = format!("{cmd:?}");
    own_group(cmd).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let pid = child.id() as i32;
    let out = read_all(child.stdout.take().expect("piped stdout"));
    let err = read_all(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + timeout;
    let mut nap = Duration::from_millis(1);
    let mut timed_out = false;
    while !has_exited(pid) {
        if Instant::now() >= deadline {
            timed_out = true;
            break;
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    }
    signal_group(pid, libc::SIGKILL);
    let status = child.wait().expect("reaping a child");
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let out = Output { status, stdout, stderr };
    if timed_out {
        return Err(out);
    }
    Ok(out)
}

/// [`run`], failing the test unless the command succeeds; returns its stdout.
pub fn run_ok(cmd: &mut Command, timeout: Duration) -> String {
    let what = format!("{cmd:?}");
    let o = run(cmd, timeout);
    assert!(o.status.success(), "{what} failed ({}):\n{}\n{}", o.status, String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).expect("utf-8 output")
}

/// A long-running child: the leader of its own process group, killed with its whole group
/// when dropped (also when the test panics); [`Proc::stop`] asks it to stop first.
pub struct Proc {
    child: Child,
    name: String,
    /// Where the child's output goes, printed (its tail) when the test fails.
    log: Option<PathBuf>,
    status: Option<ExitStatus>,
    /// How long [`Proc::stop`] waits after SIGTERM before SIGKILL; zero sends SIGKILL at
    /// once.
    grace: Duration,
}

impl Proc {
    /// Starts `cmd` (stdin empty; the caller sets stdout and stderr). `log` names the file
    /// its output goes to, if any.
    pub fn spawn(name: &str, cmd: &mut Command, log: Option<PathBuf>) -> Proc {
        own_group(cmd).stdin(Stdio::null());
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        Proc { child, name: name.to_string(), log, status: None, grace: Duration::from_secs(10) }
    }

    /// Starts `cmd` with stdout and stderr appended to `log`.
    pub fn spawn_logged(name: &str, cmd: &mut Command, log: &Path) -> Proc {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        cmd.stdout(f.try_clone().expect("dup log")).stderr(f);
        Proc::spawn(name, cmd, Some(log.to_path_buf()))
    }

    /// Starts `cmd` with stdout piped to the returned [`Lines`] and stderr appended to `log`.
    pub fn spawn_lines(name: &str, cmd: &mut Command, log: &Path) -> (Proc, Lines) {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        cmd.stdout(Stdio::piped()).stderr(f);
        let mut p = Proc::spawn(name, cmd, Some(log.to_path_buf()));
        let lines = Lines::new(p.child.stdout.take().expect("piped stdout"));
        (p, lines)
    }

    /// Starts `cmd` with stderr (where our tools log) piped to the returned [`Lines`] and
    /// stdout appended to `log`.
    pub fn spawn_stderr_lines(name: &str, cmd: &mut Command, log: &Path) -> (Proc, Lines) {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        cmd.stdout(f).stderr(Stdio::piped());
        let mut p = Proc::spawn(name, cmd, Some(log.to_path_buf()));
        let lines = Lines::new(p.child.stderr.take().expect("piped stderr"));
        (p, lines)
    }

    /// [`Proc::spawn_lines`] with stdin piped to the returned writer, for a test that
    /// answers the child's prompt.
    pub fn spawn_prompted(name: &str, cmd: &mut Command, log: &Path) -> (Proc, Lines, std::process::ChildStdin) {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        own_group(cmd).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(f);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        let stdin = child.stdin.take().expect("piped stdin");
        let lines = Lines::new(child.stdout.take().expect("piped stdout"));
        (Proc { child, name: name.to_string(), log: Some(log.to_path_buf()), status: None, grace: Duration::from_secs(10) }, lines, stdin)
    }

    /// Sets how long [`Proc::stop`] waits after SIGTERM (zero: SIGKILL at once).
    pub fn with_grace(mut self, grace: Duration) -> Proc {
        self.grace = grace;
        self
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// After the leader exited: kill what is left of its group and reap it.
    fn finish(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        signal_group(self.child.id() as i32, libc::SIGKILL);
        let s = self.child.wait().expect("reaping a child");
        self.status = Some(s);
        s
    }

    /// The exit status if the child has exited (its group is then killed and reaped).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() && !has_exited(self.child.id() as i32) {
            return None;
        }
        Some(self.finish())
    }

    /// Waits up to `secs` for the child to exit by itself; fails the test if it does not.
    pub fn wait_exit(&mut self, what: &str, secs: u64) -> ExitStatus {
        let mut status = None;
        wait_for(what, secs, || {
            status = self.exited();
            status.is_some()
        });
        status.expect("exited")
    }

    /// Stops the child: SIGTERM to its group, SIGKILL after its grace period (10 s
    /// unless set otherwise), then SIGKILL to whatever is left of the group (forked
    /// helpers), and reaps it.
    pub fn stop(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        if self.grace.is_zero() {
            return self.kill9();
        }
        let pid = self.child.id() as i32;
        signal_group(pid, libc::SIGTERM);
        let deadline = Instant::now() + self.grace;
        while !has_exited(pid) {
            if Instant::now() >= deadline {
                eprintln!("{} (pid {pid}) needed SIGKILL", self.name);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.finish()
    }

    /// `kill -9` of the child (and its group), as a crash would.
    pub fn kill9(&mut self) -> ExitStatus {
        signal_group(self.child.id() as i32, libc::SIGKILL);
        self.finish()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(log) = &self.log {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                eprintln!("==== the last lines of {} ({}):\n{}", self.name, log.display(), tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
            }
        }
        if self.status.is_none() {
            self.kill9();
        }
    }
}

/// The lines a child prints on one of its outputs, read by a thread of their own (so the
/// child never blocks on a full pipe) and kept.
pub struct Lines {
    rx: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Lines {
    fn new(r: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(r).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines { rx, seen: Vec::new() }
    }

    /// Waits until `f` holds for the lines read so far; fails the test after `secs`
    /// (showing the lines) or if the child closes the output first.
    pub fn wait(&mut self, what: &str, secs: u64, mut f: impl FnMut(&[String]) -> bool) -> &[String] {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if f(&self.seen) {
                return &self.seen;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "timed out after {secs}s waiting for {what}; lines read:\n{}", self.seen.join("\n"));
            match self.rx.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    if !f(&self.seen) {
                        panic!("the output ended before {what}; lines read:\n{}", self.seen.join("\n"));
                    }
                }
            }
        }
    }

    /// Reads for at most `within` until `f` holds; whether it does.
    pub fn poll(&mut self, within: Duration, mut f: impl FnMut(&[String]) -> bool) -> bool {
        let deadline = Instant::now() + within;
        while !f(&self.seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.rx.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return f(&self.seen),
            }
        }
        true
    }

    /// Reads until the child closes the output (at most `secs`); returns every line.
    pub fn to_end(&mut self, secs: u64) -> &[String] {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "timed out after {secs}s waiting for the output to end; lines read:\n{}", self.seen.join("\n"));
            match self.rx.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return &self.seen,
            }
        }
    }

    pub fn seen(&self) -> &[String] {
        &self.seen
    }
}

/// Polls `f` every 100 ms until it holds; fails the test, naming `what`, after `secs`.
pub fn wait_for(what: &str, secs: u64, f: impl FnMut() -> bool) {
    assert!(within(secs, f), "timed out after {secs}s waiting for {what}");
}

/// Whether `f` holds within `secs` (polled every 100 ms), for a caller that says more
/// than [`wait_for`] when it does not.
pub fn within(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
