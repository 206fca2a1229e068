//! End-to-end tests of the tools: real binaries, real files, real crashes. The one test
//! binary of the tools crate (builds are the slow part here).

#![allow(dead_code, unused_imports)] // while its tests move to tests/e2e

#![allow(dead_code, unused_imports)] // while its tests move to tests/e2e

use std::path::{Path, PathBuf};
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use halite_storage::keys::mmap::MmapKeys;
use halite_storage::keys::{Geometry, KeyView};

const SALT_KEY: &str = env!("CARGO_BIN_EXE_salt-key");
const SALT_RUN: &str = env!("CARGO_BIN_EXE_salt-run");
const CTL: &str = env!("CARGO_BIN_EXE_halite-ctl");

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/salt-3008.5")
}

/// A temp root with a config dir, pki dir and data dir.
struct Env {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Env {
    fn new(driver: &str, extra: &str) -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        std::fs::create_dir_all(root.join("conf")).unwrap();
        std::fs::create_dir_all(root.join("pki")).unwrap();
        let cfg = format!(
            "root_dir: {r}\npki_dir: {r}/pki\ncachedir: {r}/cache\nsock_dir: {r}/sock\nhalite_data_dir: {r}/data\nlog_file: {r}/log\n\
             keys.cache_driver: {driver}\n{size}mmap_key_slot_size: 96\nmmap_key_id_size: 64\nmmap_key_max_segment_bytes: 2048\n{extra}",
            r = root.display(),
            size = if extra.contains("mmap_key_size") { "" } else { "mmap_key_size: 32\n" }
        );
        std::fs::write(root.join("conf/master"), cfg).unwrap();
        Env { _tmp: tmp, root }
    }

    fn conf(&self) -> String {
        self.root.join("conf").display().to_string()
    }

    fn pki(&self) -> PathBuf {
        self.root.join("pki")
    }

    fn set_driver(&self, driver: &str) {
        let p = self.root.join("conf/master");
        let s = std::fs::read_to_string(&p).unwrap();
        let s = s.lines().map(|l| if l.starts_with("keys.cache_driver:") { format!("keys.cache_driver: {driver}") } else { l.to_string() }).collect::<Vec<_>>().join("\n");
        std::fs::write(p, s + "\n").unwrap();
    }

    fn run(&self, bin: &str, args: &[&str]) -> Output {
        let conf = self.conf();
        let mut full = vec!["-c", conf.as_str()];
        full.extend_from_slice(args);
        Command::new(bin).args(&full).stdin(Stdio::null()).output().unwrap()
    }

    fn ok(&self, bin: &str, args: &[&str]) -> String {
        let o = self.run(bin, args);
        assert!(o.status.success(), "{bin} {args:?} failed: {}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    }

    fn listing(&self) -> Value {
        serde_json::from_str(&self.ok(SALT_KEY, &["-L", "--out", "json"])).unwrap()
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
            let mut p = std::fs::metadata(&dst).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            p.set_readonly(false);
            std::fs::set_permissions(&dst, p).unwrap();
        }
    }
}

fn expected_listing() -> Value {
    serde_json::from_slice(&std::fs::read(vectors().join("mmap_key/salt_key_list_keys.json")).unwrap()).unwrap()
}

fn fake_pub(i: usize) -> String {
    format!("-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA{i:08}\n-----END PUBLIC KEY-----")
}

/// Finds `needle` in the newest log file.
fn find_in_log(env: &Env, needle: &[u8]) -> (PathBuf, usize) {
    let dir = env.root.join("data/log");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "raftlog")).collect();
    files.sort();
    let f = files.pop().unwrap();
    let b = std::fs::read(&f).unwrap();
    let at = b.windows(needle.len()).position(|w| w == needle).expect("needle in log");
    (f, at)
}

fn kill_at(mut child: std::process::Child, after: Duration) -> bool {
    std::thread::sleep(after);
    let finished = child.try_wait().unwrap().is_some();
    if !finished {
        // SAFETY: signalling our own child by PID.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGKILL);
        }
    }
    let _ = child.wait();
    !finished
}

/// The reference venv (scripts/setup-reference.sh).
fn reference_venv() -> PathBuf {
    let p = std::env::var_os("HALITE_SALT_VENV").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("HALITE_CACHE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/halite"));
        cache.join("venv-salt-3008.5")
    });
    assert!(p.join(".halite-ready").exists(), "the reference Salt 3008.5 venv is missing at {}: run scripts/setup-reference.sh (the README test command does)", p.display());
    p
}

fn msgpack(v: &rmpv::Value) -> Vec<u8> {
    let mut b = Vec::new();
    rmpv::encode::write_value(&mut b, v).unwrap();
    b
}

