//! The nemesis: faults drawn from the seed, one at a time or two held at once, each
//! undone before the next is drawn; and, once, a member joining the running cluster,
//! which faults then target as they do the founders.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use halite_storage::dirlock::DirLock;

use super::{admin_up, runner};
use crate::support::history::{History, Outcome};
use crate::support::*;

/// A member's process group stopped with SIGSTOP, resumed when dropped (also when the
/// test fails, so the member can then be killed and its directory removed).
pub struct Paused(i32);

impl Paused {
    fn new(pid: u32) -> Paused {
        // SAFETY: kill(2) on the process group of a child this test started and owns.
        unsafe { libc::kill(-(pid as i32), libc::SIGSTOP) };
        Paused(pid as i32)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(-self.0, libc::SIGCONT) };
    }
}

/// The member the cluster names leader, asked of each running member of `envs` in turn.
fn leader(envs: &[Env], procs: &[Option<Proc>]) -> Option<usize> {
    envs.iter().zip(procs).filter(|(_, p)| p.is_some()).find_map(|(e, _)| {
        let l = runner(e, &["cluster.members"])?["leader_id"].as_str()?.to_string();
        envs.iter().position(|x| x.ip == l)
    })
}

/// Whether no process holds member `env`'s data directory (its owner lock,
/// [`DirLock::is_free`]): a killed master keeps it until the last of its threads has
/// exited, which can be after its pid already shows a zombie.
fn data_dir_free(env: &Env) -> bool {
    let conf = std::fs::read_to_string(env.root.join("conf/master")).unwrap_or_default();
    let Some(dir) = conf.lines().find_map(|l| l.strip_prefix("halite_data_dir:")).map(|d| PathBuf::from(d.trim())) else { return true };
    DirLock::is_free(&dir).unwrap_or(false)
}

/// Starts member `i` again, once its former process has let go of its data directory,
/// and waits (bounded) for its admin socket.
pub fn restart(envs: &[Env], procs: &mut [Option<Proc>], i: usize) {
    within(30, || data_dir_free(&envs[i]));
    procs[i] = Some(spawn_master(&envs[i]));
    within(90, || admin_up(&envs[i]));
}

