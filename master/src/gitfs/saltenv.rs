//! Which saltenvs a remote serves, and which ref, root and mountpoint each one reads, as
//! Salt's gitfs decides them (`salt/utils/gitfs.py`): each branch and tag (as
//! `gitfs_ref_types` allows) is a saltenv of its own name, except the one named by
//! `base` (`gitfs_base`, default `master`), which is `base`; a per-saltenv `ref`
//! (`saltenv` per remote, else `gitfs_saltenv`) maps a saltenv to any ref; with
//! `disable_saltenv_mapping` only `base` and the mapped saltenvs exist; the whitelist
//! and blacklist then hide saltenvs.

use std::collections::BTreeSet;

use super::config::{EnvConf, Remote};

/// The per-saltenv configuration of `env`: the remote's own, else the global one.
fn env_conf<'a>(r: &'a Remote, env: &str) -> (Option<&'a EnvConf>, Option<&'a EnvConf>) {
    (r.saltenv.get(env), r.global_saltenv.get(env))
}

/// The ref (branch, tag or commit id) `env` is served from, or `None` when the remote
/// has no such saltenv.
pub fn ref_of(r: &Remote, env: &str) -> Option<String> {
    if env == "base" {
        return Some(r.base.clone());
    }
    let (own, global) = env_conf(r, env);
    let mapped = own.and_then(|c| c.git_ref.clone()).or_else(|| global.and_then(|c| c.git_ref.clone()));
    if r.disable_saltenv_mapping {
        mapped
    } else {
        Some(mapped.unwrap_or_else(|| env.to_string()))
    }
}

/// The directory of the repository served as the saltenv's top (`root`).
pub fn root_of(r: &Remote, env: &str) -> String {
    let (own, global) = env_conf(r, env);
    own.and_then(|c| c.root.clone()).or_else(|| global.and_then(|c| c.root.clone())).unwrap_or_else(|| r.root.clone())
}

/// The directory of the saltenv the files appear under (`mountpoint`).
pub fn mountpoint_of(r: &Remote, env: &str) -> String {
    let (own, global) = env_conf(r, env);
    own.and_then(|c| c.mountpoint.clone()).or_else(|| global.and_then(|c| c.mountpoint.clone())).unwrap_or_else(|| r.mountpoint.clone())
}

/// The saltenvs a remote serves given its branch and tag names (already limited to
/// the ref types it reads), before the whitelist and blacklist.
pub fn envs<'a>(r: &Remote, branches: impl IntoIterator<Item = &'a str>, tags: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    // ref → saltenvs mapped to it: the remote's own mappings, then the global ones for
    // saltenvs the remote does not map.
    let mut revmap: Vec<(String, String)> = r.saltenv.iter().filter_map(|(env, c)| c.git_ref.clone().map(|g| (g, env.clone()))).collect();
    for (env, c) in &r.global_saltenv {
        if let Some(g) = &c.git_ref {
            if !r.saltenv.get(env).is_some_and(|o| o.git_ref.is_some()) {
                revmap.push((g.clone(), env.clone()));
            }
        }
    }
    let mut out = BTreeSet::new();
    if is_hex(&r.base) {
        out.insert("base".to_string());
    }
    for name in branches.into_iter().chain(tags) {
        let mapped: Vec<&String> = revmap.iter().filter(|(g, _)| g == name).map(|(_, e)| e).collect();
        if !mapped.is_empty() {
            out.extend(mapped.into_iter().cloned());
        } else if name == r.base {
            out.insert("base".to_string());
        } else if !r.disable_saltenv_mapping {
            out.insert(name.to_string());
        }
    }
    // Every mapped saltenv exists, whether or not its ref does.
    out.extend(revmap.into_iter().map(|(_, e)| e));
    out.retain(|e| exposed(r, e));
    out
}

/// Whether the whitelist and blacklist let `env` be served (Salt's
/// `check_whitelist_blacklist`: a blacklisted saltenv never is; with a whitelist, only a
/// whitelisted one is).
pub fn exposed(r: &Remote, env: &str) -> bool {
    if r.blacklist.iter().any(|x| expr_match(env, x)) {
        return false;
    }
    r.whitelist.is_empty() || r.whitelist.iter().any(|x| expr_match(env, x))
}

/// Salt's `expr_match`: a glob (`fnmatch`, so also an exact name), else a regular
/// expression matching the whole value.
pub fn expr_match(value: &str, expr: &str) -> bool {
    let anchored = |re: &str| regex::Regex::new(&format!(r"\A(?:{re})\z")).is_ok_and(|r| r.is_match(value));
    anchored(&glob_to_regex(expr)) || anchored(expr)
}

/// Python's `fnmatch.fnmatch` (a glob, so also an exact name).
pub fn glob_match(value: &str, glob: &str) -> bool {
    regex::Regex::new(&format!(r"\A(?:{})\z", glob_to_regex(glob))).is_ok_and(|r| r.is_match(value))
}

/// Python's `fnmatch.translate`: `*`, `?`, `[seq]`, `[!seq]`; everything else literal.
fn glob_to_regex(glob: &str) -> String {
    let chars: Vec<char> = glob.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            '[' => {
                let mut j = i + 1;
                if j < chars.len() && chars[j] == '!' {
                    j += 1;
                }
                if j < chars.len() && chars[j] == ']' {
                    j += 1;
                }
                while j < chars.len() && chars[j] != ']' {
                    j += 1;
                }
                if j >= chars.len() {
                    out.push_str(r"\[");
                } else {
                    let mut set: String = chars[i + 1..j].iter().collect();
                    if let Some(rest) = set.strip_prefix('!') {
                        set = format!("^{rest}");
                    }
                    out.push('[');
                    out.push_str(&set.replace('\\', r"\\").replace('[', r"\["));
                    out.push(']');
                    i = j;
                }
            }
            c => out.push_str(&regex::escape(&c.to_string())),
        }
        i += 1;
    }
    out
}

/// Whether a ref is written as a commit id (hex digits only).
pub fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
#[path = "saltenv_tests.rs"]
mod tests;
