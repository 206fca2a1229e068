//! Key prints: what a request needs to know about a minion's key, kept in memory.
//!
//! Every AES request (a return, a minion event, a pillar or file request) must find the
//! minion's key accepted and check its `tok` against that key. Reading the key from
//! RocksDB cost about 10 µs a request at 8,000 minions, 7 % of the master's CPU under a
//! `test.ping`: the keys' data blocks do not stay in the small shared block cache
//! (`options::BLOCK_CACHE_BYTES`), so each read was a read from the page cache, a checksum
//! and a decompression. A [`KeyPrint`] is the key's state and the SHA-256 of its PEM: 33
//! bytes, enough to say "accepted" and to find a remembered `tok` check
//! (`master/src/view/tok_memo.rs`). The PEM itself is read only when a check is not
//! remembered or a command needs the key (the pillar).
//!
//! **Freshness.** Prints are filled on read and set or dropped at apply:
//! - `apply_refs` sets the print of every key its write batch accepted and drops that
//!   of every other id it touched, *after* the write, and bumps an epoch under the same
//!   lock (so the first request of a minion just accepted, often a whole fleet's at
//!   once after a sign-in storm, reads nothing);
//! - a read takes the epoch *before* it reads RocksDB and stores what it read only if the
//!   epoch has not moved since (else what it read may be the value just replaced);
//! - replacing the whole state (a snapshot install) drops every print.
//!
//! So a print is never older than what a direct read made an instant before would have
//! returned: a request sees a key change as soon as the apply that made it has returned,
//! as it did when every request read RocksDB. Only keys found are remembered (an unknown
//! id, which anyone can send, never fills it).
//!
//! **Bounded**: at most [`KeyPrints::capacity`] prints (about 100 bytes each with the map's
//! overhead and the id); when full it is emptied and refills from the next reads.

use std::collections::HashMap;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::StoredKey;
use crate::keys::BankState;

/// Prints kept by default: eight times the minions one master is measured with (about
/// 6 MiB if ever full; 0.8 MiB at 8,000 minions).
pub const DEFAULT_CAPACITY: usize = 65_536;

/// A minion key's state and the SHA-256 of its PEM (as stored, byte for byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPrint {
    pub state: BankState,
    pub pem_sha256: [u8; 32],
}

impl KeyPrint {
    /// The print of a key in `state` whose stored PEM is `pem`.
    pub fn new(state: BankState, pem: &[u8]) -> KeyPrint {
        KeyPrint { state, pem_sha256: Sha256::digest(pem).into() }
    }

    /// The print of a stored key.
    pub fn of(key: &StoredKey) -> KeyPrint {
        KeyPrint::new(key.state, &key.pub_key)
    }
}

/// The bounded map of prints and its epoch (see the module docs).
#[derive(Debug)]
pub(super) struct KeyPrints {
    inner: Mutex<Inner>,
    capacity: usize,
}

#[derive(Debug, Default)]
struct Inner {
    /// Moves at every apply that changed a key and at every replacement of the state.
    epoch: u64,
    prints: HashMap<Box<str>, KeyPrint>,
}

impl KeyPrints {
    pub(super) fn new(capacity: usize) -> Self {
        KeyPrints { inner: Mutex::new(Inner::default()), capacity: capacity.max(1) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most prints kept.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Prints held now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().prints.len()
    }

    /// The print of `id` if remembered; else `Err(epoch)`, the epoch to pass to
    /// [`KeyPrints::fill`] after reading the state.
    pub(super) fn get(&self, id: &str) -> std::result::Result<KeyPrint, u64> {
        let inner = self.lock();
        inner.prints.get(id).copied().ok_or(inner.epoch)
    }

    /// Remembers `print` for `id`, read from the state after [`KeyPrints::get`] answered
    /// `Err(epoch)`: only if no key changed since.
    pub(super) fn fill(&self, id: &str, print: KeyPrint, epoch: u64) {
        let mut inner = self.lock();
        if inner.epoch != epoch {
            return;
        }
        if inner.prints.len() >= self.capacity {
            inner.prints = HashMap::new();
        }
        inner.prints.insert(id.into(), print);
    }

    /// Drops the prints of `ids`, whose keys an apply has just written.
    #[cfg(test)]
    pub(super) fn forget<'a>(&self, ids: impl IntoIterator<Item = &'a String>) {
        self.replace(ids.into_iter().map(|id| (id, None)));
    }

    /// Sets the prints of keys an apply has just written, after its write: `Some` is
    /// what a read would now give, `None` drops the print (read on next use). A
    /// read that raced the apply is then not remembered ([`KeyPrints::fill`]).
    pub(super) fn replace<'a>(&self, changes: impl IntoIterator<Item = (&'a String, Option<KeyPrint>)>) {
        let mut inner = self.lock();
        inner.epoch += 1;
        for (id, print) in changes {
            match print {
                Some(print) => {
                    if inner.prints.len() >= self.capacity {
                        inner.prints = HashMap::new();
                    }
                    inner.prints.insert(id.as_str().into(), print);
                }
                None => {
                    inner.prints.remove(id.as_str());
                }
            }
        }
    }

    /// Drops every print (the whole state was replaced).
    pub(super) fn forget_all(&self) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.prints = HashMap::new();
    }
}

#[cfg(test)]
impl super::StateMachine {
    /// Whether `id`'s print is in memory (a request would read nothing).
    pub(crate) fn key_print_remembered(&self, id: &str) -> bool {
        self.prints.get(id).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn print(b: u8) -> KeyPrint {
        KeyPrint { state: BankState::Accepted, pem_sha256: [b; 32] }
    }

    #[test]
    fn a_read_that_raced_a_change_is_not_remembered() {
        let p = KeyPrints::new(8);
        let epoch = p.get("m1").unwrap_err();
        // An apply changes m1's key between this read of the state and the fill.
        p.forget([&"m1".to_string()]);
        p.fill("m1", print(1), epoch);
        assert!(p.get("m1").is_err(), "what was read before the change is not kept");
        let epoch = p.get("m1").unwrap_err();
        p.fill("m1", print(2), epoch);
        assert_eq!(p.get("m1"), Ok(print(2)));
    }

    #[test]
    fn a_change_drops_only_its_ids_and_a_replacement_drops_all() {
        let p = KeyPrints::new(8);
        for (id, b) in [("a", 1), ("b", 2)] {
            let e = p.get(id).unwrap_err();
            p.fill(id, print(b), e);
        }
        p.forget([&"a".to_string()]);
        assert!(p.get("a").is_err());
        assert_eq!(p.get("b"), Ok(print(2)));
        p.forget_all();
        assert!(p.get("b").is_err());
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn it_is_bounded() {
        let p = KeyPrints::new(3);
        for i in 0..10 {
            let id = format!("m{i}");
            let e = p.get(&id).unwrap_err();
            p.fill(&id, print(i as u8), e);
            assert!(p.len() <= p.capacity());
        }
        assert_eq!(p.get("m9"), Ok(print(9)), "the newest print is kept");
    }
}
