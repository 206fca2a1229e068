//! A sign-in sent again is answered without a second RSA operation.
//!
//! **What a retry is.** Salt 3008.5's minion builds its `_auth` load once per sign-in
//! (`salt/crypt.py`, `minion_sign_in_payload`: `id`, `pub`, `enc_algo`, `sig_algo`,
//! `autosign_grains`, a fresh uuid4 `nonce` and, when it knows the master's key, a
//! `token` RSA-OAEP-encrypted to it, random padding each time) and hands it to
//! `channel.send(payload, tries=auth_tries, timeout=auth_timeout)`, which sends the
//! same load again after every `auth_timeout` without a reply. So the retries of one
//! sign-in are byte-identical requests; a new sign-in (after `acceptance_wait_time`, a
//! restart, a `"bad load"`) has a new nonce and token, and is a different request.
//!
//! **What is reused.** A clear `_auth` is keyed by the SHA-256 of its whole body. While
//! one is being handled, an identical one waits for it and is given its reply
//! (`joined`); once it has been answered, an identical one is given the same reply
//! (`cached`) for as long as a copy of it can still plausibly come ([`keep_for`]) —
//! in both cases only if the first signed the minion in
//! and the answer is still what handling it again would say, checked at each reuse
//! ([`Stamp`]): the id's key is still accepted with the same PEM, the minion's session
//! key is still the one the reply carries, and the publish key is still the one it
//! carries. Otherwise (a later sign-in of the id installed a new session key, the key
//! was rejected or deleted, the publish key rotated, the first was refused, pending, or
//! failed) the request is handled as any other.
//!
//! **How long an answer is kept.** salt-minion sends a sign-in again only when no
//! reply came within `auth_timeout` (whole seconds, 5 by default): the request times
//! out, its socket is closed and opened again, and the same load goes out on the new
//! connection (`salt/transport/zeromq.py`, `RequestClient`; `salt/channel/client.py`,
//! `send` with `tries`). A reply that reached the minion in time is never asked for
//! again. So copies of a sign-in come while the first waits in the queue or is handled
//! (joined, or queued behind it), or just as its reply is on its way (the minion's
//! timer ran out as it was sent). A copy queued behind the first waits about as long as
//! the first did, so an answer is kept for as long as its sign-in took from arrival to
//! answer, plus [`SLACK`] for a copy on its way, and at most [`WINDOW`]: a sign-in
//! answered in milliseconds, as every one is outside a storm, is kept two seconds; one
//! that waited out a storm's queue is kept about as long again. [`SignIns::sweep`]
//! drops them when due whether or not sign-ins keep coming.
//!
//! **Why it is safe.** The reply is a function of the request and of those three
//! things: the publish and session keys, encrypted to the `pub` in the request (only
//! the holder of its private key reads them), the minion's token decrypted and
//! encrypted again to that `pub`, the request's nonce, all under the master's
//! signature. For a byte-identical request with the same three things, a fresh answer
//! would differ only in the random padding of its encryptions: it carries the same
//! secrets, to the same key, bound to the same nonce. Whoever sends a captured
//! `_auth` again learns nothing they had not captured with the first reply, and costs
//! the master a hash instead of an RSA decryption and a signature. The `salt/auth`
//! event is fired once, for the sign-in that was handled.
//!
//! **Bounds.** At most [`MAX_ANSWERS`] answers are kept (about 2.5 KiB each with a
//! 2048-bit key), each for at most [`WINDOW`]; the first due go first. Requests in
//! flight are bounded by the request port's own bound.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::watch;

use halite_storage::keys::BankState;

use crate::metrics::{metrics, HowLabel};
use crate::view::View;
use crate::wire::envelope::{self, Enc};
use crate::wire::payload::get_text;

/// The longest an answered sign-in's reply is kept: a whole `auth_tries` ×
/// `auth_timeout` round of Salt's defaults (7 × 5 s) and some.
pub const WINDOW: Duration = Duration::from_secs(60);

/// How long an answer is kept beyond the time its sign-in took: for a copy sent as the
/// reply was on its way (see the module docs).
pub const SLACK: Duration = Duration::from_secs(2);

/// How long the answer of a sign-in that took `took` from its arrival to its answer is
/// kept (see the module docs).
pub fn keep_for(took: Duration) -> Duration {
    (took + SLACK).min(WINDOW)
}

/// Most answered sign-ins kept.
pub const MAX_ANSWERS: usize = 16_384;

/// A sign-in request's key: the SHA-256 of its body.
pub type Key = [u8; 32];

/// The key of `body` and the id it names, if it is a clear `_auth` (the envelope
/// decoded within `max` bytes).
pub fn key_of(body: &[u8], max: usize) -> Option<(Key, String)> {
    let env = envelope::decode(body, max).ok()?;
    if env.enc != Enc::Clear || get_text(&env.load, "cmd") != Some("_auth") {
        return None;
    }
    Some((Sha256::digest(body).into(), get_text(&env.load, "id").unwrap_or("").to_string()))
}

