//! What the roots records do to the state machine: live files (`roots_blob`,
//! `roots_tombstone`) and `cluster.sync_roots` as one unit (`roots_stage`, `roots_sync`).
//!
//! Keys (column families `roots` and `chunks`):
//!
//! ```text
//! roots   <tree> 0 <saltenv> 0 <path>                      -> RootsMeta (msgpack)
//! chunks  <tree> 0 <saltenv> 0 <path> 0 <u32 BE chunk>      -> bytes
//! roots   "stage" 0 <sync id, 16 bytes> <tree> 0 <saltenv> 0 <path>          (staged)
//! chunks  "stage" 0 <sync id, 16 bytes> <tree> 0 <saltenv> 0 <path> 0 <chunk>
//! ```
//!
//! A tree is `file` or `pillar`, so no live key starts with `stage\0`; readers of the
//! live roots ([`StateMachine::roots_files`]) skip the staging prefix.
//!
//! A sync stages the chunks of the files it brings; its last record, `roots_sync`,
//! decides at apply (see [`RootsSync`]): every file it names is live with that content
//! already or staged complete under its id, and every other live file of its trees is
//! one it expected to remove; then the staged files become live and the others go, in
//! the apply's one write batch; otherwise nothing changes. The staging area is emptied
//! either way (one sync at a time: a sync whose staging another sync's commit cleared
//! fails, and `cluster.sync_roots` says so).

use rocksdb::{IteratorMode, WriteBatch};
use sha2::{Digest, Sha256};

use super::apply::Overlay;
use super::{chunk_key, from_msgpack, roots_key, to_msgpack, Effect, RootsMeta, StateMachine, CF_CHUNKS, CF_ROOTS};
use crate::error::{Error, Result};
use crate::format::{RootsBlob, RootsSync, RootsTombstone, RootsTree};

/// The prefix of staged roots keys.
pub(super) const STAGE_PREFIX: &[u8] = b"stage\0";

/// The key of a file staged under sync `sync`.
fn stage_key(sync: &[u8], tree: RootsTree, env: &str, path: &str) -> Vec<u8> {
    let mut k = STAGE_PREFIX.to_vec();
    k.extend_from_slice(sync);
    k.extend_from_slice(&roots_key(tree, env, path));
    k
}

impl StateMachine {
    /// The roots meta at `rk`, as this batch has left it so far.
    fn roots_meta(&self, rk: &[u8], ov: &Overlay) -> Result<Option<RootsMeta>> {
        let db = self.db()?;
        match ov.roots.get(rk) {
            Some(m) => Ok(m.clone()),
            None => match db.get_cf(db.cf(CF_ROOTS)?, rk)? {
                Some(v) => Ok(Some(from_msgpack::<RootsMeta>("roots", &v)?)),
                None => Ok(None),
            },
        }
    }

    /// A chunk, as this batch has left it so far.
    fn roots_chunk(&self, ck: &[u8], ov: &Overlay) -> Result<Option<Vec<u8>>> {
        let db = self.db()?;
        match ov.chunks.get(ck) {
            Some(d) => Ok(Some(d.clone())),
            None => Ok(db.get_cf(db.cf(CF_CHUNKS)?, ck)?),
        }
    }

    fn put_meta(&self, rk: &[u8], meta: RootsMeta, b: &mut WriteBatch, ov: &mut Overlay) -> Result<()> {
        let db = self.db()?;
        b.put_cf(db.cf(CF_ROOTS)?, rk, to_msgpack(&meta)?);
        ov.roots.insert(rk.to_vec(), Some(meta));
        Ok(())
    }

    /// Deletes the file at `rk` (meta and chunks), if there is one.
    fn drop_file(&self, rk: &[u8], b: &mut WriteBatch, ov: &mut Overlay) -> Result<bool> {
        let db = self.db()?;
        let Some(p) = self.roots_meta(rk, ov)? else { return Ok(false) };
        // A range delete and a prefix filter: the meta may declare up to u32::MAX chunks.
        b.delete_range_cf(db.cf(CF_CHUNKS)?, chunk_key(rk, 0), chunk_key(rk, p.chunks));
        let mut prefix = rk.to_vec();
        prefix.push(0);
        ov.chunks.retain(|k, _| !k.starts_with(&prefix));
        b.delete_cf(db.cf(CF_ROOTS)?, rk);
        ov.roots.insert(rk.to_vec(), None);
        Ok(true)
    }

