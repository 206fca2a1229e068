//! A full disk under a master serving a real salt-minion 3008.5: its data directory on a
//! small loop-mounted ext4 filesystem ([`SmallDisk`]) filled to the last byte. Writes are
//! refused with an error that says the disk is full (a key decision through `salt-key`,
//! a job through `salt`), what is stored keeps being served (the key list, an earlier
//! job's return), the master keeps running, and once space is freed it takes writes again
//! on its own, with nothing acknowledged before lost. Without a reserve
//! (`halite_min_free_bytes: 0`) RocksDB itself meets the full disk: the master holds the
//! same way, then opens its state machine again in place, without a restart. Needs root
//! (mount); without it the test prints a `SKIPPED` line, and fails under CI.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::json;

use crate::health::{metric, metrics_of};
use crate::support::*;

/// `halite_disk_full` as `env`'s master reports it on its health port.
fn disk_full(env: &Env, health: u16) -> Option<f64> {
    metric(&metrics_of(env, health), "halite_disk_full")
}

/// Points `env`'s `halite_data_dir` at `dir`.
fn data_dir_at(env: &Env, dir: &Path) {
    let p = env.root.join("conf/master");
    let text = std::fs::read_to_string(&p).expect("config");
    let text: Vec<String> = text.lines().map(|l| if l.starts_with("halite_data_dir:") { format!("halite_data_dir: {}", dir.display()) } else { l.to_string() }).collect();
    std::fs::write(&p, text.join("\n") + "\n").expect("write config");
}

fn skipped(test: &str) -> bool {
    match SmallDisk::cannot() {
        None => false,
        Some(why) => {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{test} cannot run under CI: {why}");
            eprintln!("SKIPPED full_disk::{test}: {why}");
            true
        }
    }
}

/// A lone master (auto-accept, `reserve` bytes kept free) whose data directory is on a
/// 64 MiB disk of its own, two keys pending (p1, p2) and a real salt-minion m1 answering;
/// and its health port. Fields drop in order: the minion, the master, then the disk it
/// writes on.
struct LoneOnSmallDisk {
    _m1: Proc,
    m: Running,
    disk: SmallDisk,
    _place: tempfile::TempDir,
    health: u16,
}

fn lone_on_small_disk(reserve: u64) -> LoneOnSmallDisk {
    let place = tempfile::tempdir().expect("tempdir");
    let ip = one_ip();
    let health = port_free_on(&[&ip]);
    let env = Env::master(&ip, "localfs_key", &format!("auto_accept: True\nhalite_min_free_bytes: {reserve}\nhalite_health_port: {health}\n"));
    let disk = SmallDisk::mount(&place.path().join("disk.img"), &env.root.join("disk"), 64);
    data_dir_at(&env, &disk.at.join("data"));
    seed_pending(&env, &["p1", "p2"]);
    let m = Running::start(env);
    let m1 = start_minion(&m.env.root, "m1", &format!("master: {}\nmaster_port: {}\n", m.env.ip, m.env.ret));
    wait_ping(&m.env, "m1", 90);
    LoneOnSmallDisk { _m1: m1, m, disk, _place: place, health }
}

#[test]
fn a_lone_master_on_a_full_disk_refuses_writes_serves_reads_and_recovers() {
    if skipped("a_lone_master_on_a_full_disk_refuses_writes_serves_reads_and_recovers") {
        return;
    }
    let mut s = lone_on_small_disk(8 << 20);
    let (disk, health, m) = (&s.disk, s.health, &mut s.m);
    let env = &m.env;
    assert_eq!(env.salt_json(&["m1", "test.echo", "before"], 60), json!({"m1": "before"}));
    let (before, _) = env.newest_job("test.echo").expect("the job before");

    assert_eq!(disk_full(env, health), Some(0.0));
    disk.fill();
    wait_for("the master to see its disk full", 30, || disk_full(env, health) == Some(1.0));
    // A key decision and a job are refused, saying why; nothing is written.
    let accept = env.run(SALT_KEY, &["-a", "p1", "-y"]);
    let said = format!("{}{}", String::from_utf8_lossy(&accept.stdout), String::from_utf8_lossy(&accept.stderr));
    assert!(said.contains("halite_min_free_bytes"), "salt-key -a on a full disk: {said}");
    let job = env.salt(&["m1", "test.echo", "during"], 30);
    let said = format!("{}{}", String::from_utf8_lossy(&job.stdout), String::from_utf8_lossy(&job.stderr));
    assert!(!job.status.success() && said.contains("halite_min_free_bytes"), "salt on a full disk: {said}");
    // What is stored is served.
    assert_eq!(env.ids("minions_pre"), ["p1", "p2"]);
    assert_eq!(env.runner(&["jobs.lookup_jid", &before]), json!({"m1": "before"}));
    assert!(m.proc.exited().is_none(), "the master keeps running: {}", env.master_log());

    // Space freed: writes are taken again, without a restart.
    disk.free();
    wait_for("the master to see space again", 30, || disk_full(env, health) == Some(0.0));
    env.ok(SALT_KEY, &["-a", "p1", "-y"]);
    assert_eq!(env.ids("minions_pre"), ["p2"]);
    assert_eq!(env.salt_json(&["m1", "test.echo", "after"], 60), json!({"m1": "after"}));
    assert_eq!(env.runner(&["jobs.lookup_jid", &before]), json!({"m1": "before"}));
    let log = env.master_log();
    assert!(log.contains("under its reserve") && log.contains("writing again"), "{log}");
}

