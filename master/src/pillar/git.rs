//! git_pillar (`ext_pillar: - git: [...]`), as Salt 3008.5's `salt/pillar/git_pillar.py`
//! and `salt/utils/gitfs.py` define it, over local repositories read with the gitfs
//! machinery (`crate::gitfs`: gix in process, `file://` URLs and absolute paths).
//!
//! **Configuration.** A remote is `<branch> <url>` (a URL alone takes
//! `git_pillar_branch`, default `master`), or that string as the one key of a mapping
//! whose list gives per-remote options: `name`, `root`, `env`, `mountpoint`, `base`.
//! Globals: `git_pillar_base` (default `master`), `git_pillar_branch`,
//! `git_pillar_root`, `git_pillar_env`, `git_pillar_includes` (default true),
//! `git_pillar_update_interval` (default 60 s). Any other option, and remotes that are
//! not local, are named in a warning at start and left out. A `root` or `mountpoint`
//! that climbs out (`..`) leaves the remote out.
//!
//! **Which env.** A remote's pillar env is its `env` (else `git_pillar_env`), else `base`
//! when its branch is `base`, else the branch's name. The branch `__env__` follows the
//! minion: its `pillarenv`, else its `saltenv`, else `base` (read from the
//! `git_pillar_base` branch); every branch of such a remote is fetched.
//!
//! **Update.** `salt-run git_pillar.update` (`admin/git_pillar.rs`), and every
//! `git_pillar_update_interval` seconds the member that leads
//! (`daemon/upkeep/git_pillar.rs`), read each remote's commit and commit what changed
//! through the log as one `roots_sync` of the `git_pillar` tree naming the commits
//! (`crate::gitfs::plan::plan_tree`), so every member compiles from the same commits at
//! the same index.
//!
//! **Compile** ([`compile`]): each remote without a mountpoint, in order, is compiled as
//! its own `pillar_roots` of one env — its files first, then (with `git_pillar_includes`)
//! those of the other remotes of the same env, mounted ones under their mountpoint — its
//! `top.sls` read and matched as for `pillar_roots`; with a minion `pillarenv`, only the
//! remotes of that env. The results merge in order with the pillar merge options.

use serde_json::{Map, Value as J};
use serde_yaml::Value as Y;
use sha2::{Digest, Sha256};

use halite_storage::format::RootsTree;

use crate::gitfs::config::{EnvConf, RefType, Refspec, Remote, DEFAULT_REFSPECS};
use crate::gitfs::GitfsConfig;
use crate::view::RootsSource;

/// The branch that follows the minion's pillarenv.
pub const ENV_BRANCH: &str = "__env__";

/// Per-remote options of Salt's git_pillar that Halite does not implement.
const UNIMPLEMENTED_PARAMS: &[&str] = &[
    "all_saltenvs", "depth", "disable_saltenv_mapping", "fallback", "insecure_auth", "passphrase", "password", "privkey", "proxy", "pubkey", "ref_types", "refspecs",
    "ssl_verify", "user",
];

/// One git_pillar remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRemote {
    /// Salt's id of the remote: its `<branch> <url>` as configured (what
    /// `git_pillar.update` answers by).
    pub id: String,
    /// What an update reads (a gitfs remote whose saltenvs are this remote's pillar envs).
    pub fetch: Remote,
    /// The configured branch (or [`ENV_BRANCH`]).
    pub branch: String,
    /// The pillar env of a fixed branch (unused for [`ENV_BRANCH`]).
    pub env: String,
    /// Whether it is mounted (its own top file is then not read).
    pub mounted: bool,
}

/// The git_pillar remotes and global options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitPillarConfig {
    pub remotes: Vec<GitRemote>,
    pub base: String,
    pub branch: String,
    pub root: String,
    pub env: String,
    pub includes: bool,
    pub update_interval: u64,
}

