//! The master's own work on a job return, per call, without sockets or storage: the
//! request envelope decoded, its AES load opened (HMAC, AES-CBC, the inner msgpack), and
//! the reply sealed. The load is what a salt-minion 3008.5 sends for `test.ping`
//! (`tok` a 256-byte signature).
//!
//! `cargo bench -p halite-benches --bench request`. Results: `docs/benchmarks.md`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use rmpv::Value;

use halite_master::wire::crypto::{Crypticle, PICKLE};
use halite_master::wire::envelope;
use halite_master::wire::payload::{bin, encode, map};

const NONCE: &str = "0123456789abcdef0123456789abcdef";
const ID: &str = "minion-0001.example.com";

/// The body of a `test.ping` return as a salt-minion 3008.5 sends it.
fn return_body(session: &Crypticle) -> Vec<u8> {
    let inner = map([
        ("cmd", Value::from("_return")),
        ("id", Value::from(ID)),
        ("success", Value::Boolean(true)),
        ("return", Value::Boolean(true)),
        ("retcode", Value::from(0)),
        ("jid", Value::from("20261128044512345678")),
        ("fun", Value::from("test.ping")),
        ("fun_args", Value::Array(vec![])),
        ("user", Value::from("root")),
        ("nonce", Value::from(NONCE)),
        ("tok", bin(vec![0x5a; 256])),
        ("ts", Value::from(1_795_000_000)),
    ]);
    let mut plain = PICKLE.to_vec();
    plain.extend_from_slice(&encode(&inner));
    let load = session.encrypt(&plain).expect("encrypt");
    encode(&map([
        ("enc", Value::from("aes")),
        ("load", bin(load)),
        ("id", Value::from(ID)),
        ("version", Value::from(3)),
        ("enc_algo", Value::from("OAEP-SHA224")),
        ("sig_algo", Value::from("PKCS1v15-SHA224")),
    ]))
}

fn request_path(c: &mut Criterion) {
    let session = Crypticle::generate();
    let body = return_body(&session);
    let env = envelope::decode(&body, 1 << 20).expect("decode");
    let mut g = c.benchmark_group("job return (test.ping)");
    g.bench_function("envelope decode", |b| b.iter(|| envelope::decode(&body, 1 << 20).expect("decode")));
    g.bench_function("open the AES load", |b| b.iter(|| envelope::open_aes(env.ciphertext, ID, &session).expect("open")));
    let opened = envelope::open_aes(env.ciphertext, ID, &session).expect("open");
    g.bench_function("encode the stored load", |b| b.iter(|| encode(&opened.inner)));
    g.bench_function("seal the reply", |b| b.iter(|| envelope::seal_reply(&session, NONCE, &Value::Nil).expect("seal")));
    g.finish();
}

fn config() -> Criterion {
    Criterion::default().sample_size(50).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2))
}

criterion_group! { name = benches; config = config(); targets = request_path }
criterion_main!(benches);