/// Whether this host can start a process in a time namespace of its own (Linux 5.6,
/// `unshare` of util-linux 2.36, root).
pub fn time_namespaces() -> Option<String> {
    if !Path::new("/proc/self/timens_offsets").exists() {
        return Some("the kernel has no time namespaces (/proc/self/timens_offsets)".into());
    }
    let o = Command::new("unshare").args(["--time", "--fork", "--monotonic=1", "--boottime=1", "true"]).output();
    match o {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("unshare --time: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Some(format!("unshare: {e}")),
    }
}

/// Starts member `env` in a new time namespace whose CLOCK_MONOTONIC and CLOCK_BOOTTIME
/// are `offset` seconds from the host's (CLOCK_REALTIME is not namespaced).
fn spawn_stepped(env: &Env, offset: i64) -> Proc {
    let (m, b) = (format!("--monotonic={offset}"), format!("--boottime={offset}"));
    Proc::spawn_logged(
        "salt-master",
        Command::new("unshare").args(["--time", "--fork", "--kill-child", &m, &b]).arg(sibling_bin("salt-master")).args(["-c", &env.conf(), "-l", "info"]),
        &env.root.join("master.out"),
    )
}

/// The host's CLOCK_MONOTONIC, in seconds (a negative offset must not take it below 0).
fn monotonic_secs() -> i64 {
    // SAFETY: clock_gettime with a valid clock id and out pointer.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec
}

/// Whether process `pid` has ended (no longer there, or a zombie: its files closed).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// What the nemesis works on: the founders, then (when `envs` has one more) a member
/// that joins the running cluster a third of the way in.
pub struct Target<'a> {
    pub h: &'a History,
    pub procs: &'a mut [Option<Proc>],
    pub envs: &'a [Env],
    pub founders: usize,
    /// The members faults (and clients) draw from: the founders, then the joiner too once
    /// it has joined.
    pub present: &'a AtomicUsize,
    pub mesh: &'a Mesh,
    /// The member whose data directory is on a small disk, and that disk.
    pub disk: Option<(usize, &'a SmallDisk)>,
    /// Whether members can be started in a time namespace of their own.
    pub clock: bool,
}

/// A fault being held, undone by [`Target::end`].
enum Held {
    Killed(usize),
    Paused(#[allow(dead_code)] Option<Paused>),
    Mesh,
    Disk,
    Stepped(usize),
}

const KINDS: [&str; 8] = ["kill", "pause", "isolate", "bridge", "one-way", "slow", "clock", "disk"];
/// The faults a second one held at once is drawn from.
const SECOND: [&str; 5] = ["kill", "pause", "isolate", "one-way", "slow"];

impl Target<'_> {
    fn name(&self, i: usize, l: Option<usize>) -> String {
        format!("member {i} ({}{})", self.envs[i].ip, if l == Some(i) { ", leader" } else { "" })
    }

    /// How many members are present (the first of `envs`).
    fn n(&self) -> usize {
        self.present.load(SeqCst)
    }

    /// Applies fault `kind` to member `t`: what it is, and how to undo it.
    fn begin(&mut self, rng: &mut StdRng, kind: &str, t: usize, l: Option<usize>) -> (String, Held) {
        let n = self.n();
        match kind {
            "kill" => {
                if let Some(mut p) = self.procs[t].take() {
                    p.kill9();
                }
                (self.name(t, l), Held::Killed(t))
            }
            "pause" => (self.name(t, l), Held::Paused(self.procs[t].as_ref().map(|p| Paused::new(p.pid())))),
            "isolate" => {
                self.mesh.isolate(t);
                (self.name(t, l), Held::Mesh)
            }
            "bridge" => {
                // The others in two halves cut from each other; `t` reaches both.
                let others: Vec<usize> = (0..n).filter(|i| *i != t).collect();
                let (a, b) = others.split_at(others.len() / 2);
                for x in a {
                    for y in b {
                        self.mesh.cut_pair(*x, *y);
                    }
                }
                (format!("{} reaches {a:?} and {b:?}, cut from each other", self.name(t, l)), Held::Mesh)
            }
            "one-way" => {
                let to = (t + rng.gen_range(1..n)) % n;
                self.mesh.cut_link(t, to);
                (format!("connections {} opens to member {to}", self.name(t, l)), Held::Mesh)
            }
            "slow" => {
                let ms = rng.gen_range(50..=400);
                self.mesh.slow(t, ms);
                (format!("{} ({ms} ms a chunk)", self.name(t, l)), Held::Mesh)
            }
            "clock" => {
                // Forward by up to 30 days, or back by up to 30 minutes (as far as the
                // host's monotonic clock allows: it cannot go below zero).
                let back = (monotonic_secs() - 120).min(1800);
                let forward = rng.gen_bool(0.5);
                let offset = if back < 60 || forward { rng.gen_range(3600..=30 * 86_400) } else { -rng.gen_range(60..=back) };
                if let Some(mut p) = self.procs[t].take() {
                    p.kill9();
                }
                within(30, || data_dir_free(&self.envs[t]));
                self.procs[t] = Some(spawn_stepped(&self.envs[t], offset));
                within(90, || admin_up(&self.envs[t]));
                (format!("{}: killed, started with CLOCK_MONOTONIC and CLOCK_BOOTTIME {offset:+} s", self.name(t, l)), Held::Stepped(t))
            }
            "disk" => {
                let (_, disk) = self.disk.expect("a member on a small disk");
                let filled = disk.fill();
                (format!("{}: its data directory's disk filled ({filled} bytes)", self.name(t, l)), Held::Disk)
            }
            k => unreachable!("fault {k}"),
        }
    }

    fn end(&mut self, held: Held) {
        match held {
            Held::Killed(t) => restart(self.envs, self.procs, t),
            Held::Paused(p) => drop(p),
            Held::Mesh => self.mesh.heal_all(),
            Held::Disk => self.disk.expect("a member on a small disk").1.free(),
            Held::Stepped(t) => {
                // Its clocks step back to the host's. The master is `unshare`'s child:
                // killed with it (one process group), gone once its pid is (it holds
                // the data directory's lock until then).
                let pid = std::fs::read_to_string(self.envs[t].root.join("master.pid")).ok().and_then(|p| p.trim().parse::<u32>().ok());
                if let Some(mut p) = self.procs[t].take() {
                    p.kill9();
                }
                if let Some(pid) = pid {
                    within(30, || gone(pid));
                }
                restart(self.envs, self.procs, t);
            }
        }
    }

    /// The member joins: started on an empty disk, waited for (bounded) until it serves
    /// and the others count it a voter; recorded as a `join` of process `membership`.
    /// Once it has, it is present: faults and clients draw it as they do the founders.
    fn join(&mut self) {
        let n = self.founders;
        let envs = self.envs;
        let (founders, env) = (&envs[..n], &envs[n]);
        let slot = &mut self.procs[n];
        let joined = self.h.op("membership", "join", json!({ "member": n, "ip": env.ip }), || {
            *slot = Some(spawn_master(env));
            let up = within(90, || admin_up(env));
            let voter = up && within(90, || founders.iter().any(|e| runner(e, &["cluster.members"]).is_some_and(|m| m["voters"].as_array().is_some_and(|v| v.iter().any(|x| x == env.ip.as_str())))));
            let outcome = if voter { Outcome::Ok } else { Outcome::Unknown };
            (outcome, json!({ "serving": up, "voter": voter }), voter)
        });
        if joined {
            self.present.store(n + 1, SeqCst);
        }
    }

    /// Starts again, as the service manager does (`Restart=on-failure`), every member
    /// whose process ended by itself; each is recorded as an `exited` of process
    /// `supervisor` (a violation: no fault here is one a member should end on).
    pub fn supervise(&mut self) {
        for i in 0..self.envs.len() {
            let Some(status) = self.procs[i].as_mut().and_then(Proc::exited) else { continue };
            self.procs[i] = None;
            let log = std::fs::read_to_string(self.envs[i].root.join("master.out")).unwrap_or_default();
            let last: Vec<&str> = log.lines().rev().take(3).collect();
            self.h.op("supervisor", "exited", json!({ "member": i }), || (Outcome::Fail, json!({ "status": status.to_string(), "log": last }), ()));
            restart(self.envs, self.procs, i);
        }
    }

    /// Draws and applies faults until `secs` have passed. With `amnesia`, the first
    /// fault after half the time kills every member, empties every disk and starts them
    /// again: acknowledged writes are lost, which the checker must find.
    ///
    /// Fault `k`'s draws come from a generator of its own, seeded from the seed and `k`,
    /// and depend on nothing else but the members present (and the leader, when the
    /// draw says the leader): what one fault meets (a leader found or not, the host's
    /// uptime for a clock stepped back) does not shift the next. The member joins
    /// before the first fault whose schedule (the holds and pauses drawn before it)
    /// reaches a third of the run, a point the seed fixes too.
    pub fn run(&mut self, seed: u64, secs: u64, amnesia: bool) {
        let begin = Instant::now();
        let deadline = begin + Duration::from_secs(secs);
        let mut forgot = !amnesia;
        let mut joined = self.envs.len() == self.founders;
        let mut scheduled = Duration::ZERO;
        for k in 0u64.. {
            if Instant::now() >= deadline {
                break;
            }
            let mut rng = StdRng::seed_from_u64(seed ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let hold = Duration::from_millis(rng.gen_range(2000..=10_000));
            let pause = Duration::from_millis(rng.gen_range(1000..=4000));
            self.supervise();
            if !joined && scheduled * 3 >= Duration::from_secs(secs) {
                joined = true;
                self.join();
            }
            scheduled += hold + pause;
            let n = self.n();
            let l = leader(&self.envs[..n], self.procs);
            let start = self.h.now();
            if !forgot && begin.elapsed() * 2 >= deadline - begin {
                forgot = true;
                self.forget();
                self.h.fault("amnesia", "every member: killed, disk emptied, started again", start);
                continue;
            }
            // A member present drawn at random, the leader half the time; a kind the run
            // can apply (the disk fault on the member whose disk it is, once present).
            let to_leader = rng.gen_bool(0.5);
            let drawn = rng.gen_range(0..n);
            let mut target = match l {
                Some(l) if to_leader => l,
                _ => drawn,
            };
            let mut kind = KINDS[rng.gen_range(0..KINDS.len())];
            match kind {
                "clock" if !self.clock => kind = "kill",
                "disk" => match self.disk {
                    Some((d, _)) if d < n => target = d,
                    _ => kind = "pause",
                },
                _ => {}
            }
            // A second fault held at once, a third of the time, on another member.
            let (twice, k2, off) = (rng.gen_bool(1.0 / 3.0), SECOND[rng.gen_range(0..SECOND.len())], rng.gen_range(1..n));
            let second = twice.then_some((k2, (target + off) % n));
            let (what, held) = self.begin(&mut rng, kind, target, l);
            let both = second.map(|(k, t)| {
                let start = self.h.now();
                let (w, held) = self.begin(&mut rng, k, t, l);
                (k, w, held, start)
            });
            std::thread::sleep(hold); // the fault's length, not a wait for a signal
            if let Some((k, w, held, start2)) = both {
                self.end(held);
                self.h.fault(k, &format!("{w}, while {kind} of member {target}"), start2);
            }
            self.end(held);
            self.h.fault(kind, &what, start);
            // Pacing between faults.
            std::thread::sleep(pause);
        }
    }

    /// Every member killed, its disk emptied (its log and state, its key view, the
    /// cluster's pki, its cache) and started again.
    fn forget(&mut self) {
        let n = self.n();
        for p in self.procs[..n].iter_mut().filter_map(Option::take) {
            let mut p = p;
            p.kill9();
        }
        for env in &self.envs[..n] {
            for d in ["data", "pki", "cpki", "cache"] {
                let _ = std::fs::remove_dir_all(env.root.join(d));
            }
        }
        if let Some((i, disk)) = self.disk.filter(|(i, _)| *i < n) {
            let _ = std::fs::remove_dir_all(disk.at.join("data"));
            let _ = i;
        }
        for (i, e) in self.envs[..n].iter().enumerate() {
            within(30, || data_dir_free(e));
            self.procs[i] = Some(spawn_master(e));
        }
        within(90, || self.envs[..n].iter().all(admin_up));
    }
}
