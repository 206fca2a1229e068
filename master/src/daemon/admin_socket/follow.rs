//! The admin socket's `job.follow` carried out: a job's returns streamed to `salt` as
//! they are committed. What is read and why is in [`crate::admin::follow`]; this file
//! is the loop: subscribe to the bus first (so no return committed after the first read
//! is missed), read what the job cache already holds, then send each return an event
//! names once the job cache has it, retrying and sweeping on a timer, until every
//! expected minion returned, the timeout passed or the client went away.
//!
//! Batched, because a big job's returns come in bursts (8,000 minions answer a
//! `test.ping` within a second): when an event wakes the loop, it waits [`COALESCE`]
//! for the burst to gather, then takes every event queued (at most [`BATCH`]); their
//! returns are read in one batched lookup and their lines written with one write (cut
//! at [`FLUSH_AT`] bytes). The cost of a wake-up, a read pass and a syscall is then
//! shared by the burst instead of paid per return.
//!
//! A return's own event (`crate::events::return_event`: fired by this member once the
//! return a minion sent is committed) carries the load that was stored; that load is
//! sent as it is, without reading it back. Any other event naming a return (forwarded
//! by a peer, or fired by a minion, which may name anyone) is only a hint: what it
//! names is read from the job cache.

use std::sync::Arc;

use serde_json::{json, Value as J};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::broadcast::Receiver;

use halite_storage::state::StateMachine;

use crate::daemon::lines::write_bounded;
use crate::daemon::live::Master;
use crate::admin::follow::{return_tag_id, Follow, FollowCmd, HINT_RETRY};
use crate::admin::error;
use crate::events::Event;
use crate::wire::payload;

/// Most events taken off the bus per wake-up (more wait for the next turn of the loop,
/// so the timeout and the client's going away are still noticed during a flood).
pub const BATCH: usize = 1024;

/// The output buffer is written once it holds this many bytes (one write per batch
/// otherwise): a burst of large returns is not held whole.
pub const FLUSH_AT: usize = 1 << 20;

/// How long a wake-up waits for more events before taking what is queued, while more
/// returns are expected: a few milliseconds later on the screen, in exchange for one
/// pass per burst instead of one per return when returns trickle in a few at a time.
pub const COALESCE: std::time::Duration = std::time::Duration::from_millis(5);

/// Up to this many returns are read on the runtime's thread (a few point reads of hot
/// data); a larger batch is read on the blocking pool.
const INLINE_READS: usize = 16;

/// The load of a stored return as JSON text (`null` if it cannot be decoded), written
/// straight from its msgpack bytes ([`payload::write_json`]).
fn load_json(load: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(load.len() + load.len() / 4 + 8);
    payload::write_json(load, &mut out);
    out
}

/// Returns read from the job cache: (minion id, its load as JSON text).
type Found = Vec<(String, Vec<u8>)>;

/// Reads the returns of `ids` to `jid` from the job cache (one batched lookup); the ids
/// with no return yet are left out (and so are all of them if the read fails: they are
/// looked up again, as any return not found).
fn read_returns(sm: &StateMachine, jid: &str, ids: &[String]) -> Found {
    sm.job_returns_of(jid, ids).unwrap_or_default().into_iter().map(|r| (r.id, load_json(&r.load))).collect()
}

/// Returns the events of a batch carry: (minion id, the event).
type Carried = Vec<(String, Arc<Event>)>;

/// The carried returns as JSON text, then [`read_returns`] of `ids`.
fn gather(sm: &StateMachine, jid: &str, carried: &Carried, ids: &[String]) -> Found {
    let mut found: Found = carried
        .iter()
        .filter_map(|(id, e)| {
            Some((id.clone(), load_json(e.carried_return()?)))
        })
        .collect();
    if !ids.is_empty() {
        found.extend(read_returns(sm, jid, ids));
    }
    found
}

/// [`gather`], on the blocking pool unless the batch is small.
async fn read_batch(sm: &Arc<StateMachine>, jid: &str, carried: Carried, ids: Vec<String>) -> Found {
    if ids.len() + carried.len() <= INLINE_READS {
        return gather(sm, jid, &carried, &ids);
    }
    let (sm, jid) = (sm.clone(), jid.to_string());
    tokio::task::spawn_blocking(move || gather(&sm, &jid, &carried, &ids)).await.unwrap_or_default()
}

/// A job's expected minions and the returns stored so far.
type Start = (Vec<String>, Found);

/// Answer lines gathered for one write.
#[derive(Default)]
struct Out {
    buf: Vec<u8>,
}

impl Out {
    fn push(&mut self, v: &J) {
        // Writing JSON into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.buf, v);
        self.buf.push(b'\n');
    }

    /// Writes what is gathered (one write, bounded by [`crate::daemon::lines::WRITE_TIMEOUT`]); false once the
    /// client cannot take it.
    async fn send<W: AsyncWrite + Unpin>(&mut self, wr: &mut W) -> bool {
        if self.buf.is_empty() {
            return true;
        }
        let ok = write_bounded(wr, &self.buf).await;
        self.buf.clear();
        ok
    }

