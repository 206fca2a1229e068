//! Python's view of a decoded value: its `str`, its `repr` (with `str.isprintable`'s
//! escapes) and its truth. What Salt's outputters print is built from these.

use serde_json::Value;

/// Python's truth of a decoded value: `None`, `False`, zero and empty text, lists and
/// mappings are false.
pub fn py_truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
    }
}

/// Python's `str` of a decoded value: text as it is, anything else as its `repr`.
pub fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => py_repr(other),
    }
}

/// Python's `repr` of a decoded value (`True`, `None`, `'text'`, `[1, 'a']`, `{'k': 1}`).
pub fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let q = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
            let mut o = String::from(q);
            for c in s.chars() {
                match c {
                    '\\' => o.push_str("\\\\"),
                    '\n' => o.push_str("\\n"),
                    '\r' => o.push_str("\\r"),
                    '\t' => o.push_str("\\t"),
                    c if c == q => {
                        o.push('\\');
                        o.push(c);
                    }
                    c if (c as u32) < 0x100 && !py_printable(c) => o.push_str(&format!("\\x{:02x}", c as u32)),
                    c if (c as u32) < 0x10000 && !py_printable(c) => o.push_str(&format!("\\u{:04x}", c as u32)),
                    c if !py_printable(c) => o.push_str(&format!("\\U{:08x}", c as u32)),
                    c => o.push(c),
                }
            }
            o.push(q);
            o
        }
        Value::Array(a) => format!("[{}]", a.iter().map(py_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(m) => format!("{{{}}}", m.iter().map(|(k, x)| format!("{}: {}", py_repr(&Value::String(k.clone())), py_repr(x))).collect::<Vec<_>>().join(", ")),
    }
}

/// Whether Python's `str.isprintable` holds for `c` (what `repr` leaves unescaped): not a
/// control, format, surrogate or private-use character, nor a separator other than the
/// space. The non-ASCII ranges are the ones met in practice (C1 controls, no-break and
/// typographic spaces, zero-width and direction marks, line and paragraph separators,
/// the byte-order mark, private use).
pub fn py_printable(c: char) -> bool {
    let u = c as u32;
    !(u < 0x20
        || (0x7f..=0xa0).contains(&u)
        || u == 0xad
        || u == 0x1680
        || (0x2000..=0x200f).contains(&u)
        || (0x2028..=0x202f).contains(&u)
        || (0x205f..=0x2064).contains(&u)
        || u == 0x3000
        || u == 0xfeff
        || (0xe000..=0xf8ff).contains(&u)
        || (0xf0000..).contains(&u))
}

