//! The request envelope (Salt's `salt/channel/server.py`) and the checks every request
//! passes before a command sees it.
//!
//! ```text
//! {"enc": "clear" | "aes", "load": ..., "version": >= 3, "id": ..., "enc_algo", "sig_algo"}
//! ```
//!
//! A clear load is a map (`_auth`, `ping`). An AES load is a Crypticle ciphertext under
//! the minion's session key whose plaintext is `pickle::` + a msgpack map holding `cmd`,
//! `id` (equal to the envelope's), a 32-hex-digit `nonce` and `tok` (the minion's X9.31
//! signature of `"salt"`, which proves the sender holds the accepted key). The reply to
//! an AES request is `pickle::` + nonce + msgpack, encrypted with the same session key.
//!
//! Every failure here is answered with `"bad load"` (which makes a stock minion sign in
//! again); the functions return an [`EnvelopeError`] naming the check that failed, for
//! the log.

use rmpv::{Value, ValueRef};

use super::crypto::{Crypticle, EncAlgo, PublicKey, SigAlgo, PICKLE};
use super::payload::{self, encode, ref_bytes, ref_text};
use super::scan::{self, MapScan, ENTRY_DEPTH};

/// The most values an AES request's load may hold to be decoded ([`Opened::inner_value`]:
/// every command but `_return`, which is stored as it came): a decoded value takes about
/// 40 bytes however small it is on the wire, so a load of 64 MiB of nils would be 2.7 GB
/// as a tree; 1,048,576 values is at most about 40 MB (a mine or an event's data is
/// seldom a thousandth of it).
pub const MAX_VALUES: usize = 1 << 20;

/// The lowest envelope version served.
pub const MIN_VERSION: i64 = 3;

/// The largest clear load decoded, in bytes: clear requests are `_auth` (an id, a public
/// key, a token, a nonce: about 1.5 KiB with a 4096-bit key) and `ping`. A clear load is
/// the only part of a request decoded into a tree before anyone is known, and a tree
/// takes about 40 bytes a value however small the value is on the wire (a nil is one
/// byte), so without this bound a 60 MB `ping` of nils held 4.2 GB while it was
/// answered (docs/benchmarks.md "Hostile-input bounds").
pub const CLEAR_LOAD_MAX: usize = 64 * 1024;

/// Why a request was refused before any command saw it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("request of {len} bytes exceeds the {max}-byte limit")]
    TooLarge { len: usize, max: usize },
    #[error("{0}")]
    Undecodable(String),
    #[error("the envelope is not a map")]
    NotAMap,
    #[error("the envelope lacks enc or load")]
    Incomplete,
    #[error("protocol version {0} is below the minimum {MIN_VERSION}")]
    OldVersion(i64),
    #[error("unknown enc {0:?}")]
    UnknownEnc(String),
    #[error("the load holds more than {max} values")]
    TooManyValues { max: usize },
    #[error("a clear load of {len} bytes exceeds the {max}-byte limit")]
    ClearTooLarge { len: usize, max: usize },
    #[error("the load is not a byte string")]
    LoadNotBytes,
    #[error("the load does not decrypt with the session key")]
    DoesNotDecrypt,
    #[error("no pickle:: prefix")]
    NoPickle,
    #[error("the decrypted load is not a map")]
    InnerNotAMap,
    #[error("missing or malformed nonce")]
    BadNonce,
    #[error("inner id differs from the envelope id")]
    IdMismatch,
    #[error("no tok")]
    NoTok,
    #[error("stale request: ts {ts} is {age}s old (request_server_ttl {ttl})")]
    Stale { ts: i64, age: i64, ttl: u64 },
}

/// A decoded envelope, borrowing from the request body: an AES request's ciphertext is
/// not copied out of it, and no field but a clear load is decoded into a tree of its own
/// (a `_return` decoded the envelope into an `rmpv::Value` before: eleven allocations and
/// a copy of the ciphertext, a request; `cargo bench -p halite-benches --bench request`).
#[derive(Debug, Clone)]
pub struct Envelope<'a> {
    pub enc: Enc,
    /// A clear request's load (a map: `_auth`, `ping`); `Nil` for an AES request.
    pub load: Value,
    /// An AES request's load, as the body holds it: the ciphertext (`None` if the load
    /// is not a byte string); `None` for a clear request.
    pub ciphertext: Option<&'a [u8]>,
    /// The envelope's `id` (AES requests), unvalidated.
    pub id: &'a str,
    pub enc_algo: EncAlgo,
    pub sig_algo: SigAlgo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enc {
    Clear,
    Aes,
}

