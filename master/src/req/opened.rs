//! A request body opened once: [`open`] decodes the envelope and, on the AES channel,
//! finds the minion's session key and decrypts and checks the load. What is left depends
//! on the view and is decided when the opened request is answered: the key's state and
//! `tok`, the request's age, the command, replays.
//!
//! The daemon opens a request once and hands the opened request on: a light one (a
//! clear `ping`, an AES `_return` or `_minion_event` of at most [`LIGHT_MAX_BYTES`]) is
//! answered on its event loop, the rest on its blocking pool. A clear request can be
//! answered again from the same opened request (a sign-in whose claim was refused, or
//! whose records did not apply as decided); an AES request is answered once, and a
//! refused claim of its nonce makes its outcome the replay's ([`Outcome::replayed`]).

use rmpv::Value;

use halite_storage::id::validate_minion_id;
use halite_storage::keys::BankState;

use super::{auth, tok_matches, Claim, Command, Ctx, Outcome};
use crate::view::replay_key::ReplayKey;
use crate::view::View;
use crate::wire::crypto::{Crypticle, EncAlgo, SigAlgo};
use crate::wire::envelope::{self, Enc};
use crate::wire::payload::{encode, get_text};

/// Requests that may be light: at most this many bytes.
pub const LIGHT_MAX_BYTES: usize = 64 * 1024;

/// AES commands answered on the event loop: each is a decryption, a key read, a record
/// or an event, and an encrypted reply (tens of microseconds), never a file, a pillar
/// compilation or an RSA private-key operation. A `test.ping` to 8,000 minions is 8,000
/// light returns, and a hop to a pool thread and back for each would cost more than the
/// return itself.
const LIGHT_COMMANDS: &[&str] = &["_return", "_minion_event"];

/// An opened request (see the module docs).
pub enum Opened {
    Clear(ClearRequest),
    Aes(AesRequest),
}

/// A clear request: `_auth`, `ping`, or a command Halite refuses.
pub struct ClearRequest {
    load: Value,
}

/// An AES request whose load was decrypted with the minion's session key and found
/// well formed (`envelope::open_aes`).
pub struct AesRequest {
    id: String,
    session: Crypticle,
    enc: EncAlgo,
    sig: SigAlgo,
    opened: envelope::Opened,
    /// The body's length.
    len: usize,
}

/// Opens `body` (see the module docs); a body that cannot be opened is answered at once
/// (`Err`: `"bad load"`, nothing to commit).
pub fn open(view: &dyn View, body: &[u8]) -> Result<Opened, Outcome> {
    let env = envelope::decode(body, view.config().halite_max_request_bytes).map_err(|why| Outcome::bad_load(why, "?", "?"))?;
    if env.enc == Enc::Clear {
        return Ok(Opened::Clear(ClearRequest { load: env.load }));
    }
    let id = env.id;
    validate_minion_id(id).map_err(|e| Outcome::bad_load(e, "aes", id))?;
    // No session key: this minion has not signed in (or its key aged out). Nothing is
    // made for it here; `"bad load"` sends it to `_auth`.
    let session = view.session_key(id).ok_or_else(|| Outcome::bad_load("no session key: the minion has not signed in", "aes", id))?;
    let opened = envelope::open_aes(env.ciphertext, id, &session).map_err(|why| Outcome::bad_load(why, "aes", id))?;
    Ok(Opened::Aes(AesRequest { id: id.to_string(), session, enc: env.enc_algo, sig: env.sig_algo, opened, len: body.len() }))
}

impl Opened {
    /// The request's command (`_auth`, `_return`, ...), as its load names it.
    pub fn cmd(&self) -> &str {
        match self {
            Opened::Clear(c) => get_text(&c.load, "cmd").unwrap_or(""),
            Opened::Aes(a) => &a.opened.cmd,
        }
    }
}

impl ClearRequest {
    /// A clear `ping` (an echo) is light; `_auth` (RSA) is not.
    pub fn is_light(&self) -> bool {
        get_text(&self.load, "cmd") == Some("ping")
    }

    /// The answer, from `view` as it is now: may be asked again of the same request.
    pub fn answer(&self, view: &dyn View) -> Outcome {
        let cmd = get_text(&self.load, "cmd").unwrap_or("");
        match cmd {
            "_auth" => auth::Auth::parse(&self.load).answer(view),
            "ping" => Outcome::reply(encode(&self.load), cmd, ""),
            // Everything else on the clear channel: the reference's CLI-facing commands
            // (publish, runner, wheel, ...) and the internal ones behind CVE-2020-11651
            // (_send_pub, _prep_auth_info). Halite serves none of them to the network.
            _ => {
                crate::metrics::refuse(crate::metrics::Port::Request, "clear channel", "clear_command", &format_args!("clear command {:?} refused", cmd.escape_debug().to_string()));
                Outcome::reply(encode(&Value::Map(vec![])), cmd, "")
            }
        }
    }
}

impl AesRequest {
    /// A `_return` or `_minion_event` of at most [`LIGHT_MAX_BYTES`].
    pub fn is_light(&self) -> bool {
        self.len <= LIGHT_MAX_BYTES && LIGHT_COMMANDS.contains(&self.opened.cmd.as_str())
    }

    /// The answer, from `view` as it is now: the key must be accepted and `tok` its
    /// signature, the request young enough (`request_server_ttl`), then the command
    /// answers; a request that changes something claims its nonce, and one already
    /// applied is answered with nothing written. The reply is sealed with the session
    /// key and the nonce (the pillar's carries its own encryption).
    pub fn answer(self, view: &dyn View) -> Outcome {
        let AesRequest { id: id_owned, session, enc, sig, mut opened, .. } = self;
        let id = id_owned.as_str();
        let (cmd_owned, nonce) = (std::mem::take(&mut opened.cmd), std::mem::take(&mut opened.nonce));
        let cmd = cmd_owned.as_str();
        // The key's state and PEM digest (from memory in the daemon); the PEM itself is
        // read only when the memo does not know this (key, tok) or the command needs it.
        let print = match view.key_print(id) {
            Ok(Some(p)) if p.state == BankState::Accepted => p,
            _ => return Outcome::bad_load("the minion's key is not accepted", cmd, id),
        };
        let tok_ok = match (view.tok_memo(), crate::wire::payload::bytes(&opened.tok)) {
            (Some(memo), Some(tok)) => memo.valid(&print.pem_sha256, tok, || tok_matches(view, id, &print, &opened.tok)),
            _ => tok_matches(view, id, &print, &opened.tok),
        };
        if !tok_ok {
            return Outcome::bad_load("bad tok", cmd, id);
        }
        let now_s = (view.now_ns() / 1_000_000_000) as i64;
        if let Err(why) = envelope::check_ttl(opened.ts, now_s, view.config().request_server_ttl) {
            return Outcome::bad_load(why, cmd, id);
        }
        let ctx = Ctx { id, nonce: &nonce, key: print, enc, sig };
        let mut ans = match Command::parse_aes(cmd, opened).and_then(|c| c.answer(&ctx, view)) {
            Ok(a) => a,
            Err(why) => return Outcome::bad_load(why, cmd, id),
        };
        // Only a request that changes something is looked for among replays and
        // remembered (its key made once, for both).
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
                Err(e) => return Outcome::bad_load(format!("cannot encrypt the reply: {e}"), cmd, id),
            }
        };
        // The command's and the id's own strings move into the outcome (not copied).
        Outcome { reply, records: ans.records, events: ans.events, claims, effects: vec![], recheck: false, signed_in: false, cmd: cmd_owned, id: id_owned }
    }
}
