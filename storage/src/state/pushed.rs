//! The state of files minions pushed (`crate::file_recv`, kind 20): applying pieces,
//! and reading a file's progress and bytes back (for the `_file_recv` handler and the
//! roots view, which writes complete files under `cachedir/minions`).

use rocksdb::{Direction, IteratorMode, WriteBatch};

use super::apply::Overlay;
use super::{from_msgpack, to_msgpack, Effect, StateMachine, CF_CHUNKS, CF_META};
use crate::error::Result;
use crate::format::KeyState;
use crate::file_recv::{chunk_key, chunk_prefix, meta_key, minion_prefix, parse_meta_key, FileRecv, PushedMeta, PushedRead, PUSHED_PREFIX};

/// The key just past every key starting with `prefix` (none of ours ends in 0xff).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    end.push(0xff);
    end
}

impl StateMachine {
    /// A file's progress, as this batch has left it.
    fn pushed_meta(&self, key: &[u8], ov: &Overlay) -> Result<Option<PushedMeta>> {
        if let Some(m) = ov.pushed.get(key) {
            return Ok(*m);
        }
        let db = self.db()?;
        let found = match db.get_pinned_cf(db.cf(CF_META)?, key)? {
            Some(v) => Some(from_msgpack("pushed file", &v)?),
            None => None,
        };
        Ok(found)
    }

