//! The master's error type, shared by the daemon, the admin verbs and the tools.
//!
//! Each lower layer keeps its own error (`ConfigError`, `halite_storage::Error`,
//! `NodeError`, `CryptoError`, `PayloadError`); this enum wraps them so a caller can `?`
//! through any of them and still match on what went wrong. The refusals a caller acts
//! on have a variant each (`NotResponding`, `NoMinionsMatched`, `Unauthorized`, named on
//! the admin socket by [`Error::kind`]); `Refused` carries any other message meant for
//! the operator as is (an admin verb's argument error, Salt's own wording), which a
//! caller only shows.

use crate::config::ConfigError;
use crate::wire::crypto::CryptoError;
use crate::wire::envelope::EnvelopeError;
use crate::wire::payload::PayloadError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Storage(#[from] halite_storage::Error),
    #[error(transparent)]
    Node(#[from] halite_replication::NodeError),
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    #[error(transparent)]
    Payload(#[from] PayloadError),
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// A target naming a nodegroup that cannot be expanded (Salt's words).
    #[error(transparent)]
    Nodegroup(#[from] crate::targeting::nodegroups::NodegroupError),
    /// A file or socket operation, with what was being done.
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    /// The master took no request or gave no answer in time (Salt's words for its
    /// request timeout).
    #[error("{}", crate::admin::client::NOT_RESPONDING)]
    NotResponding,
    /// A publish whose target matched no minion: nothing sent, no jid (Salt's words;
    /// its clients answer an empty result).
    #[error("No minions matched the target. No command was sent, no jid was assigned.")]
    NoMinionsMatched,
    /// The caller may not do this (Salt's words).
    #[error("Authorization error occurred.")]
    Unauthorized,
    /// A request or command refused, with the message the operator sees.
    #[error("{0}")]
    Refused(String),
}

impl Error {
    /// An I/O error with what was being done (`"creating /var/cache/salt/master"`).
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    /// A refusal with an operator-facing message.
    pub fn refused(msg: impl Into<String>) -> Self {
        Error::Refused(msg.into())
    }

    /// The name of a refusal a caller acts on, sent beside its message on the admin
    /// socket (`{"error": ..., "kind": ...}`); `None` for a message only shown.
    pub fn kind(&self) -> Option<&'static str> {
        match self {
            Error::NotResponding => Some("not_responding"),
            Error::NoMinionsMatched => Some("no_minions_matched"),
            Error::Unauthorized => Some("unauthorized"),
            _ => None,
        }
    }

    /// The error an admin socket's answer `{"error": msg, "kind": kind}` stands for.
    pub fn from_answer(msg: &str, kind: Option<&str>) -> Self {
        match kind {
            Some("not_responding") => Error::NotResponding,
            Some("no_minions_matched") => Error::NoMinionsMatched,
            Some("unauthorized") => Error::Unauthorized,
            _ => Error::Refused(msg.to_string()),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds context to `std::io::Result`s: `fs::read(p).ctx(|| format!("reading {p}"))?`.
pub trait IoContext<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io(what(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal a caller acts on crosses the admin socket as its message and kind and
    /// is the same variant on the other side, with Salt's words; any other message is
    /// only shown.
    #[test]
    fn refusals_cross_the_admin_socket_by_kind() {
        for (e, text) in [
            (Error::NotResponding, crate::admin::client::NOT_RESPONDING),
            (Error::NoMinionsMatched, "No minions matched the target. No command was sent, no jid was assigned."),
            (Error::Unauthorized, "Authorization error occurred."),
        ] {
            let answer = crate::admin::refusal(&e);
            assert_eq!(answer["error"], text);
            let back = Error::from_answer(answer["error"].as_str().unwrap(), answer["kind"].as_str());
            assert_eq!(std::mem::discriminant(&back), std::mem::discriminant(&e), "{answer}");
        }
        let shown = crate::admin::refusal(&Error::refused("'nope.x' is not available."));
        assert_eq!(shown, serde_json::json!({ "error": "'nope.x' is not available." }));
        assert!(matches!(Error::from_answer("No minions matched", None), Error::Refused(_)), "a kind is named, never guessed from the text");
    }
}
