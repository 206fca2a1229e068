//! A memo of `tok` checks that succeeded.
//!
//! Every AES request carries `tok`, the minion's X9.31 signature of `"salt"`, and the
//! master checks it against the minion's accepted key ([`super::envelope::tok_valid`]): an
//! RSA public-key operation (17 µs) on every return, pillar and file request. A minion
//! makes its `tok` once per sign-in and sends the same bytes with every request, so under
//! an 8,000-minion `test.ping` the same check was made over and over: 12 % of the master's
//! CPU.
//!
//! The check is a pure function of (accepted public key, `tok`), so its result can be
//! remembered exactly. The memo keeps a SHA-256 of the key's print (the SHA-256 of its
//! PEM, as the state machine keeps it: `halite_storage`'s `state/key_prints.rs`) and the
//! length-prefixed `tok`, for checks that **succeeded**; a failed check is not kept, so
//! bad input cannot fill it and a key that changes (a new PEM) is never matched by an old
//! entry. Whether the key is still accepted is read from the state on every request,
//! before this memo is asked: deleting or rejecting a key needs nothing from here.
//!
//! Bounded: at most [`TokMemo::capacity`] entries (40 bytes each with the set's own
//! overhead, about 1.3 MiB at the default 32,768); when full it is emptied and refills
//! from the next checks — one RSA operation per minion, as at start.

use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::Mutex;

/// Entries kept by default: four times the minions one master is measured with.
pub const DEFAULT_CAPACITY: usize = 32_768;

/// Remembers successful `tok` checks (see the module docs).
#[derive(Debug)]
pub struct TokMemo {
    seen: Mutex<HashSet<[u8; 32]>>,
    capacity: usize,
}

impl Default for TokMemo {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

impl TokMemo {
    /// A memo of at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        TokMemo {
            seen: Mutex::new(HashSet::new()),
            capacity: capacity.max(1),
        }
    }

    /// How many entries it keeps before it starts again.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `check()`'s answer for (the key whose PEM has the SHA-256 `pem_sha256`, `tok`):
    /// remembered if it was `true` before, else computed (outside the lock) and
    /// remembered if `true`. `check` must check `tok` against that very key.
    pub fn valid(&self, pem_sha256: &[u8; 32], tok: &[u8], check: impl FnOnce() -> bool) -> bool {
        let key = Self::key(pem_sha256, tok);
        if self
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&key)
        {
            return true;
        }
        if !check() {
            return false;
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= self.capacity {
            seen.clear();
            seen.shrink_to(self.capacity);
        }
        seen.insert(key);
        true
    }

    fn key(pem_sha256: &[u8; 32], tok: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(pem_sha256);
        h.update((tok.len() as u64).to_be_bytes());
        h.update(tok);
        h.finalize().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn print(pem: &[u8]) -> [u8; 32] {
        Sha256::digest(pem).into()
    }

    #[test]
    fn a_success_is_remembered_and_a_failure_is_not() {
        let memo = TokMemo::new(8);
        let calls = Cell::new(0);
        let ok = || {
            calls.set(calls.get() + 1);
            true
        };
        assert!(memo.valid(&print(b"PEM"), b"tok", ok));
        assert!(memo.valid(&print(b"PEM"), b"tok", || panic!(
            "a remembered success is not checked again"
        )));
        assert_eq!(calls.get(), 1);

        let bad = Cell::new(0);
        for _ in 0..3 {
            assert!(!memo.valid(&print(b"PEM"), b"forged", || {
                bad.set(bad.get() + 1);
                false
            }));
        }
        assert_eq!(bad.get(), 3, "a failed check is made again every time");
        assert_eq!(memo.len(), 1);
    }

    #[test]
    fn another_key_or_tok_is_checked_afresh() {
        let memo = TokMemo::new(8);
        assert!(memo.valid(&print(b"PEM-A"), b"tok", || true));
        // The same tok under a new key (the minion's key was replaced): checked again.
        assert!(!memo.valid(&print(b"PEM-B"), b"tok", || false));
        assert!(!memo.valid(&print(b"PEM-A"), b"tok2", || false));
    }

    #[test]
    fn it_is_bounded() {
        let memo = TokMemo::new(4);
        for i in 0..10 {
            assert!(memo.valid(&print(b"PEM"), format!("tok{i}").as_bytes(), || true));
            assert!(memo.len() <= 4);
        }
        assert!(!memo.is_empty());
        assert_eq!(memo.capacity(), 4);
    }
}
