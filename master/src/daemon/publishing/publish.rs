//! Publishing (`publish_port`, 4505): every job this master applies is published to the
//! minions connected to it, whichever master it was proposed on; a cluster's AES key
//! rotations are installed as they are applied.
//!
//! The node's tap hands each applied `job_published` and `aes_key_rotation` record to
//! [`applied`]; a job a minion started itself is not published
//! ([`crate::jobs::publishable`]); any other job is sealed with the publish key, signed with the master key
//! (`wire::publish`) and queued for the PUB socket. Jobs applied more than
//! [`PUBLISH_MAX_AGE`] after they were proposed are not published: a master catching up
//! on a long log must not replay old commands to its minions. Nor are jobs this master's
//! own log held when it started: it replays them after a crash, and had published those
//! it applied before (a minion would run them twice); one it had not applied yet is
//! left to the other members' minions (at most once, as a publish in Salt).

use std::sync::Arc;

use halite_storage::format::{now_ns, AesKeyRotation, JobPublished, Record};
use tokio::sync::mpsc;
use zeromq::{SocketSend, ZmqMessage};

use crate::daemon::live::Master;
use crate::wire::crypto::SigAlgo;
use crate::wire::payload;

/// Applied jobs older than this are not published.
pub const PUBLISH_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(30);

/// What the node's tap hands the daemon.
pub enum Applied {
    /// A job and the index of its log entry.
    Job(u64, JobPublished),
    Aes(AesKeyRotation),
}

/// The tap: called on the node's driver thread for every applied record (kept short:
/// it only forwards the two kinds the daemon acts on).
pub fn tap(tx: mpsc::UnboundedSender<Applied>) -> halite_replication::Tap {
    halite_replication::Tap(Arc::new(move |index, rec: &Record| match rec {
        Record::JobPublished(j) => {
            let _ = tx.send(Applied::Job(index, j.clone()));
        }
        Record::AesKeyRotation(a) => {
            let _ = tx.send(Applied::Aes(a.clone()));
        }
        _ => {}
    }))
}

/// Why an applied job is not published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpublished {
    /// This master's log held it when the master started: replayed after a crash.
    HeldAtStart,
    /// A minion started it itself.
    StartedByMinion,
    /// Applied more than [`PUBLISH_MAX_AGE`] after it was proposed.
    TooOld,
}

/// Whether the job applied at log `index` is published (`None`) or why not, for a
/// master whose log ended at `held_at_start` when it started, at time `now_ns`.
pub fn unpublished(index: u64, held_at_start: u64, j: &JobPublished, now_ns: u64) -> Option<Unpublished> {
    if index <= held_at_start {
        Some(Unpublished::HeldAtStart)
    } else if !crate::jobs::publishable(j) {
        Some(Unpublished::StartedByMinion)
    } else if std::time::Duration::from_nanos(now_ns.saturating_sub(j.time_ns)) > PUBLISH_MAX_AGE {
        Some(Unpublished::TooOld)
    } else {
        None
    }
}

/// Seals applied jobs and installs applied AES keys, in log order; `held_at_start` is
/// the last index of the log when the node started (jobs up to it are not published).
pub async fn applied(master: Arc<Master>, mut rx: mpsc::UnboundedReceiver<Applied>, pub_tx: mpsc::UnboundedSender<Vec<u8>>, held_at_start: u64) {
    while let Some(a) = rx.recv().await {
        let (index, j) = match a {
            Applied::Job(index, j) => (index, j),
            Applied::Aes(a) => {
                crate::daemon::cluster::install_aes(&master, &a);
                continue;
            }
        };
        match unpublished(index, held_at_start, &j, now_ns()) {
            None => {}
            Some(Unpublished::HeldAtStart) => {
                tracing::info!(jid = %j.jid, index, "not publishing a job this master's log held when it started");
                continue;
            }
            Some(Unpublished::StartedByMinion) => {
                tracing::debug!(jid = %j.jid, "a job a minion started itself: stored, not published");
                continue;
            }
            Some(Unpublished::TooOld) => {
                let age = std::time::Duration::from_nanos(now_ns().saturating_sub(j.time_ns));
                tracing::info!(jid = %j.jid, age_s = age.as_secs(), "not publishing an old job found while catching up");
                continue;
            }
        }
        let load = match payload::decode(&j.load) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(jid = %j.jid, "job load does not decode: {e}");
                continue;
            }
        };
        let frame = {
            let mut p = master.publisher.lock().unwrap_or_else(|p| p.into_inner());
            p.envelope(&load, &master.keys.private, SigAlgo::Pkcs1v15Sha1)
        };
        match frame {
            Ok(f) => {
                let _ = pub_tx.send(f);
            }
            Err(e) => tracing::error!(jid = %j.jid, "cannot seal the publish: {e}"),
        }
    }
}

/// Writes sealed publishes to the PUB socket.
pub async fn send(mut sock: zeromq::PubSocket, mut rx: mpsc::UnboundedReceiver<Vec<u8>>) {
    while let Some(frame) = rx.recv().await {
        if let Err(e) = sock.send(ZmqMessage::from(frame)).await {
            tracing::error!("publish failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(time_ns: u64, started_by: Option<&str>) -> JobPublished {
        JobPublished { jid: "20261129120000000000".into(), load: Vec::new(), minions: vec!["m1".into()], time_ns, started_by: started_by.map(String::from), joins: false }
    }

    /// A master restarted after a crash applies its own log's tail again: the jobs there
    /// were published (or left to the other members) by the process that died; those
    /// after it are new.
    #[test]
    fn jobs_the_log_held_at_start_are_not_published_again() {
        let now = 1_000_000_000_000;
        let fresh = job(now - 1_000_000, None);
        assert_eq!(unpublished(41, 42, &fresh, now), Some(Unpublished::HeldAtStart));
        assert_eq!(unpublished(42, 42, &fresh, now), Some(Unpublished::HeldAtStart));
        assert_eq!(unpublished(43, 42, &fresh, now), None);
        // A new log (nothing held) publishes from its first entry.
        assert_eq!(unpublished(1, 0, &fresh, now), None);
        assert_eq!(unpublished(43, 42, &job(now - 1_000_000, Some("m1")), now), Some(Unpublished::StartedByMinion));
        assert_eq!(unpublished(43, 42, &job(now - 31_000_000_000, None), now), Some(Unpublished::TooOld));
    }
}
