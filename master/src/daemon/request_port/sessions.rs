//! Per-minion session keys (Salt's AES session key of a minion): the key that encrypts a minion's requests and the
//! replies to them. Kept in memory and in one append-only journal,
//! `cachedir/sessions/journal` (format: `docs/formats.md` §7), so they survive a restart.
//! A key older than `publish_session` seconds is no longer handed out: the minion then
//! gets `"bad load"` once, signs in again and is given a new one.
//!
//! Keys are made only at a successful sign-in (`req::auth`, as an effect applied after
//! the sign-in's records are committed), never for an id that has not authenticated: a
//! lookup reads memory only and makes nothing.
//!
//! **Why a journal.** A file per key (`sessions/<id>`, written to a temporary name and
//! renamed) costs three file-system calls and a directory entry per sign-in, about 5 %
//! of a master's CPU in an 8,000-minion sign-in storm, and 8,000 file reads after a
//! restart. A sign-in appends one record (one `write`), and a start reads one file. The journal is rewritten with only the live keys at every start and
//! whenever it holds more than twice as many records as live keys (plus
//! [`COMPACT_SLACK`]). A start also takes in per-id files (`sessions/<id>`) it finds,
//! then removes them.
//!
//! **What a key survives.** The journal is not fsynced: a key outlives a restart and a
//! crash of the master (the kernel writes the page cache out), not the machine's power
//! loss. A key that is lost costs its minion one sign-in (`"bad load"`, then `_auth`).
//!
//! **The file is not trusted.** Every record carries its length and a CRC-32; a length
//! over [`MAX_RECORD`] is refused before anything is allocated, and the id and key are
//! checked as a minion's would be. Reading stops at the first bad record (a write torn
//! by a crash, or damage): the keys before it are kept, the rest dropped (their minions
//! sign in again), counted as `halite_refused_total{port="disk",
//! reason="session_journal"}` and logged; the rewrite at start leaves a clean file.
//!
//! The memory kept is bounded too: at most [`MAX_IN_MEMORY`] keys (far above any fleet a
//! master serves). An install at the bound drops the expired keys, then the oldest; a
//! minion whose key was dropped signs in again.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::wire::crypto::Crypticle;

/// Most session keys kept in memory (far above any fleet a master serves).
pub const MAX_IN_MEMORY: usize = 1 << 20;

/// The journal's file name in the sessions directory.
pub const JOURNAL: &str = "journal";

/// The largest record body read back (an id is at most 255 bytes, a key string 76).
pub const MAX_RECORD: usize = 1024;

/// Records the journal may hold beyond twice the live keys before it is rewritten.
pub const COMPACT_SLACK: usize = 4096;

/// How long after a failed write the journal is rewritten again.
pub const REWRITE_RETRY: Duration = Duration::from_secs(10);

/// The record header: body length and CRC-32 of the body, both little-endian u32.
const HEADER: usize = 8;

/// The first bytes of the journal: its name and format version.
const MAGIC: &[u8; 8] = b"HSESS\x00\x00\x01";

type Keys = HashMap<String, (Crypticle, SystemTime)>;

pub struct Sessions {
    /// The journal's directory; `None` for a cluster member's ([`Sessions::none`]).
    dir: Option<PathBuf>,
    max_age: Duration,
    cap: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    keys: Keys,
    /// The journal, open for appending; `None` when it cannot be written (the keys are
    /// then kept in memory only, and the failure logged).
    journal: Option<File>,
    /// Records in the journal file (live or superseded).
    records: usize,
    /// Set when an append or rewrite failed: the file lacks keys that memory has (or ends
    /// in a torn record), so nothing more is appended until a rewrite succeeds, tried at
    /// most every [`REWRITE_RETRY`] (a full disk is not rewritten at every sign-in).
    failed_at: Option<Instant>,
}

