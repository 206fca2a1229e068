//! `job.follow`: a job's returns streamed as they are committed, for `salt`.
//!
//! Why a cursor on the job cache, woken by the event bus: the job cache is the truth (a
//! return is there once its record applied, on every member alike), while the bus is
//! fast but lossy (a slow watcher loses the oldest events, a forwarded event can be lost
//! with its peer, and a minion could fire a `salt/job/<jid>/ret/<id>` tag of its own).
//! So an event only names a minion to look up: the follower reads that one return from
//! the job cache (a point read) and sends it if it is there. What an event did not bring
//! is found by re-reading the still-missing minions' returns now and then (see
//! [`Follow::due`]). No step reads the whole job, except the first read when the follow
//! begins, which finds the returns committed before it.
//!
//! Request: `{"cmd": "job.follow", "jid": JID, "timeout": SECONDS}`, with `"minions":
//! [ids]` to follow those minions only (a batch run's group: its job holds every group).
//! Answer lines: `{"id": MINION, "return": LOAD}` once per minion (the load as stored:
//! `return`, `retcode`, `success`, `out`, ...), then `{"done": true, "missing": [ids]}`
//! when every expected minion returned or the timeout passed; then the master closes the
//! connection. A client that closes first ends the follow.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use serde_json::Value as J;

use crate::error::{Error, Result};

/// The longest a follow may last (a client asking more gets this).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// How often the minions an event named but whose return was not yet applied here are
/// looked up again (in a cluster the event can arrive before this member applies).
pub const HINT_RETRY: Duration = Duration::from_millis(100);

/// How many hint retries between two reads of every missing minion's return (the net
/// for events that never came).
pub const SWEEP_EVERY: u32 = 20;

/// A parsed `job.follow` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowCmd {
    pub jid: String,
    pub timeout: Duration,
    /// `minions`: only these are expected, and only their returns are sent.
    pub only: Option<Vec<String>>,
}

/// Most ids a follow's `minions` may name.
pub const MAX_FOLLOW_MINIONS: usize = 100_000;

impl FollowCmd {
    pub fn parse(req: &J) -> Result<FollowCmd> {
        let jid = req.get("jid").and_then(J::as_str).ok_or_else(|| Error::refused("job.follow needs a jid"))?;
        if jid.is_empty() || jid.len() > 64 || jid.contains('\0') {
            return Err(Error::refused("job.follow: not a jid"));
        }
        let secs = req.get("timeout").and_then(J::as_f64).unwrap_or(5.0);
        let timeout = if secs.is_finite() && secs > 0.0 { Duration::from_secs_f64(secs).min(MAX_TIMEOUT) } else { Duration::ZERO };
        let only = match req.get("minions") {
            None | Some(J::Null) => None,
            Some(J::Array(a)) if a.len() <= MAX_FOLLOW_MINIONS => Some(a.iter().map(|m| m.as_str().filter(|m| !m.is_empty() && m.len() <= 256).map(String::from).ok_or_else(|| Error::refused("job.follow: minions are ids"))).collect::<Result<Vec<_>>>()?),
            Some(_) => return Err(Error::refused(format!("job.follow: minions is a list of at most {MAX_FOLLOW_MINIONS} ids"))),
        };
        Ok(FollowCmd { jid: jid.to_string(), timeout, only })
    }
}

/// The minion id of a `salt/job/<jid>/ret/<id>` tag of this job.
pub fn return_tag_id<'a>(tag: &'a str, jid: &str) -> Option<&'a str> {
    let rest = tag.strip_prefix("salt/job/")?.strip_prefix(jid)?.strip_prefix("/ret/")?;
    (!rest.is_empty()).then_some(rest)
}

/// Where one follow stands: who is still to return, who was named by an event but not
/// found yet, and who was sent.
#[derive(Debug, Default)]
pub struct Follow {
    pending: BTreeSet<String>,
    sent: HashSet<String>,
    hinted: BTreeSet<String>,
    ticks: u32,
    /// Following some minions only: no one else's return is sent.
    only: Option<HashSet<String>>,
}

impl Follow {
    /// A follow of a job published to `expected`.
    pub fn new(expected: impl IntoIterator<Item = String>) -> Follow {
        Follow { pending: expected.into_iter().collect(), ..Default::default() }
    }

    /// A follow of `minions` only (a group of a batch run's job).
    pub fn only(minions: Vec<String>) -> Follow {
        Follow { only: Some(minions.iter().cloned().collect()), ..Follow::new(minions) }
    }

