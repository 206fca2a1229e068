//! The master's own work on a job return, per call, without sockets or storage: the
//! request envelope decoded, its AES load opened (HMAC, AES-CBC, the inner map read in
//! place and the bytes to store cut out of it), and the reply sealed. Two loads as a
//! salt-minion 3008.5 sends them (`tok` a 256-byte signature): a `test.ping` return, and
//! a `state.apply` return of 40 states (about 11 KB).
//!
//! `cargo bench -p halite-benches --bench request`. Results: `docs/benchmarks.md`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use rmpv::Value;

use halite_master::wire::crypto::Crypticle;
use halite_master::wire::envelope;
use halite_master::wire::payload::map;

const NONCE: &str = "0123456789abcdef0123456789abcdef";
const ID: &str = "minion-0001.example.com";

/// A `state.apply` return of `n` states, each as Salt reports a `file.managed` in the
/// correct state.
fn state_return(n: usize) -> Value {
    Value::Map(
        (0..n)
            .map(|i| {
                let path = format!("/etc/halite/file-{i}.conf");
                let state = map([
                    ("name", Value::from(path.as_str())),
                    ("changes", Value::Map(vec![])),
                    ("result", Value::Boolean(true)),
                    ("comment", Value::from(format!("File {path} is in the correct state").as_str())),
                    ("__sls__", Value::from("base.files")),
                    ("__run_num__", Value::from(i as u64)),
                    ("start_time", Value::from("08:12:44.123456")),
                    ("duration", Value::F64(1.234)),
                    ("__id__", Value::from(path.as_str())),
                ]);
                (Value::from(format!("file_|-{path}_|-{path}_|-managed").as_str()), state)
            })
            .collect(),
    )
}

fn request_path(c: &mut Criterion) {
    let session = Crypticle::generate();
    for (group, fun, ret) in [("job return (test.ping)", "test.ping", Value::Boolean(true)), ("job return (state.apply, 40 states)", "state.apply", state_return(40))] {
        let body = halite_benches::return_body(&session, ID, "20261128044512345678", NONCE, fun, ret);
        let env = envelope::decode(&body, 1 << 20).expect("decode");
        let mut g = c.benchmark_group(group);
        g.bench_function("envelope decode", |b| b.iter(|| envelope::decode(&body, 1 << 20).expect("decode")));
        g.bench_function("open the AES load (the bytes to store included)", |b| b.iter(|| envelope::open_aes(env.ciphertext, ID, &session).expect("open")));
        g.bench_function("seal the reply", |b| b.iter(|| envelope::seal_reply(&session, NONCE, &Value::Nil).expect("seal")));
        g.finish();
    }
}

fn config() -> Criterion {
    Criterion::default().sample_size(50).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2))
}

criterion_group! { name = benches; config = config(); targets = request_path }
criterion_main!(benches);
