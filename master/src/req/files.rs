//! The file server (Salt's `salt/fileserver/__init__.py` over the `roots` and `gitfs`
//! backends): the `_file_*`, `_serve_file`, `_dir_list` and `_symlink_list` commands.
//!
//! A request names a saltenv and a path relative to it (`salt://` stripped; a
//! `?saltenv=x` query in the path overrides the saltenv). The path must be relative,
//! with no empty, `.` or `..` component. Lookups go through the view's backends
//! ([`View::file_backends`], `fileserver_backend` order: the first that holds the path
//! serves it; lists and saltenvs are the union), each a [`crate::view::RootsSource`]
//! that keeps every answer inside its tree. Anything else is "not found", with the
//! reply shape Salt uses for it.

use rmpv::Value;
use sha2::{Digest, Sha256};

use halite_storage::format::RootsTree;

use super::Answer;
use crate::gitfs::Backend;
use crate::view::{FileRef, Listing, RootsSource, View};
use crate::wire::payload::{bin, get, get_text, map};

/// `file_buffer_size`: the largest `_serve_file` chunk.
pub const FILE_BUFFER_SIZE: u64 = 1 << 20;

const TREE: RootsTree = RootsTree::File;

/// A file server request.
pub enum Files {
    Envs,
    List { what: ListKind, saltenv: String, prefix: String },
    Hash { path: String, saltenv: String },
    HashAndStat { path: String, saltenv: String },
    Find { path: String, saltenv: String },
    Serve { path: String, saltenv: String, loc: u64 },
}

/// Which names a list command returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Files,
    EmptyDirs,
    Dirs,
    Symlinks,
}

impl Files {
    /// The file server command named `cmd`, if it is one.
    pub fn parse(cmd: &str, inner: &Value) -> Option<Files> {
        let saltenv = get_text(inner, "saltenv").unwrap_or("base").to_string();
        let path = get_text(inner, "path").unwrap_or("").to_string();
        let list = |what| Files::List { what, saltenv: saltenv.clone(), prefix: get_text(inner, "prefix").unwrap_or("").to_string() };
        Some(match cmd {
            "_file_envs" => Files::Envs,
            "_file_list" => list(ListKind::Files),
            "_file_list_emptydirs" => list(ListKind::EmptyDirs),
            "_dir_list" => list(ListKind::Dirs),
            "_symlink_list" => list(ListKind::Symlinks),
            "_file_hash" => Files::Hash { path, saltenv },
            "_file_hash_and_stat" => Files::HashAndStat { path, saltenv },
            "_file_find" => Files::Find { path, saltenv },
            "_serve_file" => Files::Serve { path, saltenv, loc: get(inner, "loc").and_then(Value::as_u64).unwrap_or(0) },
            _ => return None,
        })
    }

    pub fn answer(self, view: &dyn View) -> Answer {
        Answer::value(match self {
            Files::Envs => {
                let mut envs = std::collections::BTreeSet::new();
                for (_, src) in view.file_backends() {
                    envs.extend(src.envs(TREE));
                }
                Value::Array(envs.into_iter().map(Value::from).collect())
            }
            Files::List { what, saltenv, prefix } => {
                let mut l = Listing::default();
                for (_, src) in view.file_backends() {
                    let b = src.list(TREE, &saltenv);
                    l.files.extend(b.files);
                    l.empty_dirs.extend(b.empty_dirs);
                    l.dirs.extend(b.dirs);
                    for (k, v) in b.links {
                        l.links.entry(k).or_insert(v);
                    }
                }
                match what {
                    ListKind::Files => with_prefix(&l.files, &prefix),
                    ListKind::EmptyDirs => with_prefix(&l.empty_dirs, &prefix),
                    ListKind::Dirs => with_prefix(&l.dirs, &prefix),
                    ListKind::Symlinks => Value::Map(
                        l.links
                            .iter()
                            .filter(|(k, _)| k.starts_with(prefix.trim_matches('/')))
                            .map(|(k, v)| (Value::from(k.as_str()), Value::from(v.as_str())))
                            .collect(),
                    ),
                }
            }
            Files::Hash { path, saltenv } => match find(view, &path, &saltenv) {
                Some((_, src, f)) => hash(src, &f),
                None => Value::from(""),
            },
            Files::HashAndStat { path, saltenv } => match find(view, &path, &saltenv) {
                Some((back, src, f)) => Value::Array(vec![hash(src, &f), stat(back, src, &f)]),
                None => Value::from(""),
            },
            Files::Find { path, saltenv } => match find(view, &path, &saltenv) {
                Some((back, src, f)) => map([("path", Value::from(f.path.as_str())), ("rel", Value::from(f.rel.as_str())), ("stat", stat(back, src, &f)), ("back", Value::from(back.name()))]),
                None => map([("path", Value::from("")), ("rel", Value::from(""))]),
            },
            Files::Serve { path, saltenv, loc } => {
                let not_found = || map([("data", Value::from("")), ("dest", Value::from(""))]);
                match find(view, &path, &saltenv).and_then(|(_, src, f)| Some((src.read(TREE, &f, loc, FILE_BUFFER_SIZE)?, f))) {
                    Some((data, f)) => map([("data", bin(data)), ("dest", Value::from(f.rel.as_str()))]),
                    None => not_found(),
                }
            }
        })
    }
}

