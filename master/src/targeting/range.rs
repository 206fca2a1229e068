//! Range targets (`-R`, `R@` in a compound): a SECO range server, named by the
//! `range_server` master option (`host[:port]`, Salt's default `range:80`), expands a
//! range expression into host names over HTTP, as Salt's `seco.range` client asks it:
//! `GET /range/list?<expression, percent-encoded>`, answered `200` with one name a line
//! (an error is a non-200 status or a `RangeException` header).
//!
//! Salt's `LocalClient` turns a `range` target into a `list` of those names before it
//! publishes; Halite does the same, and also expands every `R@expr` word of a compound
//! target into `( L@a,b )`, so minions never need a range client or a `range_server`
//! of their own (Salt sends `R@` to the minions, which match it with theirs).
//!
//! This module is the pure part: the request path, the reading of an answer (bounded:
//! the caller stops reading at [`MAX_RESPONSE`] bytes, at most [`MAX_NAMES`] names, each
//! a plausible minion id) and the rewriting of a target with a given expansion. The
//! daemon does the network I/O (`crate::daemon::range_client`).

use serde_json::Value as J;

/// Most bytes of a range server's answer (head and body) read.
pub const MAX_RESPONSE: usize = 4 << 20;

/// Most names one expansion may give.
pub const MAX_NAMES: usize = 100_000;

/// Longest name taken from an answer.
pub const MAX_NAME_LEN: usize = 1024;

/// Whether a request is a publish whose target needs the range server.
pub fn needs_range(tgt: &J, tgt_type: &str) -> bool {
    match (tgt, tgt_type) {
        (J::String(_), "range") => true,
        (J::String(t), "compound") => t.split_whitespace().any(|w| w.starts_with("R@")),
        _ => false,
    }
}

