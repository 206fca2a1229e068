//! The file server: Salt's `roots` backend over `file_roots` (spec §7.1, §7.3).
//!
//! A request names a saltenv and a path relative to it (`salt://` already stripped; a
//! `?saltenv=x` query in the path overrides the saltenv). The path must be relative, with
//! no empty, `.` or `..` component; the saltenv must be configured. Each directory of the
//! env is tried in order; the first holding a regular file wins. Symlinks are followed
//! (`fileserver_followsymlinks`) only when their target stays inside that directory.
//! Anything else is "not found", with the reply shape Salt uses for it, and logged.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rmpv::Value;
use sha2::{Digest, Sha256};

use crate::config::MasterConfig;
use crate::payload::{bin, map};

/// `file_buffer_size`: the largest `_serve_file` chunk.
pub const FILE_BUFFER_SIZE: u64 = 1 << 20;

/// A file found in the roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub abs: PathBuf,
    pub rel: String,
}

/// Splits `path?saltenv=x` and returns (path, saltenv).
fn split_query<'a>(path: &'a str, saltenv: &'a str) -> (&'a str, &'a str) {
    match path.split_once('?') {
        Some((p, q)) => {
            let env = q.split('&').find_map(|kv| kv.strip_prefix("saltenv=")).unwrap_or(saltenv);
            (p, env)
        }
        None => (path, saltenv),
    }
}

/// A safe relative path: no empty, `.` or `..` component, not absolute, no NUL.
fn safe_rel(path: &str) -> Option<String> {
    let p = path.trim_start_matches("salt://");
    if p.is_empty() || p.starts_with('/') || p.contains('\0') || p.contains('\\') {
        return None;
    }
    let parts: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
    if parts.is_empty() || parts.iter().any(|c| *c == "." || *c == "..") {
        return None;
    }
    Some(parts.join("/"))
}

/// The directories of a saltenv (empty when it is not configured or not a valid name).
pub fn env_dirs<'a>(cfg: &'a MasterConfig, saltenv: &str) -> &'a [PathBuf] {
    if halite_storage::id::validate_saltenv(saltenv).is_err() {
        return &[];
    }
    cfg.file_roots.get(saltenv).map(Vec::as_slice).unwrap_or(&[])
}

/// Resolves a request to a file inside the roots, or None.
pub fn find(cfg: &MasterConfig, path: &str, saltenv: &str) -> Option<Found> {
    let (path, saltenv) = split_query(path, saltenv);
    let Some(rel) = safe_rel(path) else {
        tracing::warn!(path = %path.escape_debug(), "file server: refusing an unsafe path");
        return None;
    };
    for root in env_dirs(cfg, saltenv) {
        let Ok(root_canon) = root.canonicalize() else { continue };
        let cand = root.join(&rel);
        let Ok(canon) = cand.canonicalize() else { continue };
        if !canon.starts_with(&root_canon) {
            tracing::warn!(path = %rel, "file server: refusing a path that resolves outside its root");
            continue;
        }
        if canon.is_file() {
            return Some(Found { abs: cand, rel });
        }
    }
    None
}

/// `{"hsum": <sha256 hex>, "hash_type": "sha256"}`, or `""` when not found.
pub fn file_hash(cfg: &MasterConfig, path: &str, saltenv: &str) -> Value {
    match find(cfg, path, saltenv).and_then(|f| std::fs::read(&f.abs).ok()) {
        Some(data) => map([("hsum", Value::from(hex::encode(Sha256::digest(&data)))), ("hash_type", Value::from("sha256"))]),
        None => Value::from(""),
    }
}

fn stat_list(p: &Path) -> Value {
    match std::fs::metadata(p) {
        Ok(m) => Value::Array(
            [m.mode() as i64, m.ino() as i64, m.dev() as i64, m.nlink() as i64, m.uid() as i64, m.gid() as i64, m.size() as i64, m.atime(), m.mtime(), m.ctime()]
                .into_iter()
                .map(Value::from)
                .collect(),
        ),
        Err(_) => Value::Array(vec![]),
    }
}

/// `_file_find`.
pub fn file_find(cfg: &MasterConfig, path: &str, saltenv: &str) -> Value {
    match find(cfg, path, saltenv) {
        Some(f) => map([
            ("path", Value::from(f.abs.to_string_lossy().into_owned())),
            ("rel", Value::from(f.rel.as_str())),
            ("stat", stat_list(&f.abs)),
            ("back", Value::from("roots")),
        ]),
        None => map([("path", Value::from("")), ("rel", Value::from(""))]),
    }
}

/// `_file_hash_and_stat`: `[hash_map, stat_list]`.
pub fn file_hash_and_stat(cfg: &MasterConfig, path: &str, saltenv: &str) -> Value {
    match find(cfg, path, saltenv) {
        Some(f) => Value::Array(vec![file_hash(cfg, path, saltenv), stat_list(&f.abs)]),
        None => Value::from(""),
    }
}

/// `_serve_file`: up to [`FILE_BUFFER_SIZE`] bytes from `loc`; empty data at EOF.
pub fn serve_file(cfg: &MasterConfig, path: &str, saltenv: &str, loc: u64) -> Value {
    use std::io::{Read, Seek, SeekFrom};
    let not_found = || map([("data", Value::from("")), ("dest", Value::from(""))]);
    let Some(f) = find(cfg, path, saltenv) else { return not_found() };
    let Ok(mut file) = std::fs::File::open(&f.abs) else { return not_found() };
    let mut buf = Vec::new();
    if file.seek(SeekFrom::Start(loc)).is_err() || file.take(FILE_BUFFER_SIZE).read_to_end(&mut buf).is_err() {
        return not_found();
    }
    map([("data", bin(buf)), ("dest", Value::from(f.rel.as_str()))])
}