/// Decodes a request body into its envelope; the body must be at most `max` bytes.
///
/// The map is read in place ([`MapScan`]): the six fields' values are read where they
/// lie, every other entry is stepped over, and nothing is allocated for an AES request.
/// What it accepts is what decoding the whole body would (the scan is held to rmpv's
/// reading, `scan.rs`); a body it refuses is decoded the old way only to say why.
pub fn decode(body: &[u8], max: usize) -> Result<Envelope<'_>, EnvelopeError> {
    if body.len() > max {
        return Err(EnvelopeError::TooLarge { len: body.len(), max });
    }
    match Fields::scan(body) {
        Some(f) => f.envelope(body),
        None => Err(why_undecodable(body)),
    }
}

/// The envelope's fields, each the value of the first entry with its name (as
/// `payload::get` reads a decoded map), borrowing from the body.
#[derive(Default)]
struct Fields<'a> {
    enc: Option<ValueRef<'a>>,
    load: Option<ValueRef<'a>>,
    version: Option<ValueRef<'a>>,
    id: Option<ValueRef<'a>>,
    enc_algo: Option<ValueRef<'a>>,
    sig_algo: Option<ValueRef<'a>>,
    /// The length of a `load` that is an array or a map over [`CLEAR_LOAD_MAX`] bytes:
    /// such a load is not read (`load` is then `Nil`), and refused if the request is clear.
    oversized_load: Option<usize>,
}

