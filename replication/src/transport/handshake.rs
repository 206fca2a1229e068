//! The connection handshake: who is on the other end, and the keys of this connection.
//!
//! The side that connects (the initiator, `I`) and the side that accepts (the responder,
//! `R`) exchange fixed-size messages; nothing on the wire declares a length before the
//! handshake completes, so an unauthenticated peer can make a master hold at most the
//! 76 bytes of a hello:
//!
//! ```text
//! I -> R  hello_I = "HLP3" | u64 BE id_I | [32] random nonce_I | [32] member key pub_I   (76 bytes)
//! R -> I  hello_R = "HLP3" | u64 BE id_R | [32] random nonce_R | [32] pub_R
//!         | [32] proof_R | [64] sig_R                                                     (172 bytes)
//! I -> R  [32] proof_I | [64] sig_I                                                       (96 bytes)
//! ```
//!
//! Both sides then derive 128 bytes with HKDF-SHA256: input key material the cluster key
//! ([`ClusterKey`], from `cluster_secret`), salt `nonce_I | nonce_R`, info
//! `"halite-peer-v3" | hello_I | hello_R` (the transcript: both ids, both nonces and both
//! member keys). The output is cut into `key_I→R | key_R→I | proof_I | proof_R`. A proof
//! is a value only a holder of the cluster key can compute for this transcript; each side
//! compares the other's in constant time.
//!
//! A signature proves the member: `sig_R` is the Ed25519 signature by `R`'s member key
//! (`identity.rs`) of `"halite-peer-v3 responder" | hello_I | hello_R`, `sig_I` that by
//! `I`'s of `"halite-peer-v3 initiator" | hello_I | hello_R` (the role words keep one side's
//! signature from serving as the other's). Each side checks, in this order, and closes
//! the connection on the first failure: the peer's proof (`bad_proof`), its signature
//! under the key its hello carries (`bad_signature`), and that the key is the one its
//! claimed id is bound to in the applied key book, or may be bound to it
//! ([`PeerKeys::admit`](super::identity::PeerKeys::admit), `peer_key_mismatch`); the
//! responder learns whether the peer is admitted as a member or for the join path only. The initiator sends its proof and signature before checking the
//! responder's, so with mismatched secrets both ends refuse and log it. The initiator also
//! refuses a responder whose id is not the member it meant to reach (`wrong_peer`).
//!
//! Fresh nonces on both sides make every connection's keys new: bytes captured from one
//! connection neither complete a handshake nor open on another connection, and a
//! signature is worthless outside its own transcript.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use hkdf::Hkdf;
use sha2::Sha256;

use super::frame::{Opener, Sealer};
use super::identity::{self, Admission, PUBLIC_LEN, SIG_LEN};
use super::refusal::Refused;
use super::{ClusterKey, Credentials};

const MAGIC: &[u8; 4] = b"HLP3";
/// What a hello starts with (for the fuzz harness).
#[cfg(test)]
pub const HELLO_MAGIC: &[u8; 4] = MAGIC;
const INFO: &[u8] = b"halite-peer-v3";
const SIGN_R: &[u8] = b"halite-peer-v3 responder";
const SIGN_I: &[u8] = b"halite-peer-v3 initiator";
/// Length of a hello: magic, id, nonce, member public key.
pub const HELLO_LEN: usize = 4 + 8 + 32 + PUBLIC_LEN;
/// Length of a proof.
pub const PROOF_LEN: usize = 32;
/// What follows a hello from the responder, and all the initiator sends after its hello:
/// a proof and a signature.
pub const PROVE_LEN: usize = PROOF_LEN + SIG_LEN;

/// The four values HKDF derives for one connection.
struct Derived {
    i_to_r: [u8; 32],
    r_to_i: [u8; 32],
    proof_i: [u8; 32],
    proof_r: [u8; 32],
}

fn hello(id: u64, creds: &Credentials) -> Result<[u8; HELLO_LEN], Refused> {
    let mut h = [0u8; HELLO_LEN];
    h[..4].copy_from_slice(MAGIC);
    h[4..12].copy_from_slice(&id.to_be_bytes());
    openssl::rand::rand_bytes(&mut h[12..44]).map_err(|e| Refused::new("rng", e))?;
    h[44..].copy_from_slice(&creds.member.public());
    Ok(h)
}

/// The member public key a hello carries.
fn hello_key(h: &[u8; HELLO_LEN]) -> [u8; PUBLIC_LEN] {
    let mut k = [0u8; PUBLIC_LEN];
    k.copy_from_slice(&h[44..]);
    k
}

/// What a side signs: its role word and the transcript.
fn signed(role: &[u8], hello_i: &[u8; HELLO_LEN], hello_r: &[u8; HELLO_LEN]) -> Vec<u8> {
    [role, &hello_i[..], &hello_r[..]].concat()
}

/// Proof and signature of one side.
fn prove(proof: &[u8; 32], sig: &[u8; SIG_LEN]) -> [u8; PROVE_LEN] {
    let mut p = [0u8; PROVE_LEN];
    p[..PROOF_LEN].copy_from_slice(proof);
    p[PROOF_LEN..].copy_from_slice(sig);
    p
}