// ---------------------------------------------------------------------------------------
// The daemon with a real salt-minion 3008.5.

/// A child process stopped by PID when dropped (SIGTERM, then SIGKILL).
struct Proc {
    child: std::process::Child,
    name: &'static str,
}

impl Proc {
    /// SIGTERM, then SIGKILL after 5 s. A child started as the leader of its own process
    /// group (salt-minion, which forks) is signalled as a group, and the group is killed
    /// once the leader is gone, so no forked helper outlives the test.
    fn stop(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: getpgid and kill on our own child's PID (and its group).
        let group = unsafe { libc::getpgid(pid) } == pid;
        let target = if group { -pid } else { pid };
        unsafe {
            libc::kill(target, libc::SIGTERM);
        }
        let mut exited = false;
        for _ in 0..50 {
            if self.child.try_wait().ok().flatten().is_some() {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
            eprintln!("{} needed SIGKILL", self.name);
        }
        if group {
            // SAFETY: as above.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The workspace's other binaries (built by `cargo test --workspace`), next to ours.
fn sibling_bin(name: &str) -> PathBuf {
    let p = Path::new(SALT_KEY).parent().unwrap().join(name);
    assert!(p.exists(), "{} is not built: run the workspace tests (scripts/test.sh)", p.display());
    p
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("timed out after {secs}s waiting for {what}");
}

fn start_master(env: &Env) -> Proc {
    let p = spawn_master(env);
    wait_master(env);
    p
}

fn wait_master(env: &Env) {
    let sock = env.root.join("sock/halite-admin.sock");
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if std::os::unix::net::UnixStream::connect(&sock).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(env.root.join("master.out")).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(40).collect();
    panic!("timed out after 30s waiting for the master's admin socket; its log ends:\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
}

/// Starts a master without waiting for it (cluster members wait for each other).
fn spawn_master(env: &Env) -> Proc {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(env.root.join("master.out")).unwrap();
    let child = Command::new(sibling_bin("salt-master"))
        .args(["-c", &env.conf(), "-l", "info"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Proc { child, name: "salt-master" }
}

/// Writes a minion config and starts the minion.
fn start_minion(venv: &Path, root: &Path, id: &str, extra: &str) -> Proc {
    let r = root.join(id);
    std::fs::create_dir_all(r.join("conf")).unwrap();
    let rd = r.display();
    std::fs::write(
        r.join("conf/minion"),
        format!(
            "id: {id}\nroot_dir: {rd}\npki_dir: {rd}/pki\ncachedir: {rd}/cache\nsock_dir: {rd}/sock\npidfile: {rd}/minion.pid\n\
             log_file: {rd}/minion.log\nacceptance_wait_time: 1\nrandom_reauth_delay: 0\nmultiprocessing: False\nuser: root\nauth_timeout: 3\n{extra}"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(r.join("out.log")).unwrap();
    Proc {
        child: Command::new(venv.join("bin/salt-minion"))
            .args(["-c", &r.join("conf").display().to_string(), "-l", "info"])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
        name: "salt-minion",
    }
}

fn ping_via(env: &Env, id: &str, timeout: &str) -> bool {
    let o = Command::new(sibling_bin("salt")).args(["-c", &env.conf(), id, "test.ping", "--out", "json", "-t", timeout]).output().unwrap();
    serde_json::from_slice::<Value>(&o.stdout).ok() == Some(serde_json::json!({ id: true }))
}

#[test]
fn two_masters_hot_multi_master_and_failover_with_failback() {
    let venv = reference_venv();
    // Same ports on two loopback addresses, as two hosts would have.
    let (ret, publish) = loop {
        let (a, b) = (free_port(), free_port());
        if std::net::TcpListener::bind(("127.0.0.2", a)).is_ok() && std::net::TcpListener::bind(("127.0.0.2", b)).is_ok() {
            break (a, b);
        }
    };
    let cfg = |addr: &str| format!("interface: {addr}\nret_port: {ret}\npublish_port: {publish}\nauto_accept: True\n");
    let e1 = Env::new("localfs_key", &cfg("127.0.0.1"));
    let e2 = Env::new("mmap_key", &format!("{}mmap_key_size: 1024\n", cfg("127.0.0.2")));
    let mut m1 = start_master(&e1);
    // Both masters present the same key pair (Salt's rule for multi-master and failover).
    for f in std::fs::read_dir(e1.pki()).unwrap() {
        let f = f.unwrap();
        let name = f.file_name().into_string().unwrap();
        if (name.ends_with(".pem") || name.ends_with(".pub")) && !name.starts_with("master.") {
            std::fs::copy(f.path(), e2.pki().join(&name)).unwrap();
        }
    }
    let mut m2 = start_master(&e2);
    let minions = tempfile::tempdir().unwrap();
    let masters = "master:\n  - 127.0.0.1\n  - 127.0.0.2\n";
    let _hot = start_minion(&venv, minions.path(), "hot1", &format!("{masters}master_port: {ret}\n"));
    let _fo = start_minion(
        &venv,
        minions.path(),
        "fo1",
        &format!("{masters}master_port: {ret}\npublish_port: {publish}\nmaster_type: failover\nmaster_alive_interval: 2\nmaster_failback: True\nmaster_failback_interval: 2\n"),
    );
    // Hot: both masters can publish to the minion and get its return.
    wait_for("hot1 via master 1", 90, || ping_via(&e1, "hot1", "3"));
    wait_for("hot1 via master 2", 90, || ping_via(&e2, "hot1", "3"));
    // Failover: the minion serves the first master; when it stops, it moves to the second.
    wait_for("fo1 via master 1", 90, || ping_via(&e1, "fo1", "3"));
    let keys2 = e2.listing();
    assert!(!keys2.to_string().contains("fo1"), "a failover minion talks to one master at a time: {keys2}");
    m1.stop();
    wait_for("fo1 to fail over to master 2", 120, || ping_via(&e2, "fo1", "3"));
    // Failback: master 1 returns (answering the minion's clear ping) and the minion goes back.
    drop(m1);
    let _m1 = start_master(&e1);
    wait_for("fo1 to fail back to master 1", 120, || ping_via(&e1, "fo1", "3"));
    // The hot minion reconnected to the restarted master as well.
    wait_for("hot1 via the restarted master 1", 90, || ping_via(&e1, "hot1", "3"));
    m2.stop();
}

/// An env for a running master on 127.0.0.1 with free ports (localfs_key); `extra` is
/// more config, where `@ROOT@` stands for the env's root. Returns the env and `ret_port`.
fn master_env(extra: &str) -> (Env, u16) {
    let (ret, publish) = (free_port(), free_port());
    let env = Env::new("localfs_key", &format!("interface: 127.0.0.1\nret_port: {ret}\npublish_port: {publish}\npidfile: @ROOT@/master.pid\n{extra}"));
    let conf_path = env.root.join("conf/master");
    let text = std::fs::read_to_string(&conf_path).unwrap().replace("@ROOT@", &env.root.display().to_string());
    std::fs::write(&conf_path, text).unwrap();
    (env, ret)
}

/// Runs `halite-swarm` until its `ready` line; returns the process and the lines read.
fn start_swarm(env: &Env, ret: u16, count: usize, jobs: Option<usize>) -> (Proc, Vec<Value>) {
    use std::io::BufRead;
    let mut args = vec!["--port".to_string(), ret.to_string(), "--count".into(), count.to_string(), "--key-dir".into(), env.root.join("swarm-keys").display().to_string(), "--auth-timeout".into(), "10".into()];
    if let Some(j) = jobs {
        args.extend(["--jobs".to_string(), j.to_string()]);
    }
    let log = std::fs::File::create(env.root.join(format!("swarm-{}.log", ret))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_halite-swarm")).args(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log).spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let proc = Proc { child, name: "halite-swarm" };
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        assert!(out.read_line(&mut l).unwrap() > 0, "halite-swarm ended early: {lines:?}");
        let v: Value = serde_json::from_str(&l).unwrap();
        let done = v["event"] == "ready";
        lines.push(v);
        if done {
            break;
        }
    }
    // Keep reading (and dropping) later lines so the swarm never blocks on a full pipe.
    std::thread::spawn(move || for _ in out.lines() {});
    (proc, lines)
}

#[test]
fn three_masters_form_a_cluster_and_replicate_keys() {
    // A pool port free on all three loopback addresses.
    let pool = loop {
        let p = free_port();
        if ["127.0.0.2", "127.0.0.3"].iter().all(|ip| std::net::TcpListener::bind((*ip, p)).is_ok()) {
            break p;
        }
    };
    let ips = ["127.0.0.1", "127.0.0.2", "127.0.0.3"];
    let mut envs = Vec::new();
    for ip in ips {
        let peers: Vec<String> = ips.iter().filter(|p| **p != ip).map(|p| format!("  - {p}\n")).collect();
        let env = Env::new(
            "localfs_key",
            &format!(
                "interface: {ip}\nid: {ip}\nret_port: {}\npublish_port: {}\npidfile: @ROOT@/master.pid\ncluster_id: halite-test\ncluster_secret: s3cret\n\
                 cluster_pool_port: {pool}\ncluster_isolated_filesystem: True\ncluster_pki_dir: @ROOT@/cpki\ncluster_peers:\n{}",
                free_port(),
                free_port(),
                peers.concat()
            ),
        );
        let conf_path = env.root.join("conf/master");
        let text = std::fs::read_to_string(&conf_path).unwrap().replace("@ROOT@", &env.root.display().to_string());
        std::fs::write(&conf_path, text).unwrap();
        envs.push(env);
    }
    // Members wait for each other (a quorum agrees on the cluster key and AES key before
    // any serves), so all three start before any is waited for.
    let mut masters: Vec<Option<Proc>> = envs.iter().map(|e| Some(spawn_master(e))).collect();
    for env in &envs {
        wait_master(env);
    }
    let members = |env: &Env| -> Value { serde_json::from_str(&env.ok(SALT_RUN, &["cluster.members", "--out", "json"])).unwrap() };
    wait_for("a cluster leader", 30, || members(&envs[0])["leader_id"].is_string());
    let m = members(&envs[1]);
    assert_eq!(m["voters"], serde_json::json!(ips), "{m}");
    assert_eq!((m["voter_count"].as_u64(), m["node_id"].as_str()), (Some(3), Some("127.0.0.2")), "{m}");
    // Two simulated minions sign in to the third master: their pending keys are records
    // every master applies.
    let ret3 = ret_port_of(&envs[2]);
    let swarm_args = ["--port".to_string(), ret3.to_string(), "--count".into(), "2".into(), "--key-dir".into(), envs[0].root.join("keys").display().to_string(), "--acceptance-wait".into(), "1".into(), "--master".into(), "127.0.0.3".into()];
    let swarm_out = std::fs::File::create(envs[0].root.join("swarm.out")).unwrap();
    let _swarm = Proc { child: Command::new(env!("CARGO_BIN_EXE_halite-swarm")).args(&swarm_args).stdout(swarm_out).stderr(Stdio::null()).spawn().unwrap(), name: "halite-swarm" };
    for env in &envs {
        wait_for("the pending keys on every master", 60, || env.listing()["minions_pre"] == serde_json::json!(["swarm-0", "swarm-1"]));
    }
    // Accepted on the second master: accepted everywhere, and the minions get in on the third.
    envs[1].ok(SALT_KEY, &["-A", "-y"]);
    for env in &envs {
        wait_for("the accepted keys on every master", 30, || env.listing()["minions"] == serde_json::json!(["swarm-0", "swarm-1"]));
        assert!(env.root.join("cpki/minions/swarm-0").exists(), "each master's own key view");
    }
    wait_for("the swarm to sign in", 60, || std::fs::read_to_string(envs[0].root.join("swarm.out")).unwrap_or_default().contains("\"ready\""));
    let o = Command::new(sibling_bin("salt")).args(["-c", &envs[2].conf(), "*", "test.ping", "--out", "json", "-t", "20"]).output().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&o.stdout).ok(), Some(serde_json::json!({"swarm-0": true, "swarm-1": true})));
    // A job published through the first master reaches the minions on the third (every
    // master publishes the jobs it applies) and their returns reach the first.
    let o = Command::new(sibling_bin("salt")).args(["-c", &envs[0].conf(), "*", "test.echo", "via-the-log", "--out", "json", "-t", "20"]).output().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&o.stdout).ok(), Some(serde_json::json!({"swarm-0": "via-the-log", "swarm-1": "via-the-log"})), "{}", String::from_utf8_lossy(&o.stderr));
    // Every member presents the same cluster key and hands out the same AES/session key:
    // a minion signs in on the third, again on the first (which must sign with the key
    // the minion cached from the third and echo its token), and its request encrypted
    // for the third is accepted by the second.
    {
        use halite_tools::swarm::minion::{self, AesReply, Identity, Job};
        let key = halite_master::crypto::PrivateKey::from_pem(&std::fs::read(envs[0].root.join("keys/0.pem")).unwrap()).unwrap();
        let me = Identity::new("swarm-0".into(), key).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let ask = |i: usize, body: Vec<u8>| rt.block_on(minion::request_once(&format!("tcp://{}:{}", ips[i], ret_port_of(&envs[i])), body, Duration::from_secs(10), "test")).unwrap();
        let n = "00000000000000000000000000000042";
        let on3 = minion::auth_reply(&me, n, &ask(2, minion::auth_request(&me, n, None).unwrap()), None).unwrap();
        let on1 = minion::auth_reply(&me, n, &ask(0, minion::auth_request(&me, n, Some(&on3.master_pub)).unwrap()), Some(&on3.master_pub)).expect("the first member signs with the cluster key the minion cached from the third");
        assert_eq!(on1.session.key_string(), on3.session.key_string(), "one session key cluster-wide");
        assert_eq!(on1.aes.key_string(), on3.aes.key_string(), "one publish key cluster-wide");
        let job = Job { jid: "20261122000000000042".into(), fun: "test.ping".into(), arg: vec![], user: None, matched: true };
        let (body, nonce) = minion::aes_request(&me, &on3.session, minion::return_load(&job)).unwrap();
        assert!(matches!(minion::aes_reply(&on3.session, &nonce, &ask(1, body)).unwrap(), AesReply::Value(_)), "the second member accepts the session from the third");
        wait_for("the return in the first member's job cache", 30, || {
            serde_json::from_str::<Value>(&envs[0].ok(SALT_RUN, &["jobs.lookup_jid", "20261122000000000042", "--out", "json"])).ok() == Some(serde_json::json!({"swarm-0": true}))
        });
        for env in &envs {
            assert!(env.root.join("cpki/cluster.pem").exists(), "the cluster key pair is written to cluster_pki_dir");
        }
        assert_eq!(std::fs::read(envs[0].root.join("cpki/cluster.pub")).unwrap(), std::fs::read(envs[2].root.join("cpki/cluster.pub")).unwrap());
    }
        // The first master stops; the other two still make a quorum and change keys.
    masters[0].take().unwrap().stop();
    envs[1].ok(SALT_KEY, &["-d", "swarm-1", "-y"]);
    wait_for("the delete on the third master", 30, || envs[2].listing()["minions"] == serde_json::json!(["swarm-0"]));
    // It comes back and catches up from the log.
    masters[0] = Some(start_master(&envs[0]));
    wait_for("the first master to catch up", 60, || envs[0].listing()["minions"] == serde_json::json!(["swarm-0"]));
    // The third member is retired: stopped, then removed from the membership, after which
    // the other two are the whole quorum.
    masters[2].take().unwrap().stop();
    let out: Value = serde_json::from_str(&envs[0].ok(SALT_RUN, &["cluster.remove_member", "127.0.0.3", "--out", "json"])).unwrap();
    assert_eq!(out["voters"], serde_json::json!(["127.0.0.1", "127.0.0.2"]), "{out}");
    wait_for("the second member to see two voters", 30, || members(&envs[1])["voter_count"] == 2);
    envs[1].ok(SALT_KEY, &["-d", "swarm-0", "-y"]);
    wait_for("the delete on the first member", 30, || envs[0].listing()["minions"] == serde_json::json!([]));
    for m in masters.iter_mut().flatten() {
        m.stop();
    }
}

/// The `ret_port` an env's master config sets.
fn ret_port_of(env: &Env) -> u16 {
    std::fs::read_to_string(env.root.join("conf/master")).unwrap().lines().find_map(|l| l.strip_prefix("ret_port: ")).unwrap().parse().unwrap()
}

/// A port free on every one of `ips`.
fn port_free_on(ips: &[&str]) -> u16 {
    loop {
        let p = free_port();
        if ips.iter().all(|ip| std::net::TcpListener::bind((*ip, p)).is_ok()) {
            return p;
        }
    }
}

#[test]
fn real_minion_behind_haproxy_with_a_three_master_cluster() {
    let venv = reference_venv();
    let ips = ["127.0.0.1", "127.0.0.2", "127.0.0.3"];
    let lb = "127.0.0.10";
    let all = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.10"];
    let (ret, publish, pool) = (port_free_on(&all), port_free_on(&all), port_free_on(&all));
    let envs: Vec<Env> = ips
        .iter()
        .map(|ip| {
            let peers: String = ips.iter().filter(|p| *p != ip).map(|p| format!("  - {p}\n")).collect();
            let env = Env::new(
                "localfs_key",
                &format!(
                    "interface: {ip}\nid: {ip}\nret_port: {ret}\npublish_port: {publish}\npidfile: @ROOT@/master.pid\ncluster_id: lb-test\ncluster_secret: s3cret\n\
                     cluster_pool_port: {pool}\ncluster_isolated_filesystem: True\ncluster_pki_dir: @ROOT@/cpki\ncluster_peers:\n{peers}"
                ),
            );
            let conf_path = env.root.join("conf/master");
            let text = std::fs::read_to_string(&conf_path).unwrap().replace("@ROOT@", &env.root.display().to_string());
            std::fs::write(&conf_path, text).unwrap();
            env
        })
        .collect();
    let mut masters: Vec<Option<Proc>> = envs.iter().map(|e| Some(spawn_master(e))).collect();
    for env in &envs {
        wait_master(env);
    }
    // HAProxy in TCP mode in front of both ports, round robin, dead members skipped.
    let backend = |name: &str, port: u16| -> String {
        let servers: String = ips.iter().enumerate().map(|(i, ip)| format!("  server m{i} {ip}:{port} check inter 500ms fall 1 rise 1\n")).collect();
        format!("frontend {name}\n  bind {lb}:{port}\n  default_backend {name}_members\nbackend {name}_members\n  balance roundrobin\n{servers}")
    };
    let cfg_path = envs[0].root.join("haproxy.cfg");
    std::fs::write(
        &cfg_path,
        format!("global\n  maxconn 2048\ndefaults\n  mode tcp\n  timeout connect 1s\n  timeout client 1h\n  timeout server 1h\n{}{}", backend("ret", ret), backend("pub", publish)),
    )
    .unwrap();
    let haproxy_log = std::fs::File::create(envs[0].root.join("haproxy.out")).unwrap();
    let _haproxy = Proc {
        child: Command::new("haproxy").args(["-f", &cfg_path.display().to_string(), "-db"]).stdout(haproxy_log.try_clone().unwrap()).stderr(haproxy_log).spawn().expect("haproxy (scripts/setup.sh installs it)"),
        name: "haproxy",
    };
    wait_for("haproxy to listen", 20, || std::net::TcpStream::connect((lb, ret)).is_ok());
    // An unmodified salt-minion that only knows the load balancer.
    let _minion = start_minion(&venv, &envs[0].root, "m1", &format!("master: {lb}\nmaster_port: {ret}\n"));
    wait_for("m1's key pending on every member", 90, || envs.iter().all(|e| e.listing()["minions_pre"] == serde_json::json!(["m1"])));
    envs[1].ok(SALT_KEY, &["-a", "m1", "-y"]);
    // Published through the first member, answered through whichever member the balancer
    // picked for each of the minion's connections.
    wait_for("test.ping through the first member", 120, || ping_via(&envs[0], "m1", "5"));
    let o = Command::new(sibling_bin("salt")).args(["-c", &envs[2].conf(), "m1", "test.echo", "lb", "--out", "json", "-t", "20"]).output().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&o.stdout).ok(), Some(serde_json::json!({"m1": "lb"})));
    // A member goes away: the minion's connections to it break, the balancer sends them
    // to the others, and jobs keep working.
    masters[2].take().unwrap().stop();
    wait_for("test.ping after a member stopped", 120, || ping_via(&envs[1], "m1", "5"));
    for m in masters.iter_mut().flatten() {
        m.stop();
    }
}

/// A cluster member's env on `ip` (isolated filesystem, auto_accept) with the given peers.
fn member_env(ip: &str, peers: &[&str], pool: u16, secret: &str) -> Env {
    let list: String = peers.iter().map(|p| format!("  - {p}\n")).collect();
    let env = Env::new(
        "localfs_key",
        &format!(
            "interface: {ip}\nid: {ip}\nret_port: {}\npublish_port: {}\npidfile: @ROOT@/master.pid\nauto_accept: True\ncluster_id: join-test\ncluster_secret: {secret}\n\
             cluster_pool_port: {pool}\ncluster_isolated_filesystem: True\ncluster_pki_dir: @ROOT@/cpki\n\
             file_roots:\n  base:\n    - @ROOT@/srv\npillar_roots:\n  base:\n    - @ROOT@/pillar\ncluster_peers:\n{list}",
            free_port(),
            free_port()
        ),
    );
    let conf_path = env.root.join("conf/master");
    let text = std::fs::read_to_string(&conf_path).unwrap().replace("@ROOT@", &env.root.display().to_string());
    std::fs::write(&conf_path, text).unwrap();
    env
}

#[test]
fn a_master_joins_a_running_cluster_and_a_wrong_secret_does_not() {
    let pool = port_free_on(&["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    let founders = [member_env("127.0.0.1", &["127.0.0.2"], pool, "s3cret"), member_env("127.0.0.2", &["127.0.0.1"], pool, "s3cret")];
    let mut procs: Vec<Proc> = founders.iter().map(spawn_master).collect();
    for env in &founders {
        wait_master(env);
    }
    let members = |env: &Env| -> Value { serde_json::from_str(&env.ok(SALT_RUN, &["cluster.members", "--out", "json"])).unwrap() };
    wait_for("a leader", 30, || members(&founders[0])["leader_id"].is_string());
    // A key in the cluster before the newcomer exists.
    let ret1 = ret_port_of(&founders[0]);
    let signed_in = Command::new(env!("CARGO_BIN_EXE_halite-swarm"))
        .args(["--port", &ret1.to_string(), "--count", "1", "--jobs", "0", "--key-dir", &founders[0].root.join("keys").display().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(signed_in.success());
    assert_eq!(founders[1].listing()["minions"], serde_json::json!(["swarm-0"]));
    // cluster.sync_roots: the first founder's roots become records every member writes.
    let (srv, pil) = (founders[0].root.join("srv"), founders[0].root.join("pillar"));
    std::fs::create_dir_all(srv.join("web")).unwrap();
    std::fs::create_dir_all(&pil).unwrap();
    std::fs::write(srv.join("top.sls"), "base:\n  '*':\n    - web\n").unwrap();
    std::fs::write(srv.join("web/init.sls"), "nginx:\n  pkg.installed\n").unwrap();
    std::fs::write(pil.join("top.sls"), "base:\n  '*':\n    - common\n").unwrap();
    let out: Value = serde_json::from_str(&founders[0].ok(SALT_RUN, &["cluster.sync_roots", "--out", "json"])).unwrap();
    assert_eq!((out["status"].as_str(), out["written"].as_u64(), out["removed"].as_u64()), (Some("committed"), Some(3), Some(0)), "{out}");
    wait_for("the roots on the second founder", 30, || std::fs::read_to_string(founders[1].root.join("srv/web/init.sls")).ok().as_deref() == Some("nginx:\n  pkg.installed\n"));
    wait_for("the pillar roots on the second founder", 30, || founders[1].root.join("pillar/top.sls").exists());
    // A third master that only knows the first, on an empty disk: it joins, receives the
    // log (the key, the cluster secrets), serves, and is promoted to voter.
    let newcomer = member_env("127.0.0.3", &["127.0.0.1"], pool, "s3cret");
    // Pinned to the cluster's key (Salt's cluster_pub_fingerprint; case does not matter).
    let pin = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(founders[0].root.join("cpki/cluster.pub")).unwrap())).to_uppercase()
    };
    let append = |env: &Env, line: String| {
        let p = env.root.join("conf/master");
        let text = std::fs::read_to_string(&p).unwrap() + &line;
        std::fs::write(&p, text).unwrap();
    };
    append(&newcomer, format!("cluster_pub_fingerprint: {pin}\n"));
    procs.push(spawn_master(&newcomer));
    let sock = newcomer.root.join("sock/halite-admin.sock");
    let start = std::time::Instant::now();
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        if start.elapsed() > Duration::from_secs(40) {
            for e in founders.iter().chain([&newcomer]) {
                eprintln!("==== {}\n{}", e.root.display(), std::fs::read_to_string(e.root.join("master.out")).unwrap_or_default());
            }
            panic!("the newcomer did not start serving");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(newcomer.listing()["minions"], serde_json::json!(["swarm-0"]), "state-sync by the log");
    wait_for("the synced roots on the newcomer", 30, || newcomer.root.join("srv/web/init.sls").exists());
    // A file removed at the source and synced again is removed everywhere.
    std::fs::remove_file(srv.join("top.sls")).unwrap();
    let out: Value = serde_json::from_str(&founders[0].ok(SALT_RUN, &["cluster.sync_roots", "roots=file", "--out", "json"])).unwrap();
    assert_eq!((out["written"].as_u64(), out["removed"].as_u64(), out["unchanged"].as_u64()), (Some(0), Some(1), Some(1)), "{out}");
    wait_for("the removal on the other members", 30, || !founders[1].root.join("srv/top.sls").exists() && !newcomer.root.join("srv/top.sls").exists());
    assert_eq!(std::fs::read(newcomer.root.join("cpki/cluster.pub")).unwrap(), std::fs::read(founders[0].root.join("cpki/cluster.pub")).unwrap());
    wait_for("the newcomer promoted to voter", 30, || members(&founders[1])["voters"] == serde_json::json!(["127.0.0.1", "127.0.0.2", "127.0.0.3"]));
    let ring: Value = serde_json::from_str(&newcomer.ok(SALT_RUN, &["cluster.ring_info", "--out", "json"])).unwrap();
    assert_eq!(ring, serde_json::json!({"is_clustered": true, "node_count": 3, "nodes": ["127.0.0.1", "127.0.0.2", "127.0.0.3"], "vnodes": 150}));
    // Its changes replicate like anyone's.
    newcomer.ok(SALT_KEY, &["-d", "swarm-0", "-y"]);
    wait_for("the delete on the founders", 30, || founders.iter().all(|e| e.listing()["minions"] == serde_json::json!([])));
    // A master with another secret is not let in: its frames do not open.
    let intruder = member_env("127.0.0.4", &["127.0.0.1"], pool, "wrong");
    let mut intruder_proc = spawn_master(&intruder);
    wait_for("the refusal in the first founder's log", 30, || std::fs::read_to_string(founders[0].root.join("master.out")).unwrap_or_default().contains("does not authenticate"));
    assert_eq!(members(&founders[0])["voter_count"], 3);
    intruder_proc.stop();
    // The right secret but a pin that does not match the cluster's key: it refuses to join
    // and exits.
    let pinned_wrong = member_env("127.0.0.4", &["127.0.0.1"], pool, "s3cret");
    append(&pinned_wrong, format!("cluster_pub_fingerprint: {}\n", "ab".repeat(32)));
    let mut p = spawn_master(&pinned_wrong);
    let mut status = None;
    wait_for("the wrongly pinned master to exit", 30, || {
        status = p.child.try_wait().unwrap();
        status.is_some()
    });
    assert!(!status.unwrap().success());
    let log = std::fs::read_to_string(pinned_wrong.root.join("master.out")).unwrap();
    assert!(log.contains("refusing to join") && log.contains("cluster_pub_fingerprint"), "{log}");
    assert_eq!(members(&founders[0])["voter_count"], 3);
    for mut p in procs {
        p.stop();
    }
}

#[test]
fn a_shared_filesystem_cluster_moves_to_local_directories_by_restarting_members() {
    let pool = port_free_on(&["127.0.0.1", "127.0.0.2"]);
    let shared = tempfile::tempdir().unwrap();
    let (spki, sroots) = (shared.path().join("pki"), shared.path().join("roots"));
    std::fs::create_dir_all(&sroots).unwrap();
    // root_dir / so that the shared paths are the same on both members (Salt puts every
    // other absolute path under root_dir).
    let write_conf = |env: &Env, ip: &str, peer: &str, ports: (u16, u16), pki: &Path, roots: &Path, isolated: bool| {
        let r = env.root.display();
        std::fs::write(
            env.root.join("conf/master"),
            format!(
                "root_dir: /\npki_dir: {r}/pki\ncachedir: {r}/cache\nsock_dir: {r}/sock\nhalite_data_dir: {r}/data\nlog_file: {r}/log\npidfile: {r}/master.pid\n\
                 interface: {ip}\nid: {ip}\nret_port: {}\npublish_port: {}\nauto_accept: True\ncluster_id: move\ncluster_secret: s3cret\n\
                 cluster_pool_port: {pool}\ncluster_isolated_filesystem: {isolated}\ncluster_pki_dir: {}\nfile_roots:\n  base:\n    - {}\ncluster_peers:\n  - {peer}\n",
                ports.0,
                ports.1,
                pki.display(),
                roots.display()
            ),
        )
        .unwrap();
    };
    let (a, b) = (Env::new("localfs_key", ""), Env::new("localfs_key", ""));
    let (ports_a, ports_b) = ((free_port(), free_port()), (free_port(), free_port()));
    write_conf(&a, "127.0.0.1", "127.0.0.2", ports_a, &spki, &sroots, false);
    write_conf(&b, "127.0.0.2", "127.0.0.1", ports_b, &spki, &sroots, false);
    let mut pa = spawn_master(&a);
    let mut pb = spawn_master(&b);
    wait_master(&a);
    wait_master(&b);
    // Keys and roots on the shared mount.
    let ok = Command::new(env!("CARGO_BIN_EXE_halite-swarm"))
        .args(["--port", &ports_a.0.to_string(), "--count", "2", "--jobs", "0", "--key-dir", &a.root.join("keys").display().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    std::fs::write(sroots.join("top.sls"), "base:\n  '*': []\n").unwrap();
    a.ok(SALT_RUN, &["cluster.sync_roots", "roots=file"]);
    wait_for("the keys on the shared mount", 30, || spki.join("minions/swarm-0").exists() && spki.join("minions/swarm-1").exists());
    // Member b moves to local directories: stop, repoint, start. Its views are rebuilt
    // from its own state machine; nothing is copied.
    pb.stop();
    let (lpki, lroots) = (b.root.join("local-pki"), b.root.join("local-roots"));
    std::fs::create_dir_all(&lroots).unwrap();
    write_conf(&b, "127.0.0.2", "127.0.0.1", ports_b, &lpki, &lroots, true);
    pb = spawn_master(&b);
    wait_master(&b);
    assert_eq!(b.listing()["minions"], serde_json::json!(["swarm-0", "swarm-1"]));
    assert!(lpki.join("minions/swarm-0").exists() && lpki.join("minions/swarm-1").exists(), "the local key view was rebuilt");
    assert_eq!(std::fs::read_to_string(lroots.join("top.sls")).unwrap(), "base:\n  '*': []\n", "the local roots were rewritten");
    // Changes keep reaching both: the shared mount through a, b's local view through b.
    a.ok(SALT_KEY, &["-d", "swarm-1", "-y"]);
    wait_for("the delete in b's local view", 30, || !lpki.join("minions/swarm-1").exists());
    wait_for("the delete on the shared mount", 30, || !spki.join("minions/swarm-1").exists());
    pa.stop();
    pb.stop();
}
