//! The gitfs options of a master config (Salt's names and shapes): `gitfs_remotes` with
//! their per-remote options, and the global `gitfs_*` defaults they override.
//!
//! A remote is a URL, or a one-key mapping of the URL to a list of one-key mappings
//! (`- name: x`, `- root: salt`, `- saltenv: [{dev: [{ref: develop}]}]`), as in Salt.
//! Only local repositories are read (`file://` URLs and absolute paths); any other
//! remote, and any per-remote option Halite does not implement, is named in a warning
//! ([`GitfsConfig::warnings`]) and left out.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_yaml::{Mapping, Value};
use sha2::{Digest, Sha256};

/// Salt's default `gitfs_update_interval` (seconds).
pub const DEFAULT_UPDATE_INTERVAL: u64 = 60;

/// Which refs become saltenvs (`gitfs_ref_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefType {
    Branch,
    Tag,
    Sha,
}

/// One refspec (`[+]src:dst`, at most one `*` a side): the repository's refs matching
/// `src` become the branches (`dst` under `refs/remotes/origin/`) and tags (under
/// `refs/tags/`) a remote serves, as Salt's fetch makes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refspec {
    pub src: String,
    pub dst: String,
}

/// Salt's default `gitfs_refspecs`.
pub const DEFAULT_REFSPECS: [&str; 2] = ["+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"];

impl Refspec {
    /// A refspec as Salt's config writes it; `None` for a form Halite does not read (no
    /// `dst`, a negative refspec, more than one `*` a side, or `*` on one side only).
    pub fn parse(s: &str) -> Option<Refspec> {
        let (src, dst) = s.trim().trim_start_matches('+').split_once(':')?;
        let stars = |x: &str| x.matches('*').count();
        let ok = !src.is_empty() && !dst.is_empty() && !src.starts_with('^') && stars(src) == stars(dst) && stars(src) <= 1 && src.starts_with("refs/") && dst.starts_with("refs/");
        ok.then(|| Refspec { src: src.to_string(), dst: dst.to_string() })
    }

    /// The destination of the full ref name `name`, if `src` matches it.
    pub fn map(&self, name: &str) -> Option<String> {
        match (self.src.split_once('*'), self.dst.split_once('*')) {
            (Some((sp, ss)), Some((dp, ds))) => {
                let mid = name.strip_prefix(sp)?.strip_suffix(ss)?;
                (!mid.is_empty()).then(|| format!("{dp}{mid}{ds}"))
            }
            _ => (name == self.src).then(|| self.dst.clone()),
        }
    }
}

/// Per-saltenv overrides (`saltenv` per remote, `gitfs_saltenv` globally).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvConf {
    /// The branch, tag or commit id served as this saltenv.
    pub git_ref: Option<String>,
    pub root: Option<String>,
    pub mountpoint: Option<String>,
}

/// One remote, with every option resolved (per-remote value, else the global one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// Its `name`, else its URL (what logs and records call it).
    pub id: String,
    pub url: String,
    /// The repository on this machine.
    pub path: PathBuf,
    /// Where its files live in the gitfs tree of the state machine (16 hex digits of the
    /// SHA-256 of `id`).
    pub key: String,
    pub base: String,
    pub root: String,
    pub mountpoint: String,
    pub whitelist: Vec<String>,
    pub blacklist: Vec<String>,
    pub ref_types: Vec<RefType>,
    pub disable_saltenv_mapping: bool,
    /// The ref served for a saltenv whose own ref the repository does not hold
    /// (`fallback`, else `gitfs_fallback`).
    pub fallback: Option<String>,
    /// What refs become branches and tags (`refspecs`, else `gitfs_refspecs`).
    pub refspecs: Vec<Refspec>,
    /// Seconds between the timer's reads of this remote (`update_interval`, else
    /// `gitfs_update_interval`; at least 1).
    pub update_interval: u64,
    /// This remote's `saltenv` option.
    pub saltenv: BTreeMap<String, EnvConf>,
    /// The global `gitfs_saltenv`.
    pub global_saltenv: BTreeMap<String, EnvConf>,
}

