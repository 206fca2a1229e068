//! A master's start is never lost to a tool: while tools poll it in loops (as `watch` or
//! a monitoring script does), every start of a master and of a cluster's members
//! succeeds; the explicit offline forms (`halite-ctl`, `salt-key --offline`, `salt-run
//! --offline`) are refused while a master holds its data directory, and a master started
//! while one of them holds it waits for it, then starts.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::support::*;

/// Starts of a single master under the polling tools.
const ROUNDS: usize = 5;

/// Tools run in loops against one config directory until stopped, each call bounded
/// ([`run`]); their outcome is not looked at (before the master serves they fail), only
/// that they ran.
struct Pollers {
    stop: Arc<AtomicBool>,
    runs: Vec<Arc<AtomicUsize>>,
    names: Vec<String>,
    threads: Vec<JoinHandle<()>>,
}

impl Pollers {
    fn start(conf: &str, calls: &[(&'static str, &[&'static str])]) -> Pollers {
        let stop = Arc::new(AtomicBool::new(false));
        let (mut runs, mut names, mut threads) = (Vec::new(), Vec::new(), Vec::new());
        for (bin, args) in calls {
            let (bin, args, conf, stop) = (*bin, args.to_vec(), conf.to_string(), stop.clone());
            let n = Arc::new(AtomicUsize::new(0));
            runs.push(n.clone());
            names.push(format!("{} {}", bin.rsplit('/').next().unwrap_or(bin), args.join(" ")));
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    run(Command::new(bin).arg("-c").arg(&conf).args(&args), TOOL_TIMEOUT);
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        Pollers { stop, runs, names, threads }
    }

    /// Calls finished so far, per tool.
    fn counts(&self) -> Vec<usize> {
        self.runs.iter().map(|n| n.load(Ordering::Relaxed)).collect()
    }

    /// Fails the test unless every tool finished a call since `before`.
    fn assert_ran_since(&self, before: &[usize], when: &str) {
        for ((name, b), now) in self.names.iter().zip(before).zip(self.counts()) {
            assert!(now > *b, "{name} did not run {when}");
        }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().expect("a polling thread");
        }
    }
}

/// Waits until the master of `env` serves, failing the test at once if it exits.
fn wait_serving(env: &Env, p: &mut Proc, what: &str) {
    let sock = env.root.join("sock/halite-admin.sock");
    wait_for(what, 120, || {
        if let Some(s) = p.exited() {
            panic!("{what}: the master exited ({s}); its log:\n{}", env.master_log());
        }
        std::os::unix::net::UnixStream::connect(&sock).is_ok()
    });
}

#[test]
fn every_start_of_a_master_polled_by_every_tool_succeeds() {
    let env = Env::master(&one_ip(), "localfs_key", "");
    seed_pending(&env, &["k1"]);
    let polls = Pollers::start(
        &env.conf(),
        &[
            (SALT_RUN, &["jobs.list_jobs"]),
            (SALT_KEY, &["-L"]),
            (SALT, &["-L", "x", "test.ping", "-t", "1"]),
            (CTL, &["dump"]),
            (CTL, &["verify"]),
        ],
    );
    for round in 1..=ROUNDS {
        let before = polls.counts();
        let mut master = spawn_master(&env);
        wait_serving(&env, &mut master, &format!("start {round} of {ROUNDS}"));
        polls.assert_ran_since(&before, &format!("during start {round}"));
        master.stop();
    }
    polls.stop();
    assert_eq!(env.ids("minions_pre"), ["k1"]);
}

#[test]
fn every_member_of_a_cluster_polled_with_cluster_members_starts() {
    let ips = loopback(3);
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let pool = port_free_on(&ipr);
    let envs = member_envs(&ips, pool, "locks-test", |_| String::new());
    let polls: Vec<Pollers> = envs.iter().map(|e| Pollers::start(&e.conf(), &[(SALT_RUN, &["cluster.members"])])).collect();
    let before: Vec<Vec<usize>> = polls.iter().map(Pollers::counts).collect();
    // Fails the test if a member does not serve (an exited one never does).
    let mut c = Cluster::start(envs);
    for (i, p) in polls.iter().enumerate() {
        p.assert_ran_since(&before[i], &format!("while member {i} started"));
    }
    for p in polls {
        p.stop();
    }
    for (i, p) in c.procs.iter_mut().enumerate() {
        assert!(p.as_mut().expect("started").exited().is_none(), "member {i} exited:\n{}", c.envs[i].master_log());
    }
    for e in &c.envs {
        assert_eq!(members(e)["voter_count"], 3, "{}", e.ip);
    }
}

