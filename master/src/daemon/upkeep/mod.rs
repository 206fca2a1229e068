//! Housekeeping on a timer: job cache expiry, publish key rotation, the heap's free pages given back.

pub mod maintenance;
pub mod trim;
