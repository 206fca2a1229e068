//! A stalled master: one stopped with SIGSTOP still accepts connections on its admin
//! socket (the kernel queues them) but never answers. The tools give up within their
//! timeout with Salt's "not responding" error instead of waiting for ever: `salt` on
//! its publish (bounded by `-t`) and on its follow of a job already published,
//! `salt-run` (by `-t`, or `request_channel_timeout`), `salt-key`'s changes (by
//! `request_channel_timeout`), while `salt-key -L` (which reads the key view) still
//! answers. Resumed, the master serves the same tools again.

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::json;

use crate::support::*;

/// What the tools print when the master does not answer (Salt's words).
const NOT_RESPONDING: &str = "Salt request timed out. The master is not responding.";

/// Every wait in this file: a tool must be done well within it (its own bound is 3 to
/// 8 s, plus 10 s of grace for a follow); a liveness check, not a measurement.
const LIVENESS: Duration = Duration::from_secs(30);

/// A process stopped with SIGSTOP, resumed when this is dropped (also when the test
/// fails, so the master can then be stopped and its directory removed).
struct Stopped(i32);

impl Stopped {
    fn new(pid: u32) -> Stopped {
        let pid = pid as i32;
        // SAFETY: kill(2) on a child this test started and still owns.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "SIGSTOP the master");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe {
            libc::kill(self.0, libc::SIGCONT);
        }
    }
}

fn text(o: &Output) -> String {
    format!("exit {:?}\nstdout:\n{}\nstderr:\n{}", o.status.code(), String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The tool failed with the not-responding error and exit `code`.
fn not_responding(o: &Output, code: i32) {
    assert_eq!(o.status.code(), Some(code), "{}", text(o));
    assert!(String::from_utf8_lossy(&o.stderr).contains(NOT_RESPONDING), "{}", text(o));
}

#[test]
fn the_tools_give_up_on_a_stopped_master_which_serves_again_once_resumed() {
    let s = Served::start(Accept::Auto, "request_channel_timeout: 3\n", "");
    let env = &s.env;
    {
        let _stopped = Stopped::new(s.master.pid());
        // The publish is never answered.
        not_responding(&env.run_for(SALT, &["*", "test.ping", "-t", "3"], LIVENESS), 2);
        // salt-run: bounded by -t, or by request_channel_timeout.
        not_responding(&env.run_for(SALT_RUN, &["jobs.list_jobs", "-t", "3"], LIVENESS), 1);
        not_responding(&env.run_for(SALT_RUN, &["manage.up"], LIVENESS), 1);
        // salt-key: a listing reads the key view; a change asks the master.
        let o = env.run_for(SALT_KEY, &["-L", "--out", "json"], LIVENESS);
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(json(&String::from_utf8_lossy(&o.stdout))["minions"], json!([MINION]));
        not_responding(&env.run_for(SALT_KEY, &["-d", MINION, "-y"], LIVENESS), 1);
    }
    // Resumed: served again, and the refused change was not made.
    assert_eq!(env.salt_json(&["*", "test.ping"], 30), json!({ MINION: true }));
    assert_eq!(env.ids("minions"), [MINION]);
    assert!(env.runner(&["jobs.list_jobs"]).as_object().is_some_and(|j| !j.is_empty()));
}

#[test]
fn salt_gives_up_on_a_master_that_stops_while_it_follows_a_job() {
    let s = Served::start(Accept::Auto, "", "");
    let env = &s.env;
    let mut cmd = Command::new(SALT);
    cmd.arg("-c").arg(env.conf()).args(["*", "test.sleep", "30", "-t", "8"]);
    let (mut salt, mut stderr) = Proc::spawn_stderr_lines("salt", &mut cmd, &env.root.join("salt.out"));
    // The job reached the minion: it was published, and salt is following it.
    wait_for("the minion to run test.sleep", 60, || minion_log(&env.root, MINION).contains("test.sleep"));
    {
        let _stopped = Stopped::new(s.master.pid());
        let status = salt.wait_exit("salt to give up on the stopped master", LIVENESS.as_secs());
        let lines = stderr.to_end(10).join("\n");
        assert_eq!(status.code(), Some(2), "{lines}");
        assert!(lines.contains(NOT_RESPONDING), "{lines}");
    }
    assert_eq!(env.salt_json(&["*", "test.ping"], 30), json!({ MINION: true }));
}