impl<'a> Fields<'a> {
    /// The envelope these fields make, or the first check it fails (however the fields
    /// were found: the tests find them in a decoded tree too).
    fn envelope(self, body: &'a [u8]) -> Result<Envelope<'a>, EnvelopeError> {
        fn text<'a>(body: &'a [u8], v: &Option<ValueRef<'a>>) -> Option<&'a str> {
            v.as_ref().and_then(|v| ref_text(body, v))
        }
        let (Some(enc), Some(load)) = (text(body, &self.enc), self.load) else {
            return Err(EnvelopeError::Incomplete);
        };
        let version = match self.version {
            Some(ValueRef::Integer(n)) => n.as_i64().unwrap_or(0),
            _ => 0,
        };
        if version < MIN_VERSION {
            return Err(EnvelopeError::OldVersion(version));
        }
        let enc = match enc {
            "clear" => Enc::Clear,
            "aes" => Enc::Aes,
            other => return Err(EnvelopeError::UnknownEnc(other.escape_debug().to_string())),
        };
        let id = text(body, &self.id).unwrap_or("");
        let enc_algo = EncAlgo::parse(text(body, &self.enc_algo).unwrap_or("OAEP-SHA1")).unwrap_or(EncAlgo::OaepSha1);
        let sig_algo = SigAlgo::parse(text(body, &self.sig_algo).unwrap_or("PKCS1v15-SHA1")).unwrap_or(SigAlgo::Pkcs1v15Sha1);
        if let (Enc::Clear, Some(len)) = (enc, self.oversized_load) {
            return Err(EnvelopeError::ClearTooLarge { len, max: CLEAR_LOAD_MAX });
        }
        let (load, ciphertext) = match enc {
            Enc::Clear => (load.to_owned(), None),
            Enc::Aes => (Value::Nil, ref_bytes(body, &load)),
        };
        Ok(Envelope { enc, load, ciphertext, id, enc_algo, sig_algo })
    }

    /// `None` unless the body is one well-formed map within the depth bound and nothing
    /// after it.
    fn scan(body: &'a [u8]) -> Option<Self> {
        let mut f = Fields::default();
        let mut scan = MapScan::new(body).ok()?;
        while let Some(entry) = scan.key() {
            let (k, _) = entry.ok()?;
            let name = ref_bytes(body, &k);
            if name == Some(b"load") && f.load.is_none() {
                // Bytes for an AES request, a map for a clear one: read only within the
                // bound (a tree of a map is built only for a clear load under it).
                let b = scan.value_bytes().ok()?;
                if scan::is_container(b) && b.len() > CLEAR_LOAD_MAX {
                    f.oversized_load = Some(b.len());
                    f.load = Some(ValueRef::Nil);
                } else {
                    f.load = Some(rmpv::decode::read_value_ref_with_max_depth(&mut &b[..], ENTRY_DEPTH as usize).ok()?);
                }
                continue;
            }
            let slot = match name {
                Some(b"enc") => &mut f.enc,
                Some(b"version") => &mut f.version,
                Some(b"id") => &mut f.id,
                Some(b"enc_algo") => &mut f.enc_algo,
                Some(b"sig_algo") => &mut f.sig_algo,
                _ => {
                    scan.skip_value().ok()?;
                    continue;
                }
            };
            if slot.is_some() {
                scan.skip_value().ok()?;
            } else {
                // Strings or numbers: a container there reads as nil, the same "not a
                // string, not a number" to every check after, without its tree.
                *slot = Some(scan.scalar().ok()?.unwrap_or(ValueRef::Nil));
            }
        }
        scan.finish().ok()?;
        Some(f)
    }
}

/// Why a body that [`Fields::scan`] refused is not an envelope: stepped over again, not
/// decoded (a tree of a hostile body would cost 40 bytes a byte of it).
fn why_undecodable(body: &[u8]) -> EnvelopeError {
    let mut rd = body;
    match scan::skip(&mut rd, payload::MAX_DEPTH as u16) {
        Err(_) => EnvelopeError::Undecodable(format!("malformed msgpack, or nested deeper than {} levels", payload::MAX_DEPTH)),
        Ok(()) if !rd.is_empty() => EnvelopeError::Undecodable(payload::PayloadError::Trailing.to_string()),
        Ok(()) if scan::map_header(body).is_some() => EnvelopeError::Undecodable("malformed map".into()),
        Ok(()) => EnvelopeError::NotAMap,
    }
}

/// An AES request, decrypted and checked up to (not including) its `tok`.
#[derive(Debug, Clone)]
pub struct Opened {
    pub cmd: String,
    pub nonce: String,
    pub tok: Value,
    /// `ts` (Salt's request time, seconds) when the load has an integer one.
    pub ts: Option<i64>,
    /// The inner load without `nonce` and `tok`, as msgpack: a new map header, then the
    /// minion's own bytes of every other entry, in its order. A `_return` stores these
    /// bytes as they are; other commands decode them ([`Opened::inner_value`]).
    pub inner: Vec<u8>,
}

impl Opened {
    /// [`Opened::inner`] decoded (it decodes: [`open_aes`] read every byte of it), unless
    /// it holds more than [`MAX_VALUES`] values.
    pub fn inner_value(&self) -> Result<Value, EnvelopeError> {
        if !scan::holds_at_most(&self.inner, payload::MAX_DEPTH as u16, MAX_VALUES) {
            return Err(EnvelopeError::TooManyValues { max: MAX_VALUES });
        }
        Ok(payload::decode(&self.inner).unwrap_or(Value::Map(Vec::new())))
    }
}

/// Decrypts an AES load with the minion's session key and checks its shape: the
/// `pickle::` prefix, a map, a well-formed nonce, the inner id equal to `id`, a `tok`.
///
/// The map is read in place, one entry at a time ([`MapScan`], within the same depth
/// bound as [`payload::decode`] of the whole), and never made into a tree: only `cmd`,
/// `id`, `nonce`, `tok` and `ts` are read, every other value is stepped over, and what
/// is stored is the minion's bytes without `nonce` and `tok`. As with a tree, the first
/// entry of a key is the one that counts (and the one left out).
pub fn open_aes(ciphertext: Option<&[u8]>, id: &str, session: &Crypticle) -> Result<Opened, EnvelopeError> {
    fn scalar<'a>(scan: &mut MapScan<'a>) -> Result<ValueRef<'a>, EnvelopeError> {
        scan.scalar().map(|v| v.unwrap_or(ValueRef::Nil)).map_err(|_| EnvelopeError::InnerNotAMap)
    }
    let ct = ciphertext.ok_or(EnvelopeError::LoadNotBytes)?;
    let plain = session.decrypt(ct).map_err(|_| EnvelopeError::DoesNotDecrypt)?;
    let msg = plain.strip_prefix(PICKLE).ok_or(EnvelopeError::NoPickle)?;
    let bad = |_| EnvelopeError::InnerNotAMap;
    let mut scan = MapScan::new(msg).map_err(bad)?;
    let (mut cmd, mut nonce, mut inner_id, mut tok, mut ts) = (None, None, None, None, None);
    // Where the entries left out (`nonce`, `tok`: each taken once, so at most two) lie,
    // in order, and how many entries.
    let mut gaps = [(0usize, 0usize); 2];
    let mut left_out = 0;
    let mut n = 0;
    while let Some(entry) = scan.key() {
        let (k, start) = entry.map_err(bad)?;
        n += 1;
        let mut leave_out = false;
        match ref_bytes(msg, &k) {
            // Each a string, bytes or a number: a container there reads as nil
            // (`MapScan::scalar`), wrong for every check after, and is not built.
            Some(b"cmd") if cmd.is_none() => cmd = Some(ref_text(msg, &scalar(&mut scan)?).unwrap_or("").to_string()),
            Some(b"nonce") if nonce.is_none() => {
                nonce = Some(ref_text(msg, &scalar(&mut scan)?).unwrap_or("").to_string());
                leave_out = true;
            }
            Some(b"id") if inner_id.is_none() => inner_id = Some(ref_text(msg, &scalar(&mut scan)?).map(|t| t == id)),
            Some(b"tok") if tok.is_none() => {
                tok = Some(scalar(&mut scan)?.to_owned());
                leave_out = true;
            }
            Some(b"ts") if ts.is_none() => ts = Some(if let ValueRef::Integer(i) = scalar(&mut scan)? { i.as_i64() } else { None }),
            // Anything else (the `return` above all) is only stepped over.
            _ => scan.skip_value().map_err(bad)?,
        }
        if leave_out {
            gaps[left_out] = (start, scan.offset());
            left_out += 1;
        }
    }
    scan.finish().map_err(bad)?;
    let header = scan.header;
    let nonce = nonce.unwrap_or_default();
    if !well_formed_nonce(&nonce) {
        return Err(EnvelopeError::BadNonce);
    }
    if inner_id.flatten() != Some(true) {
        return Err(EnvelopeError::IdMismatch);
    }
    let tok = tok.ok_or(EnvelopeError::NoTok)?;
    let mut inner = Vec::with_capacity(msg.len());
    // Fewer entries than the header read (a u32), so it fits; writing into a Vec cannot fail.
    let _ = rmp::encode::write_map_len(&mut inner, u32::try_from(n - left_out).unwrap_or(u32::MAX));
    let mut at = header;
    for &(start, end) in &gaps[..left_out] {
        inner.extend_from_slice(&msg[at..start]);
        at = end;
    }
    inner.extend_from_slice(&msg[at..]);
    Ok(Opened { cmd: cmd.unwrap_or_default(), nonce, tok, ts: ts.flatten(), inner })
}

