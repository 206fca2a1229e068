//! Routes raft-rs's slog output into `tracing`, so the node logs where everything else
//! does. raft-rs is chatty at info (every election step); that goes to debug.

use slog::{Drain, Level, OwnedKVList, Record};

pub struct TracingDrain;

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record, _values: &OwnedKVList) -> Result<(), slog::Never> {
        match record.level() {
            Level::Critical | Level::Error => tracing::error!(target: "raft", "{}", record.msg()),
            Level::Warning => tracing::warn!(target: "raft", "{}", record.msg()),
            Level::Info => tracing::debug!(target: "raft", "{}", record.msg()),
            Level::Debug | Level::Trace => tracing::trace!(target: "raft", "{}", record.msg()),
        }
        Ok(())
    }
}