/// The gitfs configuration of a master.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitfsConfig {
    pub remotes: Vec<Remote>,
    /// `gitfs_update_interval`, seconds (at least 1).
    pub update_interval: u64,
    /// What was left out, for the warning at start.
    pub warnings: Vec<String>,
}

/// Per-remote options Salt knows that Halite does not implement.
const UNIMPLEMENTED_PARAMS: &[&str] = &[
    "all_saltenvs", "depth", "insecure_auth", "passphrase", "password", "privkey", "proxy", "pubkey", "ssl_verify",
    "user",
];

impl GitfsConfig {
    /// Reads the gitfs options from a master's config mapping.
    pub fn from_raw(raw: &Mapping) -> GitfsConfig {
        let g = |k: &str| raw.get(k);
        let mut warnings = Vec::new();
        let text = |k: &str, d: &str| g(k).map(scalar).unwrap_or_else(|| d.to_string());
        let update_interval = g("gitfs_update_interval").and_then(seconds).unwrap_or(DEFAULT_UPDATE_INTERVAL).max(1);
        let global_saltenv = g("gitfs_saltenv").map(|v| saltenv_map(v, "gitfs_saltenv", &mut warnings)).unwrap_or_default();
        let defaults = Remote {
            id: String::new(),
            url: String::new(),
            path: PathBuf::new(),
            key: String::new(),
            base: text("gitfs_base", "master"),
            root: strip_path(&text("gitfs_root", "")),
            mountpoint: strip_mountpoint(&text("gitfs_mountpoint", "")),
            whitelist: g("gitfs_saltenv_whitelist").map(string_list).unwrap_or_default(),
            blacklist: g("gitfs_saltenv_blacklist").map(string_list).unwrap_or_default(),
            ref_types: ref_types(g("gitfs_ref_types"), "gitfs_ref_types", &mut warnings),
            disable_saltenv_mapping: g("gitfs_disable_saltenv_mapping").is_some_and(truthy),
            update_interval,
            fallback: g("gitfs_fallback").map(scalar).filter(|f| !f.is_empty()),
            refspecs: refspecs(g("gitfs_refspecs"), "gitfs_refspecs", &mut warnings),
            saltenv: BTreeMap::new(),
            global_saltenv,
        };
        let mut remotes: Vec<Remote> = Vec::new();
        let listed = match g("gitfs_remotes") {
            Some(Value::Sequence(s)) => s.clone(),
            Some(Value::Null) | None => Vec::new(),
            Some(other) => {
                warnings.push(format!("gitfs_remotes is not a list ({}); no remote is read", scalar(other)));
                Vec::new()
            }
        };
        for entry in &listed {
            if let Some(r) = remote(entry, &defaults, &mut warnings) {
                if remotes.iter().any(|o| o.key == r.key) {
                    warnings.push(format!("gitfs remote {} is listed twice (give each a distinct name); the second is left out", r.id));
                    continue;
                }
                remotes.push(r);
            }
        }
        // Salt picks pygit2 or gitpython; Halite is its own provider.
        if let Some(p) = g("gitfs_provider") {
            warnings.push(format!("gitfs_provider {} is not implemented: Halite reads the repositories itself, with gitoxide", scalar(p)));
        }
        GitfsConfig { remotes, update_interval, warnings }
    }

    /// Whether any remote is configured.
    pub fn enabled(&self) -> bool {
        !self.remotes.is_empty()
    }
}

