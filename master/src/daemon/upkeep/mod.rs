//! Housekeeping on a timer: job cache expiry, publish key rotation, gitfs and git_pillar updates, the master's `schedule`, the heap's free pages given back.

pub mod git_pillar;
pub mod gitfs;
pub mod maintenance;
pub mod schedule;
pub mod trim;
