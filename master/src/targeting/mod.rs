//! Salt's targeting: glob and fnmatch, the matchers of every target type, nodegroups, range targets.

pub mod glob;
pub mod matcher;
pub mod nodegroups;
pub mod range;