impl Sessions {
    /// Opens the sessions directory: reads the journal (and any per-id files
    /// `sessions/<id>`), drops expired keys and rewrites the journal with the rest.
    pub fn new(dir: PathBuf, max_age: Duration) -> Self {
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::error!(dir = %dir.display(), "cannot create the sessions directory: {e}");
        }
        let mut keys = read_journal(&dir.join(JOURNAL));
        let legacy = read_legacy_files(&dir, &mut keys);
        keys.retain(|_, (_, born)| age(*born) < max_age);
        let s = Sessions { dir: Some(dir.clone()), max_age, cap: MAX_IN_MEMORY, inner: Mutex::new(Inner { keys, journal: None, records: 0, failed_at: None }) };
        {
            let mut inner = s.lock();
            s.make_room(&mut inner.keys);
            s.rewrite(&dir, &mut inner);
            if inner.journal.is_some() {
                for name in &legacy {
                    let _ = std::fs::remove_file(dir.join(name));
                }
            }
            if !inner.keys.is_empty() || !legacy.is_empty() {
                tracing::info!(keys = inner.keys.len(), from_older_files = legacy.len(), "session keys read back");
            }
        }
        s
    }

    /// A cluster member's sessions: none is ever installed (one would be kept in memory
    /// only); no directory, no journal.
    pub fn none() -> Self {
        Sessions { dir: None, max_age: Duration::ZERO, cap: 1, inner: Mutex::new(Inner { keys: Keys::new(), journal: None, records: 0, failed_at: None }) }
    }

    /// The same with at most `cap` keys in memory.
    #[cfg(test)]
    pub(crate) fn with_cap(mut self, cap: usize) -> Self {
        self.cap = cap.max(1);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keys held in memory.
    #[cfg(test)]
    pub(crate) fn in_memory(&self) -> usize {
        self.lock().keys.len()
    }

    /// The session key of a minion id, if it has one younger than `publish_session`.
    pub fn fresh(&self, id: &str) -> Option<Crypticle> {
        let mut inner = self.lock();
        let (c, born) = inner.keys.get(id)?;
        if age(*born) < self.max_age {
            return Some(c.clone());
        }
        inner.keys.remove(id);
        None
    }

    /// Installs a minion's new session key (memory and journal).
    pub fn install(&self, id: &str, key: &Crypticle) {
        let born = SystemTime::now();
        let mut inner = self.lock();
        if !inner.keys.contains_key(id) {
            self.make_room(&mut inner.keys);
        }
        inner.keys.insert(id.to_string(), (key.clone(), born));
        let Some(dir) = &self.dir else {
            return; // `none()`: memory only
        };
        if let Some(at) = inner.failed_at {
            if at.elapsed() >= REWRITE_RETRY {
                self.rewrite(dir, &mut inner);
            }
            return;
        }
        let rec = record(id, key.key_string(), born);
        let written = match inner.journal.as_mut() {
            Some(f) => f.write_all(&rec),
            None => Err(std::io::Error::other("the journal is not open")),
        };
        match written {
            Ok(()) => inner.records += 1,
            Err(e) => {
                crate::metrics::refuse(crate::metrics::Port::Disk, &dir.display().to_string(), "session_journal", &format_args!("cannot persist the session key of {id}: {e}"));
                inner.failed_at = Some(Instant::now());
                return;
            }
        }
        if inner.records > 2 * inner.keys.len() + COMPACT_SLACK {
            self.rewrite(dir, &mut inner);
        }
    }

    /// Brings the keys in memory below the cap (see the module docs).
    fn make_room(&self, keys: &mut Keys) {
        if keys.len() < self.cap {
            return;
        }
        keys.retain(|_, (_, born)| age(*born) < self.max_age);
        while keys.len() >= self.cap {
            let Some(oldest) = keys.iter().min_by_key(|(_, (_, born))| *born).map(|(id, _)| id.clone()) else { break };
            keys.remove(&oldest);
        }
    }

    /// Writes the live keys to a new journal and swaps it in (write, rename: not fsynced,
    /// as appends are not, so a rewrite never holds the lock for a disk flush), then
    /// appends to it. On failure the old journal stays as it was, and appends stop
    /// until a later rewrite succeeds (`failed_at`).
    fn rewrite(&self, dir: &Path, inner: &mut Inner) {
        let path = dir.join(JOURNAL);
        let tmp = dir.join(format!(".{JOURNAL}.tmp"));
        let mut buf = Vec::with_capacity(MAGIC.len() + inner.keys.len() * 128);
        buf.extend_from_slice(MAGIC);
        for (id, (key, born)) in &inner.keys {
            buf.extend_from_slice(&record(id, key.key_string(), *born));
        }
        let done = (|| -> std::io::Result<File> {
            let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            f.write_all(&buf)?;
            std::fs::rename(&tmp, &path)?;
            std::fs::OpenOptions::new().append(true).open(&path)
        })();
        match done {
            Ok(f) => {
                inner.journal = Some(f);
                inner.records = inner.keys.len();
                inner.failed_at = None;
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                crate::metrics::refuse(crate::metrics::Port::Disk, &path.display().to_string(), "session_journal", &format_args!("cannot rewrite the session journal: {e}; keys are kept in memory"));
                inner.failed_at = Some(Instant::now());
            }
        }
    }
}

fn age(born: SystemTime) -> Duration {
    born.elapsed().unwrap_or_default()
}

/// One journal record: `len: u32 LE | crc32(body): u32 LE | body`, the body being
/// `born: u64 LE (ms since the epoch) | id_len: u8 | id | key string`.
fn record(id: &str, key: &str, born: SystemTime) -> Vec<u8> {
    let ms = born.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
    let id = &id.as_bytes()[..id.len().min(u8::MAX as usize)];
    let mut body = Vec::with_capacity(9 + id.len() + key.len());
    body.extend_from_slice(&ms.to_le_bytes());
    body.push(id.len() as u8);
    body.extend_from_slice(id);
    body.extend_from_slice(key.as_bytes());
    let mut rec = Vec::with_capacity(HEADER + body.len());
    rec.extend_from_slice(&(body.len() as u32).to_le_bytes());
    rec.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    rec.extend_from_slice(&body);
    rec
}

