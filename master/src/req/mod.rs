//! Minion requests on the request port (Salt's `salt/daemons/masterapi.py` commands): one [`Command`] per request,
//! parsed from the load, then answered from a read-only [`View`].
//!
//! [`handle`] is the whole path of one request body: the envelope checks
//! (`wire::envelope`), the command, the reply encryption. It does no I/O and returns an
//! [`Outcome`]: the reply, the records to commit before the reply is sent, the events
//! to fire once they are committed, and what else must happen around the commit
//! ([`Claim`]s before it, [`Effect`]s after it). The daemon carries these out; the unit
//! tests drive `handle` with `view::memory::MemoryView`.
//!
//! | command | file | does |
//! |---|---|---|
//! | `_auth`, `ping` (clear) | [`auth`], [`misc`] | sign-in decision; echo |
//! | `_return` | [`returns`] | stores a job return |
//! | `_pillar` | [`pillar`] | records grains, compiles the pillar |
//! | `_file_*`, `_serve_file`, `_dir_list`, `_symlink_list` | [`files`] | the file server |
//! | `_minion_event` | [`events`] | events onto the bus |
//! | `_mine`, `_mine_delete`, `_mine_flush`, `_mine_get` | [`mine`] | mine records; mine reads |
//! | `_master_opts`, `_master_tops`, `_register_resources`, others | [`misc`] | |
//! | any, while this member is not caught up with the cluster | [`not_ready`] | Salt's retry answers |
//!
//! Every failure of decoding, crypto or validation is answered with `"bad load"` (which
//! makes a stock minion sign in again) and logged; nothing is written for it.

pub mod auth;
pub mod events;
pub mod files;
pub mod mine;
pub mod misc;
pub mod not_ready;
pub mod pillar;
pub mod returns;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_hostile;
#[cfg(test)]
mod tests_light;
#[cfg(test)]
mod fuzz_tests;

use rmpv::Value;

use halite_storage::format::Record;
use halite_storage::id::validate_minion_id;
use halite_storage::keys::BankState;
use halite_storage::state::KeyPrint;

use crate::error::{Error, Result};
use crate::events::Event;
use crate::view::replay_key::ReplayKey;
use crate::view::View;
use crate::wire::crypto::{Crypticle, EncAlgo, PublicKey, SigAlgo};
use crate::wire::envelope::{self, Enc};
use crate::wire::payload::{encode, get_text};

/// What handling one request produced.
#[derive(Debug)]
pub struct Outcome {
    /// The msgpack reply body.
    pub reply: Vec<u8>,
    /// Records to commit before the reply is sent.
    pub records: Vec<Record>,
    /// Events to fire once the records are committed.
    pub events: Vec<Event>,
    /// What must be granted before the records are committed; if a claim is refused the
    /// request is handled again (the view then shows why).
    pub claims: Vec<Claim>,
    /// What to do once the records are committed, before the reply is sent.
    pub effects: Vec<Effect>,
    /// The records were decided from this member's read of state they name as their
    /// expectation (`KeySet::expect`): once committed, the request is handled again and
    /// that second outcome, read from the applied state, is the answer (see
    /// [`Outcome::settled`]).
    pub recheck: bool,
    /// A sign-in accepted the minion.
    pub signed_in: bool,
    /// For the log: the command and the minion.
    pub cmd: String,
    pub id: String,
}

/// A limited resource a request takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// A place among the `max_minions` minions counted.
    Count(String),
    /// A place among the `halite_max_pending_keys` pending keys, held while the new
    /// pending key is proposed: requests in flight count against the cap, so a flood of
    /// new ids cannot all pass the check before any of them applies.
    Pending(String),
    /// The request's place among the requests applied (its id and nonce), taken before
    /// its records are committed and kept once they are: of copies in flight at once
    /// only the one that claims first is applied; refused, the request is handled again
    /// and the view says it was replayed (`daemon/replay.rs`).
    Nonce(ReplayKey),
}

/// A change outside the log that follows a committed request.
#[derive(Debug, Clone)]
pub enum Effect {
    /// The minion's new session key (handed to it in the reply).
    SessionKey { id: String, key: Crypticle },
    /// The one-shot `minions_autosign/<id>` stub that let the key in is used up.
    ConsumeAutosignStub { id: String },
}

