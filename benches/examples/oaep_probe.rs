use std::time::Instant;
use openssl::rsa::{Padding, Rsa};
use openssl::pkey::PKey;
use halite_master::wire::crypto::{EncAlgo, PrivateKey, PublicKey};
fn main() {
    let key = PrivateKey::generate(2048).unwrap();
    let pem = key.public_pem().unwrap();
    let public = PublicKey::from_pem(&pem).unwrap();
    let rsa = Rsa::public_key_from_pem(&pem).unwrap();
    let pk = PKey::from_rsa(rsa.clone()).unwrap();
    let data = [1u8; 76];
    let n = 20000;
    for round in 0..2 {
        let t = Instant::now();
        for _ in 0..n { public.encrypt_oaep(&data, EncAlgo::OaepSha1).unwrap(); }
        println!("{round} encrypter (halite): {:.2} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
        let t = Instant::now();
        for _ in 0..n { let p = PublicKey::from_pem(&pem).unwrap(); p.encrypt_oaep(&data, EncAlgo::OaepSha1).unwrap(); }
        println!("{round} parse + encrypter: {:.2} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
        let t = Instant::now();
        for _ in 0..n { let mut out = vec![0u8; 256]; rsa.public_encrypt(&data, &mut out, Padding::PKCS1_OAEP).unwrap(); }
        println!("{round} legacy RSA_public_encrypt OAEP: {:.2} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
        let t = Instant::now();
        for _ in 0..n {
            let mut c = openssl::pkey_ctx::PkeyCtx::new(&pk).unwrap();
            c.encrypt_init().unwrap(); c.set_rsa_padding(Padding::PKCS1_OAEP).unwrap();
            let mut out = vec![]; c.encrypt_to_vec(&data, &mut out).unwrap();
        }
        println!("{round} PkeyCtx default md: {:.2} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
        let t = Instant::now();
        let mut c = openssl::pkey_ctx::PkeyCtx::new(&pk).unwrap();
        c.encrypt_init().unwrap(); c.set_rsa_padding(Padding::PKCS1_OAEP).unwrap();
        for _ in 0..n { let mut out = vec![]; c.encrypt_to_vec(&data, &mut out).unwrap(); }
        println!("{round} PkeyCtx reused: {:.2} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
}
