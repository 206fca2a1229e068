//! Loopback addresses and ports of a test's own.
//!
//! Each test takes a block of addresses on 127.0.0.0/8 that no other test of the run
//! uses, and ports that this process has never handed out before: a port the kernel
//! picks for a probe is released before the master binds it, so the kernel could pick it
//! again for the next probe; remembering every port handed out rules that out.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

static NEXT_BLOCK: AtomicU32 = AtomicU32::new(1);
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// `n` loopback addresses that no other test of this run uses: `127.A.B.1` to
/// `127.A.B.n`, where `B` is taken once per call and `A` comes from this process's PID
/// (100 to 249, never 0, so never the 127.0.0.x that other programs use).
pub fn loopback(n: u8) -> Vec<String> {
    let block = NEXT_BLOCK.fetch_add(1, Ordering::Relaxed);
    assert!(block < 255 && n > 0 && n < 255, "out of loopback blocks");
    let a = 100 + std::process::id() % 150;
    (1..=n).map(|i| format!("127.{a}.{block}.{i}")).collect()
}

/// One loopback address of the test's own.
pub fn one_ip() -> String {
    loopback(1).remove(0)
}

/// A TCP port free on every one of `ips` (the kernel picks it on the first) that no
/// earlier call returned.
pub fn port_free_on(ips: &[&str]) -> u16 {
    for _ in 0..1000 {
        let p = std::net::TcpListener::bind((ips[0], 0)).expect("bind loopback").local_addr().expect("addr").port();
        if !ips[1..].iter().all(|ip| std::net::TcpListener::bind((*ip, p)).is_ok()) {
            continue;
        }
        let mut taken = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if taken.get_or_insert_with(HashSet::new).insert(p) {
            return p;
        }
    }
    panic!("no port free on all of {ips:?}");
}

/// Two distinct ports free on every one of `ips`.
pub fn two_ports_on(ips: &[&str]) -> (u16, u16) {
    (port_free_on(ips), port_free_on(ips))
}