    /// One `{"id": ID, "return": LOAD}` line, the load's JSON text copied as it is.
    fn push_return(&mut self, id: &str, load: &[u8]) {
        self.buf.extend_from_slice(b"{\"id\":");
        let _ = serde_json::to_writer(&mut self.buf, id);
        self.buf.extend_from_slice(b",\"return\":");
        self.buf.extend_from_slice(load);
        self.buf.extend_from_slice(b"}\n");
    }

    /// Gathers the returns `f` still wants (marking them sent), writing whenever
    /// [`FLUSH_AT`] bytes are gathered; false once the client cannot take them.
    async fn returns<W: AsyncWrite + Unpin>(&mut self, f: &mut Follow, found: Found, wr: &mut W) -> bool {
        for (id, load) in found {
            if f.wanted(&id) {
                f.sent(&id);
                self.push_return(&id, &load);
                if self.buf.len() >= FLUSH_AT && !self.send(wr).await {
                    return false;
                }
            }
        }
        self.send(wr).await
    }
}

/// Serves one `job.follow` until it ends; the connection is closed after it.
pub async fn follow(master: Arc<Master>, cmd: FollowCmd, rd: impl AsyncRead + Unpin, wr: impl AsyncWrite + Unpin) {
    let rx = master.bus.subscribe();
    stream(master.sm().clone(), rx, cmd, rd, wr).await
}

/// The follow itself, on a job cache and a bus subscription taken before it is called.
async fn stream(sm: Arc<StateMachine>, mut rx: Receiver<Arc<Event>>, cmd: FollowCmd, mut rd: impl AsyncRead + Unpin, mut wr: impl AsyncWrite + Unpin) {
    let deadline = tokio::time::Instant::now() + cmd.timeout;
    let mut out = Out::default();
    let first = {
        let (sm, jid) = (sm.clone(), cmd.jid.clone());
        tokio::task::spawn_blocking(move || -> crate::error::Result<Option<Start>> {
            let Some(job) = sm.job(&jid)? else { return Ok(None) };
            let stored = sm.job_returns(&jid)?.into_iter().map(|r| (r.id, load_json(&r.load))).collect();
            Ok(Some((job.minions, stored)))
        })
        .await
    };
    let (expected, stored) = match first {
        Ok(Ok(Some(x))) => x,
        Ok(Ok(None)) => {
            out.push(&error(format!("no job {} in the job cache", cmd.jid)));
            out.send(&mut wr).await;
            return;
        }
        Ok(Err(e)) => {
            out.push(&error(e));
            out.send(&mut wr).await;
            return;
        }
        Err(e) => {
            out.push(&error(e));
            out.send(&mut wr).await;
            return;
        }
    };
    let mut f = match cmd.only.clone() {
        Some(only) => Follow::only(only),
        None => Follow::new(expected),
    };
    if !out.returns(&mut f, stored, &mut wr).await {
        return;
    }
    let mut tick = tokio::time::interval(HINT_RETRY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut lagged = false;
    let mut closed = false;
    let mut byte = [0u8; 1];
    while !f.done() && !closed {
        // The returns found, and the minions events named (those of them not found are
        // retried on the timer).
        let (found, named): (Found, Vec<String>) = tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            // The client closed (or wrote, which a follow does not expect): stop.
            _ = rd.read(&mut byte) => return,
            e = rx.recv() => {
                match e {
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => lagged = true,
                    Err(RecvError::Closed) => closed = true,
                }
                // More returns to come: let the burst gather for a moment first.
                if !closed && f.pending() > 1 {
                    tokio::time::sleep(COALESCE).await;
                }
                // This event and every one queued behind it, at most BATCH (the same
                // minion named twice is read once: `job_returns_of` takes each once).
                // A return's own event carries it; the others are read.
                let mut ids = Vec::new();
                let mut carried: Carried = Vec::new();
                let mut take = |e: &Arc<Event>| {
                    if let Some(id) = return_tag_id(&e.tag, &cmd.jid) {
                        if f.wanted(id) {
                            if e.carried_return().is_some() {
                                carried.push((id.to_string(), e.clone()));
                            } else {
                                ids.push(id.to_string());
                            }
                        }
                    }
                };
                if let Ok(e) = &e {
                    take(e);
                }
                for _ in 1..BATCH {
                    if closed {
                        break;
                    }
                    match rx.try_recv() {
                        Ok(e) => take(&e),
                        Err(TryRecvError::Lagged(_)) => lagged = true,
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Closed) => closed = true,
                    }
                }
                if ids.is_empty() && carried.is_empty() {
                    continue;
                }
                (read_batch(&sm, &cmd.jid, carried, ids.clone()).await, ids)
            }
            _ = tick.tick() => {
                let due = f.due(std::mem::take(&mut lagged));
                if due.is_empty() {
                    continue;
                }
                (read_batch(&sm, &cmd.jid, Vec::new(), due).await, Vec::new())
            }
        };
        if !out.returns(&mut f, found, &mut wr).await {
            return;
        }
        // Named, but not applied here yet: looked up again on the timer.
        for id in &named {
            if f.wanted(id) {
                f.hint(id);
            }
        }
    }
    out.push(&json!({ "done": true, "missing": f.missing() }));
    out.send(&mut wr).await;
}

#[cfg(test)]
#[path = "follow_tests.rs"]
mod tests;
