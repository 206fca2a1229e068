//! The request port (`ret_port`, 4506): a ROUTER socket whose requests are each opened
//! once (`req::open`: the envelope decoded, an AES load decrypted) and answered from the
//! opened request — a light one (a job return, a minion event: tens of microseconds) on
//! the event loop, the rest on the blocking pool (RSA, pillar compilation, file reads) —
//! then carried out:
//!
//! 1. claims granted (a `max_minions` or pending-key place, a side-effecting request's
//!    nonce), or the request answered again, now full, or as its replay (a copy whose
//!    nonce another copy in flight claimed first: nothing written);
//! 2. records committed through the node (group commit with everything in flight);
//! 3. if the records were decided from this member's read ([`Outcome::recheck`]: a
//!    sign-in's key change names the entry it read) and the applied state is not what
//!    they set, the request is handled again on the state that now includes them and
//!    answered from that (up to [`MAX_SETTLE`]
//!    rounds when the state keeps moving under it, then `"bad load"`, which makes the
//!    minion sign in again);
//! 4. effects applied (session key, autosign stub), events fired;
//! 5. the reply sent on the request's own routing envelope.
//!
//! A member that is not ready (not caught up with the cluster) first holds the request
//! up to [`NOT_READY_GRACE`] for readiness (an election after a member stops, a leader
//! change: usually about a second), then answers Salt's retry answers instead
//! (`req::not_ready`). Salt 3008.5's minion does not resend a job return answered with
//! `cluster_retry`, so answering it at once during an election loses that return.
//!
//! A reply is sent only after its records are committed and applied, so an
//! acknowledged key change or return is durable, and a sign-in's answer is what the
//! log decided, never what a lagging member read. If the commit fails the minion gets
//! `"bad load"` and nothing else happens; if it is refused for want of disk space
//! (`halite_min_free_bytes`) the request is not answered, so the minion sends it again
//! after its timeout.

use std::sync::Arc;

use bytes::Bytes;
use zeromq::{SocketSend, ZmqMessage};

use super::intake;
use super::shares::Class;
use super::signins::{self, SignIns, Stamp, Turn};
use crate::daemon::live::Master;
use crate::req::{self, Claim, Effect, Outcome};
use crate::view::View;
use crate::wire::envelope::{self, Enc};

/// Requests handled at once; more wait in the socket's queue.
pub const MAX_IN_FLIGHT: usize = 1024;

/// Most times a request decided from a read is committed before the minion is told to
/// retry (each round reads a state that includes the previous round's entry).
pub const MAX_SETTLE: usize = 3;

/// How long a request waits for a member that is not ready to become ready before it is
/// answered with Salt's retry. Below the minion's shortest request timeout
/// (`return_retry_timer`, 5 s), so the minion still hears the answer.
pub const NOT_READY_GRACE: std::time::Duration = std::time::Duration::from_secs(4);

/// A request opened once (`req::open`), held while it is handled: a clear one may be
/// answered again (a refused claim, a recheck), so it is shared with the pool threads.
enum Held {
    Clear(Arc<req::ClearRequest>),
    /// An AES request is answered once; nothing is left to hold.
    Answered,
}

/// Opens `body` and answers it the first time, its claims granted (see the module docs):
/// a light request right here on the event loop, anything else on the blocking pool (a
/// body too large to be light is opened there too).
async fn handle_first(master: &Arc<Master>, body: &Bytes, opened: intake::Opened) -> Option<(Outcome, Held)> {
    let opened = match opened {
        // Opened once already, by the intake's classifier.
        Some(o) => o,
        None if body.len() <= req::LIGHT_MAX_BYTES => req::open(master.as_ref(), body),
        None => {
            let (m, b) = (master.clone(), body.clone());
            blocking(move || req::open(m.as_ref(), &b)).await?
        }
    };
    match opened {
        Err(out) => Some((out, Held::Answered)),
        Ok(req::Opened::Aes(a)) => {
            let out = if a.is_light() {
                a.answer(master.as_ref())
            } else {
                let m = master.clone();
                blocking(move || a.answer(m.as_ref())).await?
            };
            // Another copy in flight claimed the nonce first: this one is its replay.
            let out = if master.claim(&out.claims) { out } else { out.replayed() };
            Some((out, Held::Answered))
        }
        Ok(req::Opened::Clear(c)) => {
            let c = Arc::new(c);
            let out = if c.is_light() { c.answer(master.as_ref()) } else { answer_clear(master, &c).await? };
            if master.claim(&out.claims) {
                return Some((out, Held::Clear(c)));
            }
            // Another request took the last place meanwhile (of `max_minions`, or of
            // `halite_max_pending_keys`): the view now says so.
            let again = answer_clear(master, &c).await?;
            let out = if master.claim(&again.claims) { again } else { Outcome::bad_load("max_minions or halite_max_pending_keys: no place left", &again.cmd, &again.id) };
            Some((out, Held::Clear(c)))
        }
    }
}

