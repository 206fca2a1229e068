//! Pseudo-random bytes for tests that write data compression must not shrink (RocksDB
//! compresses its blocks): xorshift64, deterministic from its state.

/// `len` bytes from the xorshift64 state `x`, which moves on (a caller may draw again).
pub(crate) fn noise(x: &mut u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            *x as u8
        })
        .collect()
}
