//! Salt's cryptography (as Salt's `salt.crypt` module does it): RSA-OAEP, PKCS#1 v1.5 signatures,
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
//! | the Crypticle's AES-192-CBC | every AES message | `aes` + `cbc` (AES-NI, constant time; no context to build) |
//! | random bytes (keys, IVs) | session and publish keys, every AES message | OpenSSL |
//! | the Crypticle's HMAC-SHA256 | every AES message | `hmac` + `sha2` (the key prepared once per Crypticle) |
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
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use openssl::hash::MessageDigest;
use openssl::bn::BigNum;
use openssl::pkey::{PKey, Private, Public};
use openssl::rsa::{Padding, Rsa};
use openssl::sign::{Signer, Verifier};
use aes::cipher::block_padding::Pkcs7;
use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
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
/// Cloning shares the one OpenSSL key (a reference count), it copies nothing.
#[derive(Clone)]
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
        crate::metrics::rsa_private("decrypt", || {
            let mut d = openssl::encrypt::Decrypter::new(&self.pkey)?;
            d.set_rsa_padding(Padding::PKCS1_OAEP)?;
            d.set_rsa_oaep_md(algo.md())?;
            d.set_rsa_mgf1_md(algo.md())?;
            let mut out = vec![0u8; d.decrypt_len(data)?];
            let n = d.decrypt(data, &mut out)?;
            out.truncate(n);
            Ok(out)
        })
    }

    /// PKCS#1 v1.5 signature.
    pub fn sign(&self, data: &[u8], algo: SigAlgo) -> Result<Vec<u8>> {
        crate::metrics::rsa_private("sign", || {
            let mut s = Signer::new(algo.md(), &self.pkey)?;
            s.set_rsa_padding(Padding::PKCS1)?;
            Ok(s.sign_oneshot_to_vec(data)?)
        })
    }

    /// ANSI X9.31 "private encrypt" of a short message (Salt's `tok` and auth `sig`).
    pub fn x931_sign(&self, msg: &[u8]) -> Result<Vec<u8>> {
        crate::metrics::rsa_private("x931_sign", || {
            let rsa = self.pkey.rsa()?;
            let mut out = vec![0u8; rsa.size() as usize];
            let n = rsa.private_encrypt(msg, &mut out, Padding::from_raw(X931_PADDING))?;
            out.truncate(n);
            Ok(out)
        })
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

    /// SubjectPublicKeyInfo PEM with a trailing newline (Salt's `master.pub` form).
    pub fn to_pem(&self) -> Result<Vec<u8>> {
        Ok(self.ossl.public_key_to_pem()?)
    }

    /// RSAES-OAEP with `algo`'s digest for both the label hash and MGF1 (as Salt, through
    /// `cryptography`, does), empty label.
    pub fn encrypt_oaep(&self, data: &[u8], algo: EncAlgo) -> Result<Vec<u8>> {
        let [out] = self.encrypt_oaep_each([data], algo)?;
        Ok(out)
    }

    /// [`PublicKey::encrypt_oaep`] of each of `data` (each with its own random
    /// padding), through one OpenSSL context: its set-up (the padding, the digests
    /// looked up in the provider) is paid once.
    pub fn encrypt_oaep_each<const N: usize>(&self, data: [&[u8]; N], algo: EncAlgo) -> Result<[Vec<u8>; N]> {
        let mut e = openssl::encrypt::Encrypter::new(&self.ossl)?;
        e.set_rsa_padding(Padding::PKCS1_OAEP)?;
        e.set_rsa_oaep_md(algo.md())?;
        e.set_rsa_mgf1_md(algo.md())?;
        let mut outs: [Vec<u8>; N] = std::array::from_fn(|_| Vec::new());
        for (d, out) in data.iter().zip(outs.iter_mut()) {
            *out = vec![0u8; e.encrypt_len(d)?];
            let n = e.encrypt(d, out)?;
            out.truncate(n);
        }
        Ok(outs)
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
///
/// The HMAC key is prepared once (SHA-256 of the padded key, inner and outer), so a
/// message costs only its own hashing: building an OpenSSL MAC key per message costs 6 %
/// of the master's CPU under an 8,000-minion `test.ping`.
///
/// AES is RustCrypto's `aes` (AES-NI when the CPU has it, else a constant-time bitsliced
/// fallback): OpenSSL 3's `EVP_CipherInit_ex` looks the cipher up in its provider and
/// builds a context for every message, 2–3 % of the master's CPU per return. The key
/// schedule is expanded per message (tens of nanoseconds with AES-NI) rather than kept:
/// kept, it is about a kilobyte for each of 8,000 session keys, 14 MiB of RSS.
///
/// Cloning shares the key (a reference count): a Crypticle is cloned for every request
/// (the session key handed out), and a session map's slot holds a pointer, not the
/// 200-byte key with its prepared HMAC states (the map's table has twice as many slots
/// as keys).
#[derive(Clone)]
pub struct Crypticle(std::sync::Arc<CrypticleKey>);

/// A Crypticle's key: its text and the two keys it holds.
struct CrypticleKey {
    key_string: Box<str>,
    aes: [u8; 24],
    mac_key: Hmac<Sha256>,
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
        aes.copy_from_slice(&raw[..24]);
        let mac_key = <Hmac<Sha256> as Mac>::new_from_slice(&raw[24..]).map_err(|e| CryptoError::Invalid(format!("HMAC key: {e}")))?;
        Ok(Crypticle(std::sync::Arc::new(CrypticleKey { key_string: s.trim().into(), aes, mac_key })))
    }

    /// The base64 key string (what is RSA-encrypted to minions).
    pub fn key_string(&self) -> &str {
        &self.0.key_string
    }

    /// HMAC-SHA256 of `data` under the prepared key, ready to finish or verify.
    fn mac(&self, data: &[u8]) -> Hmac<Sha256> {
        let mut m = self.0.mac_key.clone();
        m.update(data);
        m
    }

    pub fn encrypt(&self, plaintext: &[u8]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(Self::sealed_len(plaintext.len()));
        self.encrypt_into(plaintext, &mut out)?;
        Ok(out)
    }

    /// The length of `plaintext_len` bytes sealed: IV, padded ciphertext, HMAC.
    pub fn sealed_len(plaintext_len: usize) -> usize {
        // PKCS#7 always pads, by 1 to 16 bytes.
        16 + (plaintext_len / 16 + 1) * 16 + 32
    }

    /// [`Crypticle::encrypt`], appended to `out` (which a caller sizes to hold what it
    /// puts before the sealed bytes as well: one allocation for a whole reply).
    pub fn encrypt_into(&self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<()> {
        // The IV from the thread's CSPRNG (`rand`'s ChaCha, seeded from the OS and
        // reseeded after a fork): OpenSSL's `RAND_bytes` asks the kernel for the pid
        // at every call to notice forks, a syscall a return.
        let iv: [u8; 16] = rand::Rng::gen(&mut rand::thread_rng());
        let start = out.len();
        let padded = Self::sealed_len(plaintext.len()) - 16 - 32;
        out.reserve(16 + padded + 32);
        out.extend_from_slice(&iv);
        out.extend_from_slice(plaintext);
        out.resize(start + 16 + padded, 0);
        let enc = cbc::Encryptor::<aes::Aes192>::new((&self.0.aes).into(), (&iv).into());
        enc.encrypt_padded_mut::<Pkcs7>(&mut out[start + 16..], plaintext.len())
            .map_err(|_| CryptoError::Invalid("AES padding".into()))?;
        let mac = self.mac(&out[start..]).finalize().into_bytes();
        out.extend_from_slice(&mac);
        Ok(())
    }

    pub fn decrypt(&self, blob: &[u8]) -> Result<Vec<u8>> {
        if blob.len() < 16 + 16 + 32 || (blob.len() - 48) % 16 != 0 {
            return Err(CryptoError::Authentication);
        }
        let (body, mac) = blob.split_at(blob.len() - 32);
        // Constant-time comparison (`hmac`'s `verify_slice`).
        self.mac(body).verify_slice(mac).map_err(|_| CryptoError::Authentication)?;
        let (iv, ct) = body.split_at(16);
        let dec = cbc::Decryptor::<aes::Aes192>::new_from_slices(&self.0.aes, iv).map_err(|_| CryptoError::Authentication)?;
        dec.decrypt_padded_vec_mut::<Pkcs7>(ct).map_err(|_| CryptoError::Authentication)
    }
}

/// Hex SHA-256 of `data` (lowercase), as Salt hashes the AES key for the auth `sig`.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

#[cfg(test)]
#[path = "crypto_tests.rs"]
mod tests;
