//! A simulated minion's request socket after sign-in, as salt-minion 3008.5 uses its
//! own: the start event it fires once connected, its returns (tries, a fresh socket,
//! a new sign-in after `"bad load"`), and a fresh socket whenever the publish
//! connection comes back after it was lost.

use std::sync::Arc;
use std::time::Duration;

use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

use super::minion::{self, AesReply, Creds, Identity, MinionError};
use super::{sign_in_again, Swarm};

/// Fires the minion's start event (`minion::start_event_load`) and waits for the
/// master's answer, within salt-minion's 60 s for it.
pub(super) async fn start_event(me: &Identity, creds: &Creds, req: &mut zeromq::ReqSocket) -> std::result::Result<(), MinionError> {
    let timeout = Duration::from_secs(60);
    let (body, nonce) = minion::aes_request(me, &creds.session, minion::start_event_load(&me.id))?;
    req.send(ZmqMessage::from(body)).await.map_err(|e| MinionError::Transport(e.to_string()))?;
    let reply = match tokio::time::timeout(timeout, req.recv()).await {
        Ok(Ok(m)) => m.into_vec().pop().map(|b| b.to_vec()).unwrap_or_default(),
        Ok(Err(e)) => return Err(MinionError::Transport(e.to_string())),
        Err(_) => return Err(MinionError::Timeout("_minion_event", timeout)),
    };
    match minion::aes_reply(&creds.session, &nonce, &reply)? {
        AesReply::Value(_) => Ok(()),
        AesReply::BadLoad => Err(MinionError::BadReply("bad load".into())),
    }
}

/// Connects a fresh request socket whenever the publish connection comes back after it
/// was lost (the master restarted, or a balancer moved the minion), and puts it in place
/// of the old one: salt-minion's request socket (libzmq REQ) reconnects by itself in the
/// background (after 100 ms, backing off to at most 5 s: Salt sets `RECONNECT_IVL_MAX`
/// 5000), so its first return after a restart goes out on a connection that is already
/// there. This crate's REQ socket does not reconnect; without
/// this, every simulated minion made its new connection only when the first job after
/// the restart arrived, all 8,000 at once with that job's returns.
pub(super) async fn renew_request_socket(mut events: futures::channel::mpsc::Receiver<zeromq::SocketEvent>, req: Arc<tokio::sync::Mutex<zeromq::ReqSocket>>, endpoint: String) {
    use futures::StreamExt;
    let mut lost = false;
    while let Some(event) = events.next().await {
        match event {
            zeromq::SocketEvent::Disconnected(_) => lost = true,
            zeromq::SocketEvent::Connected(..) if lost => {
                lost = false;
                let mut fresh = zeromq::ReqSocket::new();
                if fresh.connect(&endpoint).await.is_ok() {
                    *req.lock().await = fresh;
                }
            }
            _ => {}
        }
    }
}

/// Sends a `_return` (salt-minion: 3 tries, a fresh socket after a timeout or a broken
/// connection, a new sign-in and one resend after `"bad load"`).
///
/// A REQ socket whose connection broke (the master restarted, or a balancer moved it)
/// never answers again: this socket type does not reconnect by itself, so every later
/// return on it failed ("Minion did not return" for every job after a member restart).
/// Any transport error therefore replaces the socket, as a timeout does. The patched
/// `zeromq` REQ fails a send to a peer that has closed at once (see
/// patches/zeromq/README-halite.md), so the first return after a master restart goes
/// out on a fresh connection right away, as salt-minion's (libzmq reconnects), instead
/// of after this function's 10 s timeout.
pub(super) async fn send_return(swarm: &Swarm, me: &Identity, endpoint: &str, creds: &mut Creds, req: &mut zeromq::ReqSocket, job: &minion::Job) -> std::result::Result<(), MinionError> {
    let timeout = Duration::from_secs(10);
    let mut reauthed = false;
    let mut tries = 0;
    loop {
        tries += 1;
        let (body, nonce) = minion::aes_request(me, &creds.session, minion::return_load(job))?;
        let answer = match req.send(ZmqMessage::from(body)).await {
            Err(e) => Err(MinionError::Transport(e.to_string())),
            Ok(()) => match tokio::time::timeout(timeout, req.recv()).await {
                Ok(Ok(m)) => Ok(m.into_vec().pop().map(|b| b.to_vec()).unwrap_or_default()),
                Ok(Err(e)) => Err(MinionError::Transport(e.to_string())),
                Err(_) => Err(MinionError::Timeout("_return", timeout)),
            },
        };
        let reply = match answer {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(id = %me.id, jid = %job.jid, "return try {tries} failed, on a fresh socket next: {e}");
                *req = zeromq::ReqSocket::new();
                req.connect(endpoint).await.map_err(|e| MinionError::Transport(e.to_string()))?;
                if tries >= 3 {
                    return Err(e);
                }
                continue;
            }
        };
        match minion::aes_reply(&creds.session, &nonce, &reply)? {
            AesReply::Value(_) => return Ok(()),
            AesReply::BadLoad if !reauthed => {
                reauthed = true;
                *creds = sign_in_again(swarm, me, endpoint, &creds.master_pub).await;
            }
            AesReply::BadLoad => return Err(MinionError::BadReply("bad load after a fresh sign-in".into())),
        }
    }
}
