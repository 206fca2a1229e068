//! The master configuration, read as Salt reads it.
//!
//! `-c CONFIG_DIR` names a directory holding the file `master`; the files matched by
//! `default_include` (`master.d/*.conf` unless set otherwise) and then `include` are read
//! after it, in name order, each overriding earlier keys. Defaults are Salt's. When
//! `root_dir` is not `/`, every path option that does not already lie under it gets it
//! prepended, as Salt's `prepend_root_dir` does.
//!
//! Every option is kept (in [`MasterConfig::raw`], with its file in
//! [`MasterConfig::origin`]), so one file can serve a Python master and a Halite master;
//! what Halite does with each one (honoured, no effect, not implemented at its value,
//! unknown) is [`crate::config_keys`], which the daemon's start and
//! `salt-master --check-config` report. A value of the wrong type or out of range stops
//! start-up with an error naming the option and the file.
//!
//! Halite's own options (not in Salt):
//!
//! | option            | default              | meaning                                       |
//! |-------------------|----------------------|-----------------------------------------------|
//! | `halite_data_dir` | `/var/lib/salt/halite` | the log (`log/`) and state machine (`state/`) |
//! | `halite_max_request_bytes` | 67108864 (64 MiB) | largest request accepted on `ret_port`; larger ones get `"bad load"` (a message over it + 64 KiB is refused from its frame header, `daemon::sockets`) |
//! | `halite_max_inflight_bytes` | 268435456 (256 MiB) | most bytes of requests handled at once on `ret_port` (all requests in flight together); past it the port is not read until replies free room (`daemon::budget`). At least `halite_max_request_bytes` + 64 KiB |
//! | `halite_request_fifo` | False | start the request port's waiting requests in arrival order (one queue) instead of by class: sign-ins, returns and the rest each with a share of the port (`daemon::request_port::shares`; for comparisons) |
//! | `halite_max_pending_keys` | 10000 | most pending keys; a new id signing in beyond it is answered `full` and nothing is written (0 = no cap) |
//! | `halite_health_port` | 0 (off) | port of the HTTP health endpoint on `interface`: `/alive`, `/ready`, `/metrics` |
//! | `halite_new_publish_key_at_start` | False | a lone master writes a new publish key generation at every start, as Salt makes one (`daemon::publish_key`; for comparisons) |
//! | `halite_pub_fanout_capacity` | 1024 | publishes held between the daemon and their fan-out to the subscribers' queues on `publish_port` (about 40 bytes a slot, reserved at start); when full, publishing waits for the fan-out, nothing is dropped (`daemon::sockets`) |
//! | `halite_log_max_bytes` | 268435456 (256 MiB) | compact the log (snapshot + drop the history) when its files exceed this; `0` or `null`: no byte limit |
//! | `halite_min_free_bytes` | 268435456 (256 MiB) | free space kept on `halite_data_dir`'s filesystem: under it, writes are refused and the member pauses until space is freed (docs/operations.md "A full disk"); `0` or `null`: none kept |
//! | `halite_cluster_pin_founders` | False | a cluster is founded only once every founder's member key is in `cluster_pki_dir/peers/`, and a founder is admitted only under that key until the log holds it (hardening; by default `cluster_secret` authenticates a founder, as in Salt: `memberkey`) |
//!
//! Salt's `pub_hwm` (default 1000) bounds the publishes queued per subscriber on
//! `publish_port`; further ones are dropped for that subscriber.
//!
//! Salt's `cluster_max_log_size` (entries in the log before it is compacted) is read with
//! a different default: Salt's `None` never compacts, Halite's default is 100000 (`0` or
//! `null` turns the entry limit off). See `halite_storage::compaction`.

use std::collections::BTreeMap;

/// `halite_min_free_bytes`'s default: room for RocksDB's flushes and compactions and
/// the log's next files.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 256 << 20;
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use halite_storage::keys::{Geometry, KeyDriver};
use halite_storage::roots::RootsDirs;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: not valid YAML: {msg}")]
    Yaml { path: PathBuf, msg: String },
    #[error("{path}: the top level must be a mapping of options")]
    NotMapping { path: PathBuf },
    #[error("option `{key}` (from {path}): {why}")]
    Invalid { key: String, path: String, why: String },
}

