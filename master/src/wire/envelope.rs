//! The request envelope (spec `minion-protocol.md` §4) and the checks every request
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

use rmpv::Value;

use super::crypto::{Crypticle, EncAlgo, PublicKey, SigAlgo, PICKLE};
use super::payload::{self, bin, encode, get, get_text, take};

/// The lowest envelope version served.
pub const MIN_VERSION: i64 = 3;

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

/// A decoded envelope.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub enc: Enc,
    pub load: Value,
    /// The envelope's `id` (AES requests), unvalidated.
    pub id: String,
    pub enc_algo: EncAlgo,
    pub sig_algo: SigAlgo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enc {
    Clear,
    Aes,
}

/// Decodes a request body into its envelope; the body must be at most `max` bytes.
pub fn decode(body: &[u8], max: usize) -> Result<Envelope, EnvelopeError> {
    if body.len() > max {
        return Err(EnvelopeError::TooLarge { len: body.len(), max });
    }
    let mut env = match payload::decode(body) {
        Ok(v @ Value::Map(_)) => v,
        Ok(_) => return Err(EnvelopeError::NotAMap),
        Err(e) => return Err(EnvelopeError::Undecodable(e.to_string())),
    };
    let (Some(enc), Some(_)) = (get_text(&env, "enc"), get(&env, "load")) else {
        return Err(EnvelopeError::Incomplete);
    };
    let version = get(&env, "version").and_then(Value::as_i64).unwrap_or(0);
    if version < MIN_VERSION {
        return Err(EnvelopeError::OldVersion(version));
    }
    let enc = match enc {
        "clear" => Enc::Clear,
        "aes" => Enc::Aes,
        other => return Err(EnvelopeError::UnknownEnc(other.escape_debug().to_string())),
    };
    let id = get_text(&env, "id").unwrap_or("").to_string();
    let enc_algo = EncAlgo::parse(get_text(&env, "enc_algo").unwrap_or("OAEP-SHA1")).unwrap_or(EncAlgo::OaepSha1);
    let sig_algo = SigAlgo::parse(get_text(&env, "sig_algo").unwrap_or("PKCS1v15-SHA1")).unwrap_or(SigAlgo::Pkcs1v15Sha1);
    // Moved out, not copied: an AES load is the whole ciphertext.
    let load = take(&mut env, "load").unwrap_or(Value::Nil);
    Ok(Envelope { enc, load, id, enc_algo, sig_algo })
}

/// An AES request, decrypted and checked up to (not including) its `tok`.
#[derive(Debug, Clone)]
pub struct Opened {
    pub cmd: String,
    pub nonce: String,
    pub tok: Value,
    /// The inner load without `nonce` and `tok`.
    pub inner: Value,
}

