//! Replayed requests: the nonces of requests that changed something.
//!
//! A minion resends a request unchanged (same nonce) when the reply is late, and anyone
//! who captured a request can send it again. Both get an answer, but only the first
//! one's records and events take effect: a request whose `(id, nonce)` is remembered
//! here is handled read-only. A request is remembered when it is **claimed**, before its
//! records are committed ([`Nonces::claim`], through `req::Claim::Nonce`), so that of two
//! copies in flight at once (a resend while the master is slow to commit, or a captured
//! request sent on other connections) only the first is applied; a claim whose request
//! was not committed is forgotten again ([`Nonces::forget`]).
//!
//! Only side-effecting requests (records or events) are remembered, for `window`
//! (Salt's `request_server_ttl` when set, so that every request young enough to be
//! accepted is covered), unless more than `keep` newer ones came in meanwhile (so memory
//! is bounded however fast requests come). The nonces are this member's own: a copy sent
//! to another member of a cluster is applied there too (docs/operations.md).
//!
//! Memory: a remembered request is its [`ReplayKey`] (`view::replay_key`: the first 16
//! bytes of SHA-256 over its id and nonce, length-prefixed, made once by the request
//! handler), not the strings, however long the ids and nonces a minion sends. They are kept in two **generations**, two hash sets:
//! new ones go into the current one; when it has been current for `window`, or holds
//! `keep` digests, it becomes the previous one and the previous one is emptied (its
//! table kept) to become current. A lookup checks both. So a request is remembered for
//! at least `window` unless `keep` newer ones came in meanwhile, and at most `2 × keep`
//! are remembered (about 2.3 MiB a generation at the default 65,536: a table of 131,072
//! 16-byte slots). A collision of two live digests would need about 2^64 of them.
//! Nothing is ever removed one by one: a map plus a queue of what to forget, in order,
//! holds 7.8 MiB at the same bound, as the forgotten slots of a hash table under
//! constant insert-and-remove fill it until it doubles.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::view::replay_key::ReplayKey;

pub struct Nonces {
    /// Remembered since `since`.
    current: HashSet<ReplayKey>,
    /// Remembered in the generation before.
    previous: HashSet<ReplayKey>,
    since: Instant,
    window: Duration,
    keep: usize,
}

impl Nonces {
    /// A guard that remembers each request for at least `window`, unless `keep` newer
    /// ones came in meanwhile (see the module docs).
    pub fn new(window: Duration, keep: usize) -> Self {
        Nonces { current: HashSet::new(), previous: HashSet::new(), since: Instant::now(), window, keep: keep.max(1) }
    }

    /// Starts a new generation: the current one becomes the previous one, the previous
    /// one is forgotten (its table is reused for the new current one).
    fn rotate(&mut self, now: Instant) {
        std::mem::swap(&mut self.current, &mut self.previous);
        self.current.clear();
        self.since = now;
    }

    /// Rotates once the current generation has been current for `window` (twice, so
    /// both are forgotten, after two windows without a request).
    fn age(&mut self, now: Instant) {
        let held = now.saturating_duration_since(self.since);
        if held >= self.window {
            self.rotate(now);
            if held >= self.window.saturating_mul(2) {
                self.previous.clear();
            }
        }
    }

    /// Whether the request `key` stands for already changed something within the window.
    pub fn seen(&mut self, key: &ReplayKey) -> bool {
        self.seen_at(key, Instant::now())
    }

    fn seen_at(&mut self, key: &ReplayKey, now: Instant) -> bool {
        self.age(now);
        self.current.contains(key) || self.previous.contains(key)
    }

    /// Remembers the request `key` stands for before its records are committed, unless
    /// it is remembered already (applied, or claimed by a copy still in flight): so of
    /// copies handled at once only the one that claims first is applied. False if it
    /// was remembered.
    pub fn claim(&mut self, key: &ReplayKey) -> bool {
        let now = Instant::now();
        if self.seen_at(key, now) {
            return false;
        }
        self.remember_at(*key, now);
        true
    }

    /// Forgets a claim whose request was not committed, so that a resend of it can be
    /// applied: the only removal one at a time, on a failed commit.
    pub fn forget(&mut self, key: &ReplayKey) {
        self.current.remove(key);
        self.previous.remove(key);
    }

    fn remember_at(&mut self, key: ReplayKey, now: Instant) {
        self.age(now);
        if self.current.len() >= self.keep {
            self.rotate(now);
        }
        self.current.insert(key);
    }

