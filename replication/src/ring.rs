//! The HashRing Salt 3008's cluster uses to name an owner for a key
//! (`salt/utils/hashring.py` in Salt 3008): XXH3-64 (seed 0) positions, 150 virtual nodes per member at the hash of
//! `"<member>#vnode<r>"`, a colliding token moved to the next free position, and the
//! owner of a key the member of the first token strictly after the key's hash (wrapping).
//!
//! Halite replicates the whole job cache to every member through the log, so nothing is
//! dropped by ownership; the ring built from the committed voters is what
//! `cluster.ring_info` reports (the reference's runner reports an empty ring, its ring
//! living in another process), and what ownership questions are answered with.

use std::collections::BTreeMap;

use xxhash_rust::xxh3::xxh3_64;

/// Virtual nodes per member.
pub const VNODES: usize = 150;

/// A consistent-hash ring over member names.
#[derive(Debug, Clone, Default)]
pub struct HashRing {
    tokens: BTreeMap<u64, String>,
    nodes: Vec<String>,
}

impl HashRing {
    /// A ring over `nodes` (order and duplicates do not matter).
    pub fn new<S: AsRef<str>>(nodes: &[S]) -> Self {
        let mut names: Vec<String> = nodes.iter().map(|n| n.as_ref().to_string()).collect();
        names.sort();
        names.dedup();
        let mut tokens = BTreeMap::new();
        for n in &names {
            for r in 0..VNODES {
                let mut t = xxh3_64(format!("{n}#vnode{r}").as_bytes());
                while tokens.contains_key(&t) {
                    t = t.wrapping_add(1);
                }
                tokens.insert(t, n.clone());
            }
        }
        HashRing { tokens, nodes: names }
    }

    /// The members, sorted.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Number of tokens (members × [`VNODES`]).
    pub fn token_count(&self) -> usize {
        self.tokens.len()
    }

    /// The member owning `key`: none for an empty ring, the only member for one.
    pub fn owner(&self, key: &str) -> Option<&str> {
        match self.nodes.len() {
            0 => None,
            1 => Some(&self.nodes[0]),
            _ => {
                let h = xxh3_64(key.as_bytes());
                let after = h.checked_add(1).and_then(|s| self.tokens.range(s..).next());
                after.or_else(|| self.tokens.iter().next()).map(|(_, n)| n.as_str())
            }
        }
    }

    /// Up to `count` distinct members clockwise from the owner of `key`.
    #[cfg(test)]
    pub(crate) fn replicas(&self, key: &str, count: usize) -> Vec<&str> {
        let want = count.min(self.nodes.len());
        if want == 0 {
            return Vec::new();
        }
        if self.nodes.len() == 1 {
            return vec![&self.nodes[0]];
        }
        let h = xxh3_64(key.as_bytes());
        let mut out: Vec<&str> = Vec::with_capacity(want);
        let after = h.checked_add(1).map(|s| self.tokens.range(s..)).into_iter().flatten();
        for (_, n) in after.chain(self.tokens.range(..=h)) {
            if !out.contains(&n.as_str()) {
                out.push(n);
                if out.len() == want {
                    break;
                }
            }
        }
        out
    }

    /// Whether `node` owns `key` (an empty ring: everyone does, i.e. broadcast).
    #[cfg(test)]
    pub(crate) fn owns(&self, key: &str, node: &str) -> bool {
        match self.owner(key) {
            None => true,
            Some(o) => o == node,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_basics() {
        let empty = HashRing::new::<&str>(&[]);
        assert_eq!(empty.owner("x"), None);
        assert!(empty.owns("x", "anyone"));
        let one = HashRing::new(&["10.0.0.1"]);
        assert_eq!(one.owner("x"), Some("10.0.0.1"));
        let ring = HashRing::new(&["10.0.0.3", "10.0.0.1", "10.0.0.2", "10.0.0.1"]);
        assert_eq!(ring.nodes(), ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
        assert_eq!(ring.token_count(), 3 * VNODES);
        // Deterministic, spread over all members, replicas distinct and owner first.
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for i in 0..3000 {
            let k = format!("2026112200000000{i:04}");
            let o = ring.owner(&k).unwrap();
            assert_eq!(HashRing::new(&["10.0.0.2", "10.0.0.3", "10.0.0.1"]).owner(&k), Some(o));
            *per.entry(o).or_default() += 1;
            let r = ring.replicas(&k, 5);
            assert_eq!(r.len(), 3);
            assert_eq!(r[0], o);
            assert!(ring.owns(&k, o));
        }
        assert_eq!(per.len(), 3);
        assert!(per.values().all(|n| *n > 600), "{per:?}");
        // The owner is the member of the first token strictly after the key's hash.
        let k = "some-jid";
        let h = xxh3_64(k.as_bytes());
        let expect = ring.tokens.range(h + 1..).next().or_else(|| ring.tokens.iter().next()).unwrap().1;
        assert_eq!(ring.owner(k), Some(expect.as_str()));
    }
}
