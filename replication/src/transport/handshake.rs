//! The connection handshake: who is on the other end, and the keys of this connection.
//!
//! The side that connects (the initiator, `I`) and the side that accepts (the responder,
//! `R`) exchange fixed-size messages; nothing on the wire declares a length before the
//! handshake completes, so an unauthenticated peer can make a master hold at most the
//! 44 bytes of a hello:
//!
//! ```text
//! I -> R  hello_I = "HLP2" | u64 BE id_I | [32] random nonce_I              (44 bytes)
//! R -> I  hello_R = "HLP2" | u64 BE id_R | [32] random nonce_R | [32] proof_R (76 bytes)
//! I -> R  [32] proof_I                                                        (32 bytes)
//! ```
//!
//! Both sides then derive 128 bytes with HKDF-SHA256: input key material the cluster key
//! ([`ClusterKey`], from `cluster_secret`), salt `nonce_I | nonce_R`, info
//! `"halite-peer-v2" | hello_I | hello_R` (the transcript: both ids and both nonces).
//! The output is cut into `key_I→R | key_R→I | proof_I | proof_R`. A proof is a value
//! only a holder of the cluster key can compute for this transcript; each side compares
//! the other's in constant time and closes the connection on a mismatch (the initiator
//! sends its proof before checking the responder's, so with mismatched secrets both ends
//! refuse and log it). The initiator
//! also refuses a responder whose id is not the member it meant to reach.
//!
//! Fresh nonces on both sides make every connection's keys new: bytes captured from one
//! connection neither complete a handshake nor open on another connection.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use hkdf::Hkdf;
use sha2::Sha256;

use super::frame::{Opener, Sealer};
use super::refusal::Refused;
use super::ClusterKey;

const MAGIC: &[u8; 4] = b"HLP2";
const INFO: &[u8] = b"halite-peer-v2";
/// Length of a hello: magic, id, nonce.
pub const HELLO_LEN: usize = 4 + 8 + 32;
/// Length of a proof.
pub const PROOF_LEN: usize = 32;

/// The four values HKDF derives for one connection.
struct Derived {
    i_to_r: [u8; 32],
    r_to_i: [u8; 32],
    proof_i: [u8; 32],
    proof_r: [u8; 32],
}

fn hello(id: u64) -> Result<[u8; HELLO_LEN], Refused> {
    let mut h = [0u8; HELLO_LEN];
    h[..4].copy_from_slice(MAGIC);
    h[4..12].copy_from_slice(&id.to_be_bytes());
    openssl::rand::rand_bytes(&mut h[12..]).map_err(|e| Refused::new("rng", e))?;
    Ok(h)
}

/// The id a hello names, if it is a hello.
fn hello_id(h: &[u8; HELLO_LEN]) -> Result<u64, Refused> {
    if &h[..4] != MAGIC {
        return Err(Refused::new("bad_hello", "not a peer hello (wrong magic)"));
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&h[4..12]);
    Ok(u64::from_be_bytes(id))
}

fn derive(key: &ClusterKey, hello_i: &[u8; HELLO_LEN], hello_r: &[u8; HELLO_LEN]) -> Derived {
    let mut salt = [0u8; 64];
    salt[..32].copy_from_slice(&hello_i[12..]);
    salt[32..].copy_from_slice(&hello_r[12..]);
    let mut info = Vec::with_capacity(INFO.len() + 2 * HELLO_LEN);
    info.extend_from_slice(INFO);
    info.extend_from_slice(hello_i);
    info.extend_from_slice(hello_r);
    let mut okm = [0u8; 128];
    // 128 bytes is far below HKDF-SHA256's 8160-byte limit: expand cannot fail.
    let _ = Hkdf::<Sha256>::new(Some(&salt), key.bytes()).expand(&info, &mut okm);
    let part = |i: usize| {
        let mut p = [0u8; 32];
        p.copy_from_slice(&okm[i * 32..(i + 1) * 32]);
        p
    };
    Derived { i_to_r: part(0), r_to_i: part(1), proof_i: part(2), proof_r: part(3) }
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && openssl::memcmp::eq(a, b)
}

/// Fills `buf` from `stream`, giving up at `deadline` (however slowly the bytes come).
pub fn read_exact_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), Refused> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Refused::new("handshake_timeout", "the handshake did not complete in time"));
        }
        stream.set_read_timeout(Some(left)).map_err(|e| Refused::new("io", e))?;
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Err(Refused::closed()),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(Refused::new("handshake_timeout", "the handshake did not complete in time"))
            }
            Err(e) => return Err(Refused::new("io", e)),
        }
    }
    Ok(())
}

fn write(stream: &mut TcpStream, bytes: &[u8]) -> Result<(), Refused> {
    stream.write_all(bytes).map_err(|e| Refused::new("io", e))
}

/// The connecting side: proves itself as `me` to the member `expect` and returns the
/// sealer of this connection's frames.
pub fn initiate(stream: &mut TcpStream, key: &ClusterKey, me: u64, expect: u64, deadline: Instant) -> Result<Sealer, Refused> {
    let hello_i = hello(me)?;
    write(stream, &hello_i)?;
    let mut hello_r = [0u8; HELLO_LEN];
    read_exact_by(stream, &mut hello_r, deadline)?;
    let id_r = hello_id(&hello_r)?;
    if id_r != expect {
        return Err(Refused::new("wrong_peer", format!("expected member {expect}, the peer says it is {id_r}")));
    }
    let mut proof_r = [0u8; PROOF_LEN];
    read_exact_by(stream, &mut proof_r, deadline)?;
    let d = derive(key, &hello_i, &hello_r);
    // Sent before checking the peer's proof, so that with mismatched secrets both ends
    // see (and log) the failure; a proof is worthless outside its own transcript.
    write(stream, &d.proof_i)?;
    if !same(&proof_r, &d.proof_r) {
        return Err(Refused::new("bad_proof", format!("member {id_r} does not authenticate: its handshake proof is not derived from our cluster_secret")));
    }
    Ok(Sealer::new(d.i_to_r, 0))
}

/// The accepting side: learns and checks who connected; returns the peer's member id
/// (every frame of this connection must claim it) and the opener of its frames.
pub fn respond(stream: &mut TcpStream, key: &ClusterKey, me: u64, deadline: Instant) -> Result<(u64, Opener), Refused> {
    let mut hello_i = [0u8; HELLO_LEN];
    read_exact_by(stream, &mut hello_i, deadline)?;
    let id_i = hello_id(&hello_i)?;
    let hello_r = hello(me)?;
    let d = derive(key, &hello_i, &hello_r);
    let mut reply = [0u8; HELLO_LEN + PROOF_LEN];
    reply[..HELLO_LEN].copy_from_slice(&hello_r);
    reply[HELLO_LEN..].copy_from_slice(&d.proof_r);
    write(stream, &reply)?;
    let mut proof_i = [0u8; PROOF_LEN];
    read_exact_by(stream, &mut proof_i, deadline)?;
    if !same(&proof_i, &d.proof_i) {
        return Err(Refused::new("bad_proof", format!("the peer claiming member {id_i} does not authenticate: its handshake proof is not derived from our cluster_secret")));
    }
    // The responder never sends frames today; its key (r_to_i) is derived for a reply
    // direction, should one be added.
    let _ = d.r_to_i;
    Ok((id_i, Opener::new(d.i_to_r, 0)))
}
