//! The request port (`ret_port`, 4506): a ROUTER socket whose requests are each handled
//! on the blocking pool (RSA and AES are CPU work) by `req::handle`, then carried out:
//!
//! 1. claims granted (a `max_minions` place), or the request handled again, now full;
//! 2. records committed through the node (group commit with everything in flight);
//! 3. effects applied (session key, autosign stub, nonce), events fired;
//! 4. the reply sent on the request's own routing envelope.
//!
//! A reply is sent only after its records are committed, so an acknowledged key change
//! or return is durable. If the commit fails the minion gets `"bad load"` and nothing
//! else happens.

use std::sync::Arc;

use zeromq::{SocketSend, ZmqMessage};

use super::live::Master;
use crate::req::{self, Outcome};
use crate::wire::envelope;

/// Requests handled at once; more wait in the socket's queue.
pub const MAX_IN_FLIGHT: usize = 1024;

/// Handles a request and grants its claims (see the module docs).
fn handle(master: &Master, body: &[u8]) -> Outcome {
    let out = req::handle(master, body);
    if master.claim(&out.claims) {
        return out;
    }
    // Another request took the last place meanwhile: the view now says so.
    let again = req::handle(master, body);
    if master.claim(&again.claims) {
        again
    } else {
        Outcome::bad_load("max_minions: no place left", &again.cmd, &again.id)
    }
}

/// One request: handle, commit what it produced, reply on its own routing envelope.
pub async fn request(master: Arc<Master>, mut send: zeromq::RouterSendHalf, msg: ZmqMessage) {
    let mut frames = msg.into_vec();
    let Some(body) = frames.pop() else { return };
    let m = master.clone();
    let out = match tokio::task::spawn_blocking(move || handle(&m, &body)).await {
        Ok(o) => o,
        Err(e) => {
            tracing::error!("request handler panicked: {e}");
            return;
        }
    };
    let mut reply = out.reply;
    let committed = if out.records.is_empty() {
        Ok(0)
    } else {
        // Awaited, not waited for on a thread: hundreds of sign-ins share one group commit
        // without holding hundreds of blocking threads.
        match master.node.propose_async(&out.records) {
            Ok(pending) => pending.committed().await,
            Err(e) => Err(e),
        }
    };
    match committed {
        Ok(_) => {
            master.apply_effects(out.effects);
            for e in out.events {
                master.bus.fire(e);
            }
        }
        Err(e) => {
            tracing::error!(cmd = %out.cmd, id = %out.id, "records not committed: {e}; answering bad load");
            master.release(&out.claims);
            reply = envelope::bad_load();
        }
    }
    frames.push(reply.into());
    match ZmqMessage::try_from(frames) {
        Ok(m) => {
            if let Err(e) = send.send(m).await {
                tracing::debug!("reply not delivered: {e}");
            }
        }
        Err(e) => tracing::warn!("cannot build a reply: {e}"),
    }
}