    /// Requests remembered (a request remembered in both generations counts twice).
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(id: &str, nonce: &str) -> ReplayKey {
        ReplayKey::of(id, nonce)
    }

    #[test]
    fn remembers_the_newest_keep_and_at_most_twice_that() {
        let mut n = Nonces::new(Duration::from_secs(60), 3);
        assert!(!n.seen(&k("m1", "a")));
        assert!(n.claim(&k("m1", "a")));
        assert!(n.seen(&k("m1", "a")));
        assert!(!n.seen(&k("m2", "a")), "nonces are per minion");
        for x in ["b", "c", "d", "e", "f"] {
            assert!(n.claim(&k("m1", x)));
        }
        // Generations {a b c} then {d e f}: the newest three and the three before.
        assert_eq!(n.len(), 6);
        assert!(["a", "b", "c", "d", "e", "f"].iter().all(|x| n.seen(&k("m1", x))));
        assert!(n.claim(&k("m1", "g")));
        assert!(!n.seen(&k("m1", "a")) && !n.seen(&k("m1", "c")), "the oldest generation is forgotten as a whole");
        assert!(["d", "e", "f", "g"].iter().all(|x| n.seen(&k("m1", x))), "the newest `keep` are always remembered");
        for i in 0..1000 {
            assert!(n.claim(&k("m9", &i.to_string())));
            assert!(n.len() <= 6);
            assert!((i.max(2) - 2..=i).all(|j| n.seen(&k("m9", &j.to_string()))));
        }
    }

    #[test]
    fn forgets_after_the_window() {
        let mut n = Nonces::new(Duration::from_secs(60), 10);
        let (t0, s) = (n.since, Duration::from_secs(1));
        n.remember_at(k("m1", "a"), t0 + 10 * s);
        assert!(n.seen_at(&k("m1", "a"), t0 + 59 * s));
        assert!(n.seen_at(&k("m1", "a"), t0 + 61 * s), "a window old: in the previous generation");
        n.remember_at(k("m1", "b"), t0 + 62 * s);
        assert!(n.seen_at(&k("m1", "a"), t0 + 119 * s), "remembered for at least a window");
        assert!(!n.seen_at(&k("m1", "a"), t0 + 122 * s), "two generations old: forgotten");
        assert!(n.seen_at(&k("m1", "b"), t0 + 122 * s));
        assert!(!n.seen_at(&k("m1", "b"), t0 + 300 * s), "two windows without a request: both forgotten");
        assert!(n.is_empty());
    }

    #[test]
    fn a_claim_is_granted_once_and_a_failed_one_can_be_made_again() {
        let mut n = Nonces::new(Duration::from_secs(60), 10);
        assert!(n.claim(&k("m1", "a")), "the first copy claims it");
        assert!(!n.claim(&k("m1", "a")), "a copy in flight, or applied: refused");
        assert!(n.seen(&k("m1", "a")), "the handler sees it as replayed");
        n.forget(&k("m1", "a"));
        assert!(!n.seen(&k("m1", "a")) && n.claim(&k("m1", "a")), "not committed: a resend may be applied");
        // Forgotten from the previous generation too.
        for x in 0..10 {
            assert!(n.claim(&k("m2", &x.to_string())));
        }
        assert!(n.seen(&k("m1", "a")));
        n.forget(&k("m1", "a"));
        assert!(!n.seen(&k("m1", "a")));
    }

    #[test]
    fn ids_and_nonces_do_not_run_into_each_other() {
        let mut n = Nonces::new(Duration::from_secs(60), 10);
        assert!(n.claim(&k("m1", "2abc")));
        assert!(!n.seen(&k("m12", "abc")), "the id's length is part of the key");
        assert!(n.seen(&k("m1", "2abc")));
    }

    #[test]
    fn a_busy_guard_keeps_its_tables() {
        // 16-byte slots (no 16-byte alignment: two words).
        assert_eq!(std::mem::size_of::<ReplayKey>(), 16);
        let mut n = Nonces::new(Duration::from_secs(60), 1000);
        for i in 0..2000 {
            assert!(n.claim(&k("m", &i.to_string())));
        }
        let sizes = (n.current.capacity(), n.previous.capacity());
        for i in 2000..20_000 {
            assert!(n.claim(&k("m", &i.to_string())));
        }
        assert_eq!((n.current.capacity(), n.previous.capacity()), sizes, "the tables were reused, never grown");
        assert!(n.seen(&k("m", "19999")) && n.seen(&k("m", "19000")) && !n.seen(&k("m", "17999")));
    }
}
