//! Salt's cryptography on the master's request path, per call, with each public-key
//! operation measured on both libraries: the `rsa` crate (which reads Halite's public
//! keys) and OpenSSL (which does every RSA operation: "openssl" is Halite's own
//! `PublicKey` / `PrivateKey`). The `rsa` arms call the crate directly, for the record.
//!
//! `cargo bench -p halite-benches --bench crypto`. Results: `docs/benchmarks.md`.
//!
//! The private-key operations stay on OpenSSL whatever they cost: the `rsa` crate's are
//! open to the Marvin timing attack (RUSTSEC-2023-0071). Two of them are measured on
//! `rsa` too, for the record only.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use openssl::pkey::PKey;
use openssl::rsa::Padding;
use rsa::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _};
use rsa::BigUint;
use sha1::{Digest as _, Sha1};

use halite_master::wire::crypto::{Crypticle, EncAlgo, PrivateKey, PublicKey, SigAlgo};

/// OpenSSL's `RSA_X931_PADDING`.
fn x931() -> Padding {
    Padding::from_raw(5)
}

fn public_key_operations(c: &mut Criterion) {
    let key = PrivateKey::generate(2048).expect("key");
    let pem = key.public_pem().expect("pem");
    let public = PublicKey::from_pem(&pem).expect("public");
    let rsa_public = rsa::RsaPublicKey::from_public_key_pem(std::str::from_utf8(&pem).expect("utf-8")).expect("rsa public");
    let tok = key.x931_sign(b"salt").expect("tok");
    let reply_sig = key.sign(b"reply", SigAlgo::Pkcs1v15Sha1).expect("sign");
    let aes = [1u8; 76];

    let mut g = c.benchmark_group("public key parse (SPKI PEM)");
    g.bench_function("rsa (Halite: then n and e into OpenSSL)", |b| b.iter(|| PublicKey::from_pem(&pem).expect("parse")));
    g.bench_function("openssl decoder", |b| b.iter(|| PKey::public_key_from_pem(&pem).expect("parse")));
    g.finish();

    for algo in [EncAlgo::OaepSha1, EncAlgo::OaepSha224] {
        let mut g = c.benchmark_group(format!("encrypt {} (auth aes/session)", algo.name()));
        g.bench_function("openssl (Halite)", |b| b.iter(|| public.encrypt_oaep(&aes, algo).expect("encrypt")));
        match algo {
            EncAlgo::OaepSha1 => g.bench_function("rsa", |b| b.iter(|| rsa_public.encrypt(&mut rand::thread_rng(), rsa::Oaep::new::<Sha1>(), &aes).expect("encrypt"))),
            EncAlgo::OaepSha224 => g.bench_function("rsa", |b| b.iter(|| rsa_public.encrypt(&mut rand::thread_rng(), rsa::Oaep::new::<sha2::Sha224>(), &aes).expect("encrypt"))),
        };
        g.finish();
    }

    let mut g = c.benchmark_group("X9.31 recover (request tok)");
    g.bench_function("openssl (Halite)", |b| b.iter(|| public.x931_recover(&tok).expect("recover")));
    // The raw public operation only (the unpadding is a few byte compares).
    let s_num = BigUint::from_bytes_be(&tok);
    g.bench_function("rsa (raw operation)", |b| b.iter(|| rsa::hazmat::rsa_encrypt(&rsa_public, &s_num).expect("recover")));
    g.finish();

    // What every AES request costs: read the accepted key, check `tok`.
    let mut g = c.benchmark_group("AES request: parse key + X9.31 recover");
    g.bench_function("Halite (rsa parse, openssl recover)", |b| b.iter(|| PublicKey::from_pem(&pem).expect("parse").x931_recover(&tok).expect("recover")));
    g.bench_function("openssl only", |b| {
        b.iter(|| {
            let rsa = PKey::public_key_from_pem(&pem).expect("parse").rsa().expect("rsa");
            let mut out = vec![0u8; rsa.size() as usize];
            let n = rsa.public_decrypt(&tok, &mut out, x931()).expect("recover");
            out.truncate(n);
            out
        })
    });
    g.finish();

    let mut g = c.benchmark_group("verify PKCS1v15-SHA1");
    g.bench_function("openssl (Halite)", |b| b.iter(|| assert!(public.verify(b"reply", &reply_sig, SigAlgo::Pkcs1v15Sha1).expect("verify"))));
    let reply_digest = Sha1::digest(b"reply");
    g.bench_function("rsa", |b| b.iter(|| rsa_public.verify(rsa::Pkcs1v15Sign::new::<Sha1>(), &reply_digest, &reply_sig).expect("verify")));
    g.finish();
}

fn private_key_operations(c: &mut Criterion) {
    let key = PrivateKey::generate(2048).expect("key");
    let public = key.public_key().expect("public");
    let token = public.encrypt_oaep(&[2u8; 44], EncAlgo::OaepSha1).expect("encrypt");
    // The same key in the `rsa` crate, for the comparison only.
    let pkcs8 = openssl::pkey::PKey::private_key_from_pem(&key.to_pem().expect("pem")).expect("pkey").private_key_to_pem_pkcs8().expect("pkcs8");
    let rsa_private = rsa::RsaPrivateKey::from_pkcs8_pem(std::str::from_utf8(&pkcs8).expect("utf-8")).expect("rsa private");
    let digest = Sha1::digest(b"reply");

    let mut g = c.benchmark_group("sign PKCS1v15-SHA1 (auth reply)");
    g.bench_function("openssl", |b| b.iter(|| key.sign(b"reply", SigAlgo::Pkcs1v15Sha1).expect("sign")));
    g.bench_function("rsa (not used: RUSTSEC-2023-0071)", |b| {
        b.iter(|| rsa_private.sign(rsa::Pkcs1v15Sign::new::<Sha1>(), &digest).expect("sign"))
    });
    g.finish();

    let mut g = c.benchmark_group("decrypt OAEP-SHA1 (auth token)");
    g.bench_function("openssl", |b| b.iter(|| key.decrypt_oaep(&token, EncAlgo::OaepSha1).expect("decrypt")));
    g.bench_function("rsa (not used: RUSTSEC-2023-0071)", |b| {
        b.iter(|| rsa_private.decrypt(rsa::Oaep::new::<Sha1>(), &token).expect("decrypt"))
    });
    g.finish();

    let mut g = c.benchmark_group("X9.31 sign (tok, auth sig)");
    g.bench_function("openssl", |b| b.iter(|| key.x931_sign(b"salt").expect("sign")));
    g.finish();
}

fn crypticle(c: &mut Criterion) {
    let aes = Crypticle::generate();
    let blob = aes.encrypt(&[7u8; 200]).expect("encrypt");
    let mut g = c.benchmark_group("Crypticle 200 B");
    g.bench_function("encrypt", |b| b.iter(|| aes.encrypt(&[7u8; 200]).expect("encrypt")));
    g.bench_function("decrypt", |b| b.iter(|| aes.decrypt(&blob).expect("decrypt")));
    g.finish();
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3))
}

criterion_group! { name = benches; config = config(); targets = public_key_operations, private_key_operations, crypticle }
criterion_main!(benches);
