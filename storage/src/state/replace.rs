//! Replacing the whole applied state with a snapshot's, in place: how a running member
//! installs a snapshot received from the leader without closing its state machine
//! (readers elsewhere in the process hold it open).
//!
//! Every column family is emptied and refilled from the snapshot's checkpoint: the
//! family's items are written, in order, into one SST file beside the database
//! (`ingest-<family>.sst`, RocksDB's `SstFileWriter`) which RocksDB then takes in whole
//! (external file ingestion, the file moved, not copied), so a large state (roots of a
//! gigabyte) is written once, sequentially, instead of going through the memtable,
//! flushes and compactions; `meta` is refilled by batches. The `meta` family's
//! `applied_index` is written in the **last** batch, and
//! `views_index` is set to 0 (the views are rebuilt from the result). So a crash part
//! way leaves a state machine whose applied index is still the old one, behind the
//! log's snapshot (the log records the snapshot first), and the next start installs
//! the snapshot by swapping directories (`snapshot::recover_at_start`). Readers during
//! the replacement may see a mix; a member installing a snapshot is not ready (it is
//! behind the cluster's commit index), so it serves none.

use std::path::Path;

use rocksdb::{IngestExternalFileOptions, IteratorMode, Options, SstFileWriter, WriteBatch, WriteOptions};

use super::{StateMachine, ALL_CFS, APPLIED_INDEX, CF_META, VIEWS_INDEX};
use crate::error::{Error, Result};

/// Bytes of keys and values written per batch.
const BATCH_BYTES: usize = 32 << 20;

impl StateMachine {
    /// Replaces everything this state machine holds with the state machine at `src` (a
    /// snapshot's checkpoint, opened read-only). Returns the key/value pairs copied.
    /// `progress(items)` is called after each batch.
    pub fn replace_from(&self, src: &Path, mut progress: impl FnMut(u64)) -> Result<u64> {
        let from = StateMachine::open_read_only(src)?;
        let mut wo = WriteOptions::default();
        wo.disable_wal(true);
        let mut items = 0u64;
        let mut applied = None;
        for name in ALL_CFS {
            let cf = self.cf(name)?;
            // Empty it (a range covering every key: no key sorts after the longest
            // run of 0xff a key could start with, so delete each one found instead).
            let mut batch = WriteBatch::default();
            for kv in self.db.iterator_cf(cf, IteratorMode::Start) {
                let (k, _) = kv?;
                batch.delete_cf(cf, &k);
                if batch.size_in_bytes() >= BATCH_BYTES {
                    self.db.write_opt(std::mem::take(&mut batch), &wo)?;
                }
            }
            self.db.write_opt(batch, &wo)?;
            if name != CF_META {
                items += self.ingest_family(name, from.items_of(name))?;
                progress(items);
                continue;
            }
            let mut batch = WriteBatch::default();
            for kv in from.items_of(name) {
                let (k, v) = kv?;
                if &*k == APPLIED_INDEX || &*k == VIEWS_INDEX {
                    if &*k == APPLIED_INDEX {
                        applied = Some(v.to_vec());
                    }
                    continue;
                }
                batch.put_cf(cf, &k, &v);
                items += 1;
                if batch.size_in_bytes() >= BATCH_BYTES {
                    self.db.write_opt(std::mem::take(&mut batch), &wo)?;
                    progress(items);
                }
            }
            self.db.write_opt(batch, &wo)?;
            progress(items);
        }
        let meta = self.cf(CF_META)?;
        let mut last = WriteBatch::default();
        last.put_cf(meta, VIEWS_INDEX, 0u64.to_be_bytes());
        if let Some(a) = applied {
            last.put_cf(meta, APPLIED_INDEX, a);
        }
        self.db.write_opt(last, &wo)?;
        // No WAL: make it durable now (all families together, see `open`).
        self.flush()?;
        self.recount_pending()?;
        Ok(items)
    }

    /// Writes `items` (in key order, as an iterator over a family yields them) into one
    /// SST file and has RocksDB ingest it into family `name`. Returns the items written.
    fn ingest_family(&self, name: &str, items: impl Iterator<Item = std::result::Result<(Box<[u8]>, Box<[u8]>), rocksdb::Error>>) -> Result<u64> {
        let path = self.path.join(format!("ingest-{name}.sst"));
        let _ = std::fs::remove_file(&path);
        let opts = Options::default();
        let mut w = SstFileWriter::create(&opts);
        w.open(&path)?;
        let mut n = 0u64;
        for kv in items {
            let (k, v) = kv?;
            w.put(&k, &v)?;
            n += 1;
        }
        if n == 0 {
            // An empty file cannot be finished or ingested: nothing to take in.
            drop(w);
            let _ = std::fs::remove_file(&path);
            return Ok(0);
        }
        w.finish()?;
        let mut io = IngestExternalFileOptions::default();
        io.set_move_files(true);
        let r = self.db.ingest_external_file_cf_opts(self.cf(name)?, &io, vec![&path]);
        let _ = std::fs::remove_file(&path);
        r.map_err(|e| Error::Invalid(format!("ingesting the snapshot's {name} items: {e}")))?;
        Ok(n)
    }
}
