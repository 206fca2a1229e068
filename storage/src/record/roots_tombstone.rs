//! The roots-tombstone record (kind 6): the deletion of a file under a roots tree,
//! applied by `state/apply.rs`. Its payload map is also what a `roots_sync` (kind 13)
//! lists in `remove`.

use serde::{Deserialize, Serialize};

use super::roots_blob::RootsTree;
use super::Payload;
use crate::error::Result;
use crate::id::{validate_relative_path, validate_saltenv};

/// The deletion of a file under a roots tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsTombstone {
    pub tree: RootsTree,
    pub saltenv: String,
    pub path: String,
}

impl Payload for RootsTombstone {
    /// A valid saltenv and safe relative path.
    fn check(&self) -> Result<()> {
        validate_saltenv(&self.saltenv)?;
        validate_relative_path(&self.path)?;
        Ok(())
    }
}
