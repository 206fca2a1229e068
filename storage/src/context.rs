//! The entry context: the bytes a node puts in a raft entry's `context` field so that
//! the proposal the entry carries is known by one identity on every member and across
//! restarts, and so that a membership change can carry the address the member listens
//! on.
//!
//! This file is the only place that builds or reads those bytes;
//! `docs/formats.md` §2 ("Entry context") specifies them. Two versions exist; this build writes v1 and
//! reads both:
//!
//! ```text
//! v1 (written since proposals are tracked exactly)
//! offset  size  field
//! 0       1     marker 0xC1
//! 1       1     version 1
//! 2       8     proposer: the proposing node's raft id, u64 BE (0: a founding entry)
//! 10      8     incarnation of the proposer's process, u64 BE (grows at every start)
//! 18      8     seq: the proposal's sequence number in that incarnation, u64 BE
//! 26      8     settled_below: the proposer's lowest sequence number still waiting
//!               when it handed the entry to raft, u64 BE (everything below is settled)
//! 34      1     0x80 | n: n = length of the address that follows (0: none)
//! 35      n     membership changes only: the member's transport address as UTF-8
//!               text `ip:port` (`[v6]:port`)
//!
//! v0 (logs written before; read only)
//! 0       8     proposer, u64 BE
//! 8       8     seq, u64 BE
//! 16      n     address text to the end of the field (membership changes only)
//!
//! v2 (written for a membership change that adds a member with its member key; every
//! other context stays v1, so a build that reads only v0/v1 reads all else)
//! 0       35+n  as v1, version byte 2
//! 35+n    1     k: length of the member key that follows, 32 (anything else is refused)
//! 36+n    k     the added member's Ed25519 public key (its transport identity)
//! ```
//!
//! Telling them apart needs no guess: a v0 context that reads as an address has ASCII
//! text from byte 16 on, so its byte 34 (if any) is below 0x80, while a v1 context has
//! the high bit set there and exactly `n` bytes after it (v1), or `n` bytes, a key
//! length byte `k` and exactly `k` bytes (v2). A context with the marker and either
//! shape but an unknown version, or a version whose shape it does not have, is refused
//! rather than read as v0.
//!
//! A committed entry comes from the log, which a peer wrote: [`decode`] checks every
//! byte and refuses what it does not understand, and never panics.

use std::net::SocketAddr;

/// Length of a v0 context's fixed part: proposer id and sequence number.
pub const V0_FIXED_LEN: usize = 16;
/// Length of a v1 context's fixed part, up to and including the address length byte.
pub const V1_FIXED_LEN: usize = 35;
/// The first byte of a versioned context.
pub const MARKER: u8 = 0xC1;
/// The context version this build writes (for all but keyed membership changes).
pub const VERSION: u8 = 1;
/// The context version of a membership change that carries a member key.
pub const VERSION_KEYED: u8 = 2;
/// Length of a member key in a v2 context (Ed25519 public key).
pub const MEMBER_KEY_LEN: usize = 32;
/// The longest address text a v1 context carries (the length byte holds 7 bits).
pub const MAX_ADDR_LEN: usize = 0x7F;

/// What identifies one proposal on every member and across restarts: who proposed it,
/// in which run of its process, and its number in that run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProposalId {
    pub proposer: u64,
    pub incarnation: u64,
    pub seq: u64,
}

/// What an entry's context says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryContext {
    /// The raft id of the node that proposed the entry; 0 for the founding membership
    /// entries a new log starts with (no node proposed those).
    pub proposer: u64,
    /// The proposer's incarnation (0 in a v0 context, and on founding entries).
    pub incarnation: u64,
    /// The proposer's sequence number for this proposal (0 for founding entries).
    pub seq: u64,
    /// The proposer's lowest sequence number still waiting when it handed this entry to
    /// raft (0 in a v0 context).
    pub settled_below: u64,
    /// For a membership change, the transport address of the member it adds.
    pub addr: Option<SocketAddr>,
    /// For a membership change that adds a member, the member's public key (v2 only).
    pub key: Option<[u8; MEMBER_KEY_LEN]>,
    /// 0 for a context read from a v0 layout, 1 or 2 ([`VERSION_KEYED`]) otherwise.
    pub version: u8,
}

impl EntryContext {
    /// The context of a proposal, as this build writes it.
    pub fn proposal(id: ProposalId, settled_below: u64, addr: Option<SocketAddr>) -> Self {
        EntryContext { proposer: id.proposer, incarnation: id.incarnation, seq: id.seq, settled_below, addr, key: None, version: VERSION }
    }

    /// This context carrying the added member's key (written as v2).
    pub fn with_key(self, key: Option<[u8; MEMBER_KEY_LEN]>) -> Self {
        EntryContext { key, version: if key.is_some() { VERSION_KEYED } else { self.version }, ..self }
    }

    /// The context of a founding membership entry (identical on every founder).
    pub fn founding(addr: Option<SocketAddr>) -> Self {
        EntryContext { proposer: 0, incarnation: 0, seq: 0, settled_below: 0, addr, key: None, version: VERSION }
    }

    /// The proposal's identity, when the context names one a state machine can track:
    /// a v1 context of a proposer (founding entries and v0 contexts name none).
    pub fn id(&self) -> Option<ProposalId> {
        (self.version >= 1 && self.proposer != 0).then_some(ProposalId { proposer: self.proposer, incarnation: self.incarnation, seq: self.seq })
    }
}

