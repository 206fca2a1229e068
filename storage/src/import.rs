//! Reading trees from outside the log into records: the `localfs_key` pki tree (for
//! `pki.migrate_to_mmap`) and a shared-filesystem cluster tree (for `import-shared`, the
//! first step of shared→isolated migration).
//!
//! Every file is untrusted: names must be valid ids or safe relative paths, sizes are
//! bounded, and a file that breaks a rule is skipped with a warning and counted, never
//! half-imported.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, IoContext, Result};
use crate::format::{JobPublished, JobReturn, KeySet, KeyState, Record, RootsTree};
use crate::id::{validate_minion_id, validate_relative_path, validate_saltenv};
use crate::state::roots_records;

/// The largest public key file accepted (a 16384-bit key is about 2.8 KiB).
pub const MAX_KEY_FILE: u64 = 64 << 10;
/// The largest roots file imported.
pub const MAX_ROOTS_FILE: u64 = 512 << 20;
/// The largest job cache file imported.
pub const MAX_JOB_FILE: u64 = 32 << 20;

/// Counts of an import, printed like the reference's `pki.migrate_to_mmap`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PkiCounts {
    pub accepted: u64,
    pub pending: u64,
    pub rejected: u64,
    pub denied: u64,
    pub skipped: u64,
}

impl PkiCounts {
    pub fn total(&self) -> u64 {
        self.accepted + self.pending + self.rejected + self.denied
    }

