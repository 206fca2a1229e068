//! A master's temp root and config, and the files tests place in it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use super::*;

/// A temp root holding a master's config (`conf/master`), keys (`pki/`), data, roots
/// (`srv/salt`, `srv/pillar`), logs (`master.out`) and anything else the test writes.
pub struct Env {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    /// Where the master listens (`interface`, `ret_port`, `publish_port`) when it is
    /// configured to run ([`Env::master`]); empty and zero for offline tools.
    pub ip: String,
    pub ret: u16,
    pub publish: u16,
}

impl Env {
    /// A config for the offline tools: `keys.cache_driver: driver`, a small mmap
    /// geometry, every path under the root, then `extra` (where `@ROOT@` stands for the
    /// root). Roots (`file_roots`, `pillar_roots`) default to `@ROOT@/srv/{salt,pillar}`
    /// unless `extra` sets them; `mmap_key_size` defaults to 32 the same way.
    pub fn new(driver: &str, extra: &str) -> Env {
        Env::build(None, driver, extra, String::new(), 0, 0)
    }

    /// A config for a master listening on `ip` with ports free there.
    pub fn master(ip: &str, driver: &str, extra: &str) -> Env {
        let (ret, publish) = two_ports_on(&[ip]);
        Env::master_on(ip, ret, publish, driver, extra)
    }

    /// A config for a master listening on `ip` with the given ports.
    pub fn master_on(ip: &str, ret: u16, publish: u16, driver: &str, extra: &str) -> Env {
        Env::listening(None, ip, ret, publish, driver, extra)
    }

    /// [`Env::master`] with its root created inside `parent` (members that share a
    /// `root_dir`).
    pub fn master_in(parent: &Path, ip: &str, driver: &str, extra: &str) -> Env {
        let (ret, publish) = two_ports_on(&[ip]);
        Env::listening(Some(parent), ip, ret, publish, driver, extra)
    }

    fn listening(parent: Option<&Path>, ip: &str, ret: u16, publish: u16, driver: &str, extra: &str) -> Env {
        let listen = format!("interface: {ip}\nret_port: {ret}\npublish_port: {publish}\n");
        Env::build(parent, driver, &(listen + extra), ip.to_string(), ret, publish)
    }

    fn build(parent: Option<&Path>, driver: &str, extra: &str, ip: String, ret: u16, publish: u16) -> Env {
        let tmp = match parent {
            Some(p) => tempfile::tempdir_in(p),
            None => tempfile::tempdir(),
        }
        .expect("tempdir");
        let root = tmp.path().to_path_buf();
        std::fs::create_dir_all(root.join("conf")).expect("conf dir");
        std::fs::create_dir_all(root.join("pki")).expect("pki dir");
        let sets = |key: &str| extra.lines().any(|l| l.starts_with(&format!("{key}:")));
        let mut cfg = format!(
            "root_dir: @ROOT@\npki_dir: @ROOT@/pki\ncachedir: @ROOT@/cache\nsock_dir: @ROOT@/sock\nhalite_data_dir: @ROOT@/data\nlog_file: @ROOT@/log\npidfile: @ROOT@/master.pid\n\
             keys.cache_driver: {driver}\nmmap_key_slot_size: 96\nmmap_key_id_size: 64\nmmap_key_max_segment_bytes: 2048\n"
        );
        if !sets("mmap_key_size") {
            cfg.push_str("mmap_key_size: 32\n");
        }
        if !sets("file_roots") {
            cfg.push_str("file_roots:\n  base:\n    - @ROOT@/srv/salt\n");
        }
        if !sets("pillar_roots") {
            cfg.push_str("pillar_roots:\n  base:\n    - @ROOT@/srv/pillar\n");
        }
        cfg.push_str(extra);
        std::fs::write(root.join("conf/master"), cfg.replace("@ROOT@", &root.display().to_string())).expect("write config");
        Env { _tmp: tmp, root, ip, ret, publish }
    }

    pub fn conf(&self) -> String {
        self.root.join("conf").display().to_string()
    }

    pub fn pki(&self) -> PathBuf {
        self.root.join("pki")
    }

    /// Adds lines to the config (`@ROOT@` stands for the root).
    pub fn append_conf(&self, lines: &str) {
        let p = self.root.join("conf/master");
        let text = std::fs::read_to_string(&p).expect("config") + &lines.replace("@ROOT@", &self.root.display().to_string());
        std::fs::write(&p, text).expect("write config");
    }