pub type Result<T, E = ConfigError> = std::result::Result<T, E>;

/// Options Halite reads, with Salt's names and defaults.
#[derive(Debug, Clone)]
pub struct MasterConfig {
    pub config_dir: PathBuf,
    pub id: String,
    pub root_dir: PathBuf,
    pub interface: String,
    pub ipv6: bool,
    pub publish_port: u16,
    pub ret_port: u16,
    pub pki_dir: PathBuf,
    pub cachedir: PathBuf,
    pub sock_dir: PathBuf,
    pub pidfile: PathBuf,
    pub log_file: String,
    pub log_level: String,
    pub log_level_logfile: Option<String>,
    pub file_roots: BTreeMap<String, Vec<PathBuf>>,
    pub pillar_roots: BTreeMap<String, Vec<PathBuf>>,
    pub auto_accept: bool,
    pub open_mode: bool,
    pub autosign_file: Option<PathBuf>,
    pub autoreject_file: Option<PathBuf>,
    pub autosign_grains_dir: Option<PathBuf>,
    pub keep_jobs_seconds: u64,
    /// Salt's `request_server_ttl`: AES requests whose `ts` is older are refused (0: off).
    pub request_server_ttl: u64,
    /// Most minions signed in at once (0: no limit); new ones beyond get `full`.
    pub max_minions: u64,
    pub publish_session: u64,
    pub timeout: u64,
    pub key_driver: KeyDriver,
    pub cluster_id: Option<String>,
    pub cluster_peers: Vec<String>,
    pub cluster_pki_dir: Option<PathBuf>,
    pub cluster_pool_port: u16,
    pub cluster_secret: Option<String>,
    pub cluster_isolated_filesystem: bool,
    pub halite_data_dir: PathBuf,
    /// Largest request body accepted on the request port, in bytes.
    pub halite_max_request_bytes: usize,
    /// A follower's election timeout window in milliseconds (Salt's
    /// `cluster_election_min`, `cluster_election_max`: 750, 1500): how long after its
    /// last contact with the leader a member stands for election.
    pub cluster_election_ms: (u64, u64),
    /// Most bytes of requests handled at once on the request port (`daemon::budget`).
    pub halite_max_inflight_bytes: usize,
    /// Start waiting requests in arrival order rather than by class (`request_port::shares`).
    pub halite_request_fifo: bool,
    /// When the log is compacted (`cluster_max_log_size`, `halite_log_max_bytes`).
    pub compaction: halite_storage::compaction::CompactionLimits,
    /// Free space kept on the data directory's filesystem (0: none).
    pub halite_min_free_bytes: u64,
    /// Most pending keys kept; a new id beyond it is answered `full` (0 = no cap).
    pub halite_max_pending_keys: u64,
    /// Publishes queued per subscriber before further ones are dropped for it.
    pub pub_hwm: usize,
    /// Publishes held between the daemon and their fan-out (`halite_pub_fanout_capacity`).
    pub halite_pub_fanout_capacity: usize,
    /// The port of the HTTP health endpoint (`/alive`, `/ready`, `/metrics`) on
    /// `interface`; `None` (0 or absent) serves none.
    pub halite_health_port: Option<u16>,
    /// `halite_cluster_dial`: member name → `host:port` this member connects to instead
    /// of the member's own address (a forwarder or NAT in between; the fault tests' proxy).
    pub halite_cluster_dial: BTreeMap<String, String>,
    /// `halite_cluster_pin_founders`: founders admitted only under keys provisioned in
    /// `cluster_pki_dir/peers/` (`memberkey`).
    pub halite_cluster_pin_founders: bool,
    /// `nodegroups`: named targets, expanded before matching (`crate::nodegroups`).
    pub nodegroups: crate::nodegroups::Nodegroups,
    /// `range_server`: the SECO range server (`host[:port]`) range targets are expanded
    /// with (`crate::range`); Salt's default `range:80`.
    pub range_server: String,
    /// `minion_data_cache` (default true): whether the master keeps the grains and
    /// pillar minions report. Off, grain, pillar and ipcidr targets are published to
    /// every accepted minion, which match themselves (Salt's behaviour).
    pub minion_data_cache: bool,
    /// `job_cache_store_endtime` (default false): `jobs.list_job` and `jobs.print_job`
    /// show `EndTime`, the time of the job's last stored return (Salt writes it at each
    /// return; Halite derives it from the returns' times).
    pub job_cache_store_endtime: bool,
    /// Salt's signed master public key (`keyfiles::signing`): `master_sign_pubkey`,
    /// `master_sign_key_name` (`master_sign`), `master_pubkey_signature` (unset: `<id>_pubkey_signature`),
    /// `master_use_pubkey_signature`.
    pub master_sign_pubkey: bool,
    pub master_sign_key_name: String,
    pub master_pubkey_signature: Option<String>,
    pub master_use_pubkey_signature: bool,
    /// `file_recv` (default False): minions may push files (`cp.push`, `req::file_recv`);
    /// `file_recv_max_size`: the largest, in MiB (default 100).
    pub file_recv: bool,
    pub file_recv_max_size: u64,
    /// Every option as read (after includes), for the ones Halite does not model.
    pub raw: Mapping,
    /// Which file each option came from.
    pub origin: BTreeMap<String, PathBuf>,
}

