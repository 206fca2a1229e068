//! What stands for one request when replays are looked for: [`ReplayKey`], 16 bytes of
//! SHA-256 over the minion's id and the request's nonce.
//!
//! Made once by the request handler (`req`), which asks the [`super::View`] whether the
//! request was seen and hands the same key to the daemon to remember once its effects
//! are committed (`daemon::replay::Nonces` keeps them): the id and nonce strings are not
//! copied into the effect, nor hashed twice.

use sha2::{Digest, Sha256};

/// One `(id, nonce)`: the first 16 bytes of SHA-256 over the id's length, the id and
/// the nonce (length-prefixed, so no two pairs share an input), as two words (aligned
/// to 8: a map slot with it is 16 bytes; a `u128` would be aligned to 16). A collision
/// of two live keys would need about 2^64 of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplayKey([u64; 2]);

impl ReplayKey {
    pub fn of(id: &str, nonce: &str) -> Self {
        let mut h = Sha256::new();
        h.update((id.len() as u64).to_be_bytes());
        h.update(id.as_bytes());
        h.update(nonce.as_bytes());
        let d = h.finalize();
        let word = |i: usize| u64::from_be_bytes(d[i..i + 8].try_into().unwrap_or([0; 8]));
        ReplayKey([word(0), word(8)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_and_the_nonce_are_kept_apart() {
        assert_eq!(ReplayKey::of("m1", "n"), ReplayKey::of("m1", "n"));
        assert_ne!(ReplayKey::of("m1", "n"), ReplayKey::of("m1", "m"));
        // The same bytes split differently between id and nonce.
        assert_ne!(ReplayKey::of("m1", "n"), ReplayKey::of("m", "1n"));
    }
}
