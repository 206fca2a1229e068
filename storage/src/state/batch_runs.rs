//! The state of master-driven batch runs (`crate::batch_run`, kind 19): whether a step
//! applies, applying it, and reading the runs back.

use rocksdb::{Direction, IteratorMode, WriteBatch};

use super::apply::Overlay;
use super::{StateMachine, CF_META};
use crate::batch_run::{run_key, BatchRun, StoredRun, RUN_PREFIX};
use crate::error::Result;

impl StateMachine {
    /// The run under `jid`, if one is stored.
    pub fn batch_run(&self, jid: &str) -> Result<Option<StoredRun>> {
        let db = self.db()?;
        let found = db.get_pinned_cf(db.cf(CF_META)?, run_key(jid))?.and_then(|v| StoredRun::decode(&v));
        Ok(found)
    }

    /// Every stored run, in jid order.
    pub fn batch_runs(&self) -> Result<Vec<(String, StoredRun)>> {
        let db = self.db()?;
        let mut out = Vec::new();
        for item in db.iterator_cf(db.cf(CF_META)?, IteratorMode::From(RUN_PREFIX, Direction::Forward)) {
            let (k, v) = item?;
            let Some(jid) = k.strip_prefix(RUN_PREFIX) else { break };
            if let Some(run) = StoredRun::decode(&v) {
                out.push((String::from_utf8_lossy(jid).into_owned(), run));
            }
        }
        Ok(out)
    }

    /// The run as of this record: the applied state plus the batch's earlier changes.
    fn held_run(&self, jid: &str, ov: &Overlay) -> Result<Option<StoredRun>> {
        match ov.batch_runs.get(jid) {
            Some(r) => Ok(Some(r.clone())),
            None => self.batch_run(jid),
        }
    }

    /// Whether a step applies: a stop always, a step on the version it follows.
    pub(super) fn batch_step_fits(&self, r: &BatchRun, ov: &Overlay) -> Result<bool> {
        if r.stop {
            return Ok(true);
        }
        Ok(self.held_run(&r.jid, ov)?.map_or(0, |h| h.version) == r.expect)
    }

    /// Applies a step that fits (checked for the entry that starts with it; a step
    /// later in an entry is checked here too and changes nothing if it does not fit).
    pub(super) fn apply_batch_run(&self, r: &BatchRun, b: &mut WriteBatch, ov: &mut Overlay) -> Result<()> {
        let held = self.held_run(&r.jid, ov)?;
        let run = match (r.stop, held) {
            (true, Some(h)) => StoredRun { version: h.version + 1, stopped: true, state: h.state },
            // Nothing to stop.
            (true, None) => return Ok(()),
            (false, h) if h.as_ref().map_or(0, |h| h.version) == r.expect => StoredRun { version: r.expect + 1, stopped: h.is_some_and(|h| h.stopped), state: r.state.clone() },
            (false, _) => return Ok(()),
        };
        let db = self.db()?;
        b.put_cf(db.cf(CF_META)?, run_key(&r.jid), run.encode());
        ov.batch_runs.insert(r.jid.clone(), run);
        Ok(())
    }
}
