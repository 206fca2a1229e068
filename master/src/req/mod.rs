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
//! | `_file_recv` | [`file_recv`] | a piece of a file a minion pushes (`cp.push`) |
//! | `_minion_event` | [`events`] | events onto the bus |
//! | `_mine`, `_mine_delete`, `_mine_flush`, `_mine_get` | [`mine`] | mine records; mine reads |
//! | `_master_opts`, `_master_tops`, `_register_resources`, others | [`misc`] | |
//! | any, while this member is not caught up with the cluster | [`not_ready`] | Salt's retry answers |
//!
//! Every failure of decoding, crypto or validation is answered with `"bad load"` (which
//! makes a stock minion sign in again) and logged; nothing is written for it.

pub mod auth;
pub mod events;
pub mod file_recv;
pub mod files;
pub mod mine;
pub mod misc;
pub mod not_ready;
pub mod opened;
pub mod pillar;
pub mod returns;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_hostile;
#[cfg(test)]
mod tests_light;
#[cfg(test)]
mod tests_file_recv;
#[cfg(test)]
mod fuzz_tests;

use rmpv::Value;

use halite_storage::format::Record;
use halite_storage::keys::BankState;
use halite_storage::state::KeyPrint;

use crate::error::{Error, Result};
use crate::events::Event;
use crate::view::replay_key::ReplayKey;
use crate::view::View;
use crate::wire::crypto::{Crypticle, EncAlgo, PublicKey, SigAlgo};
use crate::wire::envelope;

pub use opened::{open, AesRequest, ClearRequest, Opened, LIGHT_MAX_BYTES};

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
    /// and the view says it was replayed (`daemon/request_port/replay.rs`).
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

    /// What a copy of an AES request answers when another copy claimed its nonce first
    /// (`Claim::Nonce` refused): the same reply, nothing written, no event; the first
    /// copy's effects are the only ones.
    pub fn replayed(mut self) -> Self {
        tracing::info!(cmd = %self.cmd, id = %self.id, "replayed request: answered, nothing written");
        self.records.clear();
        self.events.clear();
        self.claims.clear();
        self
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
    FileRecv(file_recv::Push),
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
        if cmd == "_file_recv" {
            return Ok(Command::FileRecv(file_recv::Push::parse(&inner)));
        }
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
            Command::FileRecv(c) => Ok(c.answer(ctx, view)),
            Command::MinionEvent(c) => Ok(c.answer(ctx)),
            Command::Mine(c) => Ok(c.answer(ctx, view)),
            Command::Misc(c) => Ok(c.answer(ctx, view)),
        }
    }
}

/// Handles one request body: [`open`] it, then answer it (what the daemon does in two
/// steps, with claims and commits between them).
pub fn handle(view: &dyn View, body: &[u8]) -> Outcome {
    match open(view, body) {
        Ok(Opened::Clear(c)) => c.answer(view),
        Ok(Opened::Aes(a)) => a.answer(view),
        Err(out) => out,
    }
}