impl Default for GitPillarConfig {
    fn default() -> Self {
        GitPillarConfig { remotes: Vec::new(), base: "master".into(), branch: "master".into(), root: String::new(), env: String::new(), includes: true, update_interval: 60 }
    }
}

fn text(v: &Y) -> String {
    match v {
        Y::String(s) => s.clone(),
        Y::Number(n) => n.to_string(),
        Y::Bool(b) => if *b { "True" } else { "False" }.into(),
        _ => String::new(),
    }
}

/// Path components joined by `/`; `None` when one climbs (`..`) or is `.`.
fn clean_path(s: &str) -> Option<String> {
    let parts: Vec<&str> = s.split('/').filter(|c| !c.is_empty()).collect();
    (!parts.iter().any(|c| *c == ".." || *c == "." || c.contains('\0') || c.contains('\\'))).then(|| parts.join("/"))
}

impl GitPillarConfig {
    /// The global `git_pillar_*` options.
    pub fn globals(raw: &serde_yaml::Mapping) -> GitPillarConfig {
        let d = GitPillarConfig::default();
        let t = |k: &str, d: String| raw.get(k).map(text).filter(|s| !s.is_empty()).unwrap_or(d);
        GitPillarConfig {
            base: t("git_pillar_base", d.base),
            branch: t("git_pillar_branch", d.branch),
            root: raw.get("git_pillar_root").map(text).and_then(|r| clean_path(&r)).unwrap_or_default(),
            env: t("git_pillar_env", d.env),
            includes: raw.get("git_pillar_includes").is_none_or(super::merge::truthy),
            update_interval: raw.get("git_pillar_update_interval").and_then(Y::as_u64).unwrap_or(d.update_interval).max(1),
            remotes: Vec::new(),
        }
    }

    /// The remotes as gitfs remotes, for an update's reads.
    pub fn gitfs(&self) -> GitfsConfig {
        GitfsConfig { remotes: self.remotes.iter().map(|r| Remote { update_interval: self.update_interval, ..r.fetch.clone() }).collect(), update_interval: self.update_interval, warnings: Vec::new() }
    }
}

