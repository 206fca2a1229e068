//! The RSA and AES operations on the master's request path, per call.
//!
//! `cargo bench -p halite-benches --bench crypto`. The public-key parse is compared
//! with OpenSSL's generic decoder, which Halite used before (and still falls back to).

use criterion::{criterion_group, criterion_main, Criterion};

use halite_master::wire::crypto::{Crypticle, EncAlgo, PrivateKey, PublicKey, SigAlgo};

fn crypto(c: &mut Criterion) {
    let key = PrivateKey::generate(2048).expect("key");
    let pem = key.public_pem().expect("pem");
    let public = PublicKey::from_pem(&pem).expect("public");
    let tok = key.x931_sign(b"salt").expect("tok");
    let aes = Crypticle::generate();
    let blob = aes.encrypt(&[7u8; 200]).expect("encrypt");
    let mut g = c.benchmark_group("crypto");
    g.bench_function("public key parse (Halite)", |b| b.iter(|| PublicKey::from_pem(&pem).expect("parse")));
    g.bench_function("public key parse (OpenSSL decoder)", |b| b.iter(|| openssl::pkey::PKey::public_key_from_pem(&pem).expect("parse")));
    g.bench_function("sign PKCS1v15-SHA1 (auth reply)", |b| b.iter(|| key.sign(b"reply", SigAlgo::Pkcs1v15Sha1).expect("sign")));
    g.bench_function("encrypt OAEP-SHA1 (auth aes/session)", |b| b.iter(|| public.encrypt_oaep(&[1u8; 76], EncAlgo::OaepSha1).expect("encrypt")));
    g.bench_function("X9.31 recover (request tok)", |b| b.iter(|| public.x931_recover(&tok).expect("recover")));
    g.bench_function("Crypticle encrypt 200 B", |b| b.iter(|| aes.encrypt(&[7u8; 200]).expect("encrypt")));
    g.bench_function("Crypticle decrypt 200 B", |b| b.iter(|| aes.decrypt(&blob).expect("decrypt")));
    g.finish();
}

criterion_group!(benches, crypto);
criterion_main!(benches);
