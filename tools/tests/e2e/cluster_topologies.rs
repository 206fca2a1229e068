//! Both of Salt's cluster topologies for real.
//!
//! - **Shared filesystem** (`cluster_isolated_filesystem: False`): three members on one
//!   `cluster_pki_dir`, `cachedir` and roots, with either key driver; real salt-minion
//!   3008.5 processes sign in through different members, are accepted with `salt-key`
//!   and answer jobs, while Salt 3008.5's own `salt-key -L` keeps reading the shared
//!   tree (every read a valid listing). With `mmap_key` no writer keeps the MmapCache
//!   lock past its write.
//! - **Isolated** (`True`): each member writes its own views, with no marks and
//!   un-namespaced probe files.
//! - **Salt's shared → isolated procedure** (Salt's master-cluster page) behind HAProxy with real minions:
//!   `pki.migrate_to_mmap` on the shared tree, then one member at a time drained,
//!   stopped, its directories copied to local paths, repointed (`isolated: True`,
//!   `mmap_key`), started and put back, while jobs keep running: every job returns from
//!   every minion.
//!
//! Members and the "shared mount" live under one temp dir, which is also their
//! `root_dir`, so every path a member does not set resolves inside it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::*;

/// Where a member keeps its keys, cache and roots.
struct Paths {
    pki: PathBuf,
    cache: PathBuf,
    roots: PathBuf,
}

/// Writes `env`'s config as a member of cluster `cluster` on `pool` with `peers`.
fn write_conf(env: &Env, root_dir: &Path, peers: &[&str], pool: u16, driver: &str, isolated: bool, p: &Paths, extra: &str) {
    let r = env.root.display();
    let list: String = peers.iter().map(|p| format!("  - {p}\n")).collect();
    std::fs::write(
        env.root.join("conf/master"),
        format!(
            "root_dir: {}\npki_dir: {r}/pki\ncachedir: {}\nsock_dir: {r}/sock\nhalite_data_dir: {r}/data\nlog_file: {r}/log\npidfile: {r}/master.pid\n\
             interface: {ip}\nid: {ip}\nret_port: {}\npublish_port: {}\nkeys.cache_driver: {driver}\n\
             mmap_key_size: 64\nmmap_key_slot_size: 96\nmmap_key_id_size: 64\nmmap_key_max_segment_bytes: 65536\n\
             cluster_id: topo\ncluster_secret: s3cret\ncluster_pool_port: {pool}\ncluster_isolated_filesystem: {isolated}\ncluster_pki_dir: {}\n\
             file_roots:\n  base:\n    - {}\npillar_roots:\n  base:\n    - {r}/srv/pillar\ncluster_peers:\n{list}{extra}",
            root_dir.display(),
            p.cache.display(),
            env.ret,
            env.publish,
            p.pki.display(),
            p.roots.display(),
            ip = env.ip,
        ),
    )
    .expect("write config");
}

/// Three members on one shared mount (`dir/shared/{pki,cache,roots}`).
struct SharedThree {
    c: Cluster,
    dir: tempfile::TempDir,
    pool: u16,
}

impl SharedThree {
    fn shared(&self) -> Paths {
        let s = self.dir.path().join("shared");
        Paths { pki: s.join("pki"), cache: s.join("cache"), roots: s.join("roots") }
    }
}

/// Three members with `driver` on one shared mount, on the first three of `ips` (the
/// pool port is free on all of them); with `ports`, every member listens on those (ret,
/// publish) ports (behind a balancer), else on ports of its own; `extra` ends each
/// member's config.
fn shared_three(driver: &str, ports: Option<(u16, u16)>, ips: &[String], extra: &str) -> SharedThree {
    let dir = tempfile::tempdir().expect("tempdir");
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let pool = port_free_on(&ipr);
    let shared = Paths { pki: dir.path().join("shared/pki"), cache: dir.path().join("shared/cache"), roots: dir.path().join("shared/roots") };
    std::fs::create_dir_all(&shared.roots).expect("shared roots");
    let envs: Vec<Env> = ips[..3]
        .iter()
        .map(|ip| {
            let mut env = Env::master_in(dir.path(), ip, driver, "");
            if let Some((ret, publish)) = ports {
                env.ret = ret;
                env.publish = publish;
            }
            let peers: Vec<&str> = ipr[..3].iter().copied().filter(|p| p != ip).collect();
            write_conf(&env, dir.path(), &peers, pool, driver, false, &shared, extra);
            env
        })
        .collect();
    let c = Cluster::start(envs);
    SharedThree { c, dir, pool }
}