    pub fn set_driver(&self, driver: &str) {
        let p = self.root.join("conf/master");
        let s = std::fs::read_to_string(&p).expect("config");
        let s: Vec<String> = s.lines().map(|l| if l.starts_with("keys.cache_driver:") { format!("keys.cache_driver: {driver}") } else { l.to_string() }).collect();
        std::fs::write(p, s.join("\n") + "\n").expect("write config");
    }

    /// Runs one of our tools with `-c` this env's config dir.
    pub fn run(&self, bin: &str, args: &[&str]) -> Output {
        self.run_for(bin, args, TOOL_TIMEOUT)
    }

    pub fn run_for(&self, bin: &str, args: &[&str], timeout: Duration) -> Output {
        run(Command::new(bin).arg("-c").arg(self.conf()).args(args), timeout)
    }

    /// [`Env::run`], failing the test unless the tool succeeds; returns its stdout.
    pub fn ok(&self, bin: &str, args: &[&str]) -> String {
        run_ok(Command::new(bin).arg("-c").arg(self.conf()).args(args), TOOL_TIMEOUT)
    }

    /// `salt-key -L --out json`.
    pub fn listing(&self) -> Value {
        json(&self.ok(SALT_KEY, &["-L", "--out", "json"]))
    }

    /// The ids in one state of the listing (`minions`, `minions_pre`, ...).
    pub fn ids(&self, state: &str) -> Vec<String> {
        self.listing()[state].as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect()).unwrap_or_default()
    }

    /// `salt -c CONF ARGS...` with `-t secs`, killed (and failing the test) if it runs
    /// 30 s past that.
    pub fn salt(&self, args: &[&str], secs: u64) -> Output {
        let t = secs.to_string();
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["-t", t.as_str()]);
        self.run_for(SALT, &full, Duration::from_secs(secs + 30))
    }

    /// `salt ... --static --out json` (every return in one document, as Salt prints it
    /// with `--static`), parsed (Null when the output is not JSON).
    pub fn salt_json(&self, args: &[&str], secs: u64) -> Value {
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["--static", "--out", "json"]);
        serde_json::from_slice(&self.salt(&full, secs).stdout).unwrap_or(Value::Null)
    }

    /// `salt-run FUN ARGS... --out json`, parsed.
    pub fn runner(&self, args: &[&str]) -> Value {
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["--out", "json"]);
        json(&self.ok(SALT_RUN, &full))
    }

    /// The jid of the newest `fun` job in `jobs.list_jobs`, with what it lists.
    pub fn newest_job(&self, fun: &str) -> Option<(String, Value)> {
        let jobs = self.runner(&["jobs.list_jobs"]);
        jobs.as_object()?.iter().rev().find(|(_, j)| j["Function"] == fun).map(|(jid, j)| (jid.clone(), j.clone()))
    }

    /// The kinds of the log's records, in order (`halite-ctl dump --json`; offline).
    pub fn record_kinds(&self) -> Vec<String> {
        self.ok(CTL, &["dump", "--json"]).lines().map(|l| json(l)["kind"].as_str().unwrap_or("").to_string()).collect()
    }

    /// The master's stdout and stderr so far.
    pub fn master_log(&self) -> String {
        std::fs::read_to_string(self.root.join("master.out")).unwrap_or_default()
    }
}

pub fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("dir entry");
        let dst = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).expect("copy");
            let mut p = std::fs::metadata(&dst).expect("metadata").permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            p.set_readonly(false);
            std::fs::set_permissions(&dst, p).expect("chmod");
        }
    }
}

/// A syntactically plausible public key file, distinct for each `i`.
pub fn fake_pub(i: usize) -> String {
    format!("-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA{i:08}\n-----END PUBLIC KEY-----")
}

/// Places a pending key file for each id (read at the next start, the adoption import).
pub fn seed_pending(env: &Env, ids: &[&str]) {
    let pre = env.pki().join("minions_pre");
    std::fs::create_dir_all(&pre).expect("minions_pre");
    for (i, id) in ids.iter().enumerate() {
        std::fs::write(pre.join(id), fake_pub(1000 + i)).expect("write key");
    }
}

