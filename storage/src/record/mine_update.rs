//! The mine-update record (kind 16): a change to one minion's mine (Salt's `mine` cache
//! bank), applied by `state/apply.rs`.

use serde::{Deserialize, Serialize};

use super::Payload;
use crate::error::{Error, Result};
use crate::id::validate_minion_id;

/// Most functions one mine update names.
pub const MAX_MINE_FUNS: usize = 1000;
/// Longest mine function name.
pub const MAX_MINE_FUN_LEN: usize = 1024;
/// Most bytes of data one mine update carries (all its functions together).
pub const MAX_MINE_BYTES: usize = 4 << 20;

/// What a [`MineUpdate`] does to one minion's mine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MineOp {
    /// `_mine`: store each entry's data under its function (after removing every
    /// function first when `clear`).
    Send,
    /// `_mine_delete`: remove the entries' functions (their data is empty).
    Delete,
    /// `_mine_flush`: remove the whole mine (no entries).
    Flush,
}

/// One function of a mine update: its name and, for a send, its data (msgpack).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MineEntry {
    pub fun: String,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// A change to one minion's mine (Salt's `mine` cache bank). The id is the minion that
/// sent the request (authenticated), never a field of its load. It does not depend on
/// the state it applies to: applied in log order, every member holds the same mine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MineUpdate {
    pub id: String,
    pub op: MineOp,
    pub clear: bool,
    pub entries: Vec<MineEntry>,
    pub time_ns: u64,
}

impl Payload for MineUpdate {
    /// A valid minion id; at most [`MAX_MINE_FUNS`] functions, each named by 1 to
    /// [`MAX_MINE_FUN_LEN`] bytes without NUL; data only in a send, at most
    /// [`MAX_MINE_BYTES`] in all; a flush names no function and only a send clears.
    fn check(&self) -> Result<()> {
        let m = self;
        validate_minion_id(&m.id)?;
        if m.entries.len() > MAX_MINE_FUNS {
            return Err(Error::Invalid(format!("mine update of {:?} names {} functions, more than {MAX_MINE_FUNS}", m.id, m.entries.len())));
        }
        let mut bytes = 0usize;
        for e in &m.entries {
            if e.fun.is_empty() || e.fun.len() > MAX_MINE_FUN_LEN || e.fun.contains('\0') {
                return Err(Error::Invalid(format!("mine update of {:?}: function name empty, longer than {MAX_MINE_FUN_LEN} bytes or with a NUL", m.id)));
            }
            if m.op != MineOp::Send && !e.data.is_empty() {
                return Err(Error::Invalid(format!("mine update of {:?}: a delete carries no data", m.id)));
            }
            bytes += e.data.len();
        }
        if bytes > MAX_MINE_BYTES {
            return Err(Error::Invalid(format!("mine update of {:?} carries {bytes} bytes, more than {MAX_MINE_BYTES}", m.id)));
        }
        if (m.op == MineOp::Flush && !m.entries.is_empty()) || (m.op != MineOp::Send && m.clear) {
            return Err(Error::Invalid(format!("mine update of {:?}: a flush names no function, only a send clears", m.id)));
        }
        Ok(())
    }
}
