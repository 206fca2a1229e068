//! The import-marker record (kind 8): the start and end of an import of outside state
//! (`import.rs`), so that `dump` and recovery see where it began and whether it finished.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::Payload;
use crate::error::{Error, Result};

/// Begin or end of an import (migration) of outside state into the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImportPhase {
    Begin,
    End,
}

/// Marks the start and end of an import, so that `dump` and recovery can see where an
/// import began and whether it finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportMarker {
    /// What was imported, e.g. `localfs_key:/etc/salt/pki/master`.
    pub source: String,
    pub phase: ImportPhase,
    /// Counts per category (only meaningful at `End`).
    pub counts: BTreeMap<String, u64>,
    pub time_ns: u64,
}

impl Payload for ImportMarker {
    /// A source of at most 4096 bytes.
    fn check(&self) -> Result<()> {
        if self.source.len() > 4096 {
            return Err(Error::Invalid("import marker source longer than 4096 bytes".into()));
        }
        Ok(())
    }
}