impl Outcome {
    /// A reply and nothing else.
    pub fn reply(reply: Vec<u8>, cmd: &str, id: &str) -> Self {
        Outcome { reply, records: vec![], events: vec![], claims: vec![], effects: vec![], recheck: false, signed_in: false, cmd: cmd.to_string(), id: id.to_string() }
    }

    /// Whether, read after the commit, the view holds what every conditional keys-bank
    /// record of this outcome set: its expectations held, so the reply decided with
    /// them stands and nothing needs handling again (the common case; it spares a
    /// sign-in a second round of RSA work).
    pub fn applied_as_decided(&self, view: &dyn View) -> bool {
        self.records.iter().all(|r| match r {
            Record::KeySet(k) if k.expect.is_some() && BankState::from_key_state(k.state).is_some() => {
                view.key(&k.id).ok().flatten().is_some_and(|held| held.state.key_state() == k.state && held.pub_key == k.pub_key)
            }
            _ => true,
        })
    }

    /// The answer after a [`Outcome::recheck`] whose records did not all apply as decided: `self` was committed, `again` is the
    /// same request handled on the state that now includes it. When `again` needs no
    /// record, the expectations held or the state moved on without needing us: `again`
    /// is the answer, and it keeps what only the first decision knew (the one-shot
    /// autosign stub that let the key in is used up). Otherwise the state moved between
    /// the read and the apply and `again` must be committed in turn (`Err(again)`).
    pub fn settled(self, mut again: Outcome) -> Result<Outcome, Outcome> {
        if !again.records.is_empty() {
            return Err(again);
        }
        if again.signed_in && self.signed_in {
            again.effects.extend(self.effects.into_iter().filter(|e| matches!(e, Effect::ConsumeAutosignStub { .. })));
        }
        Ok(again)
    }

    /// `"bad load"`, counted and logged with the reason (`reason="bad_load"`, at most
    /// once a minute per id, like every refusal: a flood of bad requests cannot flood
    /// the log).
    pub fn bad_load(why: impl std::fmt::Display, cmd: &str, id: &str) -> Self {
        crate::metrics::refuse(crate::metrics::Port::Request, id, "bad_load", &format_args!("{cmd}: {why}"));
        Self::reply(envelope::bad_load(), cmd, id)
    }
}

/// A minion command on the AES channel, parsed from its load. (The clear channel has
/// only `_auth`, [`auth::Auth`], and `ping`.)
pub enum Command {
    Return(returns::Return),
    Pillar(pillar::Pillar),
    Files(files::Files),
    MinionEvent(events::MinionEvent),
    Mine(mine::Mine),
    Misc(misc::Misc),
}

/// An authenticated AES request: who sent it and how to answer.
pub struct Ctx<'a> {
    pub id: &'a str,
    pub nonce: &'a str,
    /// The print of the minion's accepted key, the key its `tok` was checked against.
    pub key: KeyPrint,
    pub enc: EncAlgo,
    pub sig: SigAlgo,
}

impl Ctx<'_> {
    /// The minion's accepted public key, read and parsed when a command needs it (the
    /// pillar's reply is encrypted to it; a return needs no key): the key whose print the
    /// `tok` was checked against, or an error if it changed since.
    pub fn minion_pub(&self, view: &dyn View) -> Result<PublicKey> {
        key_of_print(view, self.id, &self.key)
    }
}

/// `id`'s key, read and parsed, if it is still the one whose print is `print` (the
/// print holds the state too, so an accepted print means an accepted key).
fn key_of_print(view: &dyn View, id: &str, print: &KeyPrint) -> Result<PublicKey> {
    match view.key(id)? {
        Some(k) if KeyPrint::of(&k) == *print => Ok(PublicKey::from_pem(&k.pub_key)?),
        _ => Err(Error::refused("the minion's accepted key changed during the request")),
    }
}

/// Checks `tok` against the key whose print is `print` (the memo's check when it does
/// not remember this pair).
fn tok_matches(view: &dyn View, id: &str, print: &KeyPrint, tok: &Value) -> bool {
    key_of_print(view, id, print).is_ok_and(|pubkey| envelope::tok_valid(tok, &pubkey))
}