/// One entry of `gitfs_remotes`.
fn remote(entry: &Value, defaults: &Remote, warnings: &mut Vec<String>) -> Option<Remote> {
    let (url, params) = remote_entry(entry, "gitfs remote", warnings)?;
    let Some(path) = local_path(&url) else {
        warnings.push(format!("gitfs remote {url}: only local repositories (file:// URLs or absolute paths) are implemented; left out"));
        return None;
    };
    let mut r = Remote { url: url.clone(), path, ..defaults.clone() };
    let mut name = None;
    for (k, v) in params {
        match k.as_str() {
            "name" => name = Some(scalar(&v)),
            "base" => r.base = scalar(&v),
            "root" => r.root = strip_path(&scalar(&v)),
            "mountpoint" => r.mountpoint = strip_mountpoint(&scalar(&v)),
            "saltenv_whitelist" => r.whitelist = string_list(&v),
            "saltenv_blacklist" => r.blacklist = string_list(&v),
            "ref_types" => r.ref_types = ref_types(Some(&v), &format!("gitfs remote {url} ref_types"), warnings),
            "disable_saltenv_mapping" => r.disable_saltenv_mapping = truthy(&v),
            "fallback" => r.fallback = Some(scalar(&v)).filter(|f| !f.is_empty()),
            "refspecs" => r.refspecs = refspecs(Some(&v), &format!("gitfs remote {url} refspecs"), warnings),
            "update_interval" => match seconds(&v) {
                Some(s) => r.update_interval = s.max(1),
                None => warnings.push(format!("gitfs remote {url}: update_interval {} is not a number of seconds; gitfs_update_interval applies", scalar(&v))),
            },
            "saltenv" => r.saltenv = saltenv_map(&v, &format!("gitfs remote {url} saltenv"), warnings),
            p if UNIMPLEMENTED_PARAMS.contains(&p) => warnings.push(format!("gitfs remote {url}: per-remote option {p} is not implemented by Halite; ignored")),
            p => warnings.push(format!("gitfs remote {url}: unknown per-remote option {p}; ignored")),
        }
    }
    // A `ref` for `base` in the per-remote saltenv replaces `base` (as in Salt).
    if let Some(b) = r.saltenv.get_mut("base").and_then(|c| c.git_ref.take()) {
        r.base = b;
    }
    r.id = name.filter(|n| !n.is_empty()).unwrap_or(url);
    r.key = hex::encode(&Sha256::digest(r.id.as_bytes())[..8]);
    Some(r)
}

/// The repository a `file://` URL or an absolute path names.
pub fn local_path(url: &str) -> Option<PathBuf> {
    let p = url.strip_prefix("file://").unwrap_or(url);
    (p.starts_with('/') && !p.contains('\0')).then(|| PathBuf::from(p))
}

/// `mountpoint`: `salt://` and surrounding slashes removed.
fn strip_mountpoint(s: &str) -> String {
    strip_path(s.strip_prefix("salt://").unwrap_or(s))
}

fn strip_path(s: &str) -> String {
    s.split('/').filter(|c| !c.is_empty()).collect::<Vec<_>>().join("/")
}

/// One entry of a list of git remotes in Salt's shape (`gitfs_remotes`, `ext_pillar: -
/// git:`): a string, or a one-key map of the string to its per-remote options (a list of
/// one-key maps, or a map). Returns the string and the options; what is not of that
/// shape is named in `warnings` as `what`'s.
pub(crate) fn remote_entry(entry: &Value, what: &str, warnings: &mut Vec<String>) -> Option<(String, Vec<(String, Value)>)> {
    match entry {
        Value::String(u) => Some((u.clone(), Vec::new())),
        Value::Mapping(m) if m.len() == 1 => {
            let (k, v) = m.iter().next()?;
            let mut params = Vec::new();
            match v {
                Value::Sequence(items) => {
                    for item in items {
                        match item {
                            Value::Mapping(p) => params.extend(p.iter().map(|(k, v)| (scalar(k), v.clone()))),
                            other => warnings.push(format!("{what} {}: parameter {} is not a mapping; ignored", scalar(k), scalar(other))),
                        }
                    }
                }
                Value::Mapping(p) => params.extend(p.iter().map(|(k, v)| (scalar(k), v.clone()))),
                Value::Null => {}
                other => warnings.push(format!("{what} {}: parameters {} are not a list; ignored", scalar(k), scalar(other))),
            }
            Some((scalar(k), params))
        }
        other => {
            warnings.push(format!("{what} {} is neither a string nor a mapping of one to its options; left out", scalar(other)));
            None
        }
    }
}

