//! Sealed frames of an authenticated connection, numbered per direction.
//!
//! ```text
//! u32 BE  length of the rest (counter + ciphertext + tag), 8 + 17 + 16 ..= MAX_FRAME
//! u64 BE  counter: 0 for the connection's first frame, then +1 per frame
//! [n]     AES-256-GCM ciphertext of:  u8 kind | u64 BE sender id | u64 BE recipient id | body
//! [16]    GCM tag; nonce = u32 BE direction (0: initiator to responder) | u64 BE counter,
//!         additional data = the ASCII "halite-peer-v3"
//! ```
//!
//! The key is the connection's key for this direction (`handshake.rs`), so a nonce is
//! never used twice under one key, and the receiver opens only the counter it expects
//! next: a frame replayed, dropped or reordered on the connection is refused (and the
//! connection closed) before decryption.

use openssl::symm::{decrypt_aead, Cipher, Crypter, Mode};

use super::refusal::Refused;
use super::MAX_FRAME;

const AAD: &[u8] = b"halite-peer-v3";
/// Counter + kind + ids + tag: the smallest frame body.
pub const MIN_BODY: usize = 8 + 17 + 16;

pub const KIND_RAFT: u8 = 1;
pub const KIND_CONTROL: u8 = 2;
/// An empty frame a writer sends when idle, so the reader's idle timeout only closes
/// connections whose writer is gone.
pub const KIND_KEEPALIVE: u8 = 3;
/// A part of a snapshot transfer (`snapshot_transfer.rs`), on a connection of its own.
pub const KIND_SNAPSHOT: u8 = 4;

fn nonce(dir: u32, counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(&dir.to_be_bytes());
    n[4..].copy_from_slice(&counter.to_be_bytes());
    n
}

/// Why a frame was not sealed.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("a peer message of {len} bytes exceeds the {max}-byte frame limit")]
    TooLarge { len: usize, max: usize },
    #[error("frame counter exhausted; reconnect")]
    CounterExhausted,
    #[error("sealing a frame: {0}")]
    Cipher(String),
}

/// Seals the frames one side sends.
pub struct Sealer {
    key: [u8; 32],
    dir: u32,
    next: u64,
}

impl Sealer {
    pub fn new(key: [u8; 32], dir: u32) -> Self {
        Sealer { key, dir, next: 0 }
    }

    /// One frame (length prefix included) carrying `body` of `kind` from `from` to `to`.
    pub fn seal(&mut self, kind: u8, from: u64, to: u64, body: &[u8]) -> Result<Vec<u8>, SealError> {
        self.seal_parts(kind, from, to, &[body])
    }

    /// [`Sealer::seal`] of a body given in pieces (their concatenation), encrypted
    /// straight into the frame: a snapshot chunk is never copied to be sealed.
    pub fn seal_parts(&mut self, kind: u8, from: u64, to: u64, parts: &[&[u8]]) -> Result<Vec<u8>, SealError> {
        let body_len: usize = parts.iter().map(|p| p.len()).sum();
        let len = 8 + 17 + body_len + 16;
        if len > MAX_FRAME {
            return Err(SealError::TooLarge { len, max: MAX_FRAME });
        }
        if self.next == u64::MAX {
            return Err(SealError::CounterExhausted);
        }
        let counter = self.next;
        let mut head = [0u8; 17];
        head[0] = kind;
        head[1..9].copy_from_slice(&from.to_be_bytes());
        head[9..17].copy_from_slice(&to.to_be_bytes());
        // Length prefix, counter, ciphertext, tag; the ciphertext is written in place
        // (openssl may write one block past a piece's end: the next piece or the tag's
        // room takes it, and is written after).
        let mut frame = vec![0u8; 4 + len];
        frame[..4].copy_from_slice(&(len as u32).to_be_bytes());
        frame[4..12].copy_from_slice(&counter.to_be_bytes());
        let cipher = Cipher::aes_256_gcm();
        let mut c = Crypter::new(cipher, Mode::Encrypt, &self.key, Some(&nonce(self.dir, counter))).map_err(|e| SealError::Cipher(e.to_string()))?;
        c.aad_update(AAD).map_err(|e| SealError::Cipher(e.to_string()))?;
        let mut at = 12;
        for piece in std::iter::once(&head[..]).chain(parts.iter().copied()) {
            if piece.is_empty() {
                continue;
            }
            let room = (piece.len() + cipher.block_size()).min(frame.len() - at);
            at += c.update(piece, &mut frame[at..at + room]).map_err(|e| SealError::Cipher(e.to_string()))?;
        }
        at += c.finalize(&mut frame[at..]).map_err(|e| SealError::Cipher(e.to_string()))?;
        if at != 4 + len - 16 {
            return Err(SealError::Cipher(format!("wrote {} bytes of ciphertext, expected {}", at - 12, 17 + body_len)));
        }
        c.get_tag(&mut frame[at..]).map_err(|e| SealError::Cipher(e.to_string()))?;
        self.next += 1;
        Ok(frame)
    }
}