/// What the master logs when a state-machine write met a full disk.
const STATE_FAILED: &str = "the state machine cannot be written";
/// What the master logs when its node stops on an error.
const NODE_STOPPED: &str = "raft node stopped";

/// A job whose return is 800,000 bytes of random text (under the minion's
/// `max_event_size`, 1 MiB, above which it sends `VALUE_TRIMMED` instead): a few of them
/// fill RocksDB's memtables (4 MiB), whose flush then needs as much space again.
const BIG: [&str; 3] = ["m1", "cmd.run", "head -c 600000 /dev/urandom | base64 -w0"];
const BIG_LEN: usize = 800_000;

/// Fills `disk`, the data directory's of `member`, to the last byte, then runs jobs with
/// big returns through `via` while giving back only as much space as the log's next
/// write needs (at most 1.25 MiB free: never enough for a flush of the memtables), until
/// `member` says its state machine met the full disk (or its node stopped); then fills
/// what is left. Each job waits for `member` to have applied the one before, so the
/// other members' disks take no more than it does. Returns how many jobs were answered.
fn meet_full_disk(via: &Env, disk: &SmallDisk, member: &Env, health: u16) -> usize {
    disk.fill();
    let answered = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let applied = |e: &Env| metric(&metrics_of(e, health), "halite_applied_index").unwrap_or(0.0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let out = via.salt_json(&BIG, 30);
                if out["m1"].as_str().is_some_and(|r| r.len() == BIG_LEN) {
                    answered.fetch_add(1, Ordering::Relaxed);
                }
                let to = applied(via);
                within(60, || stop.load(Ordering::Relaxed) || applied(member) >= to);
            }
        });
        let met = within(300, || {
            let log = member.master_log();
            if log.contains(STATE_FAILED) || log.contains(NODE_STOPPED) {
                return true;
            }
            if disk.available() < 1 << 20 {
                disk.free_some(256 << 10);
            }
            false
        });
        disk.fill();
        stop.store(true, Ordering::Relaxed);
        assert!(met, "timed out after 300s waiting for RocksDB to meet the full disk: {}", member.master_log());
    });
    answered.into_inner()
}