fn read_yaml(path: &Path) -> Result<Mapping> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
    if text.trim().is_empty() {
        return Ok(Mapping::new());
    }
    let v: Value = serde_yaml::from_str(&text).map_err(|e| ConfigError::Yaml { path: path.to_path_buf(), msg: e.to_string() })?;
    match v {
        Value::Mapping(m) => Ok(m),
        Value::Null => Ok(Mapping::new()),
        _ => Err(ConfigError::NotMapping { path: path.to_path_buf() }),
    }
}

/// Expands a simple glob (`*` and `?` in the last component) relative to `base`.
fn glob_files(base: &Path, pattern: &str) -> Vec<PathBuf> {
    let p = if Path::new(pattern).is_absolute() { PathBuf::from(pattern) } else { base.join(pattern) };
    let (Some(dir), Some(pat)) = (p.parent(), p.file_name().and_then(|f| f.to_str())) else { return Vec::new() };
    if !pat.contains(['*', '?']) {
        return if p.is_file() { vec![p] } else { Vec::new() };
    }
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(|n| crate::glob::fnmatch(pat, n)))
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

impl MasterConfig {
    /// Reads `<config_dir>/master` and its includes. A missing `master` file means all
    /// defaults (as with Salt).
    pub fn load(config_dir: &Path) -> Result<Self> {
        let main = config_dir.join("master");
        let mut raw = Mapping::new();
        let mut origin = BTreeMap::new();
        let mut merge = |m: Mapping, from: &Path, raw: &mut Mapping| {
            for (k, v) in m {
                if let Some(ks) = k.as_str() {
                    origin.insert(ks.to_string(), from.to_path_buf());
                }
                raw.insert(k, v);
            }
        };
        let first = if main.exists() { read_yaml(&main)? } else { Mapping::new() };
        let default_include = first.get("default_include").and_then(Value::as_str).unwrap_or("master.d/*.conf").to_string();
        let include: Vec<String> = match first.get("include") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Sequence(s)) => s.iter().filter_map(|v| v.as_str().map(String::from)).collect(),
            _ => Vec::new(),
        };
        merge(first, &main, &mut raw);
        for pat in std::iter::once(default_include).chain(include) {
            for f in glob_files(config_dir, &pat) {
                let m = read_yaml(&f)?;
                merge(m, &f, &mut raw);
            }
        }
        Self::from_mapping(config_dir, raw, origin)
    }

    /// Builds the config from an already merged mapping.
    pub fn from_mapping(config_dir: &Path, raw: Mapping, origin: BTreeMap<String, PathBuf>) -> Result<Self> {
        let r = Reader { raw: &raw, origin: &origin, dir: config_dir };
        let root_dir = PathBuf::from(r.string("root_dir", "/")?);
        let cluster_id = r.opt_string("cluster_id")?;
        let size = r.uint("mmap_key_size", 1_000_000)?;
        let slot_size = r.uint("mmap_key_slot_size", 96)? as usize;
        let key_size = r.uint("mmap_key_id_size", 64)? as usize;
        let seg = match raw.get("mmap_key_max_segment_bytes") {
            Some(_) => r.uint("mmap_key_max_segment_bytes", 1 << 30)?,
            None => r.uint("mmap_cache_max_segment_bytes", 1 << 30)?,
        };
        let driver = match r.string("keys.cache_driver", "localfs_key")?.as_str() {
            "localfs_key" => KeyDriver::Localfs,
            "mmap_key" => {
                let geo = Geometry { size, slot_size, key_size, max_segment_bytes: seg };
                geo.validate().map_err(|e| r.invalid("mmap_key_slot_size", e.to_string()))?;
                KeyDriver::Mmap(geo)
            }
            other => return Err(r.invalid("keys.cache_driver", format!("unknown driver {other:?}; Halite supports localfs_key and mmap_key"))),
        };
        let default_id = format!("{}_master", hostname());
        let keep_jobs_seconds = match raw.get("keep_jobs_seconds") {
            Some(_) => r.uint("keep_jobs_seconds", 86400)?,
            // Hours; a count too large to be seconds means keep for ever (found by the
            // config fuzzing: the multiplication overflowed).
            None => r.uint("keep_jobs", 24)?.saturating_mul(3600),
        };
        let mut c = MasterConfig {
            config_dir: config_dir.to_path_buf(),
            id: r.string("id", &default_id)?,
            interface: r.string("interface", "0.0.0.0")?,
            ipv6: r.boolean("ipv6", false)?,
            publish_port: r.port("publish_port", 4505)?,
            ret_port: r.port("ret_port", 4506)?,
            pki_dir: PathBuf::from(r.string("pki_dir", "/etc/salt/pki/master")?),
            cachedir: PathBuf::from(r.string("cachedir", "/var/cache/salt/master")?),
            sock_dir: PathBuf::from(r.string("sock_dir", "/var/run/salt/master")?),
            pidfile: PathBuf::from(r.string("pidfile", "/var/run/salt-master.pid")?),
            log_file: r.string("log_file", "/var/log/salt/master")?,
            log_level: r.string("log_level", "warning")?,
            log_level_logfile: r.opt_string("log_level_logfile")?,
            file_roots: r.roots("file_roots", &["/srv/salt", "/srv/spm/salt"])?,
            pillar_roots: r.roots("pillar_roots", &["/srv/pillar", "/srv/spm/pillar"])?,
            auto_accept: r.boolean("auto_accept", false)?,
            open_mode: r.boolean("open_mode", false)?,
            autosign_file: r.opt_string("autosign_file")?.map(PathBuf::from),
            autoreject_file: r.opt_string("autoreject_file")?.map(PathBuf::from),
            autosign_grains_dir: r.opt_string("autosign_grains_dir")?.map(PathBuf::from),
            keep_jobs_seconds,
            max_minions: r.uint("max_minions", 0)?,
            request_server_ttl: r.uint("request_server_ttl", 0)?,
            publish_session: r.uint("publish_session", 86400)?,
            timeout: r.uint("timeout", 5)?,
            key_driver: driver,
            cluster_peers: r.string_list("cluster_peers")?,
            cluster_pki_dir: r.opt_string("cluster_pki_dir")?.map(PathBuf::from),
            cluster_pool_port: r.port("cluster_pool_port", 4520)?,
            cluster_secret: r.opt_string("cluster_secret")?,
            cluster_isolated_filesystem: r.boolean("cluster_isolated_filesystem", false)?,
            cluster_id,
            halite_data_dir: PathBuf::from(r.string("halite_data_dir", "/var/lib/salt/halite")?),
            halite_max_request_bytes: r.uint("halite_max_request_bytes", 64 << 20)?.max(4096) as usize,
            cluster_election_ms: {
                let (min, max) = (r.uint("cluster_election_min", 750)?, r.uint("cluster_election_max", 1500)?);
                if min < 150 {
                    return Err(r.invalid("cluster_election_min", format!("{min} ms is shorter than three heartbeats (150 ms)")));
                }
                if max <= min {
                    return Err(r.invalid("cluster_election_max", format!("{max} ms is not above cluster_election_min ({min} ms)")));
                }
                (min, max)
            },
            halite_max_inflight_bytes: 0,
            halite_request_fifo: r.boolean("halite_request_fifo", false)?,
            compaction: halite_storage::compaction::CompactionLimits {
                max_entries: r.limit("cluster_max_log_size", halite_storage::compaction::DEFAULT_MAX_ENTRIES)?,
                max_bytes: r.limit("halite_log_max_bytes", halite_storage::compaction::DEFAULT_MAX_BYTES)?,
                min_entries: halite_storage::compaction::DEFAULT_MIN_ENTRIES,
            },
            halite_min_free_bytes: r.limit("halite_min_free_bytes", DEFAULT_MIN_FREE_BYTES)?.unwrap_or(0),
            halite_max_pending_keys: r.uint("halite_max_pending_keys", 10_000)?,
            pub_hwm: r.uint("pub_hwm", 1000)?.clamp(1, 1 << 20) as usize,
            halite_pub_fanout_capacity: r.uint("halite_pub_fanout_capacity", 1024)?.clamp(1, 1 << 20) as usize,
            halite_health_port: match r.uint("halite_health_port", 0)? {
                0 => None,
                p => Some(u16::try_from(p).map_err(|_| r.invalid("halite_health_port", format!("{p} is not a TCP port")))?),
            },
            halite_cluster_dial: r.string_map("halite_cluster_dial")?,
            halite_cluster_pin_founders: r.boolean("halite_cluster_pin_founders", false)?,
            nodegroups: crate::nodegroups::from_option(raw.get("nodegroups")).map_err(|why| r.invalid("nodegroups", why.to_string()))?,
            range_server: r.string("range_server", "range:80")?,
            minion_data_cache: r.boolean("minion_data_cache", true)?,
            job_cache_store_endtime: r.boolean("job_cache_store_endtime", false)?,
            master_sign_pubkey: r.boolean("master_sign_pubkey", false)?,
            master_sign_key_name: r.string("master_sign_key_name", "master_sign")?,
            master_pubkey_signature: r.opt_string("master_pubkey_signature")?,
            master_use_pubkey_signature: r.boolean("master_use_pubkey_signature", false)?,
            file_recv: r.boolean("file_recv", false)?,
            file_recv_max_size: r.uint("file_recv_max_size", 100)?,
            root_dir,
            raw: raw.clone(),
            origin: origin.clone(),
        };
        // Room for at least one largest request besides its routing frames.
        c.halite_max_inflight_bytes = (r.uint("halite_max_inflight_bytes", 256 << 20)?.min(1 << 40) as usize).max(c.halite_max_request_bytes.saturating_add(64 << 10));
        if !["garbage", "trace", "debug", "info", "warning", "warn", "error", "critical", "quiet", "all", "profile"].contains(&c.log_level.as_str()) {
            return Err(r.invalid("log_level", format!("unknown level {:?}", c.log_level)));
        }
        c.apply_root_dir();
        Ok(c)
    }

    /// A config with Salt's defaults but every path under `root`, `file_roots` and
    /// `pillar_roots` included (`root/srv/salt`, `root/srv/pillar`): for tests and
    /// benchmarks, which must never read or write the host's `/etc/salt` or `/var`.
    pub fn under(root: &Path) -> Self {
        let mut raw = Mapping::new();
        let mut put = |k: &str, v: String| {
            raw.insert(Value::from(k), Value::from(v));
        };
        put("root_dir", root.display().to_string());
        put("halite_data_dir", root.join("data").display().to_string());
        put("log_file", root.join("log").display().to_string());
        let mut c = match Self::from_mapping(root, raw, BTreeMap::new()) {
            Ok(c) => c,
            // Every value above is a string of the right type: from_mapping cannot refuse it.
            Err(e) => unreachable!("a rooted default config is valid: {e}"),
        };
        c.file_roots = [("base".to_string(), vec![root.join("srv/salt")])].into_iter().collect();
        c.pillar_roots = [("base".to_string(), vec![root.join("srv/pillar")])].into_iter().collect();
        c
    }

    fn apply_root_dir(&mut self) {
        if self.root_dir == Path::new("/") {
            return;
        }
        let root = self.root_dir.clone();
        let fix = |p: &mut PathBuf| {
            if !p.starts_with(&root) {
                let rel = p.strip_prefix("/").unwrap_or(p).to_path_buf();
                *p = root.join(rel);
            }
        };
        for p in [&mut self.pki_dir, &mut self.cachedir, &mut self.sock_dir, &mut self.pidfile, &mut self.halite_data_dir] {
            fix(p);
        }
        for p in [&mut self.autosign_file, &mut self.autoreject_file, &mut self.autosign_grains_dir, &mut self.cluster_pki_dir].into_iter().flatten() {
            fix(p);
        }
        if self.log_file.starts_with('/') || !self.log_file.contains("://") {
            let mut p = PathBuf::from(&self.log_file);
            fix(&mut p);
            self.log_file = p.to_string_lossy().into_owned();
        }
    }

    /// The directory holding minion keys: `cluster_pki_dir` in cluster mode (when set),
    /// else `pki_dir`.
    pub fn keys_dir(&self) -> &Path {
        match (&self.cluster_id, &self.cluster_pki_dir) {
            (Some(_), Some(d)) => d,
            _ => &self.pki_dir,
        }
    }

    /// Where each saltenv is materialised: the first directory listed for it.
    pub fn roots_dirs(&self) -> RootsDirs {
        let first = |m: &BTreeMap<String, Vec<PathBuf>>| m.iter().filter_map(|(k, v)| v.first().map(|d| (k.clone(), d.clone()))).collect();
        RootsDirs { file: first(&self.file_roots), pillar: first(&self.pillar_roots), pushed: Some(self.cachedir.join("minions")) }
    }

    /// Salt's shared-filesystem topology: a cluster member (`cluster_id`) with
    /// `cluster_isolated_filesystem` false, whose `cluster_pki_dir`, `cachedir` and roots
    /// other members write too.
    pub fn shared_filesystem(&self) -> bool {
        self.cluster_id.is_some() && !self.cluster_isolated_filesystem
    }

    /// Whether the admin verbs (`fileserver.*`, orchestration, the reactor, the
    /// master-side pillar compile) read the roots from the log's roots records rather
    /// than from `file_roots`/`pillar_roots` on disk: on an isolated-filesystem cluster
    /// member only, whose directories are its own, so every member answers alike. A lone
    /// master and a shared-filesystem member read the disk minions are served from.
    pub fn roots_from_log(&self) -> bool {
        self.cluster_id.is_some() && self.cluster_isolated_filesystem
    }

    /// The node id Salt's cluster runners report: `id`, falling back to `interface`.
    pub fn node_id(&self) -> String {
        if self.id.is_empty() {
            self.interface.clone()
        } else {
            self.id.clone()
        }
    }

    /// `keys.cache_driver` as written in the config.
    pub fn key_driver_name(&self) -> &'static str {
        match self.key_driver {
            KeyDriver::Localfs => "localfs_key",
            KeyDriver::Mmap(_) => "mmap_key",
        }
    }

    /// The mmap geometry from the config, whichever driver is selected.
    pub fn mmap_geometry(&self) -> Geometry {
        let r = Reader { raw: &self.raw, origin: &self.origin, dir: &self.config_dir };
        let seg = match self.raw.get("mmap_key_max_segment_bytes") {
            Some(_) => r.uint("mmap_key_max_segment_bytes", 1 << 30).unwrap_or(1 << 30),
            None => r.uint("mmap_cache_max_segment_bytes", 1 << 30).unwrap_or(1 << 30),
        };
        Geometry {
            size: r.uint("mmap_key_size", 1_000_000).unwrap_or(1_000_000),
            slot_size: r.uint("mmap_key_slot_size", 96).unwrap_or(96) as usize,
            key_size: r.uint("mmap_key_id_size", 64).unwrap_or(64) as usize,
            max_segment_bytes: seg,
        }
    }
}

