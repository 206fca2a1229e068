//! The entry context: the bytes a node puts in a raft entry's `context` field so it can
//! recognise its own proposal when the entry is applied, and so a membership change can
//! carry the address the member listens on.
//!
//! This file is the only place that builds or reads those bytes; `docs/formats.md`
//! ("entry context", §2) specifies them:
//!
//! ```text
//! offset  size  field
//! 0       8     proposer: the proposing node's raft id, u64 BE (0: a founding entry)
//! 8       8     seq: the proposer's sequence number of the proposal, u64 BE
//! 16      n     addr (optional, membership changes only): the member's transport
//!               address as UTF-8 text `ip:port` (`[v6]:port`), to the end of the field
//! ```
//!
//! Entries of a proposal other than its last carry an empty context (no `EntryContext`
//! at all). A committed entry comes from the log, which a peer wrote: [`decode`] checks
//! every byte and refuses what it does not understand, and never panics.

use std::net::SocketAddr;

/// Length of the fixed part: proposer id and sequence number.
pub const FIXED_LEN: usize = 16;

/// What an entry's context says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryContext {
    /// The raft id of the node that proposed the entry; 0 for the founding membership
    /// entries a new log starts with (no node proposed those).
    pub proposer: u64,
    /// The proposer's sequence number for this proposal (0 for founding entries).
    pub seq: u64,
    /// For a membership change, the transport address of the member it adds.
    pub addr: Option<SocketAddr>,
}

impl EntryContext {
    /// The context of a founding membership entry (see `boot.rs`).
    pub fn founding(addr: Option<SocketAddr>) -> Self {
        EntryContext { proposer: 0, seq: 0, addr }
    }
}

/// Why a context was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("entry context of {0} bytes is shorter than its {FIXED_LEN}-byte fixed part")]
    TooShort(usize),
    #[error("entry context address is not UTF-8")]
    AddrNotUtf8,
    #[error("entry context address {0:?} is not an ip:port socket address")]
    AddrInvalid(String),
}

/// The bytes of `ctx`.
pub fn encode(ctx: &EntryContext) -> Vec<u8> {
    let addr = ctx.addr.map(|a| a.to_string());
    let mut out = Vec::with_capacity(FIXED_LEN + addr.as_ref().map_or(0, String::len));
    out.extend_from_slice(&ctx.proposer.to_be_bytes());
    out.extend_from_slice(&ctx.seq.to_be_bytes());
    if let Some(a) = addr {
        out.extend_from_slice(a.as_bytes());
    }
    out
}

/// Reads an entry's context: `Ok(None)` for an empty one (an entry that is not the last
/// of its proposal, or a new leader's empty entry), an error for anything malformed.
pub fn decode(bytes: &[u8]) -> Result<Option<EntryContext>, ContextError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let (Some(proposer), Some(seq)) = (be_u64(bytes, 0), be_u64(bytes, 8)) else {
        return Err(ContextError::TooShort(bytes.len()));
    };
    let tail = &bytes[FIXED_LEN..];
    let addr = if tail.is_empty() {
        None
    } else {
        let text = std::str::from_utf8(tail).map_err(|_| ContextError::AddrNotUtf8)?;
        Some(text.parse().map_err(|_| ContextError::AddrInvalid(text.chars().take(64).collect()))?)
    };
    Ok(Some(EntryContext { proposer, seq, addr }))
}

fn be_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_be_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let cases = [
            EntryContext { proposer: 7, seq: 1, addr: None },
            EntryContext { proposer: u64::MAX, seq: u64::MAX, addr: None },
            EntryContext { proposer: 3, seq: 42, addr: Some("127.0.0.3:4520".parse().unwrap()) },
            EntryContext { proposer: 9, seq: 2, addr: Some("[::1]:4520".parse().unwrap()) },
            EntryContext::founding(Some("10.0.0.1:4520".parse().unwrap())),
            EntryContext::founding(None),
        ];
        for c in cases {
            assert_eq!(decode(&encode(&c)), Ok(Some(c)), "{c:?}");
        }
    }

    #[test]
    fn bytes_are_the_documented_ones() {
        let c = EntryContext { proposer: 0x0102030405060708, seq: 0x1112131415161718, addr: Some("127.0.0.2:4520".parse().unwrap()) };
        let mut want = vec![1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18];
        want.extend_from_slice(b"127.0.0.2:4520");
        assert_eq!(encode(&c), want);
        // A founding entry without an address: sixteen zero bytes.
        assert_eq!(encode(&EntryContext::founding(None)), vec![0u8; 16]);
    }

    #[test]
    fn empty_is_no_context() {
        assert_eq!(decode(&[]), Ok(None));
    }

    #[test]
    fn garbage_is_refused_without_panicking() {
        for n in 1..FIXED_LEN {
            assert_eq!(decode(&vec![0xAB; n]), Err(ContextError::TooShort(n)));
        }
        let mut bad = vec![0u8; 16];
        bad.extend_from_slice(&[0xFF, 0xFE, 0x00]);
        assert_eq!(decode(&bad), Err(ContextError::AddrNotUtf8));
        for text in ["not an address", "127.0.0.1", "127.0.0.1:99999", "host.example:4520", " 127.0.0.1:1", "\0"] {
            let mut b = vec![0u8; 16];
            b.extend_from_slice(text.as_bytes());
            assert!(matches!(decode(&b), Err(ContextError::AddrInvalid(_))), "{text:?}");
        }
        // A long run of garbage is refused, and the error does not carry all of it.
        let mut long = vec![1u8; 16];
        long.extend(std::iter::repeat_n(b'x', 1 << 20));
        match decode(&long) {
            Err(ContextError::AddrInvalid(t)) => assert_eq!(t.len(), 64),
            other => panic!("{other:?}"),
        }
        // Every prefix and every single-byte change of a valid context decodes or is
        // refused; none panics.
        let good = encode(&EntryContext { proposer: 5, seq: 6, addr: Some("127.0.0.5:1".parse().unwrap()) });
        for n in 0..=good.len() {
            let _ = decode(&good[..n]);
        }
        for i in 0..good.len() {
            for v in [0u8, 0x7F, 0x80, 0xFF, b':', b'['] {
                let mut m = good.clone();
                m[i] = v;
                let _ = decode(&m);
            }
        }
    }
}
