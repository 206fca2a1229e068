//! What can go wrong reading a remote.

/// An error reading one gitfs remote. The remote's files stay as last fetched.
#[derive(Debug, thiserror::Error)]
pub enum GitfsError {
    /// The repository cannot be opened (gone, not a repository, unreadable).
    #[error("cannot open the repository at {path}: {why}")]
    Open { path: String, why: String },
    /// Reading a ref or an object failed (damaged or missing objects).
    #[error("reading {what}: {why}")]
    Read { what: String, why: String },
    /// An object, a tree or the whole update is larger than Halite accepts.
    #[error("{what} exceeds its bound ({limit})")]
    TooLarge { what: String, limit: String },
    /// The repository holds something that cannot be served (a path that is not UTF-8 or
    /// would leave its saltenv, a tag chain too long).
    #[error("refused: {0}")]
    Refused(String),
    /// Not read in this update (not named by `remotes`, or not due by its
    /// `update_interval`): it keeps what it serves. Not a failure.
    #[error("not read in this update")]
    NotRead,
}

impl GitfsError {
    pub(crate) fn read(what: impl Into<String>, why: impl std::fmt::Display) -> Self {
        GitfsError::Read { what: what.into(), why: why.to_string() }
    }

    /// A short fixed word for the metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            GitfsError::Open { .. } => "open",
            GitfsError::Read { .. } => "read",
            GitfsError::TooLarge { .. } => "too_large",
            GitfsError::Refused(_) => "refused",
            GitfsError::NotRead => "not_read",
        }
    }
}