impl GitRemote {
    /// One entry of a `git:` list.
    pub fn parse(entry: &Y, g: &GitPillarConfig, warnings: &mut Vec<String>) -> Option<GitRemote> {
        let (spec, params) = crate::gitfs::config::remote_entry(entry, "git_pillar remote", warnings)?;
        let words: Vec<&str> = spec.split_whitespace().collect();
        let (branch, url) = match words[..] {
            [url] => (g.branch.clone(), url.to_string()),
            [branch, url] => (branch.to_string(), url.to_string()),
            _ => {
                warnings.push(format!("git_pillar remote {spec:?} is not \"<branch> <url>\"; left out"));
                return None;
            }
        };
        let Some(path) = crate::gitfs::config::local_path(&url) else {
            warnings.push(format!("git_pillar remote {url}: only local repositories (file:// URLs or absolute paths) are implemented; left out"));
            return None;
        };
        let (mut name, mut root, mut env, mut mountpoint, mut base) = (None, g.root.clone(), g.env.clone(), String::new(), g.base.clone());
        for (k, v) in params {
            let escape = |what: &str, warnings: &mut Vec<String>| warnings.push(format!("git_pillar remote {url}: {what} {:?} leaves the repository; the remote is left out", text(&v)));
            match k.as_str() {
                "name" => name = Some(text(&v)),
                "root" => match clean_path(&text(&v)) {
                    Some(r) => root = r,
                    None => {
                        escape("root", warnings);
                        return None;
                    }
                },
                "mountpoint" => match clean_path(text(&v).strip_prefix("salt://").unwrap_or(&text(&v))) {
                    Some(m) => mountpoint = m,
                    None => {
                        escape("mountpoint", warnings);
                        return None;
                    }
                },
                "env" => env = text(&v),
                "base" => base = text(&v),
                p if UNIMPLEMENTED_PARAMS.contains(&p) => warnings.push(format!("git_pillar remote {url}: per-remote option {p} is not implemented by Halite; ignored")),
                p => warnings.push(format!("git_pillar remote {url}: unknown per-remote option {p}; ignored")),
            }
        }
        let id = name.filter(|n| !n.is_empty()).unwrap_or_else(|| format!("{branch} {url}"));
        let mut fetch = Remote {
            key: hex::encode(&Sha256::digest(id.as_bytes())[..8]),
            id,
            url: url.clone(),
            path,
            base: String::new(),
            root,
            mountpoint: mountpoint.clone(),
            whitelist: Vec::new(),
            blacklist: Vec::new(),
            ref_types: vec![RefType::Branch, RefType::Tag],
            disable_saltenv_mapping: true,
            saltenv: Default::default(),
            global_saltenv: Default::default(),
            fallback: None,
            refspecs: DEFAULT_REFSPECS.iter().filter_map(|s| Refspec::parse(s)).collect(),
            // `git_pillar_update_interval`, set for every remote by `gitfs_config`.
            update_interval: 60,
        };
        if branch == ENV_BRANCH {
            // Every branch is an env of its own name, `base` read from the base branch.
            fetch.base = base;
            fetch.disable_saltenv_mapping = false;
            env = String::new();
        } else {
            if env.is_empty() {
                env = if branch == base { "base".into() } else { branch.clone() };
            }
            if halite_storage::id::validate_saltenv(&env).is_err() {
                warnings.push(format!("git_pillar remote {url}: env {env:?} cannot be a pillar env; left out"));
                return None;
            }
            if env == "base" {
                fetch.base = branch.clone();
            } else {
                fetch.saltenv.insert(env.clone(), EnvConf { git_ref: Some(branch.clone()), root: None, mountpoint: None });
            }
        }
        Some(GitRemote { id: spec.trim().to_string(), fetch, branch, env, mounted: !mountpoint.is_empty() })
    }

    /// The pillar env this remote serves a minion with `pillarenv` / `saltenv`.
    pub fn env_for(&self, pillarenv: Option<&str>, saltenv: Option<&str>) -> String {
        if self.branch == ENV_BRANCH {
            pillarenv.or(saltenv).filter(|e| !e.is_empty()).unwrap_or("base").to_string()
        } else {
            self.env.clone()
        }
    }
}

/// The git_pillar pillar of one `git:` entry (its remotes: `idx`) for a minion, with the
/// errors met. Each remote is compiled afresh, as Salt's git_pillar compiles a new
/// `Pillar` (its SLS files see only what it compiled as `pillar`).
pub fn compile(cfg: &crate::config::MasterConfig, ext: &super::ext::ExtPillarConfig, idx: &[usize], tree: &dyn RootsSource, m: &super::Minion, errors: &mut Vec<String>) -> J {
    let opts = super::merge::MergeOpts::from_raw(&cfg.raw, &mut Vec::new());
    let remotes: Vec<(&GitRemote, String)> = idx.iter().filter_map(|i| ext.git.remotes.get(*i)).map(|r| (r, r.env_for(m.pillarenv, m.saltenv))).collect();
    let mut ret = J::Object(Map::new());
    for (r, env) in remotes.iter().filter(|(r, _)| !r.mounted) {
        if m.pillarenv.is_some_and(|p| p != env) {
            continue;
        }
        let mut dirs = vec![r.fetch.key.clone()];
        if ext.git.includes {
            dirs.extend(remotes.iter().filter(|(o, e)| e == env && o.fetch.key != r.fetch.key).map(|(o, _)| o.fetch.key.clone()));
        }
        let roots = super::Roots { src: tree, tree: RootsTree::GitPillar, dirs: &dirs, envs: vec![env.clone()] };
        let (p, errs) = super::compile_roots(cfg, &roots, m, J::Object(Map::new()), opts);
        errors.extend(errs);
        ret = opts.merge(ret, p);
    }
    ret
}