/// What one opened frame says.
pub struct Opened {
    pub kind: u8,
    pub from: u64,
    pub to: u64,
    /// The whole plaintext: kind and ids, then the body ([`Opened::body`]), kept as
    /// decrypted so that a large body is not copied again.
    plain: Vec<u8>,
}

impl Opened {
    /// The frame's body.
    pub fn body(&self) -> &[u8] {
        &self.plain[17..]
    }

    /// The frame's body, owned.
    pub fn into_body(mut self) -> Vec<u8> {
        self.plain.drain(..17);
        self.plain
    }
}

/// Opens the frames one side receives, in order.
pub struct Opener {
    key: [u8; 32],
    dir: u32,
    next: u64,
}

impl Opener {
    pub fn new(key: [u8; 32], dir: u32) -> Self {
        Opener { key, dir, next: 0 }
    }

    /// Opens a frame body (without its length prefix); only the next counter opens.
    pub fn open(&mut self, body: &[u8]) -> Result<Opened, Refused> {
        if body.len() < MIN_BODY {
            return Err(Refused::new("bad_frame", "frame too short"));
        }
        let (counter, rest) = body.split_at(8);
        let mut c = [0u8; 8];
        c.copy_from_slice(counter);
        let counter = u64::from_be_bytes(c);
        if counter != self.next {
            return Err(Refused::new("replayed", format!("frame counter {counter}, expected {} (a replayed or reordered frame)", self.next)));
        }
        let (ct, tag) = rest.split_at(rest.len() - 16);
        let plain = decrypt_aead(Cipher::aes_256_gcm(), &self.key, Some(&nonce(self.dir, counter)), AAD, ct, tag)
            .map_err(|_| Refused::new("bad_tag", "frame does not authenticate under this connection's key"))?;
        self.next += 1;
        if plain.len() < 17 {
            return Err(Refused::new("bad_frame", "frame too short"));
        }
        let id = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&plain[r]);
            u64::from_be_bytes(b)
        };
        let (kind, from, to) = (plain[0], id(1..9), id(9..17));
        Ok(Opened { kind, from, to, plain })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_open_once_in_order_under_their_own_key() {
        let mut s = Sealer::new([7; 32], 0);
        let f0 = s.seal(KIND_CONTROL, 1, 2, b"zero").unwrap();
        let f1 = s.seal(KIND_CONTROL, 1, 2, b"one").unwrap();
        // Out of order: refused before decrypting.
        assert_eq!(Opener::new([7; 32], 0).open(&f1[4..]).err().map(|r| r.reason), Some("replayed"));
        let mut o = Opener::new([7; 32], 0);
        let got = o.open(&f0[4..]).unwrap();
        assert_eq!((got.kind, got.from, got.to, got.body()), (KIND_CONTROL, 1, 2, &b"zero"[..]));
        assert_eq!(o.open(&f0[4..]).err().map(|r| r.reason), Some("replayed"), "the same frame again");
        assert_eq!(o.open(&f1[4..]).unwrap().body(), b"one");
        // A body sealed in pieces opens as their concatenation.
        let f2 = s.seal_parts(KIND_SNAPSHOT, 1, 2, &[b"", b"a", b"", b"bc", &[7u8; 100]]).unwrap();
        let mut joined = b"abc".to_vec();
        joined.extend_from_slice(&[7u8; 100]);
        assert_eq!(o.open(&f2[4..]).unwrap().into_body(), joined);
        // Another key, another direction, a flipped bit: the tag fails.
        assert_eq!(Opener::new([8; 32], 0).open(&f0[4..]).err().map(|r| r.reason), Some("bad_tag"));
        assert_eq!(Opener::new([7; 32], 1).open(&f0[4..]).err().map(|r| r.reason), Some("bad_tag"));
        let mut flipped = f0.clone();
        let at = flipped.len() - 20;
        flipped[at] ^= 1;
        assert_eq!(Opener::new([7; 32], 0).open(&flipped[4..]).err().map(|r| r.reason), Some("bad_tag"));
        assert_eq!(Opener::new([7; 32], 0).open(&[0u8; 10]).err().map(|r| r.reason), Some("bad_frame"));
    }
}
