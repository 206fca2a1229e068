//! Crypto tests: key parsing against OpenSSL, interop of every operation, the Crypticle,
//! and every operation against the outputs of the real Salt 3008.5
//! (`testdata/salt-3008.5/crypto`, written by its `gen_vectors.py`).

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

/// The vectors the real Salt 3008.5 wrote, and its key pair.
struct Salt {
    v: serde_json::Value,
    private: PrivateKey,
    public: PublicKey,
    public_pem: Vec<u8>,
}

fn salt() -> Salt {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/salt-3008.5/crypto");
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let v: serde_json::Value = serde_json::from_slice(&read("vectors.json")).unwrap();
    assert_eq!(v["salt_version"], "3008.5");
    let public_pem = read("salt.pub");
    Salt { v, private: PrivateKey::from_pem(&read("salt.pem")).unwrap(), public: PublicKey::from_pem(&public_pem).unwrap(), public_pem }
}

fn b64(v: &serde_json::Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap()
}

fn items<'a>(v: &'a serde_json::Value, key: &str) -> &'a Vec<serde_json::Value> {
    let a = v[key].as_array().unwrap_or_else(|| panic!("no {key} vectors"));
    assert!(!a.is_empty(), "no {key} vectors");
    a
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

/// Several messages encrypted through one context: each decrypts to its own message
/// with the digest asked for, each with its own random padding, and a message too long
/// is refused.
#[test]
fn oaep_each_encrypts_every_message_on_its_own() {
    let k = PrivateKey::generate(2048).unwrap();
    let p = PublicKey::from_pem(&k.public_pem().unwrap()).unwrap();
    for algo in [EncAlgo::OaepSha1, EncAlgo::OaepSha224] {
        let [a, b, c] = p.encrypt_oaep_each([b"publish key", b"session key", b"publish key"], algo).unwrap();
        assert_eq!(k.decrypt_oaep(&a, algo).unwrap(), b"publish key");
        assert_eq!(k.decrypt_oaep(&b, algo).unwrap(), b"session key");
        assert_eq!(k.decrypt_oaep(&c, algo).unwrap(), b"publish key");
        assert_ne!(a, c, "each message has its own padding");
        assert!(p.encrypt_oaep_each([&b"ok"[..], &[0u8; 255][..]], algo).is_err());
    }
}