#[test]
fn an_offline_call_against_a_running_master_is_refused_naming_it() {
    let env = Env::master(&one_ip(), "localfs_key", "");
    seed_pending(&env, &["k1"]);
    let m = Running::start(env);
    let env = &m.env;
    let holds = format!("the master (pid {}) holds {}: ", m.proc.pid(), env.root.join("data").display());
    let calls: [(&str, &[&str]); 5] = [
        (SALT_KEY, &["--offline", "-a", "k1", "-y"]),
        (SALT_RUN, &["--offline", "jobs.list_jobs"]),
        (SALT_RUN, &["--offline", "pki.migrate_to_mmap"]),
        (CTL, &["dump"]),
        (CTL, &["verify"]),
    ];
    for (bin, args) in calls {
        let o = env.run(bin, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(&holds), "{bin} {args:?}: {err}");
    }
    // Nothing was changed, and the master serves on: the calls without --offline answer.
    assert_eq!(env.ids("minions_pre"), ["k1"]);
    assert!(env.runner(&["jobs.list_jobs"]).is_object());
    assert!(env.ok(SALT_KEY, &["-a", "k1", "-y"]).contains("Key for minion k1 accepted."));
}

#[test]
fn without_a_master_and_without_offline_the_tools_say_salts_words_and_open_nothing() {
    let env = Env::new("localfs_key", "");
    seed_pending(&env, &["k1"]);
    let calls: [(&str, &[&str]); 4] = [
        (SALT_KEY, &["-a", "k1", "-y"]),
        (SALT_RUN, &["jobs.list_jobs"]),
        (SALT_RUN, &["cluster.members"]),
        (SALT_RUN, &["pki.migrate_to_mmap"]),
    ];
    for (bin, args) in calls {
        let o = env.run(bin, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.starts_with("The salt master could not be contacted. Is master running?\n"), "{bin} {args:?}: {err}");
    }
    assert!(!env.root.join("data").exists(), "the master's data directory was opened");
    // The listing reads the key view, as Salt's salt-key reads the key files.
    assert_eq!(env.ids("minions_pre"), ["k1"]);
}

#[test]
fn a_master_started_while_an_offline_tool_holds_its_directory_waits_then_starts() {
    let env = Env::master(&one_ip(), "localfs_key", "");
    seed_pending(&env, &["k1"]);
    // `salt-key --offline -a` holds the directory while it asks whether to proceed.
    let mut cmd = Command::new(SALT_KEY);
    cmd.arg("-c").arg(env.conf()).args(["--offline", "-a", "k1"]);
    let (mut tool, mut lines, mut answer) = Proc::spawn_prompted("salt-key --offline", &mut cmd, &env.root.join("salt-key.out"));
    lines.wait("salt-key's question", 60, |l| l.iter().any(|l| l.contains("The following keys are going to be accepted:")));
    let mut master = spawn_master(&env);
    let waits = format!("salt-key --offline (pid {}) holds {}: waiting", tool.pid(), env.root.join("data").display());
    wait_for("the master to say whom it waits for", 60, || env.master_log().contains(&waits));
    assert!(master.exited().is_none(), "the master exited:\n{}", env.master_log());
    assert!(!env.root.join("sock/halite-admin.sock").exists(), "the master serves while the tool holds its directory");
    std::io::Write::write_all(&mut answer, b"y\n").expect("answering salt-key");
    assert!(tool.wait_exit("salt-key --offline", 60).success());
    assert!(lines.to_end(10).iter().any(|l| l.ends_with("Key for minion k1 accepted.")), "{:?}", lines.seen());
    wait_serving(&env, &mut master, "the master once the tool is done");
    assert_eq!(env.master_log().matches("waiting for it to finish").count(), 1, "said once");
    // The master serves what the tool committed.
    assert_eq!(env.runner(&["cluster.members"])["voter_count"], 1);
    assert_eq!(env.ids("minions"), ["k1"]);
}

#[test]
fn a_second_master_on_the_same_directory_is_refused_naming_the_first() {
    let m = Running::start(Env::master(&one_ip(), "localfs_key", ""));
    let o = m.env.run(&sibling_bin("salt-master").display().to_string(), &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    let holds = format!("the master (pid {}) holds {}: another salt-master uses this halite_data_dir", m.proc.pid(), m.env.root.join("data").display());
    assert!(!o.status.success() && err.contains(&holds), "{err}");
    assert!(m.env.runner(&["cluster.members"])["voter_count"] == 1, "the first serves on");
}