/// Why a journal record was refused.
#[derive(Debug, PartialEq, Eq)]
enum Damage {
    TooLong(usize),
    Torn,
    Checksum,
    Malformed(&'static str),
}

/// Parses one record body: (id, key, born).
fn parse_body(body: &[u8]) -> Result<(String, Crypticle, SystemTime), Damage> {
    let (ms, rest) = body.split_first_chunk::<8>().ok_or(Damage::Malformed("short body"))?;
    let (&id_len, rest) = rest.split_first().ok_or(Damage::Malformed("short body"))?;
    if rest.len() < id_len as usize {
        return Err(Damage::Malformed("id longer than the body"));
    }
    let (id, key) = rest.split_at(id_len as usize);
    let id = halite_storage::id::validate_minion_id_bytes(id).map_err(|_| Damage::Malformed("invalid minion id"))?;
    let key = std::str::from_utf8(key).ok().and_then(|k| Crypticle::from_key_string(k).ok()).ok_or(Damage::Malformed("invalid key"))?;
    let born = UNIX_EPOCH.checked_add(Duration::from_millis(u64::from_le_bytes(*ms))).ok_or(Damage::Malformed("bad time"))?;
    Ok((id.to_string(), key, born))
}

/// Reads records until the end or the first bad one: the keys read (a later record for
/// an id replaces an earlier one), and where and why reading stopped early.
fn read_records(r: &mut impl Read) -> (Keys, Option<(u64, Damage)>) {
    let mut keys = Keys::new();
    let mut at = MAGIC.len() as u64;
    let mut header = [0u8; HEADER];
    let mut body = Vec::with_capacity(MAX_RECORD);
    loop {
        match read_full(r, &mut header) {
            Ok(0) => return (keys, None),
            Ok(n) if n < HEADER => return (keys, Some((at, Damage::Torn))),
            Ok(_) => {}
            Err(_) => return (keys, Some((at, Damage::Torn))),
        }
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if len > MAX_RECORD {
            return (keys, Some((at, Damage::TooLong(len))));
        }
        body.resize(len, 0);
        match read_full(r, &mut body) {
            Ok(n) if n == len => {}
            _ => return (keys, Some((at, Damage::Torn))),
        }
        if crc32fast::hash(&body) != crc {
            return (keys, Some((at, Damage::Checksum)));
        }
        match parse_body(&body) {
            Ok((id, key, born)) => {
                keys.insert(id, (key, born));
            }
            Err(d) => return (keys, Some((at, d))),
        }
        at += (HEADER + len) as u64;
    }
}

/// Reads into `buf` until it is full or the input ends; the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The keys in the journal at `path` (none if it does not exist); a damaged journal
/// gives the keys before the damage, and the damage is reported.
fn read_journal(path: &Path) -> Keys {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Keys::new(),
        Err(e) => {
            crate::metrics::refuse(crate::metrics::Port::Disk, &path.display().to_string(), "session_journal", &format_args!("cannot read the session journal: {e}"));
            return Keys::new();
        }
    };
    let mut r = BufReader::new(f);
    let mut magic = [0u8; MAGIC.len()];
    if read_full(&mut r, &mut magic).ok() != Some(MAGIC.len()) || &magic != MAGIC {
        crate::metrics::refuse(crate::metrics::Port::Disk, &path.display().to_string(), "session_journal", &"not a session journal (no HSESS header); its keys are dropped, their minions sign in again");
        return Keys::new();
    }
    let (keys, damage) = read_records(&mut r);
    if let Some((at, why)) = damage {
        crate::metrics::refuse(
            crate::metrics::Port::Disk,
            &path.display().to_string(),
            "session_journal",
            &format_args!("damaged record at byte {at} ({why:?}): the {} keys before it are kept, later ones dropped (their minions sign in again)", keys.len()),
        );
    }
    keys
}

/// Takes in the per-id key files (`sessions/<id>`, mtime = birth) an older Halite wrote;
/// a later journal record for the same id wins. Returns the names taken in.
fn read_legacy_files(dir: &Path, keys: &mut Keys) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return vec![] };
    let mut taken = Vec::new();
    for e in entries.flatten() {
        let Ok(name) = e.file_name().into_string() else { continue };
        if name.starts_with('.') || name == JOURNAL || halite_storage::id::validate_minion_id(&name).is_err() {
            continue;
        }
        let Ok(meta) = e.metadata() else { continue };
        if !meta.is_file() || meta.len() > MAX_RECORD as u64 {
            continue;
        }
        let (Ok(born), Ok(text)) = (meta.modified(), std::fs::read_to_string(e.path())) else { continue };
        let Ok(key) = Crypticle::from_key_string(&text) else { continue };
        if keys.get(&name).is_none_or(|(_, b)| *b < born) {
            keys.insert(name.clone(), (key, born));
        }
        taken.push(name);
    }
    taken
}

/// The session keys a master's sessions directory holds, for tools and tests (read
/// only; a damaged journal gives what precedes the damage).
pub fn read_keys(dir: &Path) -> HashMap<String, String> {
    read_journal(&dir.join(JOURNAL)).into_iter().map(|(id, (k, _))| (id, k.key_string().to_string())).collect()
}

#[cfg(test)]
#[path = "sessions_tests.rs"]
mod tests;