    /// One chunk of a file at `rk` (live or staged). Returns whether the file is now
    /// complete and matches its sha256.
    fn put_blob_chunk(&self, index: u64, rk: &[u8], blob: &RootsBlob, b: &mut WriteBatch, ov: &mut Overlay) -> Result<bool> {
        let db = self.db()?;
        let prev = self.roots_meta(rk, ov)?;
        let mut meta = if blob.chunk == 0 {
            // Chunk 0 starts a new version of the file; drop chunks of the old one.
            // One range delete, not one per chunk: the old version may have declared up
            // to u32::MAX chunks (a file of petabytes).
            if let Some(p) = prev.as_ref().filter(|p| p.chunks > blob.chunks) {
                b.delete_range_cf(db.cf(CF_CHUNKS)?, chunk_key(rk, blob.chunks), chunk_key(rk, p.chunks));
            }
            RootsMeta { mode: blob.mode, sha256: blob.sha256.clone(), size: blob.size, chunks: blob.chunks, received: 0, complete: false }
        } else {
            match prev {
                Some(p) if !p.complete && p.sha256 == blob.sha256 && p.received == blob.chunk && p.chunks == blob.chunks => p,
                _ => {
                    tracing::error!(index, path = %blob.path, chunk = blob.chunk, "roots chunk out of order or for another version; ignored");
                    return Ok(false);
                }
            }
        };
        let ck = chunk_key(rk, blob.chunk);
        b.put_cf(db.cf(CF_CHUNKS)?, &ck, &blob.data);
        ov.chunks.insert(ck, blob.data.clone());
        meta.received += 1;
        let mut done = false;
        if meta.received == meta.chunks {
            let mut h = Sha256::new();
            for c in 0..meta.chunks {
                match self.roots_chunk(&chunk_key(rk, c), ov)? {
                    Some(d) => h.update(&d),
                    None => return Err(Error::Invalid(format!("roots chunk {c} of {} missing", blob.path))),
                }
            }
            if h.finalize().as_slice() == meta.sha256.as_slice() {
                meta.complete = true;
                done = true;
            } else {
                tracing::error!(index, path = %blob.path, "roots file does not match its sha256; not materialised");
            }
        }
        self.put_meta(rk, meta, b, ov)?;
        Ok(done)
    }

    /// `roots_blob`: a chunk of a live file.
    pub(super) fn apply_roots_blob(&self, index: u64, blob: &RootsBlob, b: &mut WriteBatch, fx: &mut Vec<Effect>, ov: &mut Overlay) -> Result<()> {
        let rk = roots_key(blob.tree, &blob.saltenv, &blob.path);
        if self.put_blob_chunk(index, &rk, blob, b, ov)? {
            fx.push(Effect::RootsWritten { tree: blob.tree, saltenv: blob.saltenv.clone(), path: blob.path.clone() });
        }
        Ok(())
    }

    /// `roots_tombstone`: a live file removed.
    pub(super) fn apply_roots_tombstone(&self, t: &RootsTombstone, b: &mut WriteBatch, fx: &mut Vec<Effect>, ov: &mut Overlay) -> Result<()> {
        self.drop_file(&roots_key(t.tree, &t.saltenv, &t.path), b, ov)?;
        fx.push(Effect::RootsRemoved { tree: t.tree, saltenv: t.saltenv.clone(), path: t.path.clone() });
        Ok(())
    }

    /// `roots_stage`: a chunk of a file a sync brings, kept apart until its commit.
    pub(super) fn apply_roots_stage(&self, index: u64, sync: &[u8], blob: &RootsBlob, b: &mut WriteBatch, ov: &mut Overlay) -> Result<()> {
        let rk = stage_key(sync, blob.tree, &blob.saltenv, &blob.path);
        self.put_blob_chunk(index, &rk, blob, b, ov)?;
        Ok(())
    }

    /// Every key with `prefix` in CF `roots`, as this batch has left them (live or
    /// deleted earlier in the batch).
    fn roots_keys_with(&self, prefix: &[u8], ov: &Overlay) -> Result<Vec<Vec<u8>>> {
        let db = self.db()?;
        let mut keys = std::collections::BTreeSet::new();
        let it = db.iterator_cf(db.cf(CF_ROOTS)?, IteratorMode::From(prefix, rocksdb::Direction::Forward));
        for kv in it {
            let (k, _) = kv?;
            if !k.starts_with(prefix) {
                break;
            }
            keys.insert(k.to_vec());
        }
        for (k, v) in &ov.roots {
            if k.starts_with(prefix) {
                if v.is_some() {
                    keys.insert(k.clone());
                } else {
                    keys.remove(k);
                }
            }
        }
        Ok(keys.into_iter().collect())
    }