/// The request target of a range query: `/range/list?` and the expression, encoded as
/// Python's `urllib.parse.quote` does (letters, digits, `_.-~/` kept).
pub fn request_path(expr: &str) -> String {
    let mut out = String::from("/range/list?");
    for b in expr.bytes() {
        if b.is_ascii_alphanumeric() || b"_.-~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reads a whole HTTP answer (head and body, as received until the server closed):
/// the names it lists, sorted, or why it is not an expansion.
pub fn parse_response(bytes: &[u8]) -> Result<Vec<String>, String> {
    if bytes.len() > MAX_RESPONSE {
        return Err(format!("answer longer than {MAX_RESPONSE} bytes"));
    }
    let (head_end, sep) = match find(bytes, b"\r\n\r\n") {
        Some(i) => (i, 4),
        None => (find(bytes, b"\n\n").ok_or("no complete HTTP head")?, 2),
    };
    let head = std::str::from_utf8(&bytes[..head_end]).map_err(|_| "HTTP head is not text")?;
    let mut lines = head.lines();
    let status = lines.next().unwrap_or("");
    let mut parts = status.split_whitespace();
    let (proto, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !proto.starts_with("HTTP/") {
        return Err("not an HTTP answer".into());
    }
    if code != "200" {
        return Err(format!("got HTTP status {}", status.trim_start_matches(proto).trim()));
    }
    for h in lines {
        let Some((name, value)) = h.split_once(':') else { continue };
        let name = name.trim();
        if name.eq_ignore_ascii_case("RangeException") {
            return Err(format!("RangeException: {}", value.trim()));
        }
        if name.eq_ignore_ascii_case("Transfer-Encoding") && !value.trim().eq_ignore_ascii_case("identity") {
            return Err(format!("unsupported Transfer-Encoding {}", value.trim()));
        }
    }
    let body = std::str::from_utf8(&bytes[head_end + sep..]).map_err(|_| "the list of names is not UTF-8")?;
    let mut names = Vec::new();
    for line in body.lines() {
        let name = line.trim_end();
        if name.is_empty() {
            continue;
        }
        if name.len() > MAX_NAME_LEN || name.chars().any(|c| c.is_whitespace() || c.is_control() || c == ',') {
            return Err(format!("not a minion id: {:?}", name.chars().take(64).collect::<String>()));
        }
        if names.len() == MAX_NAMES {
            // Counted before duplicates are dropped: the bound is on the lines read.
            return Err(format!("more than {MAX_NAMES} names"));
        }
        names.push(name.to_string());
    }
    names.sort();
    names.dedup();
    Ok(names)
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// The target with its range parts expanded by `expand` (the range server's answer for
/// one expression): a `range` target becomes a `list`; in a `compound` each `R@expr`
/// word becomes `( L@names )` (a word matching nothing when the expansion is empty).
pub fn rewrite(tgt: &str, tgt_type: &str, expand: &mut dyn FnMut(&str) -> Result<Vec<String>, String>) -> Result<(J, String), String> {
    match tgt_type {
        "range" => Ok((J::Array(expand(tgt.trim())?.into_iter().map(J::String).collect()), "list".into())),
        "compound" => {
            let mut out = Vec::new();
            for w in tgt.split_whitespace() {
                match w.strip_prefix("R@") {
                    Some(expr) => {
                        let names = expand(expr)?;
                        out.push(format!("( L@{} )", names.join(",")));
                    }
                    None => out.push(w.to_string()),
                }
            }
            Ok((J::String(out.join(" ")), "compound".into()))
        }
        other => Ok((J::String(tgt.to_string()), other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_encoded_as_python_quotes_it() {
        assert_eq!(request_path("%web,db"), "/range/list?%25web%2Cdb");
        assert_eq!(request_path("a b/c~d"), "/range/list?a%20b/c~d");
    }

    #[test]
    fn answers_are_read_and_bounded() {
        assert_eq!(parse_response(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nweb2\nweb1\n\nweb1\n").unwrap(), ["web1", "web2"]);
        assert_eq!(parse_response(b"HTTP/1.1 200 OK\n\n").unwrap(), Vec::<String>::new());
        assert!(parse_response(b"HTTP/1.0 500 Internal\r\n\r\nboom").unwrap_err().contains("500"));
        assert!(parse_response(b"HTTP/1.0 200 OK\r\nRangeException: NO_CLUSTER\r\n\r\n").unwrap_err().contains("NO_CLUSTER"));
        assert!(parse_response(b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc").is_err());
        assert!(parse_response(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse_response(b"HTTP/1.0 200 OK\r\n").is_err(), "no end of head");
        assert!(parse_response(b"HTTP/1.0 200 OK\r\n\r\nweb 1\n").is_err(), "a name with a space");
        assert!(parse_response(b"HTTP/1.0 200 OK\r\n\r\na,b\n").is_err(), "a comma would split the list");
        let long = [b"HTTP/1.0 200 OK\r\n\r\n".to_vec(), vec![b'a'; MAX_NAME_LEN + 1]].concat();
        assert!(parse_response(&long).is_err());
        let many = [b"HTTP/1.0 200 OK\r\n\r\n".to_vec(), "m\n".repeat(MAX_NAMES + 1).into_bytes()].concat();
        assert!(parse_response(&many).unwrap_err().contains("more than"), "every line counts");
        let many: String = (0..=MAX_NAMES).map(|i| format!("m{i}\n")).collect();
        assert!(parse_response(&[b"HTTP/1.0 200 OK\r\n\r\n".to_vec(), many.into_bytes()].concat()).unwrap_err().contains("more than"));
    }

    #[test]
    fn targets_are_rewritten() {
        let mut ex = |e: &str| -> Result<Vec<String>, String> {
            match e {
                "%web" => Ok(vec!["web1".into(), "web2".into()]),
                "%none" => Ok(vec![]),
                _ => Err("NO_CLUSTER".into()),
            }
        };
        assert_eq!(rewrite("%web", "range", &mut ex).unwrap(), (serde_json::json!(["web1", "web2"]), "list".to_string()));
        assert_eq!(rewrite("R@%web and not web2", "compound", &mut ex).unwrap().0, "( L@web1,web2 ) and not web2");
        assert_eq!(rewrite("R@%none or db*", "compound", &mut ex).unwrap().0, "( L@ ) or db*");
        assert!(rewrite("R@%nosuch", "compound", &mut ex).is_err());
        assert!(needs_range(&J::String("x and R@%web".into()), "compound"));
        assert!(!needs_range(&J::String("x and G@R@".into()), "compound"));
        assert!(needs_range(&J::String("%web".into()), "range"));
        assert!(!needs_range(&J::String("web*".into()), "glob"));
    }
}
