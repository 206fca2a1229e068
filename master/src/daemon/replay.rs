//! Replayed requests: the nonces of requests that changed something.
//!
//! A minion resends a request unchanged (same nonce) when the reply is late, and anyone
//! who captured a request can send it again. Both get an answer, but only the first
//! one's records and events take effect: a request whose `(id, nonce)` is remembered
//! here is handled read-only. Only side-effecting requests (records or events) are
//! remembered, for `window` (Salt's `request_server_ttl` when set, so that every request
//! young enough to be accepted is covered), at most `capacity` of them (oldest forgotten
//! first).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

pub struct Nonces {
    seen: HashMap<(String, String), Instant>,
    order: VecDeque<(Instant, String, String)>,
    window: Duration,
    capacity: usize,
}

impl Nonces {
    pub fn new(window: Duration, capacity: usize) -> Self {
        Nonces { seen: HashMap::new(), order: VecDeque::new(), window, capacity: capacity.max(1) }
    }

    fn expire(&mut self, now: Instant) {
        while let Some((at, _, _)) = self.order.front() {
            if now.duration_since(*at) < self.window && self.order.len() <= self.capacity {
                break;
            }
            if let Some((at, id, nonce)) = self.order.pop_front() {
                let key = (id, nonce);
                // Only forget the entry this queue slot stands for (not a later re-insert).
                if self.seen.get(&key) == Some(&at) {
                    self.seen.remove(&key);
                }
            }
        }
    }

    /// Whether `(id, nonce)` already changed something within the window.
    pub fn seen(&mut self, id: &str, nonce: &str) -> bool {
        self.expire(Instant::now());
        self.seen.contains_key(&(id.to_string(), nonce.to_string()))
    }

    /// Remembers a request whose effects were committed.
    pub fn remember(&mut self, id: &str, nonce: &str) {
        let now = Instant::now();
        self.seen.insert((id.to_string(), nonce.to_string()), now);
        self.order.push_back((now, id.to_string(), nonce.to_string()));
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
}