    /// `roots_sync`: the commit of a sync, decided here (module docs, [`RootsSync`]).
    pub(super) fn apply_roots_sync(&self, index: u64, s: &RootsSync, b: &mut WriteBatch, fx: &mut Vec<Effect>, ov: &mut Overlay) -> Result<()> {
        let db = self.db()?;
        let verdict = self.judge_sync(s, ov)?;
        match verdict {
            Ok((promote, stray)) => {
                // Files left incomplete by an interrupted `roots_blob` upload: never live.
                for k in stray {
                    self.drop_file(&k, b, ov)?;
                }
                for f in &promote {
                    let from = stage_key(&s.sync, f.tree, &f.saltenv, &f.path);
                    let to = roots_key(f.tree, &f.saltenv, &f.path);
                    let Some(staged) = self.roots_meta(&from, ov)? else { continue };
                    self.drop_file(&to, b, ov)?;
                    for c in 0..staged.chunks {
                        let data = self.roots_chunk(&chunk_key(&from, c), ov)?.ok_or_else(|| Error::Invalid(format!("staged roots chunk {c} of {} missing", f.path)))?;
                        let ck = chunk_key(&to, c);
                        b.put_cf(db.cf(CF_CHUNKS)?, &ck, &data);
                        ov.chunks.insert(ck, data);
                    }
                    self.put_meta(&to, RootsMeta { mode: f.mode, ..staged }, b, ov)?;
                    fx.push(Effect::RootsWritten { tree: f.tree, saltenv: f.saltenv.clone(), path: f.path.clone() });
                }
                for t in &s.remove {
                    if self.drop_file(&roots_key(t.tree, &t.saltenv, &t.path), b, ov)? {
                        fx.push(Effect::RootsRemoved { tree: t.tree, saltenv: t.saltenv.clone(), path: t.path.clone() });
                    }
                }
                tracing::info!(index, sync = %hex(&s.sync), files = s.files.len(), written = promote.len(), removed = s.remove.len(), "roots sync applied");
                for c in &s.commits {
                    tracing::info!(index, remote = %c.remote, saltenv = %c.saltenv, commit = %c.commit, "gitfs commit served");
                }
            }
            Err(why) => tracing::warn!(index, sync = %hex(&s.sync), "roots sync not applied, nothing changed: {why}"),
        }
        // The staging area is emptied, whoever staged it.
        for k in self.roots_keys_with(STAGE_PREFIX, ov)? {
            self.drop_file(&k, b, ov)?;
        }
        Ok(())
    }

    /// Whether sync `s` can apply on the state as this batch has left it: `Ok((files to
    /// promote from staging, incomplete live files of its trees to drop))`, or why not.
    #[allow(clippy::type_complexity)]
    fn judge_sync<'a>(&self, s: &'a RootsSync, ov: &Overlay) -> Result<std::result::Result<(Vec<&'a crate::format::RootsSyncFile>, Vec<Vec<u8>>), String>> {
        let mut promote = Vec::new();
        let mut named = std::collections::HashSet::new();
        for f in &s.files {
            let rk = roots_key(f.tree, &f.saltenv, &f.path);
            named.insert(rk.clone());
            let live = self.roots_meta(&rk, ov)?;
            if live.as_ref().is_some_and(|m| m.complete && m.sha256 == f.sha256 && m.mode == f.mode && m.size == f.size) {
                continue;
            }
            let staged = self.roots_meta(&stage_key(&s.sync, f.tree, &f.saltenv, &f.path), ov)?;
            match staged {
                Some(m) if m.complete && m.sha256 == f.sha256 && m.size == f.size => promote.push(f),
                _ => return Ok(Err(format!("the content of {}/{}/{} is neither live nor staged by this sync (another sync came first, or the proposer read an older state)", f.tree.as_str(), f.saltenv, f.path))),
            }
        }
        let removing: std::collections::HashSet<Vec<u8>> = s.remove.iter().map(|t| roots_key(t.tree, &t.saltenv, &t.path)).collect();
        let mut stray = Vec::new();
        for tree in &s.trees {
            let mut prefix = tree.as_str().as_bytes().to_vec();
            prefix.push(0);
            for k in self.roots_keys_with(&prefix, ov)? {
                if !named.contains(&k) && !removing.contains(&k) {
                    if self.roots_meta(&k, ov)?.is_some_and(|m| !m.complete) {
                        stray.push(k);
                        continue;
                    }
                    let shown = String::from_utf8_lossy(&k).replace('\0', "/");
                    return Ok(Err(format!("{shown} is live but neither kept nor removed by this sync (added after the proposer read its state)")));
                }
            }
        }
        Ok(Ok((promote, stray)))
    }
}

impl StateMachine {
    /// Files staged by syncs whose commit has not applied (0 once any commit applies).
    #[cfg(test)]
    pub(crate) fn staged_items(&self) -> Result<usize> {
        Ok(self.roots_keys_with(STAGE_PREFIX, &Overlay::default())?.len())
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
#[path = "roots_tests.rs"]
mod tests;