/// Splits `path?saltenv=x` and returns (path, saltenv).
fn split_query<'a>(path: &'a str, saltenv: &'a str) -> (&'a str, &'a str) {
    match path.split_once('?') {
        Some((p, q)) => (p, q.split('&').find_map(|kv| kv.strip_prefix("saltenv=")).unwrap_or(saltenv)),
        None => (path, saltenv),
    }
}

/// A safe relative path: no empty, `.` or `..` component, not absolute, no NUL or `\`.
pub fn safe_rel(path: &str) -> Option<String> {
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

/// Resolves a request to a file of the first backend that holds it.
fn find<'v>(view: &'v dyn View, path: &str, saltenv: &str) -> Option<(Backend, &'v dyn RootsSource, FileRef)> {
    let (path, saltenv) = split_query(path, saltenv);
    let Some(rel) = safe_rel(path) else {
        crate::metrics::refuse(crate::metrics::Port::Request, "file request", "unsafe_path", &format_args!("file server: refusing an unsafe path {:?}", path.escape_debug().to_string()));
        return None;
    };
    // A saltenv names a configured environment, never a path.
    if saltenv.contains(['/', '\\', '\0']) || saltenv == ".." || saltenv == "." {
        crate::metrics::refuse(crate::metrics::Port::Request, "file request", "unsafe_path", &format_args!("file server: refusing the saltenv {:?}", saltenv.escape_debug().to_string()));
        return None;
    }
    view.file_backends().into_iter().find_map(|(back, src)| src.find(TREE, saltenv, &rel).map(|f| (back, src, f)))
}

/// `{"hsum": <sha256 hex>, "hash_type": "sha256"}`, or `""` when unreadable.
fn hash(src: &dyn RootsSource, f: &FileRef) -> Value {
    match src.read_all(TREE, f) {
        Some(data) => map([("hsum", Value::from(hex::encode(Sha256::digest(&data)))), ("hash_type", Value::from("sha256"))]),
        None => Value::from(""),
    }
}

/// The `roots` backend's `os.stat` fields; gitfs reports the file's git mode alone, as
/// Salt's does.
fn stat(back: Backend, src: &dyn RootsSource, f: &FileRef) -> Value {
    match (src.stat(TREE, f), back) {
        (Some(s), Backend::Gitfs) => Value::Array(vec![Value::from(s[0])]),
        (Some(s), Backend::Roots) => Value::Array(s.into_iter().map(Value::from).collect()),
        (None, _) => Value::Array(vec![]),
    }
}

/// Filters sorted names by Salt's `prefix` rule (`startswith(prefix.strip("/"))`).
fn with_prefix<'a>(names: impl IntoIterator<Item = &'a String>, prefix: &str) -> Value {
    let p = prefix.trim_matches('/');
    Value::Array(names.into_iter().filter(|n| n.starts_with(p)).map(|n| Value::from(n.as_str())).collect())
}