/// What an AES command answered.
#[derive(Debug)]
pub struct Answer {
    pub value: Value,
    /// Sent as is (it carries its own encryption: the pillar) instead of sealed with the
    /// session key and the nonce.
    pub private: bool,
    pub records: Vec<Record>,
    pub events: Vec<Event>,
}

impl Answer {
    pub fn value(value: Value) -> Self {
        Answer { value, private: false, records: vec![], events: vec![] }
    }
}

impl Command {
    /// Parses an AES command from its (decrypted, checked) inner load, msgpack without
    /// `nonce` and `tok` ([`envelope::Opened::inner`]). A return takes those bytes as they
    /// are, to be stored (they are never made into a tree); any other command decodes them.
    pub fn parse_aes(cmd: &str, opened: envelope::Opened) -> Result<Command> {
        if cmd == "_return" {
            return Ok(Command::Return(returns::Return::parse(opened.inner)));
        }
        let inner = opened.inner_value()?;
        if let Some(f) = files::Files::parse(cmd, &inner) {
            return Ok(Command::Files(f));
        }
        if let Some(m) = mine::Mine::parse(cmd, &inner) {
            return Ok(Command::Mine(m));
        }
        Ok(match cmd {
            "_pillar" => Command::Pillar(pillar::Pillar::parse(&inner)),
            "_minion_event" => Command::MinionEvent(events::MinionEvent::parse(&inner)),
            other => Command::Misc(misc::Misc::parse(other, &inner)),
        })
    }

    /// Answers an AES command. An error becomes `"bad load"`.
    pub fn answer(self, ctx: &Ctx, view: &dyn View) -> Result<Answer> {
        match self {
            Command::Return(c) => c.answer(ctx, view),
            Command::Pillar(c) => c.answer(ctx, view),
            Command::Files(c) => Ok(c.answer(view)),
            Command::MinionEvent(c) => Ok(c.answer(ctx)),
            Command::Mine(c) => Ok(c.answer(ctx, view)),
            Command::Misc(c) => Ok(c.answer(ctx, view)),
        }
    }
}

/// Handles one request body.
pub fn handle(view: &dyn View, body: &[u8]) -> Outcome {
    match handle_as(view, body, Weight::Any) {
        Some(out) => out,
        None => Outcome::bad_load("internal: a request was left unanswered", "?", "?"),
    }
}

/// Requests [`handle_light`] answers: at most this many bytes.
pub const LIGHT_MAX_BYTES: usize = 64 * 1024;

/// AES commands [`handle_light`] answers: each is a decryption, a key read, a record or
/// an event, and an encrypted reply (tens of microseconds), never a file, a pillar
/// compilation or an RSA private-key operation.
const LIGHT_COMMANDS: &[&str] = &["_return", "_minion_event"];

/// Handles `body` if it is light (a clear `ping`, or an AES `_return` or `_minion_event`
/// of at most [`LIGHT_MAX_BYTES`]); `None` for anything else, which [`handle`] then
/// answers in full. The daemon answers light requests on its event loop and the rest on
/// its blocking pool: a `test.ping` to 8,000 minions is 8,000 light returns, and a hop
/// to a pool thread and back for each cost more than the return itself. Equivalent to
/// [`handle`] whenever it answers: the same function, stopped before the command when
/// the command is not light.
pub fn handle_light(view: &dyn View, body: &[u8]) -> Option<Outcome> {
    if body.len() > LIGHT_MAX_BYTES {
        return None;
    }
    handle_as(view, body, Weight::Light)
}

/// Which requests a call answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Weight {
    Any,
    Light,
}

fn handle_as(view: &dyn View, body: &[u8], weight: Weight) -> Option<Outcome> {
    let env = match envelope::decode(body, view.config().halite_max_request_bytes) {
        Ok(e) => e,
        Err(why) => return Some(Outcome::bad_load(why, "?", "?")),
    };
    match env.enc {
        Enc::Clear if weight == Weight::Light && get_text(&env.load, "cmd") != Some("ping") => None,
        Enc::Clear => Some(handle_clear(view, &env.load)),
        Enc::Aes => handle_aes(view, &env, weight),
    }
}

