//! Helpers shared by Halite's benchmarks (criterion benches in `benches/` and the
//! `halite-bench` binary).

use std::path::Path;

pub mod cluster;
pub mod floor;
pub mod floor_work;
pub mod gitfs_serve;
pub mod restart;
pub mod work;

use rmpv::Value;

use halite_master::wire::crypto::{Crypticle, PICKLE};
use halite_master::wire::payload::{bin, encode, map};
use halite_storage::keys::BankState;
use halite_storage::mmap_cache::{Geometry, MmapWriter};

/// A 450-byte SPKI-shaped public key, unique per `i`.
pub fn fake_pub(i: u64) -> String {
    let body: String = format!("{i:016}").repeat(24).chars().take(392).collect();
    let lines: Vec<&str> = body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap_or("")).collect();
    format!("-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----", lines.join("\n"))
}

/// Fills an mmap_key `keys` bank with `n` accepted keys `minion-00000000`...
pub fn fill_mmap(path: &Path, geo: Geometry, n: u64) {
    let mut w = MmapWriter::open(path, geo, false).expect("open mmap");
    for i in 0..n {
        let mut v = vec![BankState::Accepted.mmap_byte()];
        v.extend_from_slice(fake_pub(i).as_bytes());
        assert!(w.put(format!("minion-{i:08}").as_bytes(), &v, 1).expect("put"));
    }
    w.finish().expect("finish");
}

/// Random bytes (xorshift), so that RocksDB's compression cannot shrink them.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The body of a job return as a salt-minion 3008.5 sends it: an AES load under the
/// minion's `session` key, with a 256-byte `tok`.
pub fn return_body(session: &Crypticle, id: &str, jid: &str, nonce: &str, fun: &str, ret: Value) -> Vec<u8> {
    let inner = map([
        ("cmd", Value::from("_return")),
        ("id", Value::from(id)),
        ("success", Value::Boolean(true)),
        ("return", ret),
        ("retcode", Value::from(0)),
        ("jid", Value::from(jid)),
        ("fun", Value::from(fun)),
        ("fun_args", Value::Array(vec![])),
        ("user", Value::from("root")),
        ("nonce", Value::from(nonce)),
        ("tok", bin(vec![0x5a; 256])),
        ("ts", Value::from(1_795_000_000)),
    ]);
    let mut plain = PICKLE.to_vec();
    plain.extend_from_slice(&encode(&inner));
    let load = session.encrypt(&plain).expect("encrypt");
    encode(&map([
        ("enc", Value::from("aes")),
        ("load", bin(load)),
        ("id", Value::from(id)),
        ("version", Value::from(3)),
        ("enc_algo", Value::from("OAEP-SHA224")),
        ("sig_algo", Value::from("PKCS1v15-SHA224")),
    ]))
}
