//! `_return`: a minion's job return, stored as a `job_return` record (spec §9).
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

use rmpv::Value;

use halite_storage::format::{JobPublished, JobReturn, Record};

use super::{Answer, Ctx};
use crate::error::Result;
use crate::events::return_event;
use crate::view::View;
use crate::wire::payload::{encode, get, get_text, take};

/// A `_return` request.
pub struct Return {
    load: Value,
}

impl Return {
    pub fn parse(inner: Value) -> Self {
        Return { load: inner }
    }

    pub fn answer(self, ctx: &Ctx, view: &dyn View) -> Result<Answer> {
        let mut load = self.load;
        let jid = get_text(&load, "jid").unwrap_or("").to_string();
        // Salt stores nothing for a return without `return` (or `jid`), nor for `nocache`.
        if jid == "nocache" || jid.is_empty() || get(&load, "return").is_none() {
            tracing::debug!(id = ctx.id, jid, "return not stored");
            return Ok(Answer::value(Value::Nil));
        }
        let now = view.now_ns();
        let mut records = Vec::with_capacity(2);
        let jid = if jid == "req" {
            let jid = view.new_jid();
            let fun_args = get(&load, "arg").or_else(|| get(&load, "fun_args")).cloned().unwrap_or(Value::Array(vec![]));
            for (k, v) in [("arg", fun_args), ("tgt_type", Value::from("glob")), ("tgt", Value::from(ctx.id)), ("jid", Value::from(jid.as_str()))] {
                take(&mut load, k);
                if let Value::Map(m) = &mut load {
                    m.push((Value::from(k), v));
                }
            }
            let job = JobPublished { jid: jid.clone(), load: encode(&load), minions: vec![ctx.id.to_string()], time_ns: now, started_by: Some(ctx.id.to_string()), joins: false };
            records.push(Record::JobPublished(job));
            jid
        } else {
            jid
        };
        records.push(Record::JobReturn(JobReturn { jid: jid.clone(), id: ctx.id.to_string(), load: encode(&load), time_ns: now, first_only: false }));
        for rec in &records {
            rec.validate().map_err(|e| crate::error::Error::refused(format!("return refused: {e}")))?;
        }
        // The event's data is rendered only if something reads it (`crate::events`).
        let events = vec![return_event(&jid, ctx.id, load)];
        Ok(Answer { value: Value::Nil, private: false, records, events })
    }
}