/// What a walk of an env's roots finds: files, empty dirs, dirs, symlinks (rel → target).
#[derive(Debug, Default)]
pub struct Listing {
    pub files: std::collections::BTreeSet<String>,
    pub empty_dirs: std::collections::BTreeSet<String>,
    pub dirs: std::collections::BTreeSet<String>,
    pub links: std::collections::BTreeMap<String, String>,
}

/// Walks every directory of a saltenv (bounded depth; symlinked dirs are not entered).
pub fn list(cfg: &MasterConfig, saltenv: &str) -> Listing {
    let mut out = Listing::default();
    fn walk(root: &Path, rel: &str, depth: usize, out: &mut Listing) {
        if depth > 64 {
            return;
        }
        let dir = if rel.is_empty() { root.to_path_buf() } else { root.join(rel) };
        let Ok(rd) = std::fs::read_dir(&dir) else { return };
        let mut empty = true;
        for ent in rd.flatten() {
            empty = false;
            let Ok(name) = ent.file_name().into_string() else { continue };
            if name.starts_with(".halite-tmp-") {
                continue;
            }
            let r = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            let Ok(meta) = std::fs::symlink_metadata(ent.path()) else { continue };
            if meta.file_type().is_symlink() {
                if let Ok(t) = std::fs::read_link(ent.path()) {
                    out.links.insert(r.clone(), t.to_string_lossy().into_owned());
                }
                // A link to a file inside the root is served as a file.
                if let (Ok(c), Ok(rc)) = (ent.path().canonicalize(), root.canonicalize()) {
                    if c.starts_with(&rc) && c.is_file() {
                        out.files.insert(r);
                    }
                }
            } else if meta.is_dir() {
                out.dirs.insert(r.clone());
                walk(root, &r, depth + 1, out);
            } else if meta.is_file() {
                out.files.insert(r);
            }
        }
        if empty && !rel.is_empty() {
            out.empty_dirs.insert(rel.to_string());
        }
    }
    for root in env_dirs(cfg, saltenv) {
        walk(root, "", 0, &mut out);
    }
    out
}

/// Filters sorted names by Salt's `prefix` rule (`startswith(prefix.strip("/"))`).
pub fn with_prefix<'a>(names: impl IntoIterator<Item = &'a String>, prefix: &str) -> Value {
    let p = prefix.trim_matches('/');
    Value::Array(names.into_iter().filter(|n| n.starts_with(p)).map(|n| Value::from(n.as_str())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{get, get_bytes};

    fn cfg(root: &Path) -> MasterConfig {
        let mut c = MasterConfig::from_mapping(root, Default::default(), Default::default()).unwrap();
        c.file_roots = [("base".to_string(), vec![root.join("a"), root.join("b")])].into_iter().collect();
        c
    }

    #[test]
    fn resolution_order_escapes_and_chunks() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        for p in ["a/web", "b", "outside"] {
            std::fs::create_dir_all(r.join(p)).unwrap();
        }
        std::fs::write(r.join("a/top.sls"), "base: {}\n").unwrap();
        std::fs::write(r.join("b/top.sls"), "shadowed\n").unwrap();
        std::fs::write(r.join("b/only_b.sls"), "b\n").unwrap();
        std::fs::write(r.join("a/web/init.sls"), "x").unwrap();
        std::fs::write(r.join("outside/secret"), "secret").unwrap();
        std::fs::create_dir_all(r.join("a/empty")).unwrap();
        std::os::unix::fs::symlink(r.join("outside/secret"), r.join("a/leak")).unwrap();
        std::os::unix::fs::symlink(r.join("a/top.sls"), r.join("a/alias.sls")).unwrap();
        let c = cfg(r);
        assert_eq!(find(&c, "top.sls", "base").unwrap().abs, r.join("a/top.sls"));
        assert_eq!(find(&c, "only_b.sls", "base").unwrap().abs, r.join("b/only_b.sls"));
        assert!(find(&c, "alias.sls", "base").is_some(), "a link inside the root is served");
        for bad in ["../outside/secret", "/etc/passwd", "web/../../outside/secret", "leak", "a\0b", "", "."] {
            assert!(find(&c, bad, "base").is_none(), "{bad:?} must not resolve");
        }
        assert!(find(&c, "top.sls", "..").is_none());
        assert!(find(&c, "top.sls", "dev").is_none());
        assert!(find(&c, "top.sls?saltenv=base", "dev").is_some());
        let h = file_hash(&c, "top.sls", "base");
        assert_eq!(crate::payload::get_text(&h, "hsum").unwrap(), hex::encode(Sha256::digest(b"base: {}\n")));
        assert_eq!(file_hash(&c, "../outside/secret", "base"), Value::from(""));
        let s = serve_file(&c, "web/init.sls", "base", 0);
        assert_eq!(get_bytes(&s, "data").unwrap(), b"x");
        assert_eq!(crate::payload::get_text(&s, "dest").unwrap(), "web/init.sls");
        let eof = serve_file(&c, "web/init.sls", "base", 1);
        assert_eq!(get_bytes(&eof, "data").unwrap(), b"");
        let nf = serve_file(&c, "leak", "base", 0);
        assert_eq!(get(&nf, "dest").and_then(crate::payload::text), Some(""));
        let l = list(&c, "base");
        assert!(l.files.contains("top.sls") && l.files.contains("only_b.sls") && l.files.contains("web/init.sls"));
        assert!(!l.files.contains("leak"), "a link leaving the root is not listed as a file");
        assert!(l.empty_dirs.contains("empty"));
        assert!(l.links.contains_key("leak"));
        assert_eq!(with_prefix(&l.files, "/web/"), Value::Array(vec![Value::from("web/init.sls")]));
    }
}