/// Salt 3008.5's `salt-key -c CONF ARGS` (it reads `cluster_pki_dir` in a cluster).
fn reference_salt_key(env: &Env, args: &[&str]) -> std::process::Output {
    run(Command::new(reference_venv().join("bin/salt-key")).arg("-c").arg(env.conf()).args(args), TOOL_TIMEOUT)
}

/// Runs Salt's `salt-key -L` over `env`'s key tree again and again until stopped; each
/// listing must be one Salt could print: valid JSON, only `ids`, each in one bucket.
struct Watcher {
    stop: Arc<AtomicBool>,
    runs: std::thread::JoinHandle<Vec<Result<Value, String>>>,
}

impl Watcher {
    fn start(env: &Env) -> Watcher {
        let conf = env.conf();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let runs = std::thread::spawn(move || {
            let mut out = Vec::new();
            while !s.load(Ordering::Relaxed) {
                let o = run(Command::new(reference_venv().join("bin/salt-key")).arg("-c").arg(&conf).args(["-L", "--out", "json"]), TOOL_TIMEOUT);
                out.push(if o.status.success() {
                    serde_json::from_slice::<Value>(&o.stdout).map_err(|e| format!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
                } else {
                    Err(format!("{}: {}{}", o.status, String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
                });
            }
            out
        });
        Watcher { stop, runs }
    }

    /// Stops and checks every listing the reference printed meanwhile.
    fn check(self, ids: &[&str]) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        let runs = self.runs.join().expect("watcher thread");
        for r in &runs {
            let v = r.as_ref().unwrap_or_else(|e| panic!("Salt's salt-key failed on the shared tree: {e}"));
            let mut seen = Vec::new();
            for bucket in ["minions", "minions_pre", "minions_rejected", "minions_denied"] {
                for id in v[bucket].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                    let id = id.as_str().unwrap_or_default();
                    assert!(ids.contains(&id), "an id nobody signed in with: {v}");
                    assert!(!seen.contains(&id), "an id in two buckets: {v}");
                    seen.push(id);
                }
            }
        }
        runs.len()
    }
}

/// Three shared members with `driver`; real minions r0, r1, r2 each signing in through
/// another member, each accepted with `salt-key` through the next one; all answer jobs
/// through every member, and Salt's `salt-key` read the shared tree throughout.
fn minions_through_every_shared_member(driver: &str) -> SharedThree {
    let s = shared_three(driver, None, &loopback(3), "");
    let watcher = Watcher::start(&s.c.envs[0]);
    let ids = ["r0", "r1", "r2"];
    let minions: Vec<Proc> = ids
        .iter()
        .zip(&s.c.envs)
        .map(|(id, env)| start_minion(&env.root, id, &format!("master: {}\nmaster_port: {}\n", env.ip, env.ret)))
        .collect();
    for env in &s.c.envs {
        wait_for("every minion pending through every member", 120, || env.ids("minions_pre") == ids);
    }
    for (i, id) in ids.iter().enumerate() {
        s.c.envs[(i + 1) % 3].ok(SALT_KEY, &["-a", id, "-y"]);
    }
    for (id, env) in ids.iter().zip(&s.c.envs) {
        wait_minion_ready(&env.root, id, 1, 120);
    }
    for env in &s.c.envs {
        wait_ping(env, "r2", 120);
        assert_eq!(env.salt_json(&["*", "test.ping"], 30), json!({"r0": true, "r1": true, "r2": true}), "through {}", env.ip);
    }
    let reads = watcher.check(&ids);
    assert!(reads > 0, "Salt's salt-key read the shared tree");
    let o = reference_salt_key(&s.c.envs[1], &["-L", "--out", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(json(&String::from_utf8_lossy(&o.stdout))["minions"], json!(ids), "Salt's salt-key on the shared tree");
    drop(minions);
    s
}

#[test]
fn three_shared_members_on_mmap_key_serve_real_minions_signing_in_through_each() {
    let s = minions_through_every_shared_member("mmap_key");
    assert!(s.shared().pki.join(".mmap_keys.idx").exists());
}

#[test]
fn three_shared_members_on_localfs_key_serve_real_minions_signing_in_through_each() {
    let s = minions_through_every_shared_member("localfs_key");
    assert!(s.shared().pki.join("minions/r0").exists());
}

#[test]
fn shared_members_mark_the_views_they_write_and_keep_their_probes_apart() {
    let s = shared_three("mmap_key", None, &loopback(3), "auto_accept: True\n");
    let a = &s.c.envs[0];
    run_ok(Command::new(SWARM).args(["--master", &a.ip, "--port", &a.ret.to_string(), "--count", "2", "--jobs", "0"]).arg("--key-dir").arg(a.root.join("keys")), TOOL_TIMEOUT);
    std::fs::write(s.shared().roots.join("top.sls"), "base:\n  '*': []\n").expect("top.sls");
    a.ok(SALT_RUN, &["cluster.sync_roots", "roots=file"]);
    let shared = s.shared();
    for name in [".halite-view-keys-mmap_key.index", ".halite-view-roots.index"] {
        let mark = std::fs::read_to_string(shared.pki.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut f = mark.split_whitespace();
        assert!(f.next().and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n > 0) && f.next() == Some("topo"), "{name}: {mark:?}");
    }
    for env in &s.c.envs {
        wait_for("each member's own ready probe", 30, || shared.cache.join("health").join(&env.ip).join("ready").exists());
    }
    assert!(!shared.cache.join("health/ready").exists(), "no member's probe speaks for the others");
}

#[test]
fn isolated_members_each_write_their_own_views_without_marks() {
    let c = crate::cluster::founding(3, "iso", "");
    crate::cluster::accepted_key(&c, "k1", 2, 1);
    for env in &c.envs {
        let cpki = env.root.join("cpki");
        assert!(cpki.join("minions/k1").exists(), "{}: its own view", env.ip);
        let marks: Vec<_> = std::fs::read_dir(&cpki).expect("cpki").flatten().filter(|e| e.file_name().to_string_lossy().starts_with(".halite-view-")).collect();
        assert!(marks.is_empty(), "{}: no shared-view marks in an isolated member's tree", env.ip);
        wait_for("the member's probe directly under cachedir/health", 30, || env.root.join("cache/health/ready").exists());
    }
}

// ---------------------------------------------------------------------------------------
// Salt's shared → isolated procedure, behind HAProxy, with jobs running throughout.

/// HAProxy in front of the members, with its admin socket.
struct Balancer {
    _proc: Proc,
    sock: PathBuf,
}

impl Balancer {
    fn start(dir: &Path, lb: &str, members: &[String], ret: u16, publish: u16) -> Balancer {
        let sock = dir.join("haproxy.sock");
        let backend = |name: &str, port: u16| -> String {
            let servers: String = members.iter().enumerate().map(|(i, ip)| format!("  server m{i} {ip}:{port} check inter 500ms fall 1 rise 1\n")).collect();
            format!("frontend {name}\n  bind {lb}:{port}\n  default_backend {name}_members\nbackend {name}_members\n  balance roundrobin\n{servers}")
        };
        let cfg = dir.join("haproxy.cfg");
        std::fs::write(
            &cfg,
            format!(
                "global\n  maxconn 2048\n  stats socket {} level admin\ndefaults\n  mode tcp\n  timeout connect 1s\n  timeout client 1h\n  timeout server 1h\n{}{}",
                sock.display(),
                backend("ret", ret),
                backend("pub", publish)
            ),
        )
        .expect("haproxy.cfg");
        let p = Proc::spawn_logged("haproxy (scripts/setup.sh installs it)", Command::new("haproxy").arg("-f").arg(&cfg).arg("-db"), &dir.join("haproxy.out"));
        wait_for("haproxy to listen", 20, || std::net::TcpStream::connect((lb, ret)).is_ok() && sock.exists());
        Balancer { _proc: p, sock }
    }

    /// One command on the admin socket; its answer.
    fn admin(&self, cmd: &str) -> String {
        let mut s = std::os::unix::net::UnixStream::connect(&self.sock).expect("haproxy admin socket");
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        s.write_all(format!("{cmd}\n").as_bytes()).expect("admin command");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// Sessions open now to server `m{i}` of both backends.
    fn sessions_to(&self, i: usize) -> u64 {
        let stat = self.admin("show stat");
        stat.lines()
            .filter(|l| l.starts_with("ret_members,") || l.starts_with("pub_members,"))
            .filter(|l| l.split(',').nth(1) == Some(&format!("m{i}")))
            .filter_map(|l| l.split(',').nth(4).and_then(|n| n.parse::<u64>().ok()))
            .sum()
    }

    /// Takes member `i` out (maintenance: no new sessions) and closes its sessions, so
    /// its minions reconnect to the others.
    fn drain(&self, i: usize) {
        for b in ["ret_members", "pub_members"] {
            self.admin(&format!("set server {b}/m{i} state maint"));
            self.admin(&format!("shutdown sessions server {b}/m{i}"));
        }
        wait_for("the drained member's sessions to close", 30, || self.sessions_to(i) == 0);
    }

    fn put_back(&self, i: usize) {
        for b in ["ret_members", "pub_members"] {
            self.admin(&format!("set server {b}/m{i} state ready"));
        }
    }
}

/// Jobs run one after another through member `via` until stopped; the procedure holds
/// `gate` while it changes `via` or drains a member.
struct Jobs {
    gate: Arc<Mutex<usize>>,
    stop: Arc<AtomicBool>,
    done: Arc<std::sync::atomic::AtomicUsize>,
    results: std::thread::JoinHandle<Vec<(usize, usize, Value)>>,
}

impl Jobs {
    fn start(confs: Vec<String>, via: usize) -> Jobs {
        let gate = Arc::new(Mutex::new(via));
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (g, s, d) = (gate.clone(), stop.clone(), done.clone());
        let results = std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut n = 0usize;
            while !s.load(Ordering::Relaxed) {
                let via = g.lock().unwrap_or_else(|p| p.into_inner());
                n += 1;
                let fun = if n % 2 == 0 { vec!["*".to_string(), "test.ping".to_string()] } else { vec!["*".to_string(), "test.echo".to_string(), format!("job-{n}")] };
                let o = run(
                    Command::new(SALT).arg("-c").arg(&confs[*via]).args(&fun).args(["-t", "30", "--static", "--out", "json"]),
                    Duration::from_secs(90),
                );
                // The timeline, printed if the test fails.
                eprintln!("job {n} via member {} done at {:?}", *via, std::time::SystemTime::now());
                out.push((n, *via, serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)));
                drop(via);
                d.fetch_add(1, Ordering::Relaxed);
                // Paces the job generator; the test waits on the `done` counter.
                std::thread::sleep(Duration::from_millis(200));
            }
            out
        });
        Jobs { gate, stop, done, results }
    }

    /// Waits until `k` more jobs have finished (whatever their result).
    fn wait_more(&self, k: usize) {
        let target = self.done.load(Ordering::Relaxed) + k;
        wait_for("more jobs", 300, || self.done.load(Ordering::Relaxed) >= target);
    }

    fn finish(self) -> Vec<(usize, usize, Value)> {
        self.stop.store(true, Ordering::Relaxed);
        self.results.join().expect("jobs thread")
    }
}

#[test]
fn salts_shared_to_isolated_procedure_behind_haproxy_loses_no_job() {
    let ips = loopback(4);
    let (lb_ret, lb_pub) = two_ports_on(&ips.iter().map(String::as_str).collect::<Vec<_>>());
    let mut s = shared_three("localfs_key", Some((lb_ret, lb_pub)), &ips, "");
    let lb = ips[3].clone();
    let lbr = Balancer::start(s.dir.path(), &lb, &ips[..3], lb_ret, lb_pub);
    let ids = ["m1", "m2"];
    let minions: Vec<Proc> = ids.iter().map(|id| start_minion(s.dir.path(), id, &format!("master: {lb}\nmaster_port: {lb_ret}\n"))).collect();
    wait_for("both minions pending", 120, || s.c.envs[0].ids("minions_pre") == ids);
    s.c.envs[1].ok(SALT_KEY, &["-A", "-y"]);
    for id in ids {
        wait_minion_ready(s.dir.path(), id, 1, 120);
    }
    wait_for("both minions answering", 120, || s.c.envs[0].salt_json(&["*", "test.ping"], 10) == json!({"m1": true, "m2": true}));

    let confs: Vec<String> = s.c.envs.iter().map(Env::conf).collect();
    let jobs = Jobs::start(confs, 0);
    // 1. On one master, the shared tree to mmap_key.
    let out = s.c.envs[2].ok(SALT_RUN, &["pki.migrate_to_mmap"]);
    assert!(out.contains("successfully"), "{out}");
    // 2-3. One member at a time: drain, stop, copy to local paths, repoint (isolated,
    // mmap_key), start, put back.
    let shared = s.shared();
    let ip_list: Vec<String> = ips[..3].to_vec();
    for i in 0..3 {
        {
            // The next job goes through another member, once the minions have left this one.
            let mut via = jobs.gate.lock().unwrap_or_else(|p| p.into_inner());
            *via = (i + 1) % 3;
            lbr.drain(i);
            let next = &s.c.envs[*via];
            wait_for("the minions reconnected through the others", 60, || next.salt_json(&["*", "test.ping"], 10) == json!({"m1": true, "m2": true}));
        }
        eprintln!("step {i}: stopping at {:?}", std::time::SystemTime::now());
        s.c.stop(i);
        let env = &s.c.envs[i];
        let local = Paths { pki: env.root.join("local/pki"), cache: env.root.join("local/cache"), roots: env.root.join("local/roots") };
        copy_dir(&shared.pki, &local.pki);
        copy_dir(&shared.cache, &local.cache);
        copy_dir(&shared.roots, &local.roots);
        let peers: Vec<&str> = ip_list.iter().map(String::as_str).filter(|p| *p != env.ip).collect();
        write_conf(env, s.dir.path(), &peers, s.pool, "mmap_key", true, &local, "");
        // Jobs go on while the member is out.
        jobs.wait_more(2);
        s.c.restart(i);
        let env = &s.c.envs[i];
        wait_for("the moved member's own view lists the minions", 60, || env.ids("minions") == ids);
        lbr.put_back(i);
        eprintln!("step {i}: back at {:?}", std::time::SystemTime::now());
        jobs.wait_more(2);
    }
    let results = jobs.finish();
    drop(minions);
    assert!(results.len() >= 12, "jobs ran throughout: {}", results.len());
    for (n, via, v) in &results {
        let want = if n % 2 == 0 { json!({"m1": true, "m2": true}) } else { json!({"m1": format!("job-{n}"), "m2": format!("job-{n}")}) };
        assert_eq!(v, &want, "job {n} through member {via}");
    }
    for env in &s.c.envs {
        let cfg = std::fs::read_to_string(env.root.join("conf/master")).expect("config");
        assert!(cfg.contains("cluster_isolated_filesystem: true") && cfg.contains("keys.cache_driver: mmap_key"), "{cfg}");
        assert!(env.root.join("local/pki/.mmap_keys.idx").exists());
    }
}