    pub fn as_map(&self) -> BTreeMap<String, u64> {
        [("accepted", self.accepted), ("pending", self.pending), ("rejected", self.rejected), ("denied", self.denied), ("skipped", self.skipped)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }
}

fn mtime_ns(m: &fs::Metadata) -> u64 {
    (m.mtime().max(0) as u64) * 1_000_000_000 + m.mtime_nsec().max(0) as u64
}

/// Regular, non-symlink files of `dir` (sorted by name so imports are deterministic).
fn regular_files(dir: &Path) -> Result<Vec<(String, PathBuf, fs::Metadata)>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("listing {}", dir.display()), e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.ctx(|| format!("listing {}", dir.display()))?;
        let path = ent.path();
        let meta = fs::symlink_metadata(&path).ctx(|| format!("stat {}", path.display()))?;
        if !meta.file_type().is_file() {
            continue;
        }
        match ent.file_name().into_string() {
            Ok(name) => out.push((name, path, meta)),
            Err(name) => tracing::warn!(dir = %dir.display(), name = ?name, "file name is not UTF-8; skipped"),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn read_bounded(path: &Path, meta: &fs::Metadata, max: u64) -> Result<Vec<u8>> {
    if meta.len() > max {
        return Err(Error::Invalid(format!("{} is {} bytes, more than the {max}-byte limit", path.display(), meta.len())));
    }
    let data = fs::read(path).ctx(|| format!("reading {}", path.display()))?;
    if data.len() as u64 > max {
        return Err(Error::Invalid(format!("{} grew past the {max}-byte limit while being read", path.display())));
    }
    Ok(data)
}

/// Reads a `localfs_key` pki tree into key records, in the reference migration's order:
/// `minions` (accepted), `minions_pre` (pending), `minions_rejected` (rejected), then
/// `minions_denied`. An id in several state directories yields several records and the
/// last wins (rejected > pending > accepted), as with the reference. Dot-files are skipped
/// in the state directories; symlinks and invalid ids everywhere (logged, counted as
/// skipped). Key bytes are kept exactly, without newline translation.
pub fn read_localfs_pki(pki_dir: &Path) -> Result<(Vec<Record>, PkiCounts)> {
    let mut recs = Vec::new();
    let mut c = PkiCounts::default();
    let dirs = [("minions", KeyState::Accepted), ("minions_pre", KeyState::Pending), ("minions_rejected", KeyState::Rejected), ("minions_denied", KeyState::Denied)];
    for (dir, state) in dirs {
        for (name, path, meta) in regular_files(&pki_dir.join(dir))? {
            if state != KeyState::Denied && name.starts_with('.') {
                continue;
            }
            if let Err(e) = validate_minion_id(&name) {
                tracing::warn!(file = %path.display(), "skipping: {e}");
                c.skipped += 1;
                continue;
            }
            let data = match read_bounded(&path, &meta, MAX_KEY_FILE) {
                Ok(d) if !d.is_empty() => d,
                Ok(_) => {
                    tracing::warn!(file = %path.display(), "skipping an empty key file");
                    c.skipped += 1;
                    continue;
                }
                Err(e) => {
                    tracing::warn!("skipping: {e}");
                    c.skipped += 1;
                    continue;
                }
            };
            recs.push(Record::KeySet(KeySet { id: name, state, pub_key: data, time_ns: mtime_ns(&meta), expect: None, pending_below: None }));
            match state {
                KeyState::Accepted => c.accepted += 1,
                KeyState::Pending => c.pending += 1,
                KeyState::Rejected => c.rejected += 1,
                _ => c.denied += 1,
            }
        }
    }
    Ok((recs, c))
}

/// The master key files at the top of a pki dir, by name: every `*.pem`, `*.pub` and
/// `*_pubkey_signature` (symlinks such as `master.pem -> <id>.pem` are followed, so the
/// names the reference's `MasterKeys` looks up, `<master_id>.pem` and `master.pem`, are
/// both present).
pub fn read_master_keys(pki_dir: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let rd = match fs::read_dir(pki_dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("listing {}", pki_dir.display()), e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.ctx(|| format!("listing {}", pki_dir.display()))?;
        let Ok(name) = ent.file_name().into_string() else { continue };
        if !(name.ends_with(".pem") || name.ends_with(".pub") || name.ends_with("_pubkey_signature")) {
            continue;
        }
        let path = ent.path();
        let Ok(meta) = fs::metadata(&path) else {
            tracing::warn!(file = %path.display(), "dangling master key link; skipped");
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        out.push((name, read_bounded(&path, &meta, MAX_KEY_FILE)?));
    }
    out.sort();
    Ok(out)
}

/// Reads the files of a roots directory (one saltenv) into blob records. Symlinks are
/// not followed (logged and skipped), hidden VCS dirs are imported like any file.
pub fn read_roots_dir(tree: RootsTree, saltenv: &str, dir: &Path, out: &mut Vec<Record>, counts: &mut BTreeMap<String, u64>) -> Result<()> {
    validate_saltenv(saltenv)?;
    fn walk(tree: RootsTree, env: &str, root: &Path, rel: &str, out: &mut Vec<Record>, counts: &mut BTreeMap<String, u64>) -> Result<()> {
        let dir = if rel.is_empty() { root.to_path_buf() } else { root.join(rel) };
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(format!("listing {}", dir.display()), e)),
        };
        let mut ents: Vec<_> = rd.collect::<std::io::Result<Vec<_>>>().ctx(|| format!("listing {}", dir.display()))?;
        ents.sort_by_key(|e| e.file_name());
        for ent in ents {
            let Ok(name) = ent.file_name().into_string() else {
                tracing::warn!(dir = %dir.display(), "non-UTF-8 file name skipped");
                *counts.entry("skipped".into()).or_default() += 1;
                continue;
            };
            let relp = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            if name.starts_with(".halite-tmp-") {
                continue;
            }
            let meta = fs::symlink_metadata(ent.path()).ctx(|| format!("stat {}", ent.path().display()))?;
            if meta.file_type().is_symlink() {
                tracing::warn!(path = %ent.path().display(), "symlink in a roots tree not imported");
                *counts.entry("skipped".into()).or_default() += 1;
            } else if meta.is_dir() {
                walk(tree, env, root, &relp, out, counts)?;
            } else if meta.is_file() {
                if validate_relative_path(&relp).is_err() {
                    *counts.entry("skipped".into()).or_default() += 1;
                    continue;
                }
                let data = read_bounded(&ent.path(), &meta, MAX_ROOTS_FILE)?;
                out.extend(roots_records(tree, env, &relp, meta.permissions().mode() & 0o7777, &data));
                *counts.entry(format!("{}_roots", tree.as_str())).or_default() += 1;
            }
        }
        Ok(())
    }
    walk(tree, saltenv, dir, "", out, counts)
}

/// Reads Salt's default job cache (`<cachedir>/jobs/<h2>/<h>/`: `jid`, `.load.p`,
/// `.minions.p`, `<minion>/return.p`) into job records. Loads stay msgpack bytes.
pub fn read_job_cache(cachedir: &Path, out: &mut Vec<Record>, counts: &mut BTreeMap<String, u64>) -> Result<()> {
    let jobs = cachedir.join("jobs");
    let Ok(rd) = fs::read_dir(&jobs) else { return Ok(()) };
    let mut tops: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect();
    tops.sort();
    for top in tops {
        let Ok(rd) = fs::read_dir(&top) else { continue };
        let mut jdirs: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect();
        jdirs.sort();
        for jd in jdirs {
            let jid_path = jd.join("jid");
            let Ok(meta) = fs::symlink_metadata(&jid_path) else { continue };
            let jid = match read_bounded(&jid_path, &meta, 1024).map(String::from_utf8) {
                Ok(Ok(s)) => s.trim().to_string(),
                _ => {
                    *counts.entry("skipped".into()).or_default() += 1;
                    continue;
                }
            };
            let load = match fs::symlink_metadata(jd.join(".load.p")) {
                Ok(m) if m.is_file() => read_bounded(&jd.join(".load.p"), &m, MAX_JOB_FILE)?,
                _ => Vec::new(),
            };
            let minions: Vec<String> = match fs::symlink_metadata(jd.join(".minions.p")) {
                Ok(m) if m.is_file() => {
                    let b = read_bounded(&jd.join(".minions.p"), &m, MAX_JOB_FILE)?;
                    rmp_serde::from_slice::<Vec<String>>(&b).unwrap_or_default().into_iter().filter(|m| validate_minion_id(m).is_ok()).collect()
                }
                _ => Vec::new(),
            };
            let rec = Record::JobPublished(JobPublished { jid: jid.clone(), load, minions, time_ns: mtime_ns(&meta), started_by: None, joins: false });
            if rec.validate().is_err() {
                tracing::warn!(dir = %jd.display(), "job with an invalid jid skipped");
                *counts.entry("skipped".into()).or_default() += 1;
                continue;
            }
            out.push(rec);
            *counts.entry("jobs".into()).or_default() += 1;
            for (name, path, m) in sub_dirs(&jd)? {
                let rp = path.join("return.p");
                let Ok(rm) = fs::symlink_metadata(&rp) else { continue };
                if !rm.is_file() || validate_minion_id(&name).is_err() {
                    continue;
                }
                let load = read_bounded(&rp, &rm, MAX_JOB_FILE)?;
                out.push(Record::JobReturn(JobReturn { jid: jid.clone(), id: name, load, time_ns: mtime_ns(&m), first_only: false }));
                *counts.entry("returns".into()).or_default() += 1;
            }
        }
    }
    Ok(())
}

fn sub_dirs(dir: &Path) -> Result<Vec<(String, PathBuf, fs::Metadata)>> {
    let rd = fs::read_dir(dir).ctx(|| format!("listing {}", dir.display()))?;
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.ctx(|| format!("listing {}", dir.display()))?;
        let meta = fs::symlink_metadata(ent.path()).ctx(|| format!("stat {}", ent.path().display()))?;
        if meta.is_dir() {
            if let Ok(name) = ent.file_name().into_string() {
                out.push((name, ent.path(), meta));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