/// A clear request answered (again) on the blocking pool.
async fn answer_clear(master: &Arc<Master>, c: &Arc<req::ClearRequest>) -> Option<Outcome> {
    let (m, c) = (master.clone(), c.clone());
    blocking(move || c.answer(m.as_ref())).await
}

/// `f` on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(o) => Some(o),
        Err(e) => {
            tracing::error!("request handler panicked: {e}");
            None
        }
    }
}

/// Commits `out`'s records (awaited, not waited for on a thread: hundreds of sign-ins
/// share one group commit without holding hundreds of blocking threads).
async fn commit(master: &Master, out: &Outcome) -> Result<(), halite_replication::NodeError> {
    if out.records.is_empty() {
        return Ok(());
    }
    master.node.propose_async(&out.records)?.committed().await.map(|_| ())
}

/// The reply to one request body, with everything it calls for carried out.
async fn answer(master: &Arc<Master>, signins: &Arc<SignIns>, body: Bytes, opened: intake::Opened, class: Class, arrived: std::time::Instant) -> Option<Vec<u8>> {
    if !ready_within(master, NOT_READY_GRACE).await {
        // Not caught up with the cluster: decide nothing from a stale state.
        return not_ready(master, body).await;
    }
    let sign_in = if class == Class::SignIn { signins::key_of(&body, master.cfg.halite_max_request_bytes) } else { None };
    let Some((key, id)) = sign_in else {
        let out = settle(master, body, opened).await?;
        crate::daemon::node_metrics::answered(&out.cmd, out.signed_in);
        return Some(out.reply);
    };
    // A sign-in: an identical one in flight or just answered answers it (`signins.rs`).
    let lead = match signins.turn(key, std::time::Instant::now()) {
        Turn::Lead(lead) => Some(lead),
        Turn::Cached(a) => {
            if let Some(reply) = a.still_valid(master.as_ref()) {
                signins::reused("cached");
                crate::daemon::node_metrics::answered("_auth", true);
                return Some(reply.to_vec());
            }
            None
        }
        Turn::Join(mut rx) => {
            let first = loop {
                let now = rx.borrow_and_update().clone();
                if now.is_some() {
                    break now;
                }
                if rx.changed().await.is_err() {
                    break rx.borrow().clone();
                }
            };
            if let Some(reply) = first.as_ref().and_then(|a| a.still_valid(master.as_ref())) {
                signins::reused("joined");
                crate::daemon::node_metrics::answered("_auth", true);
                return Some(reply.to_vec());
            }
            None
        }
    };
    let before = (master.key_print(&id).ok().flatten(), master.session_key(&id).map(|k| k.key_string().to_string()), master.publish_key().aes.key_string().to_string());
    let out = settle(master, body, opened).await?;
    crate::daemon::node_metrics::answered(&out.cmd, out.signed_in);
    if let (Some(lead), true) = (lead, out.signed_in) {
        // Kept only if the reply carries what the view holds now: the session key it
        // made or found, the publish key and accepted key it was decided with.
        let carried = out.new_session.clone().or(before.1);
        let now = Stamp::of(master.as_ref(), &out.id);
        let same_key = |s: &Stamp| before.0.as_ref().is_none_or(|p| p.pem_sha256 == s.pem_sha256);
        if let Some(stamp) = now.filter(|s| Some(&s.session) == carried.as_ref() && s.publish == before.2 && same_key(s)) {
            lead.answered(signins::Answer { id: out.id, reply: out.reply.clone(), stamp }, arrived, std::time::Instant::now());
        }
    }
    Some(out.reply)
}

/// The class of a request (`shares.rs`), from its body, and the request opened on the
/// way, handed to its handler so a request is opened (decoded, decrypted) once. A body
/// of at most `req::LIGHT_MAX_BYTES` is opened here (an AES load decrypted with its
/// session key: about a microsecond for a small return): a clear `_auth` is a
/// sign-in, an AES `_return` or `_syndic_return` a return, anything else (one that
/// does not open included) of the rest. A larger body is of the rest, its envelope
/// alone read to find a (large) sign-in, and is opened by its handler on the blocking
/// pool.
pub fn class_of(master: &Master, msg: &ZmqMessage) -> (Class, intake::Opened) {
    let Some(body) = msg.iter().last() else { return (Class::Other, None) };
    if body.len() > req::LIGHT_MAX_BYTES {
        let sign_in = envelope::decode(body, master.cfg.halite_max_request_bytes).is_ok_and(|env| env.enc == Enc::Clear && crate::wire::payload::get_text(&env.load, "cmd") == Some("_auth"));
        return (if sign_in { Class::SignIn } else { Class::Other }, None);
    }
    let opened = req::open(master, body);
    let class = match &opened {
        Ok(o @ req::Opened::Clear(_)) if o.cmd() == "_auth" => Class::SignIn,
        Ok(o @ req::Opened::Aes(_)) if o.cmd() == "_return" || o.cmd() == "_syndic_return" => Class::Return,
        _ => Class::Other,
    };
    (class, Some(opened))
}

