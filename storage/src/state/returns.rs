//! Reading the job cache's returns: a job's all, one minion's, or a burst of them at
//! once. `salt`'s follow of a big job (`halite_master::daemon::follow`) is told of many
//! returns together, and reads them with one batched RocksDB lookup (`MultiGet`, keys
//! sorted) instead of one point read each: the lookups share their passes over the
//! memtables and blocks.

use super::{from_msgpack, StateMachine, CF_RETURNS};
use crate::error::Result;
use crate::format::JobReturn;

/// A job return's key in `returns`: the jid, a zero byte, the minion id.
pub(super) fn return_key(jid: &str, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(jid.len() + 1 + id.len());
    k.extend_from_slice(jid.as_bytes());
    k.push(0);
    k.extend_from_slice(id.as_bytes());
    k
}

impl StateMachine {
    /// The returns stored for a job.
    pub fn job_returns(&self, jid: &str) -> Result<Vec<JobReturn>> {
        let mut prefix = jid.as_bytes().to_vec();
        prefix.push(0);
        self.scan(CF_RETURNS, &prefix)?.into_iter().map(|(_, v)| from_msgpack("returns", &v)).collect()
    }

    /// One minion's return to a job (a point read; a burst of them is
    /// [`StateMachine::job_returns_of`]).
    pub fn job_return(&self, jid: &str, id: &str) -> Result<Option<JobReturn>> {
        let db = self.db()?;
        match db.get_cf(db.cf(CF_RETURNS)?, return_key(jid, id))? {
            Some(v) => Ok(Some(from_msgpack("returns", &v)?)),
            None => Ok(None),
        }
    }

    /// The stored returns of the minions `ids` to `jid`, in minion-id order (each once);
    /// minions with no return stored are left out.
    pub fn job_returns_of(&self, jid: &str, ids: &[String]) -> Result<Vec<JobReturn>> {
        let db = self.db()?;
        let mut keys: Vec<Vec<u8>> = ids.iter().map(|id| return_key(jid, id)).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut out = Vec::with_capacity(keys.len());
        for found in db.batched_multi_get_cf(db.cf(CF_RETURNS)?, &keys, true) {
            if let Some(v) = found? {
                out.push(from_msgpack("returns", &v)?);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::format::{JobReturn, Record};
    use crate::state::StateMachine;

    fn ret(jid: &str, id: &str, load: &[u8]) -> Record {
        Record::JobReturn(JobReturn { jid: jid.into(), id: id.into(), load: load.to_vec(), time_ns: 1, first_only: false })
    }

    #[test]
    fn a_burst_of_returns_is_read_at_once() {
        let sm = StateMachine::open_in_memory("returns-of").unwrap();
        let recs = [ret("1", "b", b"\x02"), ret("1", "a", b"\x01"), ret("1", "c", b"\x03"), ret("12", "a", b"\x04"), ret("2", "d", b"\x05")];
        let entries: Vec<(u64, Record)> = recs.into_iter().enumerate().map(|(i, r)| (i as u64 + 1, r)).collect();
        sm.apply(&entries).unwrap();
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let got = sm.job_returns_of("1", &ids(&["c", "x", "a", "c", "d"])).unwrap();
        // Sorted, each once, the missing ("x") and another job's ("d") left out; "12"'s
        // "a" is not "1"'s.
        let seen: Vec<(&str, &str, &[u8])> = got.iter().map(|r| (r.jid.as_str(), r.id.as_str(), r.load.as_slice())).collect();
        assert_eq!(seen, [("1", "a", &b"\x01"[..]), ("1", "c", &b"\x03"[..])]);
        for id in ["a", "b", "c"] {
            assert_eq!(sm.job_returns_of("1", &ids(&[id])).unwrap(), vec![sm.job_return("1", id).unwrap().unwrap()], "the same as a point read");
        }
        assert!(sm.job_returns_of("1", &[]).unwrap().is_empty());
        assert!(sm.job_returns_of("3", &ids(&["a"])).unwrap().is_empty());
    }
}