/// A public key read from PEM encrypts, the private key decrypts, for both digests and
/// every message length OAEP allows with a 2048-bit key (Salt's own ciphertexts:
/// [`salts_oaep_ciphertexts_decrypt`]).
#[test]
fn oaep_round_trips_at_every_length() {
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

/// The private key signs (PKCS#1 v1.5), a public key read from PEM verifies, for both
/// digests; other keys', changed and cut signatures do not (Salt's own signatures:
/// [`pkcs1v15_signatures_are_salts`]).
#[test]
fn signatures_verify_only_as_made() {
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

/// Salt's X9.31 signatures (`PrivateKey.encrypt`: a request's `tok`, the sign-in's
/// `sig`): Halite signs the same bytes, and recovers from each what Salt's verifier
/// recovers (nothing from the empty message's), whichever of s and n − s Salt sent.
#[test]
fn x931_signatures_are_salts() {
    let salt = salt();
    let rsa = salt.private.pkey.rsa().unwrap();
    let other = PrivateKey::generate(2048).unwrap().public_key().unwrap();
    let (mut direct, mut complement) = (0, 0);
    for x in items(&salt.v, "x931") {
        let (msg, sig) = (b64(&x["msg"]), b64(&x["sig"]));
        assert_eq!(salt.private.x931_sign(&msg).unwrap(), sig, "signing {:?}", String::from_utf8_lossy(&msg));
        let salts = (!x["recovered"].is_null()).then(|| b64(&x["recovered"]));
        assert_eq!(salt.public.x931_recover(&sig), salts, "recovering {:?}", String::from_utf8_lossy(&msg));
        assert_eq!(other.x931_recover(&sig), None, "another key recovers nothing");
        let mut bent = sig.clone();
        bent[128] ^= 0x10;
        assert_eq!(salt.public.x931_recover(&bent), None);
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
    assert!(items(&salt.v, "x931").iter().filter(|x| x["recovered"].is_null()).count() < 2, "Salt recovers the others");
}

/// Salt's PKCS#1 v1.5 signatures (`PrivateKey.sign`) are Halite's byte for byte, and
/// verify on Halite's public key; changed ones do not.
#[test]
fn pkcs1v15_signatures_are_salts() {
    let salt = salt();
    for x in items(&salt.v, "signatures") {
        let algo = SigAlgo::parse(x["algo"].as_str().unwrap()).unwrap();
        let (msg, sig) = (b64(&x["msg"]), b64(&x["sig"]));
        assert_eq!(salt.private.sign(&msg, algo).unwrap(), sig, "{algo:?}");
        assert!(salt.public.verify(&msg, &sig, algo).unwrap(), "{algo:?}");
        let wrong = if algo == SigAlgo::Pkcs1v15Sha1 { SigAlgo::Pkcs1v15Sha224 } else { SigAlgo::Pkcs1v15Sha1 };
        assert!(!salt.public.verify(&msg, &sig, wrong).unwrap());
        assert!(!salt.public.verify(b"another message", &sig, algo).unwrap());
        let mut bent = sig.clone();
        bent[100] ^= 0x40;
        assert!(!salt.public.verify(&msg, &bent, algo).unwrap());
    }
}

/// What Salt encrypts for a key (`PublicKey.encrypt`, OAEP) Halite's private key
/// decrypts, under the digest it was made with only.
#[test]
fn salts_oaep_ciphertexts_decrypt() {
    let salt = salt();
    for x in items(&salt.v, "oaep") {
        let algo = EncAlgo::parse(x["algo"].as_str().unwrap()).unwrap();
        let (plain, cipher) = (b64(&x["plain"]), b64(&x["cipher"]));
        assert_eq!(salt.private.decrypt_oaep(&cipher, algo).unwrap(), plain, "{algo:?}, {} bytes", plain.len());
        let other = if algo == EncAlgo::OaepSha1 { EncAlgo::OaepSha224 } else { EncAlgo::OaepSha1 };
        assert!(salt.private.decrypt_oaep(&cipher, other).is_err());
        // The largest message Salt encrypts is the largest Halite's public key takes.
        assert_eq!(salt.public.encrypt_oaep(&plain, algo).unwrap().len(), cipher.len());
    }
}

/// The public PEM of a private key, from OpenSSL and from the storage crate, is the one
/// Salt writes beside it (`salt.pub`).
#[test]
fn public_pem_is_the_same_from_openssl_and_storage() {
    let salt = salt();
    let salt_pem = std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/salt-3008.5/crypto/salt.pem")).unwrap();
    assert_eq!(salt.private.public_pem().unwrap(), salt.public_pem);
    assert_eq!(halite_storage::keys::pair::public_pem_of(&salt_pem).unwrap(), salt.public_pem);
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

/// Salt's Crypticle blobs (`Crypticle.encrypt`: AES-192-CBC, then HMAC-SHA256) decrypt
/// under the same key string, at every padding length; Halite's own blob of each is as
/// long as Salt's; a changed blob is refused.
#[test]
fn crypticle_decrypts_salts_blobs() {
    let salt = salt();
    let c = Crypticle::from_key_string(salt.v["crypticle"]["key_string"].as_str().unwrap()).unwrap();
    let blobs = items(&salt.v["crypticle"], "blobs");
    assert_eq!(blobs.len(), 40, "0 to 39 bytes: every padding length twice");
    for x in blobs {
        let (plain, blob) = (b64(&x["plain"]), b64(&x["blob"]));
        assert_eq!(c.decrypt(&blob).unwrap(), plain, "{} bytes", plain.len());
        assert_eq!(c.encrypt(&plain).unwrap().len(), blob.len());
        for at in [0, 16, blob.len() - 1] {
            let mut bent = blob.clone();
            bent[at] ^= 1;
            assert!(matches!(c.decrypt(&bent), Err(CryptoError::Authentication)), "changed at {at}");
        }
    }
    assert!(Crypticle::generate().decrypt(&b64(&blobs[5]["blob"])).is_err());
}

/// Halite's Crypticle blobs (sealed with the `aes`/`cbc`/`hmac` crates) open with
/// OpenSSL, read as Salt's `Crypticle.decrypt` reads them: the key string's first 24
/// bytes the AES-192 key, the last 32 the HMAC-SHA256 key; the blob an IV, the CBC
/// ciphertext (PKCS#7) and the HMAC of the two.
#[test]
fn crypticle_blobs_open_with_openssl() {
    use openssl::symm::{decrypt, Cipher};
    let salt = salt();
    let key_string = salt.v["crypticle"]["key_string"].as_str().unwrap();
    let raw = base64::engine::general_purpose::STANDARD.decode(key_string).unwrap();
    let (aes_key, hmac_key) = raw.split_at(24);
    let hmac_key = PKey::hmac(hmac_key).unwrap();
    let c = Crypticle::from_key_string(key_string).unwrap();
    for len in 0..40 {
        let plain: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        let blob = c.encrypt(&plain).unwrap();
        let (body, mac) = blob.split_at(blob.len() - 32);
        let mut signer = Signer::new(MessageDigest::sha256(), &hmac_key).unwrap();
        signer.update(body).unwrap();
        assert_eq!(signer.sign_to_vec().unwrap(), mac, "HMAC, {len} bytes");
        let (iv, ct) = body.split_at(16);
        assert_eq!(decrypt(Cipher::aes_192_cbc(), aes_key, Some(iv), ct).unwrap(), plain, "{len} bytes");
    }
}
