//! Salt's cryptography (spec `minion-protocol.md` §3): RSA-OAEP, PKCS#1 v1.5 signatures,
//! the raw ANSI X9.31 "private encrypt" of `tok` and the auth `sig`, and the "Crypticle"
//! (AES-192-CBC + HMAC-SHA256).
//!
//! Two libraries share the work:
//!
//! | operation | where Halite does it | library |
//! |---|---|---|
//! | read and check a public key (SPKI or PKCS#1 PEM) | every sign-in (the presented key), every AES request (the accepted key) | `rsa` and its `pkcs1` / `spki` / PEM decoders |
//! | OAEP encryption (SHA-1 / SHA-224), X9.31 recovery (`tok`), PKCS#1 v1.5 verification | the accept reply and pillar; every AES request; the swarm and tests | OpenSSL, on a key built from the modulus and exponent `rsa` read |
//! | key generation, private PEM in and out, the public PEM of a private key | the master key pair | OpenSSL |
//! | OAEP decryption, PKCS#1 v1.5 signature, X9.31 signature | the master's private key | OpenSSL |
//! | the Crypticle, random bytes | session and publish keys | OpenSSL |
//!
//! Every private-key operation runs in OpenSSL (the system libssl), whose RSA is blinded
//! and constant time: the pure-Rust `rsa` crate's private-key operations leak timing (the
//! Marvin attack, RUSTSEC-2023-0071, unfixed in the 0.9 series), and a master decrypts
//! and signs for any peer that asks. Key material is read by `rsa`'s strict DER decoders
//! (no hand-written parser; 200× faster than OpenSSL 3's generic decoder). The public
//! operations stay on OpenSSL too: measured on this machine, `rsa` 0.9's are 8–11× slower
//! (RSA-2048 `tok` check 231 µs against 24 µs; its bignum library needs ~90
//! multiplications for e = 65537), which cost 70 % more sign-in time and `test.ping`
//! latency under a 500-minion swarm. `docs/benchmarks.md` has each figure
//! (`cargo bench -p halite-benches --bench crypto`); `rsa` 0.10, on another bignum
//! library, is the candidate to move them.
//!
//! (Over 600 lines: more than half is the interop tests against OpenSSL, kept beside the
//! code whose behaviour they pin down.)

use base64::Engine as _;
use openssl::hash::MessageDigest;
use openssl::bn::BigNum;
use openssl::pkey::{PKey, Private, Public};
use openssl::rsa::{Padding, Rsa};
use openssl::sign::{Signer, Verifier};
use openssl::symm::Cipher;
use rsa::pkcs1::der::Decode as _;
use rsa::pkcs8::spki::SubjectPublicKeyInfoRef;
use rsa::traits::PublicKeyParts as _;
use rsa::{BigUint, RsaPublicKey};

/// X9.31 padding mode of OpenSSL's low-level RSA calls (`RSA_X931_PADDING`).
const X931_PADDING: i32 = 5;

/// The largest public modulus accepted, in bits: OpenSSL's `OPENSSL_RSA_MAX_MODULUS_BITS`,
/// the limit Halite had while OpenSSL held public keys (the `rsa` crate's default is
/// 4,096, and Salt lets a minion choose its `keysize`).
const MAX_MODULUS_BITS: usize = 16384;

