//! The master's error type, shared by the daemon, the admin verbs and the tools.
//!
//! Each lower layer keeps its own error (`ConfigError`, `halite_storage::Error`,
//! `NodeError`, `CryptoError`, `PayloadError`); this enum wraps them so a caller can `?`
//! through any of them and still match on what went wrong. `Refused` carries a message
//! meant for the operator as is (an admin verb's argument error, Salt's own wording).

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