/// Decrypts an AES load with the minion's session key and checks its shape: the
/// `pickle::` prefix, a map, a well-formed nonce, the inner id equal to `id`, a `tok`.
pub fn open_aes(load: &Value, id: &str, session: &Crypticle) -> Result<Opened, EnvelopeError> {
    let ct = payload::bytes(load).ok_or(EnvelopeError::LoadNotBytes)?;
    let plain = session.decrypt(ct).map_err(|_| EnvelopeError::DoesNotDecrypt)?;
    let msg = plain.strip_prefix(PICKLE).ok_or(EnvelopeError::NoPickle)?;
    let mut inner = match payload::decode(msg) {
        Ok(v @ Value::Map(_)) => v,
        _ => return Err(EnvelopeError::InnerNotAMap),
    };
    let cmd = get_text(&inner, "cmd").unwrap_or("").to_string();
    let nonce = take(&mut inner, "nonce").and_then(|n| payload::text(&n).map(String::from)).unwrap_or_default();
    if !well_formed_nonce(&nonce) {
        return Err(EnvelopeError::BadNonce);
    }
    if get_text(&inner, "id") != Some(id) {
        return Err(EnvelopeError::IdMismatch);
    }
    let tok = take(&mut inner, "tok").ok_or(EnvelopeError::NoTok)?;
    Ok(Opened { cmd, nonce, tok, inner })
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
pub fn check_ttl(inner: &Value, now_s: i64, ttl: u64) -> Result<(), EnvelopeError> {
    if ttl == 0 {
        return Ok(());
    }
    let ts = get(inner, "ts").and_then(Value::as_i64).unwrap_or(0);
    let age = now_s.saturating_sub(ts);
    if age > ttl as i64 {
        return Err(EnvelopeError::Stale { ts, age, ttl });
    }
    Ok(())
}

/// The reply to an AES request: `pickle::` + nonce + msgpack, sealed with the session key.
pub fn seal_reply(session: &Crypticle, nonce: &str, value: &Value) -> Result<Vec<u8>, super::crypto::CryptoError> {
    let body = encode(value);
    let mut plain = Vec::with_capacity(PICKLE.len() + nonce.len() + body.len());
    plain.extend_from_slice(PICKLE);
    plain.extend_from_slice(nonce.as_bytes());
    plain.extend_from_slice(&body);
    Ok(encode(&bin(session.encrypt(&plain)?)))
}

/// The `"bad load"` reply.
pub fn bad_load() -> Vec<u8> {
    encode(&Value::from("bad load"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::payload::map;

    fn body(v: Value) -> Vec<u8> {
        encode(&v)
    }

    #[test]
    fn envelope_checks() {
        let ok = body(map([("enc", Value::from("clear")), ("load", map([("cmd", Value::from("ping"))])), ("version", Value::from(3))]));
        assert_eq!(decode(&ok, 1 << 20).unwrap().enc, Enc::Clear);
        assert!(matches!(decode(&ok, 4), Err(EnvelopeError::TooLarge { max: 4, .. })));
        let old = body(map([("enc", Value::from("clear")), ("load", map([])), ("version", Value::from(2))]));
        assert_eq!(decode(&old, 1 << 20).unwrap_err(), EnvelopeError::OldVersion(2));
        let unversioned = body(map([("enc", Value::from("clear")), ("load", map([]))]));
        assert!(decode(&unversioned, 1 << 20).is_err());
        let odd = body(map([("enc", Value::from("rot13")), ("load", map([])), ("version", Value::from(3))]));
        assert_eq!(decode(&odd, 1 << 20).unwrap_err(), EnvelopeError::UnknownEnc("rot13".into()));
        assert_eq!(decode(&body(Value::from(1)), 1 << 20).unwrap_err(), EnvelopeError::NotAMap);
        assert!(decode(b"\xc1", 1 << 20).is_err());
    }

    #[test]
    fn aes_load_checks_in_order() {
        let k = Crypticle::generate();
        let seal = |inner: Value| {
            let mut p = PICKLE.to_vec();
            p.extend_from_slice(&encode(&inner));
            bin(k.encrypt(&p).unwrap())
        };
        let nonce = "0123456789abcdef0123456789abcdef";
        let good = seal(map([("cmd", Value::from("_return")), ("id", Value::from("m1")), ("nonce", Value::from(nonce)), ("tok", bin(b"t".to_vec()))]));
        let o = open_aes(&good, "m1", &k).unwrap();
        assert_eq!((o.cmd.as_str(), o.nonce.as_str()), ("_return", nonce));
        assert!(get(&o.inner, "nonce").is_none() && get(&o.inner, "tok").is_none(), "nonce and tok are taken out");
        assert_eq!(open_aes(&good, "m2", &k).unwrap_err(), EnvelopeError::IdMismatch);
        assert_eq!(open_aes(&good, "m1", &Crypticle::generate()).unwrap_err(), EnvelopeError::DoesNotDecrypt);
        let short_nonce = seal(map([("cmd", Value::from("x")), ("id", Value::from("m1")), ("nonce", Value::from("abc")), ("tok", bin(b"t".to_vec()))]));
        assert_eq!(open_aes(&short_nonce, "m1", &k).unwrap_err(), EnvelopeError::BadNonce);
        let no_tok = seal(map([("cmd", Value::from("x")), ("id", Value::from("m1")), ("nonce", Value::from(nonce))]));
        assert_eq!(open_aes(&no_tok, "m1", &k).unwrap_err(), EnvelopeError::NoTok);
        let raw = bin(k.encrypt(b"no prefix").unwrap());
        assert_eq!(open_aes(&raw, "m1", &k).unwrap_err(), EnvelopeError::NoPickle);
        assert_eq!(open_aes(&Value::from(3), "m1", &k).unwrap_err(), EnvelopeError::LoadNotBytes);
    }

    #[test]
    fn ttl_and_reply() {
        let inner = map([("ts", Value::from(1000))]);
        assert!(check_ttl(&inner, 1010, 0).is_ok(), "0 is off");
        assert!(check_ttl(&inner, 1010, 60).is_ok());
        assert_eq!(check_ttl(&inner, 1100, 60).unwrap_err(), EnvelopeError::Stale { ts: 1000, age: 100, ttl: 60 });
        let k = Crypticle::generate();
        let r = seal_reply(&k, "0123456789abcdef0123456789abcdef", &Value::from(true)).unwrap();
        let ct = payload::decode(&r).unwrap();
        let plain = k.decrypt(payload::bytes(&ct).unwrap()).unwrap();
        assert!(plain.starts_with(b"pickle::0123456789abcdef0123456789abcdef"));
        assert_eq!(payload::decode(&plain[8 + 32..]).unwrap(), Value::from(true));
    }
}
