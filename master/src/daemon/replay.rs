//! Replayed requests: the nonces of requests that changed something.
//!
//! A minion resends a request unchanged (same nonce) when the reply is late, and anyone
//! who captured a request can send it again. Both get an answer, but only the first
//! one's records and events take effect: a request whose `(id, nonce)` is remembered
//! here is handled read-only. Only side-effecting requests (records or events) are
//! remembered, for `window` (Salt's `request_server_ttl` when set, so that every request
//! young enough to be accepted is covered), at most `capacity` of them (oldest forgotten
//! first).
//!
//! Memory: a remembered request is the first 16 bytes of SHA-256 over its id and nonce
//! (length-prefixed, so no two pairs share an input), not the strings: a master taking
//! a return from every minion of a large fleet keeps `capacity` of them at about 64
//! bytes each (the map slot and the queue slot), 4 MiB at the default capacity, however
//! long the ids and nonces a minion sends. A collision of two live entries would need
//! 2^64 of them.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// What stands for one `(id, nonce)`.
type Key = u128;

fn key(id: &str, nonce: &str) -> Key {
    let mut h = Sha256::new();
    h.update((id.len() as u64).to_be_bytes());
    h.update(id.as_bytes());
    h.update(nonce.as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&d[..16]);
    u128::from_be_bytes(first)
}

pub struct Nonces {
    seen: HashMap<Key, Instant>,
    order: VecDeque<(Instant, Key)>,
    window: Duration,
    capacity: usize,
}

impl Nonces {
    pub fn new(window: Duration, capacity: usize) -> Self {
        Nonces { seen: HashMap::new(), order: VecDeque::new(), window, capacity: capacity.max(1) }
    }

    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            if now.duration_since(*at) < self.window && self.order.len() <= self.capacity {
                break;
            }
            if let Some((at, k)) = self.order.pop_front() {
                // Only forget the entry this queue slot stands for (not a later re-insert).
                if self.seen.get(&k) == Some(&at) {
                    self.seen.remove(&k);
                }
            }
        }
    }

    /// Whether `(id, nonce)` already changed something within the window.
    pub fn seen(&mut self, id: &str, nonce: &str) -> bool {
        self.expire(Instant::now());
        self.seen.contains_key(&key(id, nonce))
    }

    /// Remembers a request whose effects were committed.
    pub fn remember(&mut self, id: &str, nonce: &str) {
        let now = Instant::now();
        let k = key(id, nonce);
        self.seen.insert(k, now);
        self.order.push_back((now, k));
        self.expire(now);
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_within_window_and_capacity() {
        let mut n = Nonces::new(Duration::from_secs(60), 3);
        assert!(!n.seen("m1", "a"));
        n.remember("m1", "a");
        assert!(n.seen("m1", "a"));
        assert!(!n.seen("m2", "a"), "nonces are per minion");
        for x in ["b", "c", "d"] {
            n.remember("m1", x);
        }
        assert_eq!(n.len(), 3);
        assert!(!n.seen("m1", "a"), "the oldest is forgotten past capacity");
        assert!(n.seen("m1", "d"));
        let mut short = Nonces::new(Duration::from_millis(1), 10);
        short.remember("m1", "a");
        std::thread::sleep(Duration::from_millis(5));
        assert!(!short.seen("m1", "a"), "forgotten after the window");
        assert!(short.is_empty());
    }

    #[test]
    fn ids_and_nonces_do_not_run_into_each_other() {
        let mut n = Nonces::new(Duration::from_secs(60), 10);
        n.remember("m1", "2abc");
        assert!(!n.seen("m12", "abc"), "the id's length is part of the key");
        assert!(n.seen("m1", "2abc"));
    }
}