fn handle_clear(view: &dyn View, load: &Value) -> Outcome {
    let cmd = get_text(load, "cmd").unwrap_or("");
    match cmd {
        "_auth" => auth::Auth::parse(load).answer(view),
        "ping" => Outcome::reply(encode(load), cmd, ""),
        // Everything else on the clear channel: the reference's CLI-facing commands
        // (publish, runner, wheel, ...) and the internal ones behind CVE-2020-11651
        // (_send_pub, _prep_auth_info). Halite serves none of them to the network.
        _ => {
            crate::metrics::refuse(crate::metrics::Port::Request, "clear channel", "clear_command", &format_args!("clear command {:?} refused", cmd.escape_debug().to_string()));
            Outcome::reply(encode(&Value::Map(vec![])), cmd, "")
        }
    }
}

fn handle_aes(view: &dyn View, env: &envelope::Envelope, weight: Weight) -> Option<Outcome> {
    let id = env.id;
    if let Err(e) = validate_minion_id(id) {
        return Some(Outcome::bad_load(e, "aes", id));
    }
    // No session key: this minion has not signed in (or its key aged out). Nothing is
    // made for it here; `"bad load"` sends it to `_auth`.
    let Some(session) = view.session_key(id) else {
        return Some(Outcome::bad_load("no session key: the minion has not signed in", "aes", id));
    };
    let mut opened = match envelope::open_aes(env.ciphertext, id, &session) {
        Ok(o) => o,
        Err(why) => return Some(Outcome::bad_load(why, "aes", id)),
    };
    let (cmd_owned, nonce) = (std::mem::take(&mut opened.cmd), std::mem::take(&mut opened.nonce));
    let cmd = cmd_owned.as_str();
    if weight == Weight::Light && !LIGHT_COMMANDS.contains(&cmd) {
        return None;
    }
    // The key's state and PEM digest (from memory in the daemon); the PEM itself is read
    // only when the memo does not know this (key, tok) or the command needs the key.
    let print = match view.key_print(id) {
        Ok(Some(p)) if p.state == BankState::Accepted => p,
        _ => return Some(Outcome::bad_load("the minion's key is not accepted", cmd, id)),
    };
    let tok_ok = match (view.tok_memo(), crate::wire::payload::bytes(&opened.tok)) {
        (Some(memo), Some(tok)) => memo.valid(&print.pem_sha256, tok, || tok_matches(view, id, &print, &opened.tok)),
        _ => tok_matches(view, id, &print, &opened.tok),
    };
    if !tok_ok {
        return Some(Outcome::bad_load("bad tok", cmd, id));
    }
    let now_s = (view.now_ns() / 1_000_000_000) as i64;
    if let Err(why) = envelope::check_ttl(opened.ts, now_s, view.config().request_server_ttl) {
        return Some(Outcome::bad_load(why, cmd, id));
    }
    let ctx = Ctx { id, nonce: &nonce, key: print, enc: env.enc_algo, sig: env.sig_algo };
    let mut ans = match Command::parse_aes(cmd, opened).and_then(|c| c.answer(&ctx, view)) {
        Ok(a) => a,
        Err(why) => return Some(Outcome::bad_load(why, cmd, id)),
    };
    // Only a request that changes something is looked for among replays and remembered
    // (its key made once, for both).
    let replay_key = (!(ans.records.is_empty() && ans.events.is_empty())).then(|| ReplayKey::of(id, &nonce));
    if replay_key.as_ref().is_some_and(|k| view.replayed(k)) {
        // Answered (a minion resending after a lost reply needs it), but the first
        // copy's effects are the only ones.
        tracing::info!(cmd, id, nonce = %nonce, "replayed request: answered, nothing written");
        ans.records.clear();
        ans.events.clear();
    }
    let claims = match replay_key {
        Some(k) if !(ans.records.is_empty() && ans.events.is_empty()) => vec![Claim::Nonce(k)],
        _ => vec![],
    };
    let reply = if ans.private {
        encode(&ans.value)
    } else {
        match envelope::seal_reply(&session, &nonce, &ans.value) {
            Ok(r) => r,
            Err(e) => return Some(Outcome::bad_load(format!("cannot encrypt the reply: {e}"), cmd, id)),
        }
    };
    // The command's own string moves into the outcome (not copied).
    Some(Outcome { reply, records: ans.records, events: ans.events, claims, effects: vec![], recheck: false, signed_in: false, cmd: cmd_owned, id: id.to_string() })
}