/// Why a context was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("entry context of {0} bytes is shorter than its {V0_FIXED_LEN}-byte fixed part")]
    TooShort(usize),
    #[error("entry context version {0} is not known to this build (it reads 0 and {VERSION})")]
    UnknownVersion(u8),
    #[error("entry context version {0} does not have that version's layout")]
    Malformed(u8),
    #[error("entry context member key of {0} bytes (a member key is {MEMBER_KEY_LEN})")]
    KeyLength(usize),
    #[error("entry context address is not UTF-8")]
    AddrNotUtf8,
    #[error("entry context address {0:?} is not an ip:port socket address")]
    AddrInvalid(String),
}

/// The bytes of `ctx`: the v1 layout, or v2 when it carries a member key.
pub fn encode(ctx: &EntryContext) -> Vec<u8> {
    let addr = ctx.addr.map(|a| a.to_string()).unwrap_or_default();
    // A socket address is at most 58 characters; the bound is for the type's sake.
    let addr = &addr.as_bytes()[..addr.len().min(MAX_ADDR_LEN)];
    let mut out = Vec::with_capacity(V1_FIXED_LEN + addr.len());
    out.push(MARKER);
    out.push(if ctx.key.is_some() { VERSION_KEYED } else { VERSION });
    out.extend_from_slice(&ctx.proposer.to_be_bytes());
    out.extend_from_slice(&ctx.incarnation.to_be_bytes());
    out.extend_from_slice(&ctx.seq.to_be_bytes());
    out.extend_from_slice(&ctx.settled_below.to_be_bytes());
    out.push(0x80 | addr.len() as u8);
    out.extend_from_slice(addr);
    if let Some(k) = &ctx.key {
        out.push(MEMBER_KEY_LEN as u8);
        out.extend_from_slice(k);
    }
    out
}

/// Reads an entry's context: `Ok(None)` for an empty one (a new leader's empty entry,
/// or an entry written before contexts were put on every proposal), an error for
/// anything malformed.
pub fn decode(bytes: &[u8]) -> Result<Option<EntryContext>, ContextError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    if let Some(shape) = versioned(bytes) {
        let version = bytes[1];
        let (Some(proposer), Some(incarnation), Some(seq), Some(settled_below)) = (be_u64(bytes, 2), be_u64(bytes, 10), be_u64(bytes, 18), be_u64(bytes, 26)) else {
            return Err(ContextError::TooShort(bytes.len()));
        };
        let n = (bytes[V1_FIXED_LEN - 1] & 0x7F) as usize;
        let key = match (version, shape) {
            (VERSION, Shape::V1) => None,
            (VERSION_KEYED, Shape::V2) => {
                let k = bytes[V1_FIXED_LEN + n] as usize;
                if k != MEMBER_KEY_LEN {
                    return Err(ContextError::KeyLength(k));
                }
                let mut key = [0u8; MEMBER_KEY_LEN];
                key.copy_from_slice(&bytes[V1_FIXED_LEN + n + 1..]);
                Some(key)
            }
            (VERSION | VERSION_KEYED, _) => return Err(ContextError::Malformed(version)),
            _ => return Err(ContextError::UnknownVersion(version)),
        };
        let addr = addr(&bytes[V1_FIXED_LEN..V1_FIXED_LEN + n])?;
        return Ok(Some(EntryContext { proposer, incarnation, seq, settled_below, addr, key, version }));
    }
    let (Some(proposer), Some(seq)) = (be_u64(bytes, 0), be_u64(bytes, 8)) else {
        return Err(ContextError::TooShort(bytes.len()));
    };
    let addr = addr(&bytes[V0_FIXED_LEN..])?;
    Ok(Some(EntryContext { proposer, incarnation: 0, seq, settled_below: 0, addr, key: None, version: 0 }))
}

/// The two layouts a versioned context can have.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// The address length byte accounts for exactly the bytes after it.
    V1,
    /// After the address, a key length byte accounts for exactly the bytes after it.
    V2,
}

/// Whether `bytes` has a versioned shape: the marker, and a length byte with its high
/// bit set that accounts for exactly the bytes after it (v1), or for the address and a
/// key length byte that accounts for exactly the rest (v2).
fn versioned(bytes: &[u8]) -> Option<Shape> {
    if bytes.len() < V1_FIXED_LEN || bytes[0] != MARKER || bytes[V1_FIXED_LEN - 1] & 0x80 == 0 {
        return None;
    }
    let n = (bytes[V1_FIXED_LEN - 1] & 0x7F) as usize;
    let rest = bytes.len() - V1_FIXED_LEN;
    if rest == n {
        return Some(Shape::V1);
    }
    match bytes.get(V1_FIXED_LEN + n) {
        Some(&k) if rest == n + 1 + k as usize => Some(Shape::V2),
        _ => None,
    }
}

fn addr(tail: &[u8]) -> Result<Option<SocketAddr>, ContextError> {
    if tail.is_empty() {
        return Ok(None);
    }
    let text = std::str::from_utf8(tail).map_err(|_| ContextError::AddrNotUtf8)?;
    Ok(Some(text.parse().map_err(|_| ContextError::AddrInvalid(text.chars().take(64).collect()))?))
}

fn be_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_be_bytes(b))
}

#[cfg(test)]
#[path = "context_tests.rs"]
mod tests;
