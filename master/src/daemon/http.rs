//! The little HTTP the health endpoint needs (`health.rs`): read one request head,
//! answer with one HTTP/1.0 response and close. No keep-alive, no bodies in, no chunking.
//!
//! The head comes from anyone who can reach the port: [`parse_head`] looks at no more
//! than [`MAX_HEAD`] bytes, takes only the request line (method, path) and ignores the
//! headers; anything else is [`Head::Bad`] with a short reason (answered 400).

/// Most bytes of a request head read before it is refused.
pub const MAX_HEAD: usize = 4096;

/// What the bytes read so far hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Head<'a> {
    /// No blank line yet (and fewer than [`MAX_HEAD`] bytes): read more.
    Incomplete,
    /// A request line: method and path (the query string cut off).
    Request { method: &'a str, path: &'a str },
    /// Not a request this server takes (the reason is a fixed word, safe to log).
    Bad(&'static str),
}

/// Reads a request head from the bytes received so far.
pub fn parse_head(buf: &[u8]) -> Head<'_> {
    let end = match find(buf, b"\r\n\r\n").or_else(|| find(buf, b"\n\n")) {
        Some(e) => e,
        None if buf.len() >= MAX_HEAD => return Head::Bad("head_too_long"),
        None => return Head::Incomplete,
    };
    if end > MAX_HEAD {
        return Head::Bad("head_too_long");
    }
    let line_end = find(&buf[..end], b"\n").unwrap_or(end);
    let Ok(line) = std::str::from_utf8(&buf[..line_end]) else { return Head::Bad("not_utf8") };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Head::Bad("bad_request_line");
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) || !target.starts_with('/') {
        return Head::Bad("bad_request_line");
    }
    let path = target.split('?').next().unwrap_or(target);
    Head::Request { method, path }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The reason phrase of the statuses this server sends.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// One complete HTTP/1.0 response; `head_only` (a `HEAD` request) leaves the body out
/// but keeps its length.
pub fn response(status: u16, content_type: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.0 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        assert_eq!(parse_head(b"GET /ready HTTP/1.0\r\n\r\n"), Head::Request { method: "GET", path: "/ready" });
        assert_eq!(parse_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nUser-Agent: b\r\n\r\n"), Head::Request { method: "GET", path: "/metrics" });
        assert_eq!(parse_head(b"HEAD /alive HTTP/1.1\n\n"), Head::Request { method: "HEAD", path: "/alive" });
        assert_eq!(parse_head(b"GET /ready HTTP/1.0\r\n"), Head::Incomplete);
        assert_eq!(parse_head(b""), Head::Incomplete);
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [&b"GET\r\n\r\n"[..], b"GET /a\r\n\r\n", b"get /a HTTP/1.0\r\n\r\n", b"GET a HTTP/1.0\r\n\r\n", b"GET /a SPDY/3\r\n\r\n", b"GET /a HTTP/1.0 x\r\n\r\n", b"\xff\xfe /a HTTP/1.0\r\n\r\n", b"\r\n\r\n"] {
            assert!(matches!(parse_head(bad), Head::Bad(_)), "{:?}", String::from_utf8_lossy(bad));
        }
        let long = vec![b'A'; MAX_HEAD];
        assert_eq!(parse_head(&long), Head::Bad("head_too_long"));
        let mut late = b"GET /ready HTTP/1.0\r\nX: ".to_vec();
        late.extend(std::iter::repeat_n(b'a', MAX_HEAD));
        late.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse_head(&late), Head::Bad("head_too_long"));
    }

    #[test]
    fn responses() {
        let r = response(503, "text/plain", b"behind\n", false);
        let t = String::from_utf8(r).unwrap();
        assert!(t.starts_with("HTTP/1.0 503 Service Unavailable\r\n"), "{t}");
        assert!(t.contains("Content-Length: 7\r\n"));
        assert!(t.ends_with("\r\n\r\nbehind\n"));
        let h = String::from_utf8(response(200, "text/plain", b"ok\n", true)).unwrap();
        assert!(h.contains("Content-Length: 3\r\n") && h.ends_with("\r\n\r\n"), "{h}");
    }
}