/// Whether the member is ready now or becomes ready within `grace` (polled; the request
/// holds only its task meanwhile).
async fn ready_within(master: &Master, grace: std::time::Duration) -> bool {
    let status = master.node.status();
    if status.ready() {
        return true;
    }
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        if status.ready() {
            return true;
        }
    }
    false
}

/// Salt's retry answers (`req::not_ready`), on the blocking pool (a sign-in's reply is
/// signed).
async fn not_ready(master: &Arc<Master>, body: Bytes) -> Option<Vec<u8>> {
    let m = master.clone();
    let out = tokio::task::spawn_blocking(move || req::not_ready::answer(m.as_ref(), &body)).await.ok()?;
    if out.cmd == "_auth" {
        crate::daemon::node_metrics::auth_not_ready();
    }
    Some(out.reply)
}

/// A request handled, committed and settled.
struct Settled {
    cmd: String,
    id: String,
    signed_in: bool,
    reply: Vec<u8>,
    /// The session key a sign-in made (and installed), if it made one.
    new_session: Option<String>,
}

/// Handles, commits and settles a request.
async fn settle(master: &Arc<Master>, body: Bytes, opened: intake::Opened) -> Option<Settled> {
    let (mut out, held) = handle_first(master, &body, opened).await?;
    // Places granted along the way: kept only if the request ends signed in. They move
    // here out of the outcomes, which nothing reads them from again.
    let mut granted: Vec<Claim> = std::mem::take(&mut out.claims);
    let mut round = 1;
    loop {
        if let Err(e) = commit(master, &out).await {
            master.release(&granted);
            if let halite_replication::NodeError::DiskFull { .. } = e {
                // Nothing written, and no answer: the minion sends the request again
                // when its timeout passes (a job return answered with Salt's retry
                // answer is not sent again).
                crate::metrics::refuse(crate::metrics::Port::Request, &out.id, "disk_full", &e);
                return None;
            }
            tracing::error!(cmd = %out.cmd, id = %out.id, "records not committed: {e}; answering bad load");
            return Some(Settled::bad_load());
        }
        if !out.recheck || out.applied_as_decided(master.as_ref()) {
            break;
        }
        // Only a sign-in is decided from a read (`Outcome::recheck`): a clear request.
        let Held::Clear(c) = &held else { break };
        let mut again = answer_clear(master, c).await?;
        granted.append(&mut again.claims);
        match out.settled(again) {
            Ok(done) => {
                out = done;
                break;
            }
            Err(again) if round < MAX_SETTLE => {
                tracing::info!(cmd = %again.cmd, id = %again.id, round, "the state changed under a request decided from a read; deciding again");
                out = again;
                round += 1;
            }
            Err(again) => {
                tracing::warn!(cmd = %again.cmd, id = %again.id, "the state kept changing under a request; the minion will retry");
                master.release(&granted);
                return Some(Settled::bad_load());
            }
        }
    }
    // Committed. A pending key's place is held only while its request is in flight, a
    // counted place only by a minion that signed in; a nonce stays claimed (applied).
    let done: Vec<Claim> = granted
        .into_iter()
        .filter(|c| match c {
            Claim::Pending(_) => true,
            Claim::Count(_) => !out.signed_in,
            Claim::Nonce(_) => false,
        })
        .collect();
    if !done.is_empty() {
        master.release(&done);
    }
    let new_session = out.effects.iter().find_map(|e| match e {
        Effect::SessionKey { key, .. } => Some(key.key_string().to_string()),
        _ => None,
    });
    master.apply_effects(out.effects);
    for e in out.events {
        master.bus.fire(e);
    }
    Some(Settled { cmd: out.cmd, id: out.id, signed_in: out.signed_in, reply: out.reply, new_session })
}

impl Settled {
    fn bad_load() -> Self {
        Settled { cmd: String::new(), id: String::new(), signed_in: false, reply: envelope::bad_load(), new_session: None }
    }
}

/// One request of `class` (as the intake classed it), received at `arrived`: handle,
/// commit what it produced, reply on its own routing envelope.
pub async fn request(master: Arc<Master>, signins: Arc<SignIns>, mut send: zeromq::RouterSendHalf, msg: ZmqMessage, opened: intake::Opened, class: Class, arrived: std::time::Instant) {
    let mut frames = msg.into_vec();
    let Some(body) = frames.pop() else { return };
    let Some(reply) = answer(&master, &signins, body, opened, class, arrived).await else { return };
    frames.push(reply.into());
    match ZmqMessage::try_from(frames) {
        Ok(m) => {
            match send.send(m).await {
                Ok(()) => {}
                Err(zeromq::ZmqError::ReturnToSender { .. }) => {
                    crate::metrics::refuse(crate::metrics::Port::Request, "?", "reply_queue_full", &format_args!("a connection that does not read its replies has {} of them or {} bytes queued: reply dropped", crate::daemon::sockets::REPLIES_PER_PEER, crate::daemon::sockets::REPLY_BYTES_PER_PEER));
                }
                Err(e) => tracing::debug!("reply not delivered: {e}"),
            }
        }
        Err(e) => tracing::warn!("cannot build a reply: {e}"),
    }
}