/// Salt's truthy and falsy strings (`True`, `yes`, `on`, `1` / `False`, `no`, `off`, `0`, `None`).
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" | "none" => Some(false),
        _ => None,
    }
}

/// Maps Salt's log level names to a `tracing` filter level.
pub fn tracing_level(salt_level: &str) -> &'static str {
    match salt_level {
        "garbage" | "trace" | "all" => "trace",
        "debug" | "profile" => "debug",
        "info" => "info",
        "warning" | "warn" => "warn",
        "error" | "critical" => "error",
        "quiet" => "off",
        _ => "warn",
    }
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_else(|_| "localhost".into())
}

struct Reader<'a> {
    raw: &'a Mapping,
    origin: &'a BTreeMap<String, PathBuf>,
    dir: &'a Path,
}

impl Reader<'_> {
    fn invalid(&self, key: &str, why: String) -> ConfigError {
        let path = self.origin.get(key).map(|p| p.display().to_string()).unwrap_or_else(|| self.dir.join("master").display().to_string());
        ConfigError::Invalid { key: key.to_string(), path, why }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.raw.get(key).filter(|v| !v.is_null())
    }

    fn string(&self, key: &str, default: &str) -> Result<String> {
        Ok(self.opt_string(key)?.unwrap_or_else(|| default.to_string()))
    }

    fn opt_string(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(self.invalid(key, "expected a string".into())),
        }
    }

    fn uint(&self, key: &str, default: u64) -> Result<u64> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Number(n)) => n.as_u64().ok_or_else(|| self.invalid(key, format!("expected a non-negative integer, got {n}"))),
            Some(Value::String(s)) => s.trim().parse().map_err(|_| self.invalid(key, format!("expected a non-negative integer, got {s:?}"))),
            Some(_) => Err(self.invalid(key, "expected a non-negative integer".into())),
        }
    }

    /// A limit: a non-negative integer, `0`, `null` or `None` meaning no limit.
    fn limit(&self, key: &str, default: u64) -> Result<Option<u64>> {
        match self.raw.get(key) {
            Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.trim() == "None" => Ok(None),
            _ => Ok(Some(self.uint(key, default)?).filter(|v| *v > 0)),
        }
    }

    fn port(&self, key: &str, default: u16) -> Result<u16> {
        let v = self.uint(key, default as u64)?;
        if v == 0 || v > 65535 {
            return Err(self.invalid(key, format!("{v} is not a TCP port")));
        }
        Ok(v as u16)
    }

    fn boolean(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s)) => parse_bool(s).ok_or_else(|| self.invalid(key, format!("expected True or False, got {s:?}"))),
            Some(Value::Number(n)) if n.as_u64() == Some(0) || n.as_u64() == Some(1) => Ok(n.as_u64() == Some(1)),
            Some(_) => Err(self.invalid(key, "expected True or False".into())),
        }
    }

    fn string_list(&self, key: &str) -> Result<Vec<String>> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Sequence(s)) => s.iter().map(|v| v.as_str().map(String::from).ok_or_else(|| self.invalid(key, "expected a list of strings".into()))).collect(),
            Some(_) => Err(self.invalid(key, "expected a list of strings".into())),
        }
    }

    fn string_map(&self, key: &str) -> Result<BTreeMap<String, String>> {
        match self.get(key) {
            None => Ok(BTreeMap::new()),
            Some(Value::Mapping(m)) => m
                .iter()
                .map(|(k, v)| match (k.as_str(), v.as_str()) {
                    (Some(k), Some(v)) => Ok((k.to_string(), v.to_string())),
                    _ => Err(self.invalid(key, "expected a mapping of strings to strings".into())),
                })
                .collect(),
            Some(_) => Err(self.invalid(key, "expected a mapping of strings to strings".into())),
        }
    }

    fn roots(&self, key: &str, default: &[&str]) -> Result<BTreeMap<String, Vec<PathBuf>>> {
        match self.get(key) {
            None => Ok([("base".to_string(), default.iter().map(PathBuf::from).collect())].into_iter().collect()),
            Some(Value::Mapping(m)) => {
                let mut out = BTreeMap::new();
                for (env, dirs) in m {
                    let env = env.as_str().ok_or_else(|| self.invalid(key, "saltenv names must be strings".into()))?;
                    halite_storage::id::validate_saltenv(env).map_err(|e| self.invalid(key, e.to_string()))?;
                    let list = match dirs {
                        Value::String(s) => vec![PathBuf::from(s)],
                        Value::Sequence(s) => s
                            .iter()
                            .map(|d| d.as_str().map(PathBuf::from).ok_or_else(|| self.invalid(key, format!("saltenv {env}: directories must be strings"))))
                            .collect::<Result<Vec<_>>>()?,
                        _ => return Err(self.invalid(key, format!("saltenv {env}: expected a list of directories"))),
                    };
                    out.insert(env.to_string(), list);
                }
                Ok(out)
            }
            Some(_) => Err(self.invalid(key, "expected a mapping of saltenv to directories".into())),
        }
    }
}

#[cfg(test)]
#[path = "config_fuzz_tests.rs"]
mod fuzz_tests;

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