/// A nonce as Salt makes them: 32 hex digits.
pub fn well_formed_nonce(nonce: &str) -> bool {
    nonce.len() == 32 && nonce.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `tok` is the X9.31 signature of `"salt"` by the minion's accepted key.
pub fn tok_valid(tok: &Value, minion_pub: &PublicKey) -> bool {
    payload::bytes(tok).and_then(|t| minion_pub.x931_recover(t)).as_deref() == Some(b"salt")
}

/// Salt's `request_server_ttl`: refuses a request whose `ts` is more than `ttl` seconds
/// before `now_s` (0 turns the check off).
pub fn check_ttl(ts: Option<i64>, now_s: i64, ttl: u64) -> Result<(), EnvelopeError> {
    if ttl == 0 {
        return Ok(());
    }
    let ts = ts.unwrap_or(0);
    let age = now_s.saturating_sub(ts);
    if age > ttl as i64 {
        return Err(EnvelopeError::Stale { ts, age, ttl });
    }
    Ok(())
}

/// The reply to an AES request: `pickle::` + nonce + msgpack, sealed with the session key.
///
/// Two allocations: the plaintext (the value written straight after the prefix and the
/// nonce), and the reply (a msgpack bin header, then the sealed bytes written in place).
/// The reply's capacity is its length, so the socket takes it as a frame without a
/// third (`bytes::Bytes::from` a full `Vec` keeps its storage as it is).
pub fn seal_reply(session: &Crypticle, nonce: &str, value: &Value) -> Result<Vec<u8>, super::crypto::CryptoError> {
    let mut plain = Vec::with_capacity(PICKLE.len() + nonce.len() + 16);
    plain.extend_from_slice(PICKLE);
    plain.extend_from_slice(nonce.as_bytes());
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut plain, value);
    let sealed = Crypticle::sealed_len(plain.len());
    let sealed_u32 = u32::try_from(sealed).map_err(|_| super::crypto::CryptoError::Invalid("reply too large".into()))?;
    let mut out = Vec::with_capacity(bin_header_len(sealed) + sealed);
    // A bin header for `sealed` bytes, as `encode(&bin(..))` writes it.
    let _ = rmp::encode::write_bin_len(&mut out, sealed_u32);
    session.encrypt_into(&plain, &mut out)?;
    Ok(out)
}

/// The length of msgpack's bin header for `len` bytes (bin 8, 16 or 32).
fn bin_header_len(len: usize) -> usize {
    match len {
        0..=0xff => 2,
        0x100..=0xffff => 3,
        _ => 5,
    }
}

/// The `"bad load"` reply.
pub fn bad_load() -> Vec<u8> {
    encode(&Value::from("bad load"))
}

#[cfg(test)]
#[path = "envelope_tests.rs"]
mod tests;
