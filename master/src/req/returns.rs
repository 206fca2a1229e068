//! `_return`: a minion's job return, stored as a `job_return` record.
//!
//! Returns with jid `nocache`, or without a jid or a `return`, are not stored (Salt's
//! rule). A return with jid `req` is a job
//! the minion ran on its own (its scheduler, `salt-call` with `return_job`): as Salt
//! does (`salt.utils.job.store_job`), it gets a new jid here and its load, with `arg`
//! (from `fun_args`), `tgt_type: glob` and `tgt: <its id>`, is stored as the job's load
//! beside the return. That job record names the minion in `started_by`, which makes it
//! a stored job only: a master never publishes what a minion sent
//! ([`crate::jobs::publishable`]), so a scheduled job runs once, its return data stays
//! on the master, and no minion can pick the target of a publish. The reply comes once
//! the records are committed; the `salt/job/<jid>/ret/<id>` event fires then (its data
//! the load, rendered as JSON only when read).

use std::sync::Arc;

use rmpv::Value;

use halite_storage::format::{JobPublished, JobReturn, Record};

use super::{Answer, Ctx};
use crate::error::Result;
use crate::events::return_event;
use crate::view::View;
use crate::wire::payload::{self, encode, get, ref_bytes, ref_text, take};
use crate::wire::scan::MapScan;

/// A `_return` request.
pub struct Return {
    /// The inner load as msgpack, without `nonce` and `tok` (a map: `open_aes` read it).
    load: Vec<u8>,
}

impl Return {
    pub fn parse(inner: Vec<u8>) -> Self {
        Return { load: inner }
    }

    pub fn answer(self, ctx: &Ctx, view: &dyn View) -> Result<Answer> {
        // Read in place: a return is stored as the minion sent it, so only `jid` and
        // whether there is a `return` are looked at (a tree is made only for `req`).
        let (jid, has_return) = jid_and_return(&self.load);
        // Salt stores nothing for a return without `return` (or `jid`), nor for `nocache`.
        if jid == "nocache" || jid.is_empty() || !has_return {
            tracing::debug!(id = ctx.id, jid, "return not stored");
            return Ok(Answer::value(Value::Nil));
        }
        let now = view.now_ns();
        let mut records = Vec::with_capacity(2);
        let (jid, load) = if jid == "req" {
            let mut load = payload::decode(&self.load).unwrap_or(Value::Map(Vec::new()));
            let jid = view.new_jid();
            let fun_args = get(&load, "arg").or_else(|| get(&load, "fun_args")).cloned().unwrap_or(Value::Array(vec![]));
            for (k, v) in [("arg", fun_args), ("tgt_type", Value::from("glob")), ("tgt", Value::from(ctx.id)), ("jid", Value::from(jid.as_str()))] {
                take(&mut load, k);
                if let Value::Map(m) = &mut load {
                    m.push((Value::from(k), v));
                }
            }
            let load = encode(&load);
            let job = JobPublished { jid: jid.clone(), load: load.clone(), minions: vec![ctx.id.to_string()], time_ns: now, started_by: Some(ctx.id.to_string()), joins: false };
            records.push(Record::JobPublished(job));
            (jid, load)
        } else {
            (jid, self.load)
        };
        // The event's data is rendered only if something reads it (`crate::events`).
        let events = vec![return_event(&jid, ctx.id, Arc::from(load.as_slice()))];
        records.push(Record::JobReturn(JobReturn { jid, id: ctx.id.to_string(), load, time_ns: now, first_only: false }));
        for rec in &records {
            rec.validate().map_err(|e| crate::error::Error::refused(format!("return refused: {e}")))?;
        }
        Ok(Answer { value: Value::Nil, private: false, records, events })
    }
}

/// The first `jid` of a load (its text, or empty), and whether it has a `return`: read
/// in place, every other value stepped over ([`MapScan`]), as `payload::get_text` and
/// `payload::get` of the decoded load would find them. The load is one `open_aes` read
/// whole, so it scans; should it not, it reads as neither.
fn jid_and_return(load: &[u8]) -> (String, bool) {
    let (mut jid, mut has_return) = (None, false);
    let Ok(mut scan) = MapScan::new(load) else { return (String::new(), false) };
    while let Some(Ok((k, _))) = scan.key() {
        let read = match ref_bytes(load, &k) {
            Some(b"jid") if jid.is_none() => scan.value().map(|v| jid = Some(ref_text(load, &v).unwrap_or("").to_string())),
            other => {
                has_return |= other == Some(b"return");
                scan.skip_value()
            }
        };
        if read.is_err() {
            return (String::new(), false);
        }
    }
    (jid.unwrap_or_default(), has_return)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::payload::{bin, get_text};
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Nil),
            any::<i64>().prop_map(Value::from),
            prop::sample::select(vec!["20261128000000000001", "req", "nocache", ""]).prop_map(Value::from),
            prop::collection::vec(any::<u8>(), 0..4).prop_map(bin),
            Just(Value::Array(vec![Value::Map(vec![(Value::from("a"), Value::Nil)]); 2])),
        ]
    }

    proptest! {
        /// Read in place, a load's `jid` and `return` are what the decoded tree gives.
        #[test]
        fn jid_and_return_read_as_the_tree(pairs in prop::collection::vec((prop::sample::select(vec!["jid", "return", "fun", "#bin-jid", "#int"]), value()), 0..8)) {
            let key = |k: &str| match k {
                "#bin-jid" => bin(b"jid".to_vec()),
                "#int" => Value::from(3),
                k => Value::from(k),
            };
            let tree = Value::Map(pairs.into_iter().map(|(k, v)| (key(k), v)).collect());
            let got = jid_and_return(&encode(&tree));
            prop_assert_eq!(got, (get_text(&tree, "jid").unwrap_or("").to_string(), get(&tree, "return").is_some()));
        }
    }
}