/// No reserve: RocksDB meets the full disk. The disk is filled to the last byte and given
/// back a little at a time, only as much as the log's next writes need, while jobs with
/// big returns run: the memtables' flush finds no room and fails, and RocksDB refuses
/// every write after it. The master holds: writes refused saying the disk is full, key
/// list and job cache served, the same process running. Once space is freed it opens its
/// state machine again in place, applies its log again from the state's own applied
/// index, and takes writes; every job answered before is still in the job cache.
#[test]
fn a_lone_master_whose_rocksdb_met_a_full_disk_opens_it_again_once_freed() {
    if skipped("a_lone_master_whose_rocksdb_met_a_full_disk_opens_it_again_once_freed") {
        return;
    }
    let mut s = lone_on_small_disk(0);
    let (disk, health, m) = (&s.disk, s.health, &mut s.m);
    let env = &m.env;
    let pid = || std::fs::read_to_string(env.root.join("master.pid")).unwrap_or_default().trim().to_string();
    let started = pid();
    assert_eq!(started, m.proc.pid().to_string(), "the master's pidfile");
    assert_eq!(env.salt_json(&["m1", "test.echo", "before"], 60), json!({"m1": "before"}));
    let (before, _) = env.newest_job("test.echo").expect("the job before");

    let answered = meet_full_disk(env, &disk, env, health);
    assert!(answered > 0, "jobs answered before RocksDB met the full disk: {}", env.master_log());
    assert_eq!(disk_full(env, health), Some(1.0));
    // Writes are refused, saying why; nothing is written.
    let accept = env.run(SALT_KEY, &["-a", "p1", "-y"]);
    let said = format!("{}{}", String::from_utf8_lossy(&accept.stdout), String::from_utf8_lossy(&accept.stderr));
    assert!(said.contains("filesystem is full"), "salt-key -a on a full disk: {said}");
    let job = env.salt(&["m1", "test.echo", "during"], 30);
    let said = format!("{}{}", String::from_utf8_lossy(&job.stdout), String::from_utf8_lossy(&job.stderr));
    assert!(!job.status.success() && said.contains("filesystem is full"), "salt on a full disk: {said}");
    // What is stored is served.
    assert_eq!(env.ids("minions_pre"), ["p1", "p2"]);
    assert_eq!(env.runner(&["jobs.lookup_jid", &before]), json!({"m1": "before"}));
    assert!(m.proc.exited().is_none(), "the master keeps running: {}", env.master_log());

    // Space freed: the state machine is opened again, writes are taken, no restart.
    disk.free();
    wait_for("the master to write again", 60, || disk_full(env, health) == Some(0.0));
    env.ok(SALT_KEY, &["-a", "p1", "-y"]);
    assert_eq!(env.ids("minions_pre"), ["p2"]);
    assert_eq!(env.salt_json(&["m1", "test.echo", "after"], 60), json!({"m1": "after"}));
    assert_eq!(env.runner(&["jobs.lookup_jid", &before]), json!({"m1": "before"}));
    // Every big job answered is in the job cache with its return.
    let jobs = env.runner(&["jobs.list_jobs"]);
    let kept = jobs
        .as_object()
        .expect("jobs")
        .iter()
        .filter(|(_, j)| j["Function"] == "cmd.run")
        .filter(|(jid, _)| env.runner(&["jobs.lookup_jid", jid.as_str()])["m1"].as_str().is_some_and(|r| r.len() == BIG_LEN))
        .count();
    assert!(kept >= answered, "{kept} big returns kept, {answered} answered");
    assert!(m.proc.exited().is_none(), "the master keeps running: {}", env.master_log());
    assert_eq!(pid(), started, "the same master process");
    let log = env.master_log();
    assert!(log.contains(STATE_FAILED) && log.contains("the state machine is opened again"), "{log}");
    assert!(!log.contains(NODE_STOPPED), "{log}");
    for line in log.lines().filter(|l| l.contains(STATE_FAILED) || l.contains("the state machine is opened again")) {
        eprintln!("{line}");
    }
}

/// Three members, each with its data directory on a 64 MiB disk of its own and
/// `reserve` bytes kept free, and their health port. Fields drop in order: the cluster
/// stops before the disks it writes on are unmounted.
struct OnSmallDisks {
    c: Cluster,
    disks: Vec<SmallDisk>,
    _place: tempfile::TempDir,
    health: u16,
}

fn on_small_disks(name: &str, reserve: u64) -> OnSmallDisks {
    let ips = loopback(3);
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let pool = port_free_on(&ipr);
    let health = port_free_on(&ipr);
    let place = tempfile::tempdir().expect("tempdir");
    let envs = member_envs(&ips, pool, name, |_| format!("halite_min_free_bytes: {reserve}\nhalite_health_port: {health}\n"));
    let disks: Vec<SmallDisk> = envs.iter().enumerate().map(|(i, e)| SmallDisk::mount(&place.path().join(format!("disk{i}.img")), &e.root.join("disk"), 64)).collect();
    for (e, d) in envs.iter().zip(&disks) {
        data_dir_at(e, &d.at.join("data"));
    }
    OnSmallDisks { c: Cluster::start(envs), disks, _place: place, health }
}

