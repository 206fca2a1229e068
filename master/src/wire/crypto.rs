//! Salt's cryptography (spec `minion-protocol.md` §3), all through OpenSSL (the system
//! libssl): RSA-OAEP, PKCS#1 v1.5 signatures, the raw ANSI X9.31 "private encrypt" of
//! `tok` and the auth `sig`, and the "Crypticle" (AES-192-CBC + HMAC-SHA256).
//!
//! Every private-key operation on the network path (OAEP decrypt of a minion's token,
//! signing replies) runs in OpenSSL, whose RSA implementation is blinded and constant
//! time; the pure-Rust `rsa` crate is not used because of its unpatched Marvin timing
//! advisory (RUSTSEC-2023-0071).

use base64::Engine as _;
use openssl::bn::BigNum;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private, Public};
use openssl::rsa::{Padding, Rsa};
use openssl::sign::{Signer, Verifier};
use openssl::symm::Cipher;

/// X9.31 padding mode of OpenSSL's low-level RSA calls (`RSA_X931_PADDING`).
const X931_PADDING: i32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("openssl: {0}")]
    Ssl(#[from] openssl::error::ErrorStack),
    #[error("{0}")]
    Invalid(String),
    #[error("message authentication failed")]
    Authentication,
}

pub type Result<T, E = CryptoError> = std::result::Result<T, E>;

/// RSA encryption algorithm a minion asks for (`enc_algo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncAlgo {
    OaepSha1,
    OaepSha224,
}

impl EncAlgo {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "OAEP-SHA1" => Some(EncAlgo::OaepSha1),
            "OAEP-SHA224" => Some(EncAlgo::OaepSha224),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            EncAlgo::OaepSha1 => "OAEP-SHA1",
            EncAlgo::OaepSha224 => "OAEP-SHA224",
        }
    }
    fn md(self) -> MessageDigest {
        match self {
            EncAlgo::OaepSha1 => MessageDigest::sha1(),
            EncAlgo::OaepSha224 => MessageDigest::sha224(),
        }
    }
}

/// Signature algorithm a minion asks for (`sig_algo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigAlgo {
    Pkcs1v15Sha1,
    Pkcs1v15Sha224,
}

impl SigAlgo {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "PKCS1v15-SHA1" => Some(SigAlgo::Pkcs1v15Sha1),
            "PKCS1v15-SHA224" => Some(SigAlgo::Pkcs1v15Sha224),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            SigAlgo::Pkcs1v15Sha1 => "PKCS1v15-SHA1",
            SigAlgo::Pkcs1v15Sha224 => "PKCS1v15-SHA224",
        }
    }
    fn md(self) -> MessageDigest {
        match self {
            SigAlgo::Pkcs1v15Sha1 => MessageDigest::sha1(),
            SigAlgo::Pkcs1v15Sha224 => MessageDigest::sha224(),
        }
    }
}

/// Salt's `clean_key`: strip, split into lines, join with `\n`.
pub fn clean_key(pem: &[u8]) -> Vec<u8> {
    let s = String::from_utf8_lossy(pem);
    s.trim().lines().map(str::trim_end).collect::<Vec<_>>().join("\n").into_bytes()
}

/// A master (or test minion) private key.
pub struct PrivateKey {
    pkey: PKey<Private>,
}

impl PrivateKey {
    pub fn generate(bits: u32) -> Result<Self> {
        Ok(PrivateKey { pkey: PKey::from_rsa(Rsa::generate(bits)?)? })
    }

    /// Reads a PEM private key (PKCS#1 or PKCS#8).
    pub fn from_pem(pem: &[u8]) -> Result<Self> {
        Ok(PrivateKey { pkey: PKey::private_key_from_pem(pem)? })
    }

    /// PKCS#1 PEM (`BEGIN RSA PRIVATE KEY`), as Salt writes `master.pem`.
    pub fn to_pem(&self) -> Result<Vec<u8>> {
        Ok(self.pkey.rsa()?.private_key_to_pem()?)
    }

    /// SubjectPublicKeyInfo PEM with a trailing newline, as Salt writes `master.pub`.
    pub fn public_pem(&self) -> Result<Vec<u8>> {
        Ok(self.pkey.public_key_to_pem()?)
    }

    pub fn public_key(&self) -> Result<PublicKey> {
        PublicKey::from_pem(&self.public_pem()?)
    }

