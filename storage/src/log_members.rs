//! The membership entries a log keeps from its compacted part (under `members` in the
//! log, and in a snapshot's manifest): their bytes and how they are folded to one or two
//! per member.

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, Entry, EntryType};

use crate::error::{Error, Result};
use crate::log::MAX_MEMBER_ENTRIES;

/// Membership entries as stored under `members` (and carried in a snapshot manifest):
/// each one a u32 BE length and a protobuf `Entry`.
pub fn encode_members(members: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in members {
        let b = e.write_to_bytes().unwrap_or_default();
        out.extend_from_slice(&(b.len() as u32).to_be_bytes());
        out.extend_from_slice(&b);
    }
    out
}

/// Reads [`encode_members`] bytes; refuses more than [`MAX_MEMBER_ENTRIES`] entries, an
/// entry over 64 KiB, a length past the end and anything protobuf cannot parse.
pub fn decode_members(mut b: &[u8]) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if out.len() >= MAX_MEMBER_ENTRIES {
            return Err(Error::Invalid(format!("more than {MAX_MEMBER_ENTRIES} membership entries")));
        }
        if b.len() < 4 {
            return Err(Error::Invalid("membership entries: truncated length".into()));
        }
        let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if n > 64 << 10 || n > b.len() - 4 {
            return Err(Error::Invalid(format!("membership entries: entry of {n} bytes out of bounds")));
        }
        let e = Entry::parse_from_bytes(&b[4..4 + n]).map_err(|e| Error::Invalid(format!("membership entries: {e}")))?;
        out.push(e);
        b = &b[4 + n..];
    }
    Ok(out)
}

/// Keeps, per node, its last membership entry and its last one that names an address
/// (an entry context longer than the 16 fixed bytes, docs/formats.md §2), in log order;
/// drops nodes whose last change removed them. Entries whose change cannot be read (e.g.
/// joint-consensus `ConfChangeV2`) are kept as they are; the result is capped at
/// [`MAX_MEMBER_ENTRIES`] (the newest kept).
pub(crate) fn fold_members(entries: Vec<Entry>) -> Vec<Entry> {
    const CONTEXT_FIXED: usize = 16;
    let mut last: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut last_addr: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut removed = std::collections::HashSet::new();
    let mut keep = vec![true; entries.len()];
    for (i, e) in entries.iter().enumerate() {
        if e.get_entry_type() != EntryType::EntryConfChange {
            continue;
        }
        let Ok(cc) = ConfChange::parse_from_bytes(&e.data) else { continue };
        keep[i] = false;
        last.insert(cc.node_id, i);
        if e.context.len() > CONTEXT_FIXED {
            last_addr.insert(cc.node_id, i);
        }
        if cc.get_change_type() == raft::eraftpb::ConfChangeType::RemoveNode {
            removed.insert(cc.node_id);
            last_addr.remove(&cc.node_id);
        } else {
            removed.remove(&cc.node_id);
        }
    }
    for (node, i) in last.iter().chain(last_addr.iter()) {
        if !removed.contains(node) {
            keep[*i] = true;
        }
    }
    let mut out: Vec<Entry> = entries.into_iter().zip(keep).filter(|(_, k)| *k).map(|(e, _)| e).collect();
    if out.len() > MAX_MEMBER_ENTRIES {
        out.drain(..out.len() - MAX_MEMBER_ENTRIES);
    }
    out
}