/// Checks the other side's proof and signature, then its key against the id it claims.
fn check(creds: &Credentials, id: u64, who: &str, got: &[u8; PROVE_LEN], want_proof: &[u8; 32], role: &[u8], (hello_i, hello_r): (&[u8; HELLO_LEN], &[u8; HELLO_LEN])) -> Result<Admission, Refused> {
    if !same(&got[..PROOF_LEN], want_proof) {
        return Err(Refused::new("bad_proof", format!("{who} does not authenticate: its handshake proof is not derived from our cluster_secret")));
    }
    let mut sig = [0u8; SIG_LEN];
    sig.copy_from_slice(&got[PROOF_LEN..]);
    let key = hello_key(if role == SIGN_I { hello_i } else { hello_r });
    if !identity::verify(&key, &signed(role, hello_i, hello_r), &sig) {
        return Err(Refused::new("bad_signature", format!("{who} does not sign the handshake with the member key it presents")));
    }
    creds.peers.admit(id, &key)
}

/// The id a hello names, if it is a hello.
fn hello_id(h: &[u8; HELLO_LEN]) -> Result<u64, Refused> {
    if &h[..4] != MAGIC {
        // `HLP` and another digit: a member of a release with another peer protocol.
        if h[..3] == MAGIC[..3] && h[3].is_ascii_digit() {
            return Err(Refused::new(
                "peer_version",
                format!("a member speaking peer protocol {} (this member speaks {}): members of a cluster must run releases that share a peer protocol (docs/operations.md, \"Upgrading a cluster\")", h[3] as char, MAGIC[3] as char),
            ));
        }
        return Err(Refused::new("bad_hello", "not a peer hello (wrong magic)"));
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&h[4..12]);
    Ok(u64::from_be_bytes(id))
}

fn derive(key: &ClusterKey, hello_i: &[u8; HELLO_LEN], hello_r: &[u8; HELLO_LEN]) -> Derived {
    let mut salt = [0u8; 64];
    salt[..32].copy_from_slice(&hello_i[12..44]);
    salt[32..].copy_from_slice(&hello_r[12..44]);
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
pub fn initiate(stream: &mut TcpStream, creds: &Credentials, me: u64, expect: u64, deadline: Instant) -> Result<Sealer, Refused> {
    let hello_i = hello(me, creds)?;
    write(stream, &hello_i)?;
    let mut hello_r = [0u8; HELLO_LEN];
    read_exact_by(stream, &mut hello_r, deadline)?;
    let id_r = hello_id(&hello_r)?;
    if id_r != expect {
        return Err(Refused::new("wrong_peer", format!("expected member {expect}, the peer says it is {id_r}")));
    }
    let mut got = [0u8; PROVE_LEN];
    read_exact_by(stream, &mut got, deadline)?;
    let d = derive(&creds.secret, &hello_i, &hello_r);
    // Sent before checking the peer's proof, so that with mismatched secrets both ends
    // see (and log) the failure; a proof or signature is worthless outside its own
    // transcript.
    let sig = creds.member.sign(&signed(SIGN_I, &hello_i, &hello_r))?;
    write(stream, &prove(&d.proof_i, &sig))?;
    // A responder that is no member (a joiner we answer) is admitted for the join path;
    // what this side sends it is the caller's choice.
    check(creds, id_r, &format!("member {id_r}"), &got, &d.proof_r, SIGN_R, (&hello_i, &hello_r))?;
    Ok(Sealer::new(d.i_to_r, 0))
}

/// Who connected, as the responder's handshake found.
pub struct Peer {
    /// Its member id (every frame of this connection must claim it).
    pub id: u64,
    /// The member key it proved.
    pub key: [u8; PUBLIC_LEN],
    /// What it may do.
    pub admission: Admission,
}

/// The accepting side: learns and checks who connected; returns the peer and the
/// opener of its frames.
pub fn respond(stream: &mut TcpStream, creds: &Credentials, me: u64, deadline: Instant) -> Result<(Peer, Opener), Refused> {
    let mut hello_i = [0u8; HELLO_LEN];
    read_exact_by(stream, &mut hello_i, deadline)?;
    let id_i = hello_id(&hello_i)?;
    let hello_r = hello(me, creds)?;
    let d = derive(&creds.secret, &hello_i, &hello_r);
    let sig = creds.member.sign(&signed(SIGN_R, &hello_i, &hello_r))?;
    let mut reply = [0u8; HELLO_LEN + PROVE_LEN];
    reply[..HELLO_LEN].copy_from_slice(&hello_r);
    reply[HELLO_LEN..].copy_from_slice(&prove(&d.proof_r, &sig));
    write(stream, &reply)?;
    let mut got = [0u8; PROVE_LEN];
    read_exact_by(stream, &mut got, deadline)?;
    let admission = check(creds, id_i, &format!("the peer claiming member {id_i}"), &got, &d.proof_i, SIGN_I, (&hello_i, &hello_r))?;
    // The responder never sends frames today; its key (r_to_i) is derived for a reply
    // direction, should one be added.
    let _ = d.r_to_i;
    Ok((Peer { id: id_i, key: hello_key(&hello_i), admission }, Opener::new(d.i_to_r, 0)))
}
