//! Helpers the in-process tests with real sockets share.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A free port on a loopback address (127.0.0.x).
pub fn free_addr(ip: &str) -> SocketAddr {
    std::net::TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap()
}

/// Members `1..=n` on 127.0.0.1 ..= 127.0.0.n, each on a free port.
pub fn member_addrs(n: u64) -> std::collections::HashMap<u64, SocketAddr> {
    (1..=n).map(|i| (i, free_addr(&format!("127.0.0.{i}")))).collect()
}

/// Polls `f` every 50 ms until it holds; fails the test naming `what` after `secs`.
pub fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}
