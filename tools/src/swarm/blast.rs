//! `--blast N`: the master's own rate of acknowledged returns, measured apart from the
//! minions' half of the work.
//!
//! In the ordinary mode a job's returns per second are bounded by the swarm itself: on
//! the same cores as the master it decrypts every publish, builds and encrypts every
//! return (docs/benchmarks.md, "Returns"). Here each
//! minion holds the first `N` publishes it matches instead of answering them, and builds
//! (encrypts) their `N` returns ahead of time. Once every minion holds its `N`, all of
//! them send at once, each its returns one after the other on its request socket as
//! salt-minion does (one request outstanding a connection), checking each reply (its
//! nonce, under the session key). What is measured, from the go to the last reply, is
//! the master's work on returns it had not seen: reading, decrypting, checking,
//! committing through the log, applying, answering. The swarm's share in that window is
//! a send and a receive a return, and it is reported beside the master's.
//!
//! One `blast` line on stdout: returns acknowledged, failed, seconds, returns per
//! second, and the CPU-seconds of the master's process tree and of the swarm in the
//! window. The returns are real: each is for a job the master published, and the job
//! cache holds every one afterwards.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::{mpsc, watch};
use zeromq::{SocketRecv, SocketSend, ZmqMessage};

use super::minion::{self, AesReply, Creds, Identity, Job};
use super::procstat;

/// How long a blast return waits for its reply before it counts as failed.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the swarm waits for every ready minion to hold its publishes.
pub const ARM_TIMEOUT: Duration = Duration::from_secs(300);

/// One minion's part: how many of its returns were acknowledged and how many failed.
struct Part {
    acknowledged: usize,
    failed: usize,
}

/// The blast's shared state: minions arm (hold their returns ready), the swarm says go
/// once every one has, and each reports its part.
pub struct Blast {
    /// Publishes each minion holds before the blast.
    pub per_minion: usize,
    armed: AtomicUsize,
    go: watch::Receiver<bool>,
    go_tx: watch::Sender<bool>,
    parts: mpsc::UnboundedSender<Part>,
    parts_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Part>>,
}

impl Blast {
    pub fn new(per_minion: usize) -> Self {
        let (go_tx, go) = watch::channel(false);
        let (parts, parts_rx) = mpsc::unbounded_channel();
        Blast { per_minion: per_minion.max(1), armed: AtomicUsize::new(0), go, go_tx, parts, parts_rx: tokio::sync::Mutex::new(parts_rx) }
    }

    /// One minion's blast: builds the returns of `jobs`, waits for the go, sends them
    /// one after the other on `req`, checking each reply.
    pub async fn fire(&self, me: &Identity, creds: &Creds, req: &mut zeromq::ReqSocket, jobs: &[Job]) {
        let built: Vec<(Vec<u8>, String)> = jobs.iter().filter_map(|j| minion::aes_request(me, &creds.session, minion::return_load(j)).ok()).collect();
        let mut part = Part { acknowledged: 0, failed: jobs.len() - built.len() };
        self.armed.fetch_add(1, Ordering::AcqRel);
        let mut go = self.go.clone();
        let _ = go.wait_for(|g| *g).await;
        for (body, nonce) in built {
            let ok = match req.send(ZmqMessage::from(body)).await {
                Err(_) => false,
                Ok(()) => match tokio::time::timeout(REPLY_TIMEOUT, req.recv()).await {
                    Ok(Ok(m)) => {
                        let reply = m.into_vec().pop().map(|b| b.to_vec()).unwrap_or_default();
                        matches!(minion::aes_reply(&creds.session, &nonce, &reply), Ok(AesReply::Value(_)))
                    }
                    _ => false,
                },
            };
            if ok {
                part.acknowledged += 1;
            } else {
                part.failed += 1;
                tracing::warn!(id = %me.id, "a blast return was not acknowledged");
            }
        }
        let _ = self.parts.send(part);
    }

    /// Waits until the `members` minions that are ready are armed, says go, and reports
    /// when all have finished (the `blast` line). `master_pid`: whose process tree's CPU
    /// to report. Fails when they are not all armed within [`ARM_TIMEOUT`] (publishes
    /// that did not reach every minion).
    pub async fn run(&self, master_pid: Option<u32>, members: usize) -> Result<(), NotArmed> {
        let deadline = Instant::now() + ARM_TIMEOUT;
        while self.armed.load(Ordering::Acquire) < members {
            if Instant::now() > deadline {
                return Err(NotArmed { armed: self.armed.load(Ordering::Acquire), members, per_minion: self.per_minion });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let me = std::process::id();
        let (master0, swarm0) = (master_pid.map(procstat::tree_stats), procstat::tree_stats(me));
        let t0 = Instant::now();
        let _ = self.go_tx.send(true);
        let (mut acknowledged, mut failed) = (0, 0);
        let mut rx = self.parts_rx.lock().await;
        for _ in 0..members {
            let Some(p) = rx.recv().await else { break };
            acknowledged += p.acknowledged;
            failed += p.failed;
        }
        let seconds = t0.elapsed().as_secs_f64();
        let (master1, swarm1) = (master_pid.map(procstat::tree_stats), procstat::tree_stats(me));
        super::emit(json!({"event": "blast", "minions": members, "per_minion": self.per_minion,
            "acknowledged": acknowledged, "failed": failed, "seconds": seconds,
            "returns_per_s": (acknowledged as f64 / seconds.max(1e-9)).round(),
            "master_cpu_seconds": master0.zip(master1).map(|(a, b)| b.cpu_seconds - a.cpu_seconds),
            "swarm_cpu_seconds": swarm1.cpu_seconds - swarm0.cpu_seconds}));
        Ok(())
    }
}

/// Not every minion held its publishes within [`ARM_TIMEOUT`] (publishes that did not
/// reach every minion): the blast does not start.
#[derive(Debug, thiserror::Error)]
#[error("only {armed} of {members} minions held {per_minion} publishes after {ARM_TIMEOUT:?}")]
pub struct NotArmed {
    pub armed: usize,
    pub members: usize,
    pub per_minion: usize,
}
