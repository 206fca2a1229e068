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
//! (length-prefixed, so no two pairs share an input), not the strings, and the
//! millisecond it was remembered at (counted from the guard's start, 8 bytes, not a
//! 16-byte `Instant`): a map slot and a queue slot of 24 bytes each, however long the
//! ids and nonces a minion sends. The queue is reserved at `capacity` + 1 slots (1.5 MiB
//! at the default, its pages touched as it fills) so it never doubles; under constant
//! insert-and-forget the map's table settles at twice the slots that `capacity` needs
//! (262,144 for 65,536: 6.3 MiB). So 7.8 MiB at the default bound (12.3 MiB measured
//! with 16-byte keys aligned to 16 and `Instant`s, docs/benchmarks.md "Memory soak"). A
//! collision of two live entries would need 2^64 of them.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// What stands for one `(id, nonce)`: 16 bytes of a digest, as two words (aligned to 8,
/// so a map slot with its time is 24 bytes; a `u128` is aligned to 16 and pads it to 32).
type Key = [u64; 2];

fn key(id: &str, nonce: &str) -> Key {
    let mut h = Sha256::new();
    h.update((id.len() as u64).to_be_bytes());
    h.update(id.as_bytes());
    h.update(nonce.as_bytes());
    let d = h.finalize();
    let word = |i: usize| u64::from_be_bytes(d[i..i + 8].try_into().unwrap_or([0; 8]));
    [word(0), word(8)]
}

/// Milliseconds since the guard started.
type Millis = u64;

pub struct Nonces {
    seen: HashMap<Key, Millis>,
    order: VecDeque<(Millis, Key)>,
    start: Instant,
    window: Duration,
    capacity: usize,
}

impl Nonces {
    pub fn new(window: Duration, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        // The queue holds at most `capacity` + 1 entries (one past, until `expire`); reserved
        // so, it is never copied into a buffer twice its size.
        Nonces { seen: HashMap::new(), order: VecDeque::with_capacity(capacity + 1), start: Instant::now(), window, capacity }
    }

    fn now(&self) -> Millis {
        self.start.elapsed().as_millis() as Millis
    }

    fn expire(&mut self, now: Millis) {
        let window = self.window.as_millis() as Millis;
        while let Some((at, _)) = self.order.front() {
            if now.saturating_sub(*at) < window && self.order.len() <= self.capacity {
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
        self.expire(self.now());
        self.seen.contains_key(&key(id, nonce))
    }

    /// Remembers a request whose effects were committed.
    pub fn remember(&mut self, id: &str, nonce: &str) {
        let now = self.now();
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

    #[test]
    fn a_full_guard_keeps_its_reserved_size() {
        // 24-byte slots in the queue and the map (not 32: no 16-byte alignment, no Instant).
        assert_eq!(std::mem::size_of::<(Millis, Key)>(), 24);
        assert_eq!(std::mem::size_of::<(Key, Millis)>(), 24);
        let mut n = Nonces::new(Duration::from_secs(60), 1000);
        let reserved = n.order.capacity();
        assert!(reserved > 1000);
        for i in 0..5000 {
            n.remember("m", &i.to_string());
        }
        assert_eq!(n.len(), 1000);
        assert_eq!(n.order.capacity(), reserved, "the queue was never copied into a larger buffer");
        assert!(n.seen("m", "4999") && !n.seen("m", "3999"));
    }
}