    /// Whether `id`'s return is still to be sent (a minion outside the expected list
    /// that returned is sent too, as Salt prints it, unless following some only).
    pub fn wanted(&self, id: &str) -> bool {
        !self.sent.contains(id) && self.only.as_ref().is_none_or(|o| o.contains(id))
    }

    /// `id`'s return was sent.
    pub fn sent(&mut self, id: &str) {
        self.pending.remove(id);
        self.hinted.remove(id);
        self.sent.insert(id.to_string());
    }

    /// An event named `id`, but its return is not applied here yet (retried only for an
    /// expected minion: a tag naming anyone else cannot keep a follow going).
    pub fn hint(&mut self, id: &str) {
        if self.pending.contains(id) {
            self.hinted.insert(id.to_string());
        }
    }

    /// How many expected minions are still to return.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    pub fn done(&self) -> bool {
        self.pending.is_empty()
    }

    /// Called every [`HINT_RETRY`]: the ids to look up now (the hinted ones, and every
    /// pending one each [`SWEEP_EVERY`] calls, or at once after the bus dropped events).
    pub fn due(&mut self, lagged: bool) -> Vec<String> {
        self.ticks += 1;
        if lagged || self.ticks % SWEEP_EVERY == 0 {
            self.pending.union(&self.hinted).cloned().collect()
        } else {
            self.hinted.iter().cloned().collect()
        }
    }

    /// The expected minions that have not returned, sorted.
    pub fn missing(&self) -> Vec<String> {
        self.pending.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tags_of_this_job_only() {
        assert_eq!(return_tag_id("salt/job/123/ret/m1", "123"), Some("m1"));
        assert_eq!(return_tag_id("salt/job/1234/ret/m1", "123"), None);
        assert_eq!(return_tag_id("salt/job/123/ret/", "123"), None);
        assert_eq!(return_tag_id("salt/job/123/new", "123"), None);
    }

    #[test]
    fn requests_are_bounded() {
        let f = FollowCmd::parse(&json!({"cmd": "job.follow", "jid": "1", "timeout": 1e12})).unwrap();
        assert_eq!(f.timeout, MAX_TIMEOUT);
        assert_eq!(FollowCmd::parse(&json!({"jid": "1", "timeout": -3})).unwrap().timeout, Duration::ZERO);
        assert!(FollowCmd::parse(&json!({"jid": ""})).is_err());
        assert!(FollowCmd::parse(&json!({"jid": "a\u{0}b"})).is_err());
        assert!(FollowCmd::parse(&json!({})).is_err());
        assert_eq!(FollowCmd::parse(&json!({"jid": "1", "minions": ["m1", "m2"]})).unwrap().only, Some(vec!["m1".to_string(), "m2".to_string()]));
        for bad in [json!("m1"), json!([1]), json!([""]), json!(vec!["m"; MAX_FOLLOW_MINIONS + 1])] {
            assert!(FollowCmd::parse(&json!({"jid": "1", "minions": bad})).is_err());
        }
    }

    #[test]
    fn a_follow_of_some_minions_sends_only_theirs() {
        let mut f = Follow::only(vec!["m2".to_string()]);
        assert!(f.wanted("m2") && !f.wanted("m1"), "another group's minion is not this follow's");
        f.sent("m2");
        assert!(f.done() && !f.wanted("m2"));
    }

    #[test]
    fn hints_are_retried_and_pending_swept() {
        let mut f = Follow::new(["a".to_string(), "b".to_string(), "c".to_string()]);
        f.hint("b");
        assert_eq!(f.due(false), vec!["b"]);
        f.sent("b");
        f.hint("b"); // a second event for a return already sent
        f.hint("nobody"); // a tag naming a minion the job was not sent to
        assert!(f.due(false).is_empty());
        assert_eq!(f.due(true), vec!["a", "c"], "after lost events every pending minion is looked up");
        for _ in 0..SWEEP_EVERY - 4 {
            assert!(f.due(false).is_empty());
        }
        assert_eq!(f.due(false), vec!["a", "c"], "a sweep every SWEEP_EVERY ticks");
        f.sent("a");
        f.sent("zz"); // not expected: sent, and never pending
        assert!(!f.done());
        assert_eq!((f.pending(), f.missing()), (1, vec!["c".to_string()]));
        f.sent("c");
        assert!(f.done());
    }
}
