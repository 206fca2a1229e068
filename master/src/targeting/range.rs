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
//! This module is the pure part: the request path, the reading of an answer's body
//! (bounded: the caller stops reading at [`MAX_RESPONSE`] bytes, at most [`MAX_NAMES`]
//! names, each a plausible minion id), the rewriting of a target with a given expansion,
//! and [`RangeError`]. The daemon does the HTTP exchange, on hyper
//! (`crate::daemon::range_client`).

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

/// Why a range expression was not expanded.
#[derive(Debug, thiserror::Error)]
pub enum RangeError {
    #[error("cannot resolve {server}: {source}")]
    Resolve { server: String, source: std::io::Error },
    #[error("{0} resolves to no address")]
    NoAddress(String),
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: std::net::SocketAddr, source: std::io::Error },
    #[error("no complete answer within {0:?}")]
    Deadline(std::time::Duration),
    /// The exchange failed (a broken connection, an answer that is not HTTP).
    #[error("HTTP: {0}")]
    Http(String),
    #[error("got HTTP status {0}")]
    Status(String),
    /// The server's own error (`RangeException` header).
    #[error("RangeException: {0}")]
    Exception(String),
    #[error("answer longer than {MAX_RESPONSE} bytes")]
    TooLong,
    #[error("the list of names is not UTF-8")]
    NotUtf8,
    #[error("not a minion id: {0:?}")]
    NotAnId(String),
    #[error("more than {MAX_NAMES} names")]
    TooMany,
}

/// The names an answer's body lists (one a line), sorted, without duplicates.
pub fn parse_names(body: &[u8]) -> Result<Vec<String>, RangeError> {
    if body.len() > MAX_RESPONSE {
        return Err(RangeError::TooLong);
    }
    let body = std::str::from_utf8(body).map_err(|_| RangeError::NotUtf8)?;
    let mut names = Vec::new();
    for line in body.lines() {
        let name = line.trim_end();
        if name.is_empty() {
            continue;
        }
        if name.len() > MAX_NAME_LEN || name.chars().any(|c| c.is_whitespace() || c.is_control() || c == ',') {
            return Err(RangeError::NotAnId(name.chars().take(64).collect()));
        }
        if names.len() == MAX_NAMES {
            // Counted before duplicates are dropped: the bound is on the lines read.
            return Err(RangeError::TooMany);
        }
        names.push(name.to_string());
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// The target with its range parts expanded by `expand` (the range server's answer for
/// one expression): a `range` target becomes a `list`; in a `compound` each `R@expr`
/// word becomes `( L@names )` (a word matching nothing when the expansion is empty).
pub fn rewrite<E>(tgt: &str, tgt_type: &str, expand: &mut dyn FnMut(&str) -> Result<Vec<String>, E>) -> Result<(J, String), E> {
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
    fn names_are_read_and_bounded() {
        assert_eq!(parse_names(b"web2\nweb1\n\nweb1\n").unwrap(), ["web1", "web2"]);
        assert_eq!(parse_names(b"").unwrap(), Vec::<String>::new());
        assert!(matches!(parse_names(b"web 1\n"), Err(RangeError::NotAnId(_))), "a name with a space");
        assert!(matches!(parse_names(b"a,b\n"), Err(RangeError::NotAnId(_))), "a comma would split the list");
        assert!(matches!(parse_names(&[0xff, b'\n']), Err(RangeError::NotUtf8)));
        assert!(matches!(parse_names(&vec![b'a'; MAX_NAME_LEN + 1]), Err(RangeError::NotAnId(_))));
        assert!(matches!(parse_names("m\n".repeat(MAX_NAMES + 1).as_bytes()), Err(RangeError::TooMany)), "every line counts");
        let many: String = (0..=MAX_NAMES).map(|i| format!("m{i}\n")).collect();
        assert!(matches!(parse_names(many.as_bytes()), Err(RangeError::TooMany)));
        assert!(matches!(parse_names(&vec![b'\n'; MAX_RESPONSE + 1]), Err(RangeError::TooLong)));
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