    /// Whether another pushed file of `id` is in the way of `path`: one at a parent
    /// path (a file where a folder must be), or one below it (a folder where the file
    /// must be).
    fn pushed_conflict(&self, id: &str, path: &str, ov: &Overlay) -> Result<bool> {
        let mut at = 0;
        while let Some(slash) = path[at..].find('/') {
            let parent = &path[..at + slash];
            if self.pushed_meta(&meta_key(id, parent), ov)?.is_some() {
                return Ok(true);
            }
            at += slash + 1;
        }
        let below = meta_key(id, &format!("{path}/"));
        if ov.pushed.iter().any(|(k, m)| m.is_some() && k.starts_with(&below)) {
            return Ok(true);
        }
        let db = self.db()?;
        for item in db.iterator_cf(db.cf(CF_META)?, IteratorMode::From(&below, Direction::Forward)) {
            let (k, _) = item?;
            if !k.starts_with(&below) {
                break;
            }
            if ov.pushed.get(&*k) != Some(&None) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// What the `_file_recv` handler reads before it decides (the applied state).
    pub fn pushed_read(&self, id: &str, path: &str) -> Result<PushedRead> {
        let ov = Overlay::default();
        Ok(PushedRead { held: self.pushed_meta(&meta_key(id, path), &ov)?, conflict: self.pushed_conflict(id, path, &ov)? })
    }

    /// One piece, decided here (`crate::file_recv`): offset 0 starts the file again; a
    /// piece that does not continue it, or that another file is in the way of, changes
    /// nothing. A file made complete is for the view to write; one started again is
    /// removed from it until complete.
    pub(super) fn apply_file_recv(&self, index: u64, r: &FileRecv, b: &mut WriteBatch, fx: &mut Vec<Effect>, ov: &mut Overlay) -> Result<()> {
        let db = self.db()?;
        // A piece of a minion whose key is not accepted here (deleted, or rejected, after
        // the piece was read) is not kept: its files went with its key.
        if !self.held_key(&r.id, ov)?.is_some_and(|(s, _)| s == KeyState::Accepted) {
            tracing::info!(index, id = %r.id, path = %r.path, "pushed piece not kept: the minion's key is not accepted");
            return Ok(());
        }
        let key = meta_key(&r.id, &r.path);
        let held = self.pushed_meta(&key, ov)?;
        let end = r.loc + r.data.len() as u64;
        let meta = match held {
            _ if r.loc == 0 => {
                if held.is_none() && self.pushed_conflict(&r.id, &r.path, ov)? {
                    tracing::warn!(index, id = %r.id, path = %r.path, "pushed file not kept: another pushed file of the minion is in its way");
                    return Ok(());
                }
                let prefix = chunk_prefix(&r.id, &r.path);
                b.delete_range_cf(db.cf(CF_CHUNKS)?, prefix.clone(), prefix_end(&prefix));
                if held.is_some() {
                    fx.push(Effect::PushedRemoved { id: r.id.clone(), path: r.path.clone() });
                }
                PushedMeta { size: r.size, held: end, time_ns: r.time_ns }
            }
            Some(m) if m.held == r.loc && m.size == r.size && !m.complete() => PushedMeta { size: m.size, held: end, time_ns: r.time_ns },
            _ => {
                tracing::warn!(index, id = %r.id, path = %r.path, loc = r.loc, held = ?held.map(|m| (m.held, m.size)), "pushed piece not kept: it does not continue its file");
                return Ok(());
            }
        };
        if !r.data.is_empty() {
            b.put_cf(db.cf(CF_CHUNKS)?, chunk_key(&r.id, &r.path, r.loc), &r.data);
        }
        b.put_cf(db.cf(CF_META)?, &key, to_msgpack(&meta)?);
        ov.pushed.insert(key, Some(meta));
        if meta.complete() {
            fx.push(Effect::PushedWritten { id: r.id.clone(), path: r.path.clone() });
        }
        Ok(())
    }

    /// Drops every file `id` pushed (its key is deleted), decided here so every member
    /// drops the same files; the view clears `cachedir/minions/<id>`.
    pub(super) fn drop_pushed(&self, index: u64, id: &str, b: &mut WriteBatch, fx: &mut Vec<Effect>, ov: &mut Overlay) -> Result<()> {
        let db = self.db()?;
        let prefix = minion_prefix(id);
        let mut dropped = 0u64;
        for (_, m) in ov.pushed.iter_mut().filter(|(k, _)| k.starts_with(&prefix)) {
            dropped += u64::from(m.take().is_some());
        }
        for item in db.iterator_cf(db.cf(CF_META)?, IteratorMode::From(&prefix, Direction::Forward)) {
            let (k, _) = item?;
            if !k.starts_with(&prefix) {
                break;
            }
            if !ov.pushed.contains_key(&*k) {
                ov.pushed.insert(k.to_vec(), None);
                dropped += 1;
            }
        }
        if dropped > 0 {
            b.delete_range_cf(db.cf(CF_META)?, prefix.clone(), prefix_end(&prefix));
            b.delete_range_cf(db.cf(CF_CHUNKS)?, prefix.clone(), prefix_end(&prefix));
            tracing::info!(index, id, files = dropped, "the minion's pushed files go with its deleted key");
            fx.push(Effect::PushedCleared { id: id.to_owned() });
        }
        Ok(())
    }

    /// A complete pushed file's bytes, piece by piece in order, handed to `each`;
    /// `false` when the state holds no complete file there.
    pub fn pushed_file(&self, id: &str, path: &str, mut each: impl FnMut(&[u8]) -> Result<()>) -> Result<bool> {
        match self.pushed_meta(&meta_key(id, path), &Overlay::default())? {
            Some(m) if m.complete() => {}
            _ => return Ok(false),
        }
        let db = self.db()?;
        let prefix = chunk_prefix(id, path);
        for item in db.iterator_cf(db.cf(CF_CHUNKS)?, IteratorMode::From(&prefix, Direction::Forward)) {
            let (k, v) = item?;
            if !k.starts_with(&prefix) {
                break;
            }
            each(&v)?;
        }
        Ok(true)
    }

    /// Every complete pushed file: (minion id, path).
    pub fn pushed_files(&self) -> Result<Vec<(String, String)>> {
        self.pushed_in(PUSHED_PREFIX)
    }

    /// The complete pushed files of one minion.
    pub fn pushed_files_of(&self, id: &str) -> Result<Vec<(String, String)>> {
        self.pushed_in(&minion_prefix(id))
    }

    fn pushed_in(&self, prefix: &[u8]) -> Result<Vec<(String, String)>> {
        let db = self.db()?;
        let mut out = Vec::new();
        for item in db.iterator_cf(db.cf(CF_META)?, IteratorMode::From(prefix, Direction::Forward)) {
            let (k, v) = item?;
            if !k.starts_with(prefix) {
                break;
            }
            let m: PushedMeta = from_msgpack("pushed file", &v)?;
            if let (true, Some(named)) = (m.complete(), parse_meta_key(&k)) {
                out.push(named);
            }
        }
        Ok(out)
    }
}