/// What a sign-in's reply depends on besides the request (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    pub pem_sha256: [u8; 32],
    pub session: String,
    pub publish: String,
}

impl Stamp {
    /// The id's stamp as `view` holds it now; `None` if its key is not accepted or it has
    /// no session key.
    pub fn of(view: &dyn View, id: &str) -> Option<Stamp> {
        let print = view.key_print(id).ok().flatten().filter(|p| p.state == BankState::Accepted)?;
        let session = view.session_key(id)?;
        Some(Stamp { pem_sha256: print.pem_sha256, session: session.key_string().to_string(), publish: view.publish_key().aes.key_string().to_string() })
    }
}

/// A sign-in's reply and what it was valid for.
#[derive(Debug)]
pub struct Answer {
    pub id: String,
    pub reply: Vec<u8>,
    pub stamp: Stamp,
}

impl Answer {
    /// The reply, if `view` still says what it said.
    pub fn still_valid(&self, view: &dyn View) -> Option<&[u8]> {
        (Stamp::of(view, &self.id).as_ref() == Some(&self.stamp)).then_some(self.reply.as_slice())
    }
}

enum Entry {
    InFlight(watch::Receiver<Option<Arc<Answer>>>),
    /// Answered, kept until the instant given.
    Answered(Arc<Answer>, Instant),
}

/// The sign-ins in flight and recently answered.
#[derive(Default)]
pub struct SignIns {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    /// Answered keys by the instant they are due to go, first due on top (a key
    /// answered again appears twice; the entry's own instant decides).
    due: BinaryHeap<Reverse<(Instant, Key)>>,
}

/// What to do with a sign-in ([`SignIns::turn`]).
pub enum Turn {
    /// Handle it; tell the others through [`Lead::answered`].
    Lead(Lead),
    /// An identical one is being handled: wait for its answer.
    Join(watch::Receiver<Option<Arc<Answer>>>),
    /// An identical one was answered within the window.
    Cached(Arc<Answer>),
}

/// The handling of a sign-in others may be waiting for. Dropped without an answer, it
/// releases them to handle their own.
pub struct Lead {
    key: Key,
    tx: watch::Sender<Option<Arc<Answer>>>,
    owner: Arc<SignIns>,
}

impl SignIns {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The turn of the sign-in keyed `key` at `now`.
    pub fn turn(self: &Arc<Self>, key: Key, now: Instant) -> Turn {
        let mut inner = self.lock();
        inner.expire(now);
        match inner.entries.get(&key) {
            Some(Entry::InFlight(rx)) => return Turn::Join(rx.clone()),
            Some(Entry::Answered(a, _)) => return Turn::Cached(a.clone()),
            None => {}
        }
        let (tx, rx) = watch::channel(None);
        inner.entries.insert(key, Entry::InFlight(rx));
        Turn::Lead(Lead { key, tx, owner: self.clone() })
    }

    /// Answered sign-ins kept.
    pub fn answers(&self) -> usize {
        self.lock().entries.values().filter(|e| matches!(e, Entry::Answered(..))).count()
    }

    /// Drops the answers due to go by `now` (the daemon calls it every second, so a
    /// storm's answers go when due though no sign-in follows).
    pub fn sweep(&self, now: Instant) {
        self.lock().expire(now);
    }
}

impl Inner {
    fn expire(&mut self, now: Instant) {
        while let Some(&Reverse((until, key))) = self.due.peek() {
            if until > now && self.due.len() <= MAX_ANSWERS {
                break;
            }
            self.due.pop();
            if matches!(self.entries.get(&key), Some(Entry::Answered(_, t)) if *t == until) {
                self.entries.remove(&key);
            }
        }
    }
}

impl Lead {
    /// The sign-in, received at `arrived`, was answered at `now` with `answer` (it
    /// signed the minion in): given to those waiting and kept for [`keep_for`] the
    /// time it took.
    pub fn answered(self, answer: Answer, arrived: Instant, now: Instant) {
        let a = Arc::new(answer);
        let _ = self.tx.send(Some(a.clone()));
        let until = now + keep_for(now.saturating_duration_since(arrived));
        let mut inner = self.owner.lock();
        inner.entries.insert(self.key, Entry::Answered(a, until));
        inner.due.push(Reverse((until, self.key)));
        inner.expire(now);
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        let mut inner = self.owner.lock();
        if matches!(inner.entries.get(&self.key), Some(Entry::InFlight(_))) {
            inner.entries.remove(&self.key);
        }
    }
}

/// Counts a reused answer (`joined` or `cached`).
pub fn reused(how: &'static str) {
    metrics().signin_reused.get_or_create(&HowLabel { how }).inc();
}

#[cfg(test)]
#[path = "signins_tests.rs"]
mod tests;
