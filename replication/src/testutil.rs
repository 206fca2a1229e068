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

/// A tmpfs of `mib` MiB mounted over a directory, unmounted when dropped: a small
/// filesystem a test fills. Mounting needs root; without it (not under CI) the test is
/// skipped, saying so.
pub struct Tmpfs(pub std::path::PathBuf);

impl Tmpfs {
    pub fn mount(at: &std::path::Path, mib: u64, test: &str) -> Option<Tmpfs> {
        let root = std::fs::read_to_string("/proc/self/status").unwrap_or_default().lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
        if !root {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{test}: mounting a tmpfs needs root under CI");
            eprintln!("SKIPPED {test}: mounting a tmpfs needs root");
            return None;
        }
        std::fs::create_dir_all(at).unwrap();
        let ok = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"]).arg(at).status().unwrap().success();
        assert!(ok, "mount -t tmpfs over {}", at.display());
        Some(Tmpfs(at.to_path_buf()))
    }

    /// Writes a file until the filesystem has no byte left.
    pub fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
        while f.write_all(&block[..1]).is_ok() {}
    }

    /// Frees what [`Tmpfs::fill`] took.
    pub fn free(&self) {
        std::fs::remove_file(self.0.join("filler")).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