/// A YAML scalar as Salt reads it into a string.
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => if *b { "True" } else { "False" }.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => String::new(),
        other => serde_yaml::to_string(other).unwrap_or_default().trim().to_string(),
    }
}

/// A `refspecs` option (Salt's default when unset); a refspec Halite does not read is
/// named and left out.
fn refspecs(v: Option<&Value>, what: &str, warnings: &mut Vec<String>) -> Vec<Refspec> {
    let Some(v) = v else { return DEFAULT_REFSPECS.iter().filter_map(|s| Refspec::parse(s)).collect() };
    let mut out = Vec::new();
    for s in string_list(v) {
        match Refspec::parse(&s) {
            Some(r) => out.push(r),
            None => warnings.push(format!("{what}: {s} is not a refspec Halite reads (refs/...:refs/..., one * a side or none); left out")),
        }
    }
    out
}

/// A number of seconds, written as a number or a string of digits.
fn seconds(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::String(s) => matches!(s.to_ascii_lowercase().as_str(), "true" | "yes" | "on" | "1"),
        Value::Number(n) => n.as_i64().is_some_and(|n| n != 0),
        _ => false,
    }
}

/// Salt's `stringlist`: a list, or a comma-separated string.
fn string_list(v: &Value) -> Vec<String> {
    match v {
        Value::Sequence(s) => s.iter().map(scalar).collect(),
        Value::Null => Vec::new(),
        other => scalar(other).split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
    }
}

fn ref_types(v: Option<&Value>, what: &str, warnings: &mut Vec<String>) -> Vec<RefType> {
    let Some(v) = v else { return vec![RefType::Branch, RefType::Tag, RefType::Sha] };
    let mut out = Vec::new();
    for t in string_list(v) {
        match t.to_ascii_lowercase().as_str() {
            "branch" => out.push(RefType::Branch),
            "tag" => out.push(RefType::Tag),
            "sha" => out.push(RefType::Sha),
            other => warnings.push(format!("{what}: {other} is not branch, tag or sha; ignored")),
        }
    }
    out
}

/// A `saltenv` option: a list of one-key mappings `env: [{ref: x}, {root: y}, ...]`.
fn saltenv_map(v: &Value, what: &str, warnings: &mut Vec<String>) -> BTreeMap<String, EnvConf> {
    let mut out = BTreeMap::new();
    let entries: Vec<(String, Value)> = match v {
        Value::Sequence(s) => s.iter().filter_map(Value::as_mapping).flat_map(|m| m.iter().map(|(k, v)| (scalar(k), v.clone()))).collect(),
        Value::Mapping(m) => m.iter().map(|(k, v)| (scalar(k), v.clone())).collect(),
        _ => Vec::new(),
    };
    for (env, conf) in entries {
        let mut c = EnvConf::default();
        let params: Vec<(String, Value)> = match &conf {
            Value::Sequence(s) => s.iter().filter_map(Value::as_mapping).flat_map(|m| m.iter().map(|(k, v)| (scalar(k), v.clone()))).collect(),
            Value::Mapping(m) => m.iter().map(|(k, v)| (scalar(k), v.clone())).collect(),
            _ => Vec::new(),
        };
        for (k, v) in params {
            match k.as_str() {
                "ref" => c.git_ref = Some(scalar(&v)),
                "root" => c.root = Some(strip_path(&scalar(&v))),
                "mountpoint" => c.mountpoint = Some(strip_mountpoint(&scalar(&v))),
                other => warnings.push(format!("{what} {env}: {other} is not ref, root or mountpoint; ignored")),
            }
        }
        out.insert(env, c);
    }
    out
}