#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("openssl: {0}")]
    Ssl(#[from] openssl::error::ErrorStack),
    #[error("rsa: {0}")]
    Rsa(#[from] rsa::Error),
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

/// A master (or test minion) private key. Every operation on it runs in OpenSSL.
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

    /// The public half, for the `rsa` side (built from the modulus and exponent).
    pub fn public_key(&self) -> Result<PublicKey> {
        let rsa = self.pkey.rsa()?;
        PublicKey::from_components(&rsa.n().to_vec(), &rsa.e().to_vec())
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

/// A public key (a minion's, or the master's for the swarm and tests): read and checked
/// by the `rsa` crate, used through OpenSSL (see the module docs for why).
#[derive(Clone)]
pub struct PublicKey {
    ossl: PKey<Public>,
}

impl PublicKey {
    /// Reads SPKI (`BEGIN PUBLIC KEY`, algorithm rsaEncryption) or PKCS#1
    /// (`BEGIN RSA PUBLIC KEY`) PEM and refuses anything else: another label or
    /// algorithm, PEM headers, base64 lines other than 64 wide, DER that is not canonical
    /// or has trailing bytes, a modulus over 16,384 bits, an even modulus, an exponent
    /// that is even, 1, or 2³³ and more. Whitespace around the PEM is ignored (Salt's
    /// [`clean_key`] form has no final newline; Windows minions write CRLF).
    pub fn from_pem(pem: &[u8]) -> Result<Self> {
        let bad = |what: &str| CryptoError::Invalid(format!("public key: {what}"));
        let (label, der) = rsa::pkcs1::der::pem::decode_vec(pem.trim_ascii()).map_err(|e| bad(&format!("PEM: {e}")))?;
        let pkcs1 = match label {
            "PUBLIC KEY" => {
                let spki = SubjectPublicKeyInfoRef::from_der(&der).map_err(|e| bad(&format!("SubjectPublicKeyInfo: {e}")))?;
                if spki.algorithm.oid != rsa::pkcs1::ALGORITHM_OID {
                    return Err(bad(&format!("algorithm {} is not rsaEncryption", spki.algorithm.oid)));
                }
                // rsaEncryption's parameters are NULL; some writers leave them out.
                if !spki.algorithm.parameters.is_none_or(|p| p.is_null()) {
                    return Err(bad("rsaEncryption with parameters"));
                }
                let bits = spki.subject_public_key.as_bytes().ok_or_else(|| bad("the key's BIT STRING has unused bits"))?;
                rsa::pkcs1::RsaPublicKey::from_der(bits)
            }
            "RSA PUBLIC KEY" => rsa::pkcs1::RsaPublicKey::from_der(&der),
            other => return Err(bad(&format!("PEM label {other:?}, expected PUBLIC KEY or RSA PUBLIC KEY"))),
        }
        .map_err(|e| bad(&format!("RSAPublicKey: {e}")))?;
        Self::from_components(pkcs1.modulus.as_bytes(), pkcs1.public_exponent.as_bytes())
    }

    /// A key from its modulus and exponent (big-endian magnitudes), with the checks of
    /// [`PublicKey::from_pem`].
    fn from_components(n: &[u8], e: &[u8]) -> Result<Self> {
        // The rsa crate's checks (size, odd modulus, exponent range), then the same
        // numbers in an OpenSSL key for the operations.
        let key = RsaPublicKey::new_with_max_size(BigUint::from_bytes_be(n), BigUint::from_bytes_be(e), MAX_MODULUS_BITS)?;
        let rsa = Rsa::from_public_components(BigNum::from_slice(&key.n().to_bytes_be())?, BigNum::from_slice(&key.e().to_bytes_be())?)?;
        Ok(PublicKey { ossl: PKey::from_rsa(rsa)? })
    }

    /// RSAES-OAEP with `algo`'s digest for both the label hash and MGF1 (as Salt, through
    /// `cryptography`, does), empty label.
    pub fn encrypt_oaep(&self, data: &[u8], algo: EncAlgo) -> Result<Vec<u8>> {
        let mut e = openssl::encrypt::Encrypter::new(&self.ossl)?;
        e.set_rsa_padding(Padding::PKCS1_OAEP)?;
        e.set_rsa_oaep_md(algo.md())?;
        e.set_rsa_mgf1_md(algo.md())?;
        let mut out = vec![0u8; e.encrypt_len(data)?];
        let n = e.encrypt(data, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// Whether `sig` is the RSASSA-PKCS1-v1_5 signature of `data` with `algo`'s digest.
    pub fn verify(&self, data: &[u8], sig: &[u8], algo: SigAlgo) -> Result<bool> {
        let mut v = Verifier::new(algo.md(), &self.ossl)?;
        v.set_rsa_padding(Padding::PKCS1)?;
        Ok(v.verify_oneshot(sig, data).unwrap_or(false))
    }

    /// The modulus and exponent, big-endian (for the tests).
    #[cfg(test)]
    fn components(&self) -> (Vec<u8>, Vec<u8>) {
        let rsa = self.ossl.rsa().expect("an RSA key");
        (rsa.n().to_vec(), rsa.e().to_vec())
    }

    /// Recovers the message of an X9.31 signature (`None` if it does not verify):
    /// OpenSSL's `RSA_public_decrypt` with `RSA_X931_PADDING`.
    pub fn x931_recover(&self, sig: &[u8]) -> Option<Vec<u8>> {
        let rsa = self.ossl.rsa().ok()?;
        if sig.len() > rsa.size() as usize {
            return None;
        }
        let mut out = vec![0u8; rsa.size() as usize];
        let n = rsa.public_decrypt(sig, &mut out, Padding::from_raw(X931_PADDING)).ok()?;
        out.truncate(n);
        Some(out)
    }
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
    use openssl::bn::BigNum;
    use rsa::pkcs1::der::Encode as _;

    /// A deterministic byte stream (xorshift64) for the garbage tests.
    fn noise(seed: &mut u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                *seed as u8
            })
            .collect()
    }

    fn pem(label: &str, der: &[u8]) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
        format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
    }

    /// What OpenSSL recovers from an X9.31 signature: Halite's implementation before the
    /// `rsa` crate, kept here as the reference.
    fn openssl_x931_recover<T: openssl::pkey::HasPublic>(rsa: &Rsa<T>, sig: &[u8]) -> Option<Vec<u8>> {
        if sig.len() > rsa.size() as usize {
            return None;
        }
        let mut out = vec![0u8; rsa.size() as usize];
        let n = rsa.public_decrypt(sig, &mut out, Padding::from_raw(X931_PADDING)).ok()?;
        out.truncate(n);
        Some(out)
    }

    #[test]
    fn public_key_parse_agrees_with_openssl() {
        let k = PrivateKey::generate(2048).unwrap();
        let reference = k.pkey.rsa().unwrap();
        let spki = k.public_pem().unwrap();
        let pkcs1 = reference.public_key_to_pem_pkcs1().unwrap();
        // SPKI without the NULL parameters of rsaEncryption (some writers leave them out).
        let bare = SubjectPublicKeyInfoRef {
            algorithm: rsa::pkcs8::spki::AlgorithmIdentifierRef { oid: rsa::pkcs1::ALGORITHM_OID, parameters: None },
            subject_public_key: rsa::pkcs8::der::asn1::BitStringRef::from_bytes(&reference.public_key_to_der_pkcs1().unwrap()).unwrap(),
        }
        .to_der()
        .unwrap();
        let bare = pem("PUBLIC KEY", &bare).into_bytes();
        let crlf = String::from_utf8(spki.clone()).unwrap().replace('\n', "\r\n").into_bytes();
        let padded = [b"\n  \n".as_slice(), &spki, b"\n\n  "].concat();
        for pem in [&spki, &pkcs1, &bare, &clean_key(&spki), &clean_key(&pkcs1), &crlf, &padded] {
            let p = PublicKey::from_pem(pem).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(pem)));
            assert_eq!(p.components().0, reference.n().to_vec());
            assert_eq!(p.components().1, reference.e().to_vec());
            // The parsed key works both ways with the private key.
            assert_eq!(k.decrypt_oaep(&p.encrypt_oaep(b"x", EncAlgo::OaepSha1).unwrap(), EncAlgo::OaepSha1).unwrap(), b"x");
            assert_eq!(p.x931_recover(&k.x931_sign(b"salt").unwrap()).unwrap(), b"salt");
        }
        // The private key's own public half is the same key.
        assert_eq!(k.public_key().unwrap().components(), PublicKey::from_pem(&spki).unwrap().components());
    }

    #[test]
    fn damaged_or_foreign_public_keys_are_refused() {
        let k = PrivateKey::generate(2048).unwrap();
        let spki = String::from_utf8(k.public_pem().unwrap()).unwrap();
        let spki_der = k.pkey.public_key_to_der().unwrap();
        let lines: Vec<&str> = spki.lines().collect();
        let truncated = [&lines[..3], &lines[lines.len() - 1..]].concat().join("\n");
        let trailing_der = pem("PUBLIC KEY", &[spki_der.as_slice(), &[0x05, 0x00]].concat());
        let pkcs1_under_spki_label = pem("PUBLIC KEY", &k.pkey.rsa().unwrap().public_key_to_der_pkcs1().unwrap());
        let spki_under_pkcs1_label = pem("RSA PUBLIC KEY", &spki_der);
        let wrong_label = spki.replace("PUBLIC KEY", "CERTIFICATE");
        let text_after = format!("{spki}garbage\n");
        let ec = openssl::ec::EcKey::generate(&openssl::ec::EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1).unwrap()).unwrap();
        let ec_pem = String::from_utf8(ec.public_key_to_pem().unwrap()).unwrap();
        let private_pem = String::from_utf8(k.to_pem().unwrap()).unwrap();
        let rewrapped = {
            let b64: String = lines[1..lines.len() - 1].concat();
            let wide: Vec<&str> = b64.as_bytes().chunks(76).map(|c| std::str::from_utf8(c).unwrap()).collect();
            format!("-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n", wide.join("\n"))
        };
        for bad in [
            truncated.as_str(),
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----",
            "-----BEGIN RSA PUBLIC KEY-----\n-----END RSA PUBLIC KEY-----",
            "not a key",
            "",
            &trailing_der,
            &pkcs1_under_spki_label,
            &spki_under_pkcs1_label,
            &wrong_label,
            &text_after,
            &ec_pem,
            &private_pem,
            // Base64 lines other than 64 wide (OpenSSL takes them; no Salt writer makes them).
            &rewrapped,
        ] {
            assert!(PublicKey::from_pem(bad.as_bytes()).is_err(), "accepted: {bad}");
        }
        assert!(PublicKey::from_pem(&[0xff, 0xfe, 0x00]).is_err());
    }

    #[test]
    fn public_key_size_and_exponent_limits() {
        // A public key needs no primes: any odd modulus of the right size will do.
        let mut seed = 0x9E3779B97F4A7C15u64;
        let modulus = |bits: usize, seed: &mut u64| {
            let mut n = noise(seed, bits / 8);
            n[0] |= 0x80;
            *n.last_mut().unwrap() |= 1;
            n
        };
        let spki = |n: &[u8], e: u32| {
            let rsa = Rsa::from_public_components(BigNum::from_slice(n).unwrap(), BigNum::from_u32(e).unwrap()).unwrap();
            PKey::from_rsa(rsa).unwrap().public_key_to_pem().unwrap()
        };
        // OpenSSL's limit, not the rsa crate's default of 4,096 bits.
        assert!(PublicKey::from_pem(&spki(&modulus(8192, &mut seed), 65537)).is_ok());
        assert!(PublicKey::from_pem(&spki(&modulus(16384, &mut seed), 65537)).is_ok());
        assert!(PublicKey::from_pem(&spki(&modulus(16392, &mut seed), 65537)).is_err());
        let n = modulus(2048, &mut seed);
        assert!(PublicKey::from_pem(&spki(&n, 3)).is_ok());
        for e in [1, 65536] {
            assert!(PublicKey::from_pem(&spki(&n, e)).is_err(), "e = {e}");
        }
        let mut even = n.clone();
        *even.last_mut().unwrap() &= 0xfe;
        assert!(PublicKey::from_pem(&spki(&even, 65537)).is_err());
    }

    #[test]
    fn public_key_parser_never_panics_on_garbage() {
        let k = PrivateKey::generate(2048).unwrap();
        let ders = [k.pkey.public_key_to_der().unwrap(), k.pkey.rsa().unwrap().public_key_to_der_pkcs1().unwrap()];
        let mut seed = 0x2545F4914F6CDD1Du64;
        for len in 0..400 {
            let bytes = noise(&mut seed, len);
            let _ = PublicKey::from_pem(&bytes);
            for label in ["PUBLIC KEY", "RSA PUBLIC KEY"] {
                assert!(PublicKey::from_pem(pem(label, &bytes).as_bytes()).is_err());
            }
        }
        // Every truncation and many one-byte changes of real keys.
        for (der, label) in ders.iter().zip(["PUBLIC KEY", "RSA PUBLIC KEY"]) {
            for cut in 0..der.len() {
                assert!(PublicKey::from_pem(pem(label, &der[..cut]).as_bytes()).is_err(), "{label} cut at {cut}");
            }
            for _ in 0..2000 {
                let r = noise(&mut seed, 3);
                let mut changed = der.clone();
                let at = (u16::from_le_bytes([r[0], r[1]]) as usize) % changed.len();
                changed[at] ^= r[2] | 1;
                let _ = PublicKey::from_pem(pem(label, &changed).as_bytes());
            }
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

    /// The `rsa` path encrypts, OpenSSL (the master's private key) decrypts, for both
    /// digests and every message length OAEP allows with a 2048-bit key.
    #[test]
    fn oaep_from_rsa_decrypts_in_openssl() {
        let k = PrivateKey::generate(2048).unwrap();
        let p = PublicKey::from_pem(&k.public_pem().unwrap()).unwrap();
        for (algo, digest_len) in [(EncAlgo::OaepSha1, 20), (EncAlgo::OaepSha224, 28)] {
            let max = 256 - 2 * digest_len - 2;
            for len in [0, 1, 44, 76, max] {
                let msg: Vec<u8> = (0..len).map(|i| i as u8).collect();
                let ct = p.encrypt_oaep(&msg, algo).unwrap();
                assert_eq!(ct.len(), 256);
                assert_eq!(k.decrypt_oaep(&ct, algo).unwrap(), msg, "{algo:?}, {len} bytes");
                assert_ne!(p.encrypt_oaep(&msg, algo).unwrap(), ct, "OAEP is randomised");
                // The other digest does not decrypt it.
                let other = if algo == EncAlgo::OaepSha1 { EncAlgo::OaepSha224 } else { EncAlgo::OaepSha1 };
                assert!(k.decrypt_oaep(&ct, other).is_err());
            }
            assert!(p.encrypt_oaep(&vec![0u8; max + 1], algo).is_err());
        }
    }

    /// OpenSSL signs (PKCS#1 v1.5), the `rsa` path verifies, for both digests.
    #[test]
    fn openssl_signatures_verify_on_rsa_path() {
        let k = PrivateKey::generate(2048).unwrap();
        let p = PublicKey::from_pem(&k.public_pem().unwrap()).unwrap();
        let other = PrivateKey::generate(2048).unwrap();
        for algo in [SigAlgo::Pkcs1v15Sha1, SigAlgo::Pkcs1v15Sha224] {
            for data in [&b""[..], b"reply", &[0xa5; 5000]] {
                let sig = k.sign(data, algo).unwrap();
                assert!(p.verify(data, &sig, algo).unwrap(), "{algo:?}");
                assert!(!p.verify(b"another message", &sig, algo).unwrap());
                assert!(!p.verify(data, &other.sign(data, algo).unwrap(), algo).unwrap());
                let mut bent = sig.clone();
                bent[100] ^= 0x40;
                assert!(!p.verify(data, &bent, algo).unwrap());
                assert!(!p.verify(data, &sig[1..], algo).unwrap());
                assert!(!p.verify(data, &[sig.as_slice(), &[0]].concat(), algo).unwrap());
                assert!(!p.verify(data, &[], algo).unwrap());
            }
            let wrong = if algo == SigAlgo::Pkcs1v15Sha1 { SigAlgo::Pkcs1v15Sha224 } else { SigAlgo::Pkcs1v15Sha1 };
            assert!(!p.verify(b"reply", &k.sign(b"reply", algo).unwrap(), wrong).unwrap());
        }
    }

    /// OpenSSL makes X9.31 signatures (`tok`, the auth `sig`); the `rsa` path recovers
    /// what OpenSSL recovers, whichever of s and n − s the signer sent.
    #[test]
    fn x931_signatures_from_openssl_recover_on_rsa_path() {
        let k = PrivateKey::generate(2048).unwrap();
        let rsa = k.pkey.rsa().unwrap();
        let p = k.public_key().unwrap();
        let (mut direct, mut complement) = (0, 0);
        for i in 0..64 {
            let msg = format!("{}{i}", sha256_hex(&[i as u8]));
            let sig = k.x931_sign(msg.as_bytes()).unwrap();
            assert_eq!(p.x931_recover(&sig).as_deref(), Some(msg.as_bytes()));
            assert_eq!(openssl_x931_recover(&rsa, &sig).as_deref(), Some(msg.as_bytes()));
            // Which branch: the raw public operation ends in the trailer 0xCC, or not.
            let mut raw = vec![0u8; 256];
            rsa.public_decrypt(&sig, &mut raw, Padding::NONE).unwrap();
            if raw[255] == 0xcc {
                direct += 1;
            } else {
                complement += 1;
            }
        }
        assert!(direct > 0 && complement > 0, "both branches: {direct} / {complement}");
        // The request `tok` of several keys.
        for _ in 0..4 {
            let k = PrivateKey::generate(2048).unwrap();
            let p = PublicKey::from_pem(&k.public_pem().unwrap()).unwrap();
            assert_eq!(p.x931_recover(&k.x931_sign(b"salt").unwrap()).as_deref(), Some(&b"salt"[..]));
        }
    }

    /// Differential test of the padding check: blocks made by hand, raised to the private
    /// exponent with no padding by OpenSSL, then recovered by both libraries.
    #[test]
    fn public_pem_is_the_same_from_openssl_and_storage() {
        for bits in [2048, 4096] {
            let k = PrivateKey::generate(bits).unwrap();
            let openssl_pub = k.public_pem().unwrap();
            assert!(openssl_pub.starts_with(b"-----BEGIN PUBLIC KEY-----\n") && openssl_pub.ends_with(b"-----END PUBLIC KEY-----\n"));
            let pkcs1 = k.to_pem().unwrap();
            let pkcs8 = k.pkey.private_key_to_pem_pkcs8().unwrap();
            assert!(pkcs1.starts_with(b"-----BEGIN RSA PRIVATE KEY-----") && pkcs8.starts_with(b"-----BEGIN PRIVATE KEY-----"));
            for private in [&pkcs1, &pkcs8] {
                assert_eq!(halite_storage::keys::pair::public_pem_of(private).unwrap(), openssl_pub);
                assert_eq!(PrivateKey::from_pem(private).unwrap().public_pem().unwrap(), openssl_pub);
            }
        }
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