/// Three members, each with its data directory on a small disk of its own; the
/// leader's disk filled. It stops writing and is cut off: writes through it are refused,
/// it is not ready, the two others elect a leader and take a key decision. Once space is
/// freed it catches up on its own, and every member ends with the same state.
#[test]
fn a_cluster_member_on_a_full_disk_steps_aside_and_catches_up_once_freed() {
    if skipped("a_cluster_member_on_a_full_disk_steps_aside_and_catches_up_once_freed") {
        return;
    }
    let mut s = on_small_disks("full", 8 << 20);
    let (disks, health) = (&s.disks, s.health);
    let c = &mut s.c;
    let full = crate::faults::leader(&c, 0);
    let (a, b) = ((full + 1) % 3, (full + 2) % 3);
    register_key(&c.envs[a], "k1");
    wait_for("k1 pending on every member", 30, || c.envs.iter().all(|e| e.ids("minions_pre") == ["k1"]));

    disks[full].fill();
    wait_for("the leader to see its disk full", 30, || disk_full(&c.envs[full], health) == Some(1.0));
    // Writes through it are refused, saying why; it is not ready.
    let refused = c.envs[full].run(SALT_KEY, &["-a", "k1", "-y"]);
    let said = format!("{}{}", String::from_utf8_lossy(&refused.stdout), String::from_utf8_lossy(&refused.stderr));
    assert!(said.contains("halite_min_free_bytes"), "salt-key -a through the full member: {said}");
    wait_for("the full member to be not ready", 30, || metric(&metrics_of(&c.envs[full], health), "halite_ready") == Some(0.0));
    // The two others go on without it.
    wait_for("another leader", 60, || crate::faults::leader(&c, a) != full);
    c.envs[b].ok(SALT_KEY, &["-a", "k1", "-y"]);
    for i in [a, b] {
        wait_for("k1 accepted on the members with space", 30, || c.envs[i].ids("minions") == ["k1"]);
    }
    assert_eq!(c.envs[full].ids("minions_pre"), ["k1"], "the full member wrote nothing");

    // Freed: it catches up without a restart.
    disks[full].free();
    wait_for("the member to see space again", 30, || disk_full(&c.envs[full], health) == Some(0.0));
    wait_for("k1 accepted on the member that was full", 60, || c.envs[full].ids("minions") == ["k1"]);
    wait_for("the member ready again", 60, || metric(&metrics_of(&c.envs[full], health), "halite_ready") == Some(1.0));
    crate::faults::assert_same_digests(c);
}

/// Three members without a reserve; a follower's disk filled and given back only as
/// much as its log's writes need while jobs with big returns go through another member,
/// until its RocksDB meets the full disk. It holds: writes through it refused, saying the
/// disk is full, not ready; the two others go on and take a key decision. Once freed it
/// opens its state machine again in place, catches up without a restart, and every
/// member ends with the same state.
#[test]
fn a_cluster_member_whose_rocksdb_met_a_full_disk_catches_up_once_freed() {
    if skipped("a_cluster_member_whose_rocksdb_met_a_full_disk_catches_up_once_freed") {
        return;
    }
    let mut s = on_small_disks("fullrocks", 0);
    let (disks, health) = (&s.disks, s.health);
    let c = &mut s.c;
    let lead = crate::faults::leader(&c, 0);
    let (full, home) = ((lead + 1) % 3, (lead + 2) % 3);
    let _m1 = crate::faults::served(&c, "m1", home, home);
    register_key(&c.envs[home], "k1");
    wait_for("k1 pending on every member", 30, || c.envs.iter().all(|e| e.ids("minions_pre") == ["k1"]));

    meet_full_disk(&c.envs[home], &disks[full], &c.envs[full], health);
    let pid = c.procs[full].as_ref().expect("the full member runs").pid();
    // Writes through it are refused, saying why; it is not ready.
    let refused = c.envs[full].run(SALT_KEY, &["-a", "k1", "-y"]);
    let said = format!("{}{}", String::from_utf8_lossy(&refused.stdout), String::from_utf8_lossy(&refused.stderr));
    assert!(said.contains("filesystem is full"), "salt-key -a through the full member: {said}");
    wait_for("the full member to be not ready", 30, || metric(&metrics_of(&c.envs[full], health), "halite_ready") == Some(0.0));
    // The two others go on without it (it may have led meanwhile: they elect another).
    wait_for("a leader with space", 60, || crate::faults::leader(&c, home) != full);
    wait_for("k1 accepted through a member with space", 60, || c.envs[home].run(SALT_KEY, &["-a", "k1", "-y"]).status.success());
    for i in [lead, home] {
        wait_for("k1 accepted on the members with space", 30, || c.envs[i].ids("minions") == ["k1", "m1"]);
    }
    assert_eq!(c.envs[full].ids("minions_pre"), ["k1"], "the full member wrote nothing");

    // Freed: it opens its state machine again and catches up, without a restart.
    disks[full].free();
    wait_for("the member to write again", 60, || disk_full(&c.envs[full], health) == Some(0.0));
    wait_for("k1 accepted on the member that was full", 60, || c.envs[full].ids("minions") == ["k1", "m1"]);
    wait_for("the member ready again", 60, || metric(&metrics_of(&c.envs[full], health), "halite_ready") == Some(1.0));
    assert_eq!(c.procs[full].as_mut().expect("the full member runs").exited(), None, "the member keeps running");
    assert_eq!(c.procs[full].as_ref().expect("the full member runs").pid(), pid);
    let log = c.envs[full].master_log();
    assert!(log.contains(STATE_FAILED) && log.contains("the state machine is opened again") && !log.contains(NODE_STOPPED), "{log}");
    for line in log.lines().filter(|l| l.contains(STATE_FAILED) || l.contains("the state machine is opened again")) {
        eprintln!("{line}");
    }
    crate::faults::assert_same_digests(c);
}
