//! Routes raft-rs's slog output into `tracing`, so the node logs where everything else
//! does. raft-rs is chatty at info (every election step); that goes to debug.
//!
//! slog's key-value pairs (raft-rs adds `raft_id` to every line, and the term, the
//! message type or the remaining ticks to many) are appended to the message as
//! `key=value`, so that an election can be followed member by member from the log
//! (`RUST_LOG=raft=debug`).

use std::fmt::Write as _;

use slog::{Drain, Key, Level, OwnedKVList, Record, Serializer, KV};

pub struct TracingDrain;

/// Collects key-value pairs as ` key=value`.
struct Pairs(String);

impl Serializer for Pairs {
    fn emit_arguments(&mut self, key: Key, val: &std::fmt::Arguments) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record, values: &OwnedKVList) -> Result<(), slog::Never> {
        // Formatting costs only when the line is wanted: raft-rs logs every election
        // step and every rejected message.
        let level = match record.level() {
            Level::Critical | Level::Error => tracing::Level::ERROR,
            Level::Warning => tracing::Level::WARN,
            Level::Info => tracing::Level::DEBUG,
            Level::Debug | Level::Trace => tracing::Level::TRACE,
        };
        let wanted = match level {
            tracing::Level::ERROR => tracing::enabled!(target: "raft", tracing::Level::ERROR),
            tracing::Level::WARN => tracing::enabled!(target: "raft", tracing::Level::WARN),
            tracing::Level::DEBUG => tracing::enabled!(target: "raft", tracing::Level::DEBUG),
            _ => tracing::enabled!(target: "raft", tracing::Level::TRACE),
        };
        if !wanted {
            return Ok(());
        }
        let mut kv = Pairs(String::new());
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let (msg, kv) = (record.msg(), kv.0);
        match level {
            tracing::Level::ERROR => tracing::error!(target: "raft", "{msg}{kv}"),
            tracing::Level::WARN => tracing::warn!(target: "raft", "{msg}{kv}"),
            tracing::Level::DEBUG => tracing::debug!(target: "raft", "{msg}{kv}"),
            _ => tracing::trace!(target: "raft", "{msg}{kv}"),
        }
        Ok(())
    }
}
