//! TCP listeners for the publish and request ports, configured as Salt configures its
//! ZeroMQ sockets (zmq.rs has no socket options, so the listener is built with socket2
//! and handed over): `SO_KEEPALIVE` with the idle/interval/count options (so the master
//! notices minions that vanished without closing), the listen backlog `zmq_backlog`,
//! address reuse, and dual-stack IPv6 when `ipv6` is set on `::`.

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};

/// Keepalive and backlog settings of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenOptions {
    pub backlog: i32,
    pub keepalive: bool,
    /// Seconds idle before the first probe (`tcp_keepalive_idle`); None = system default.
    pub idle: Option<u64>,
    pub interval: Option<u64>,
    pub count: Option<u32>,
}

impl ListenOptions {
    /// The request port: Salt sets keepalive with idle 60 s, interval 15 s, 3 probes.
    pub fn request(backlog: i32) -> Self {
        ListenOptions { backlog, keepalive: true, idle: Some(60), interval: Some(15), count: Some(3) }
    }

    /// The publish port: from `tcp_keepalive*` (Salt: on, idle 300 s, others system default).
    pub fn publish(cfg: &crate::config::MasterConfig) -> Self {
        let num = |k: &str| cfg.raw.get(k).and_then(serde_yaml::Value::as_i64);
        let positive = |v: Option<i64>| v.filter(|x| *x > 0);
        ListenOptions {
            backlog: backlog(cfg),
            keepalive: !matches!(cfg.raw.get("tcp_keepalive"), Some(serde_yaml::Value::Bool(false))),
            idle: positive(num("tcp_keepalive_idle")).or(Some(300)).map(|v| v as u64),
            interval: positive(num("tcp_keepalive_intvl")).map(|v| v as u64),
            count: positive(num("tcp_keepalive_cnt")).map(|v| v as u32),
        }
    }
}

/// `zmq_backlog` (Salt's default 1000).
pub fn backlog(cfg: &crate::config::MasterConfig) -> i32 {
    cfg.raw.get("zmq_backlog").and_then(serde_yaml::Value::as_i64).filter(|b| *b > 0).unwrap_or(1000).min(i32::MAX as i64) as i32
}

/// Binds a non-blocking listener on `interface:port` with `opts`.
pub fn bind(interface: &str, port: u16, ipv6: bool, opts: ListenOptions) -> std::io::Result<TcpListener> {
    let addr: SocketAddr = (interface, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("cannot resolve {interface}")))?;
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(!ipv6)?;
    }
    if opts.keepalive {
        sock.set_keepalive(true)?;
        let mut ka = TcpKeepalive::new();
        if let Some(i) = opts.idle {
            ka = ka.with_time(Duration::from_secs(i));
        }
        if let Some(i) = opts.interval {
            ka = ka.with_interval(Duration::from_secs(i));
        }
        if let Some(c) = opts.count {
            ka = ka.with_retries(c);
        }
        sock.set_tcp_keepalive(&ka)?;
    }
    sock.bind(&addr.into())?;
    sock.listen(opts.backlog)?;
    sock.set_nonblocking(true)?;
    let l: TcpListener = sock.into();
    // Accepted connections inherit SO_KEEPALIVE and the TCP_KEEP* options on Linux.
    debug_assert!(!opts.keepalive || SockRef::from(&l).keepalive().unwrap_or(false));
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalive_backlog_and_inheritance() {
        let l = bind("127.0.0.1", 0, false, ListenOptions::request(64)).unwrap();
        let r = SockRef::from(&l);
        assert!(r.keepalive().unwrap());
        assert_eq!(r.tcp_keepalive_time().unwrap(), Duration::from_secs(60));
        assert_eq!(r.tcp_keepalive_interval().unwrap(), Duration::from_secs(15));
        assert_eq!(r.tcp_keepalive_retries().unwrap(), 3);
        let port = l.local_addr().unwrap().port();
        let _c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        l.set_nonblocking(false).unwrap();
        let (accepted, _) = l.accept().unwrap();
        let a = SockRef::from(&accepted);
        assert!(a.keepalive().unwrap(), "accepted connections inherit keepalive");
        assert_eq!(a.tcp_keepalive_time().unwrap(), Duration::from_secs(60));
        let off = bind("127.0.0.1", 0, false, ListenOptions { backlog: 8, keepalive: false, idle: None, interval: None, count: None }).unwrap();
        assert!(!SockRef::from(&off).keepalive().unwrap());
    }
}