    pub fn decrypt_oaep(&self, data: &[u8], algo: EncAlgo) -> Result<Vec<u8>> {
        let mut d = openssl::encrypt::Decrypter::new(&self.pkey)?;
        d.set_rsa_padding(Padding::PKCS1_OAEP)?;
        d.set_rsa_oaep_md(algo.md())?;
        d.set_rsa_mgf1_md(algo.md())?;
        let mut out = vec![0u8; d.decrypt_len(data)?];
        let n = d.decrypt(data, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// PKCS#1 v1.5 signature.
    pub fn sign(&self, data: &[u8], algo: SigAlgo) -> Result<Vec<u8>> {
        let mut s = Signer::new(algo.md(), &self.pkey)?;
        s.set_rsa_padding(Padding::PKCS1)?;
        Ok(s.sign_oneshot_to_vec(data)?)
    }

    /// ANSI X9.31 "private encrypt" of a short message (Salt's `tok` and auth `sig`).
    pub fn x931_sign(&self, msg: &[u8]) -> Result<Vec<u8>> {
        let rsa = self.pkey.rsa()?;
        let mut out = vec![0u8; rsa.size() as usize];
        let n = rsa.private_encrypt(msg, &mut out, Padding::from_raw(X931_PADDING))?;
        out.truncate(n);
        Ok(out)
    }
}

/// A public key (a minion's, or the master's for tests).
#[derive(Clone)]
pub struct PublicKey {
    pkey: PKey<Public>,
}

impl PublicKey {
    /// Reads SPKI (`BEGIN PUBLIC KEY`) or PKCS#1 (`BEGIN RSA PUBLIC KEY`) PEM.
    ///
    /// RSA keys are read by [`rsa_pem_components`] and built from their modulus and
    /// exponent: OpenSSL 3's generic decoder costs about as much as an RSA private-key
    /// operation (~0.4 ms here), and a key is parsed on every sign-in. Anything that
    /// parser does not take (another algorithm, odd encodings) goes to OpenSSL's.
    pub fn from_pem(pem: &[u8]) -> Result<Self> {
        if let Some((n, e)) = rsa_pem_components(pem) {
            let rsa = Rsa::from_public_components(BigNum::from_slice(&n)?, BigNum::from_slice(&e)?)?;
            return Ok(PublicKey { pkey: PKey::from_rsa(rsa)? });
        }
        let text = String::from_utf8_lossy(pem);
        if text.contains("BEGIN RSA PUBLIC KEY") {
            let rsa = Rsa::public_key_from_pem_pkcs1(pem)?;
            return Ok(PublicKey { pkey: PKey::from_rsa(rsa)? });
        }
        Ok(PublicKey { pkey: PKey::public_key_from_pem(pem)? })
    }

    pub fn encrypt_oaep(&self, data: &[u8], algo: EncAlgo) -> Result<Vec<u8>> {
        let mut e = openssl::encrypt::Encrypter::new(&self.pkey)?;
        e.set_rsa_padding(Padding::PKCS1_OAEP)?;
        e.set_rsa_oaep_md(algo.md())?;
        e.set_rsa_mgf1_md(algo.md())?;
        let mut out = vec![0u8; e.encrypt_len(data)?];
        let n = e.encrypt(data, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    pub fn verify(&self, data: &[u8], sig: &[u8], algo: SigAlgo) -> Result<bool> {
        let mut v = Verifier::new(algo.md(), &self.pkey)?;
        v.set_rsa_padding(Padding::PKCS1)?;
        Ok(v.verify_oneshot(sig, data)?)
    }

    /// Recovers the message of an X9.31 signature (None if it does not verify).
    pub fn x931_recover(&self, sig: &[u8]) -> Option<Vec<u8>> {
        let rsa = self.pkey.rsa().ok()?;
        if sig.len() > rsa.size() as usize {
            return None;
        }
        let mut out = vec![0u8; rsa.size() as usize];
        let n = rsa.public_decrypt(sig, &mut out, Padding::from_raw(X931_PADDING)).ok()?;
        out.truncate(n);
        Some(out)
    }
}

/// One DER element: `(tag, contents, rest)`. Definite lengths of at most 4 bytes only.
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, &b| acc << 8 | b as usize);
        rest = &rest[n..];
        len
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// `RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }` → (n, e),
/// big-endian magnitudes (a sign-padding zero byte is kept; BigNum ignores it).
fn rsa_public_key_der(input: &[u8]) -> Option<(&[u8], &[u8])> {
    const INTEGER: u8 = 0x02;
    let (0x30, seq, []) = der(input)? else { return None };
    let (INTEGER, n, rest) = der(seq)? else { return None };
    let (INTEGER, e, []) = der(rest)? else { return None };
    // Positive integers only.
    (!n.is_empty() && !e.is_empty() && n[0] & 0x80 == 0 && e[0] & 0x80 == 0).then_some((n, e))
}

/// The modulus and exponent (big-endian) of an RSA public key in PEM: SPKI
/// (`PUBLIC KEY` with algorithm rsaEncryption) or PKCS#1 (`RSA PUBLIC KEY`). `None` for
/// anything else, including trailing garbage.
pub fn rsa_pem_components(pem: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    const RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
    let text = std::str::from_utf8(pem).ok()?.trim();
    let (spki, body) = if let Some(b) = text.strip_prefix("-----BEGIN PUBLIC KEY-----") {
        (true, b.strip_suffix("-----END PUBLIC KEY-----")?)
    } else if let Some(b) = text.strip_prefix("-----BEGIN RSA PUBLIC KEY-----") {
        (false, b.strip_suffix("-----END RSA PUBLIC KEY-----")?)
    } else {
        return None;
    };
    let b64: String = body.split_ascii_whitespace().collect();
    if b64.len() > 16 * 1024 {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    let pkcs1 = if spki {
        let (0x30, seq, []) = der(&bytes)? else { return None };
        let (0x30, alg, rest) = der(seq)? else { return None };
        let (0x06, oid, params) = der(alg)? else { return None };
        if oid != RSA_ENCRYPTION || !(params.is_empty() || params == [0x05, 0x00]) {
            return None;
        }
        let (0x03, bits, []) = der(rest)? else { return None };
        let (0, key) = bits.split_first()? else { return None };
        key
    } else {
        &bytes[..]
    };
    let (n, e) = rsa_public_key_der(pkcs1)?;
    Some((n.to_vec(), e.to_vec()))
}

/// Salt's authenticated symmetric cipher: AES-192-CBC with a random IV, then
/// HMAC-SHA256 over IV ‖ ciphertext. The key string is base64 of 24 AES bytes followed
/// by 32 HMAC bytes.
#[derive(Clone)]
pub struct Crypticle {
    key_string: String,
    aes: [u8; 24],
    hmac: [u8; 32],
}

impl std::fmt::Debug for Crypticle {
    /// Never prints the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Crypticle(..)")
    }
}

/// The plaintext prefix of every Crypticle message.
pub const PICKLE: &[u8] = b"pickle::";

impl Crypticle {
    /// A fresh random key.
    pub fn generate() -> Self {
        let mut raw = [0u8; 56];
        openssl::rand::rand_bytes(&mut raw).expect("the system RNG failed");
        let key_string = base64::engine::general_purpose::STANDARD.encode(raw);
        Self::from_key_string(&key_string).expect("a generated key is valid")
    }

    pub fn from_key_string(s: &str) -> Result<Self> {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map_err(|e| CryptoError::Invalid(format!("AES key string is not base64: {e}")))?;
        if raw.len() != 56 {
            return Err(CryptoError::Invalid(format!("AES key string decodes to {} bytes, expected 56", raw.len())));
        }
        let mut aes = [0u8; 24];
        let mut hmac = [0u8; 32];
        aes.copy_from_slice(&raw[..24]);
        hmac.copy_from_slice(&raw[24..]);
        Ok(Crypticle { key_string: s.trim().to_string(), aes, hmac })
    }

    /// The base64 key string (what is RSA-encrypted to minions).
    pub fn key_string(&self) -> &str {
        &self.key_string
    }

    fn mac(&self, data: &[u8]) -> Result<Vec<u8>> {
        let key = PKey::hmac(&self.hmac)?;
        let mut s = Signer::new(MessageDigest::sha256(), &key)?;
        Ok(s.sign_oneshot_to_vec(data)?)
    }

    pub fn encrypt(&self, plaintext: &[u8]) -> Result<Vec<u8>> {
        let mut iv = [0u8; 16];
        openssl::rand::rand_bytes(&mut iv)?;
        let ct = openssl::symm::encrypt(Cipher::aes_192_cbc(), &self.aes, Some(&iv), plaintext)?;
        let mut out = Vec::with_capacity(16 + ct.len() + 32);
        out.extend_from_slice(&iv);
        out.extend_from_slice(&ct);
        let mac = self.mac(&out)?;
        out.extend_from_slice(&mac);
        Ok(out)
    }

    pub fn decrypt(&self, blob: &[u8]) -> Result<Vec<u8>> {
        if blob.len() < 16 + 16 + 32 || (blob.len() - 48) % 16 != 0 {
            return Err(CryptoError::Authentication);
        }
        let (body, mac) = blob.split_at(blob.len() - 32);
        let expect = self.mac(body)?;
        if !openssl::memcmp::eq(&expect, mac) {
            return Err(CryptoError::Authentication);
        }
        let (iv, ct) = body.split_at(16);
        openssl::symm::decrypt(Cipher::aes_192_cbc(), &self.aes, Some(iv), ct).map_err(|_| CryptoError::Authentication)
    }
}

/// Hex SHA-256 of `data` (lowercase), as Salt hashes the AES key for the auth `sig`.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_public_key_parser_agrees_with_openssl() {
        let k = PrivateKey::generate(2048).unwrap();
        let spki = k.public_pem().unwrap();
        let pkcs1 = k.pkey.rsa().unwrap().public_key_to_pem_pkcs1().unwrap();
        let reference = k.pkey.rsa().unwrap();
        for pem in [&spki, &pkcs1] {
            let (n, e) = rsa_pem_components(pem).expect("parsed");
            assert_eq!(BigNum::from_slice(&n).unwrap(), *reference.n().to_owned().unwrap());
            assert_eq!(BigNum::from_slice(&e).unwrap(), *reference.e().to_owned().unwrap());
            // Keys built from the components work both ways with the private key.
            let p = PublicKey::from_pem(pem).unwrap();
            assert_eq!(k.decrypt_oaep(&p.encrypt_oaep(b"x", EncAlgo::OaepSha1).unwrap(), EncAlgo::OaepSha1).unwrap(), b"x");
            assert_eq!(p.x931_recover(&k.x931_sign(b"salt").unwrap()).unwrap(), b"salt");
        }
        // clean_key form (no trailing newline) and CRLF line ends parse too.
        assert!(rsa_pem_components(&clean_key(&spki)).is_some());
        assert!(rsa_pem_components(String::from_utf8(spki.clone()).unwrap().replace('\n', "\r\n").as_bytes()).is_some());
        // Anything damaged is refused by the fast path and by OpenSSL.
        let text = String::from_utf8(spki.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let truncated = [&lines[..3], &lines[lines.len() - 1..]].concat().join("\n");
        for bad in [truncated.as_str(), "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----", "not a key", ""] {
            assert!(rsa_pem_components(bad.as_bytes()).is_none(), "{bad}");
            assert!(PublicKey::from_pem(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn der_reader_never_panics_on_garbage() {
        let mut seed = 0x2545F4914F6CDD1Du64;
        for len in 0..400 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = der(&bytes);
            let _ = rsa_public_key_der(&bytes);
            let pem = format!("-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----", base64::engine::general_purpose::STANDARD.encode(&bytes));
            let _ = rsa_pem_components(pem.as_bytes());
        }
    }

    #[test]
    fn rsa_round_trips() {
        let k = PrivateKey::generate(2048).unwrap();
        let p = k.public_key().unwrap();
        for algo in [EncAlgo::OaepSha1, EncAlgo::OaepSha224] {
            let ct = p.encrypt_oaep(b"secret", algo).unwrap();
            assert_eq!(k.decrypt_oaep(&ct, algo).unwrap(), b"secret");
        }
        let sig = k.sign(b"data", SigAlgo::Pkcs1v15Sha1).unwrap();
        assert!(p.verify(b"data", &sig, SigAlgo::Pkcs1v15Sha1).unwrap());
        assert!(!p.verify(b"datb", &sig, SigAlgo::Pkcs1v15Sha1).unwrap());
        let tok = k.x931_sign(b"salt").unwrap();
        assert_eq!(tok.len(), 256);
        assert_eq!(p.x931_recover(&tok).unwrap(), b"salt");
        assert_eq!(k.x931_sign(b"salt").unwrap(), tok, "X9.31 is deterministic");
        let other = PrivateKey::generate(2048).unwrap().public_key().unwrap();
        assert!(other.x931_recover(&tok).is_none());
        assert!(PublicKey::from_pem(b"garbage").is_err());
    }

    #[test]
    fn crypticle_round_trip_and_tamper() {
        let c = Crypticle::generate();
        assert_eq!(c.key_string().len(), 76);
        let blob = c.encrypt(b"pickle::hello").unwrap();
        assert_eq!(c.decrypt(&blob).unwrap(), b"pickle::hello");
        let mut bad = blob.clone();
        bad[20] ^= 1;
        assert!(matches!(c.decrypt(&bad), Err(CryptoError::Authentication)));
        assert!(c.decrypt(b"bad load").is_err());
        let other = Crypticle::generate();
        assert!(other.decrypt(&blob).is_err());
    }

    #[test]
    fn clean_key_form() {
        assert_eq!(clean_key(b"  -----BEGIN X-----\r\nAAA\r\n-----END X-----\n\n"), b"-----BEGIN X-----\nAAA\n-----END X-----");
    }
}
