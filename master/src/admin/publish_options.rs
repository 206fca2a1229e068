//! What a publish adds to its job's load besides the function, its arguments and the
//! target, as Salt's client adds it:
//!
//! - the returners (`ret`, `ret_config`, `ret_kwargs`: [`ReturnTo`]);
//! - `metadata` (`salt --metadata`, salt-api's `metadata`): any value, kept in the job
//!   cache with the load (`jobs.list_jobs` shows it as `Metadata` and searches it with
//!   `search_metadata`); a salt-minion copies a mapping into each of its returns;
//! - `start_event` (`salt --start-event`): each minion fires
//!   `salt/job/<jid>/start/<id>` on the master's bus when it takes the job, before
//!   running it (new in Salt 3008);
//! - `jid` of a job already stored: this publish is the next group of a `--batch` run,
//!   published under the run's one jid as Salt 3008 does (the record joins the job:
//!   `halite_storage::format::JobPublished::joins`).
//!
//! Checked before anything is published: the metadata is at most
//! [`MAX_METADATA_BYTES`] as JSON, `start_event` a boolean (or a form's `"true"`).

use serde_json::{Map, Value as J};

use super::returners::ReturnTo;
use crate::error::{Error, Result};

/// Largest `metadata`, as JSON.
pub const MAX_METADATA_BYTES: usize = 64 << 10;

/// A publish's load fields beyond the job itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PublishOptions {
    pub ret: ReturnTo,
    /// `metadata`: `None` when not given (Salt's load then has no `metadata` key).
    pub metadata: Option<J>,
    /// `start_event`: minions announce that they took the job.
    pub start_event: bool,
    /// `jid`: the stored job this publish joins (a batch run's next group).
    pub join: Option<String>,
}

impl PublishOptions {
    /// Reads the options of an admin `publish` request.
    pub fn parse(req: &J) -> Result<PublishOptions> {
        let metadata = match req.get("metadata") {
            None | Some(J::Null) => None,
            Some(m) if serde_json::to_vec(m).map_or(usize::MAX, |b| b.len()) <= MAX_METADATA_BYTES => Some(m.clone()),
            Some(_) => return Err(Error::refused(format!("metadata: larger than {MAX_METADATA_BYTES} bytes"))),
        };
        let start_event = match req.get("start_event") {
            None | Some(J::Null) => false,
            Some(J::Bool(b)) => *b,
            // A form (salt-api) sends text.
            Some(J::String(t)) if t.eq_ignore_ascii_case("true") => true,
            Some(J::String(t)) if t.eq_ignore_ascii_case("false") => false,
            Some(_) => return Err(Error::refused("start_event: true or false")),
        };
        let join = match req.get("jid") {
            None | Some(J::Null) => None,
            Some(J::String(j)) if j.len() == 20 && j.bytes().all(|b| b.is_ascii_digit()) => Some(j.clone()),
            Some(_) => return Err(Error::refused("jid: the 20-digit jid of the batch run this publish joins")),
        };
        Ok(PublishOptions { ret: ReturnTo::parse(req)?, metadata, start_event, join })
    }

    /// Adds the options to a publish load (`ext_job_cache`: the master's, joined to the
    /// returners).
    pub fn fill(&self, load: &mut Map<String, J>, ext_job_cache: Option<&str>) {
        self.ret.fill(load, ext_job_cache);
        if let Some(m) = &self.metadata {
            load.insert("metadata".into(), m.clone());
        }
        if self.start_event {
            load.insert("start_event".into(), J::Bool(true));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metadata_and_start_event_are_read_checked_and_put_in_the_load() {
        let o = PublishOptions::parse(&json!({"metadata": {"ticket": "OPS-1"}, "start_event": true, "ret": "rawfile_json"})).unwrap();
        let mut load = Map::new();
        o.fill(&mut load, None);
        assert_eq!(J::Object(load), json!({"ret": "rawfile_json", "metadata": {"ticket": "OPS-1"}, "start_event": true}));
        let mut load = Map::new();
        PublishOptions::parse(&json!({})).unwrap().fill(&mut load, None);
        assert_eq!(J::Object(load), json!({"ret": ""}), "nothing given, nothing added");
        assert_eq!(PublishOptions::parse(&json!({"jid": "20261125000000000001"})).unwrap().join.as_deref(), Some("20261125000000000001"));
        for bad in [json!({"metadata": "x".repeat(MAX_METADATA_BYTES)}), json!({"start_event": "yes"}), json!({"ret": "../x"}), json!({"jid": "../x"}), json!({"jid": 2026112500000000000u64})] {
            assert!(PublishOptions::parse(&bad).is_err(), "{bad}");
        }
    }
}
