//! The health endpoint's HTTP over real sockets: the answers' shape, and every bound.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// Serves a fixed answer per path (`/ok`: 200, else 404) within `bounds`; the address.
async fn start(bounds: Bounds) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let answer = |m: &Method, path: &str| -> Answer {
        if m != Method::GET && m != Method::HEAD {
            return (405, "text/plain", b"GET or HEAD only\n".to_vec());
        }
        match path {
            "/ok" => (200, "text/plain; version=0.0.4; charset=utf-8", b"m 1\n".to_vec()),
            _ => (503, "text/plain", b"behind\n".to_vec()),
        }
    };
    tokio::spawn(serve_with(l, bounds, Arc::new(answer)));
    addr
}

fn quick() -> Bounds {
    Bounds { io_timeout: Duration::from_millis(500), ..BOUNDS }
}

/// Sends `bytes` and reads until the server closes (bounded): everything it sent.
async fn exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(bytes).await;
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.expect("the server closes the connection");
    if let Err(e) = read {
        // A reset after an answer to a head the server did not read to its end.
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn refused(reason: &str) -> u64 {
    let line = format!("halite_refused_total{{port=\"health\",reason=\"{reason}\"}} ");
    crate::metrics::encode().lines().find_map(|l| l.strip_prefix(&line).and_then(|v| v.trim().parse().ok())).unwrap_or(0)
}

#[tokio::test]
async fn answers_keep_their_status_line_headers_and_body() {
    let addr = start(quick()).await;
    let t = exchange(addr, b"GET /ok?x=1 HTTP/1.0\r\n\r\n").await;
    assert!(t.starts_with("HTTP/1.0 200 OK\r\n"), "{t}");
    for h in ["Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n", "Content-Length: 4\r\n", "Cache-Control: no-store\r\n", "Connection: close\r\n"] {
        assert!(t.contains(h), "{h} in {t}");
    }
    assert!(t.ends_with("\r\n\r\nm 1\n"), "{t}");
    let t = exchange(addr, b"GET /other HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert!(t.starts_with("HTTP/1.1 503 Service Unavailable\r\n") && t.ends_with("\r\n\r\nbehind\n"), "one answer on HTTP/1.1 too, then closed: {t}");
    // HEAD: the length of the body, not the body.
    let t = exchange(addr, b"HEAD /other HTTP/1.1\r\n\r\n").await;
    assert!(t.contains("Content-Length: 7\r\n") && t.ends_with("\r\n\r\n"), "{t}");
    let t = exchange(addr, b"POST /ok HTTP/1.0\r\nContent-Length: 2\r\n\r\nab").await;
    assert!(t.starts_with("HTTP/1.0 405 Method Not Allowed\r\n") && t.ends_with("GET or HEAD only\n"), "{t}");
}

#[tokio::test]
async fn heads_that_are_not_http_are_refused_and_counted() {
    let addr = start(quick()).await;
    let before = refused("bad_request_line");
    for bad in [&b"hello\r\n\r\n"[..], b"GET /a SPDY/3\r\n\r\n", b"\xff\xfe /a HTTP/1.0\r\n\r\n", b"\x01"] {
        let t = exchange(addr, bad).await;
        assert!(t.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{:?}: {t}", String::from_utf8_lossy(bad));
    }
    assert!(refused("bad_request_line") >= before + 4);
    // A method in lower case is a method, and not GET.
    assert!(exchange(addr, b"get /ok HTTP/1.0\r\n\r\n").await.starts_with("HTTP/1.0 405 "));
}

#[tokio::test]
async fn a_head_over_its_bytes_or_headers_is_refused() {
    let addr = start(quick()).await;
    let before = refused("head_too_long");
    let mut long = b"GET /ok HTTP/1.0\r\nX: ".to_vec();
    long.extend(std::iter::repeat_n(b'a', BOUNDS.max_head));
    long.extend_from_slice(b"\r\n\r\n");
    let endless = vec![b'A'; 1 << 20];
    let mut many = b"GET /ok HTTP/1.0\r\n".to_vec();
    for i in 0..=BOUNDS.max_headers {
        many.extend_from_slice(format!("h{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    for bad in [long, endless, many] {
        let t = exchange(addr, &bad).await;
        assert!(t.is_empty() || t.starts_with("HTTP/1.1 431 "), "{t}");
    }
    assert!(refused("head_too_long") >= before + 3);
    // Just under the bound is served.
    let mut fits = b"GET /ok HTTP/1.0\r\nX: ".to_vec();
    fits.extend(std::iter::repeat_n(b'a', BOUNDS.max_head - 100));
    fits.extend_from_slice(b"\r\n\r\n");
    assert!(exchange(addr, &fits).await.starts_with("HTTP/1.0 200 OK\r\n"));
}

#[tokio::test]
async fn idle_and_slow_heads_are_closed_after_the_timeout() {
    let addr = start(quick()).await;
    let before = refused("timeout");
    // Nothing sent at all, and a head sent one byte at a time, never finished.
    let idle = TcpStream::connect(addr).await.unwrap();
    let mut slow = TcpStream::connect(addr).await.unwrap();
    let slow_writer = async {
        for b in b"GET /ok HTTP/1.1\r\nX: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
            if slow.write_all(&[*b]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(tokio::time::timeout(Duration::from_secs(10), slow_writer).await.unwrap(), "the slow head was closed before it was sent in full");
    let mut idle = idle;
    let mut out = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), idle.read_to_end(&mut out)).await.expect("the idle connection is closed");
    assert!(n.is_err() || out.is_empty(), "closed without an answer: {out:?}");
    assert!(refused("timeout") >= before + 2);
}

#[tokio::test]
async fn connections_over_the_cap_are_closed_at_once() {
    let addr = start(Bounds { max_connections: 2, io_timeout: Duration::from_secs(30), ..BOUNDS }).await;
    let before = refused("too_many_connections");
    let _held = [TcpStream::connect(addr).await.unwrap(), TcpStream::connect(addr).await.unwrap()];
    // The two held connections are accepted before the third (one accept loop, in order).
    let t = exchange(addr, b"GET /ok HTTP/1.0\r\n\r\n").await;
    assert!(t.is_empty(), "{t}");
    assert!(refused("too_many_connections") > before);
}
