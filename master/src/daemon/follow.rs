//! The admin socket's `job.follow` carried out: a job's returns streamed to `salt` as
//! they are committed. What is read and why is in [`crate::admin::follow`]; this file
//! is the loop: subscribe to the bus first (so no return committed after the first read
//! is missed), read what the job cache already holds, then send each return an event
//! names once the job cache has it, retrying and sweeping on a timer, until every
//! expected minion returned, the timeout passed or the client went away.

use std::sync::Arc;

use serde_json::{json, Value as J};
use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::broadcast::error::RecvError;

use super::admin::write_line;
use super::live::Master;
use crate::admin::follow::{return_tag_id, Follow, FollowCmd, HINT_RETRY};
use crate::admin::error;
use crate::wire::payload;

/// The load of a stored return, as JSON (`Null` if it cannot be decoded).
fn load_json(load: &[u8]) -> J {
    payload::decode(load).map(|v| payload::to_json(&v)).unwrap_or(J::Null)
}

/// Reads the returns of `ids` to `jid` from the job cache (point reads).
fn read_returns(m: &Master, jid: &str, ids: &[String]) -> Vec<(String, J)> {
    let sm = m.sm();
    ids.iter().filter_map(|id| sm.job_return(jid, id).ok().flatten().map(|r| (r.id, load_json(&r.load)))).collect()
}

/// A job's expected minions and the returns stored so far.
type Start = (Vec<String>, Vec<(String, J)>);

/// Serves one `job.follow` until it ends; the connection is closed after it.
pub async fn follow(master: Arc<Master>, cmd: FollowCmd, mut rd: BufReader<OwnedReadHalf>, mut wr: OwnedWriteHalf) {
    let mut rx = master.bus.subscribe();
    let deadline = tokio::time::Instant::now() + cmd.timeout;
    let first = {
        let (m, jid) = (master.clone(), cmd.jid.clone());
        tokio::task::spawn_blocking(move || -> crate::error::Result<Option<Start>> {
            let sm = m.sm();
            let Some(job) = sm.job(&jid)? else { return Ok(None) };
            let stored = sm.job_returns(&jid)?.into_iter().map(|r| (r.id, load_json(&r.load))).collect();
            Ok(Some((job.minions, stored)))
        })
        .await
    };
    let (expected, stored) = match first {
        Ok(Ok(Some(x))) => x,
        Ok(Ok(None)) => {
            let _ = write_line(&mut wr, error(format!("no job {} in the job cache", cmd.jid)).to_string()).await;
            return;
        }
        Ok(Err(e)) => {
            let _ = write_line(&mut wr, error(e).to_string()).await;
            return;
        }
        Err(e) => {
            let _ = write_line(&mut wr, error(e).to_string()).await;
            return;
        }
    };
    let mut f = Follow::new(expected);
    for (id, load) in stored {
        if f.wanted(&id) {
            f.sent(&id);
            if !write_line(&mut wr, json!({ "id": id, "return": load }).to_string()).await {
                return;
            }
        }
    }
    let mut tick = tokio::time::interval(HINT_RETRY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut lagged = false;
    let mut byte = [0u8; 1];
    while !f.done() {
        let found: Vec<(String, J)> = tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            // The client closed (or wrote, which a follow does not expect): stop.
            _ = rd.read(&mut byte) => return,
            e = rx.recv() => match e {
                Ok(e) => match return_tag_id(&e.tag, &cmd.jid) {
                    Some(id) if f.wanted(id) => {
                        let got = read_returns(&master, &cmd.jid, &[id.to_string()]);
                        if got.is_empty() {
                            f.hint(id);
                        }
                        got
                    }
                    _ => continue,
                },
                Err(RecvError::Lagged(_)) => {
                    lagged = true;
                    continue;
                }
                Err(RecvError::Closed) => break,
            },
            _ = tick.tick() => {
                let due = f.due(std::mem::take(&mut lagged));
                if due.is_empty() {
                    continue;
                }
                let (m, jid) = (master.clone(), cmd.jid.clone());
                tokio::task::spawn_blocking(move || read_returns(&m, &jid, &due)).await.unwrap_or_default()
            }
        };
        for (id, load) in found {
            if f.wanted(&id) {
                f.sent(&id);
                if !write_line(&mut wr, json!({ "id": id, "return": load }).to_string()).await {
                    return;
                }
            }
        }
    }
    let _ = write_line(&mut wr, json!({ "done": true, "missing": f.missing() }).to_string()).await;
}
