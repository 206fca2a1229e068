//! Salt's outputters, as far as the tools print them: `json` (Python's `json.dumps` with
//! `indent=4`, ASCII-escaped), `yaml`, `key` (what `salt-key -L` prints by default), `raw`
//! (Python's `str()` of the data) and `txt` (`id: line` for each line of each value).

use serde_json::Value;

use halite_storage::keys::KeyListing;

/// `--out` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Out {
    Json,
    Yaml,
    Nested,
    Key,
    Txt,
    Raw,
}

/// Python `json.dumps(v, indent=4)` (ensure_ascii, `", "`/`": "` separators, key order kept).
pub fn python_json(v: &Value) -> String {
    let mut s = String::new();
    write_json(v, 0, &mut s);
    s
}

fn write_str(t: &str, out: &mut String) {
    out.push('"');
    for c in t.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{:04x}", u));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write_json(v: &Value, depth: usize, out: &mut String) {
    let pad = |d: usize, out: &mut String| {
        out.push('\n');
        out.push_str(&" ".repeat(4 * d));
    };
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(t) => write_str(t, out),
        Value::Array(a) if a.is_empty() => out.push_str("[]"),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(depth + 1, out);
                write_json(x, depth + 1, out);
            }
            pad(depth, out);
            out.push(']');
        }
        Value::Object(m) if m.is_empty() => out.push_str("{}"),
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(depth + 1, out);
                write_str(k, out);
                out.push_str(": ");
                write_json(x, depth + 1, out);
            }
            pad(depth, out);
            out.push('}');
        }
    }
}

/// YAML like Salt's yaml outputter (block style).
pub fn yaml(v: &Value) -> String {
    serde_yaml::to_string(v).unwrap_or_else(|e| format!("# cannot render yaml: {e}\n"))
}

/// The listing as the ordered JSON object Salt returns (`minions_pre`, `minions_rejected`,
/// `minions`, `minions_denied`).
pub fn listing_value(l: &KeyListing) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("minions_pre".into(), l.minions_pre.clone().into());
    m.insert("minions_rejected".into(), l.minions_rejected.clone().into());
    m.insert("minions".into(), l.minions.clone().into());
    m.insert("minions_denied".into(), l.minions_denied.clone().into());
    Value::Object(m)
}

struct Colors {
    on: bool,
}

impl Colors {
    fn wrap(&self, code: &str, s: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

/// Salt's `key` outputter: buckets in sorted key order (Accepted, Denied, Unaccepted,
/// Rejected), ids sorted (case-sensitive, as Python's `sorted`), values after `:  ` for
/// fingerprints.
pub fn key_outputter(data: &serde_json::Map<String, Value>, color: bool) -> String {
    let c = Colors { on: color };
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    let mut lines = Vec::new();
    for status in names {
        let (title, title_code, code) = match status.as_str() {
            "minions" => ("Accepted Keys:", "1;32", "0;32"),
            "minions_pre" => ("Unaccepted Keys:", "1;31", "0;31"),
            "minions_denied" => ("Denied Keys:", "1;35", "0;35"),
            "minions_rejected" => ("Rejected Keys:", "1;34", "0;34"),
            "local" => ("Local Keys:", "1;35", "0;35"),
            other => (other, "0", "0"),
        };
        lines.push(c.wrap(title_code, title));
        match &data[status] {
            Value::Array(a) => {
                let mut ids: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
                ids.sort();
                for id in ids {
                    lines.push(c.wrap(code, id));
                }
            }
            Value::Object(m) => {
                let mut ids: Vec<(&String, &Value)> = m.iter().collect();
                ids.sort_by(|a, b| a.0.cmp(b.0));
                for (id, v) in ids {
                    let v = v.as_str().map(String::from).unwrap_or_else(|| v.to_string());
                    lines.push(c.wrap(code, &format!("{id}:  {v}")));
                }
            }
            _ => {}
        }
    }
    lines.join("\n")
}

/// Prints `v` in the chosen format (`key` and `nested` fall back to a readable form).
pub fn render(v: &Value, out: Out, color: bool) -> String {
    match out {
        Out::Json => python_json(v),
        Out::Yaml => yaml(v).trim_end().to_string(),
        Out::Key => match v {
            Value::Object(m) => key_outputter(m, color),
            other => nested(other, 0),
        },
        Out::Nested => nested(v, 0),
        Out::Txt => txt(v),
        Out::Raw => python_repr(v),
    }
}

/// Python's `repr` of the data as Salt holds it (`True`, `None`, `'text'`, `{'k': [1]}`):
/// what the `raw` outputter prints.
pub fn python_repr(v: &Value) -> String {
    let mut s = String::new();
    write_repr(v, &mut s);
    s
}

fn write_repr(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(t) => repr_str(t, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr_str(k, out);
                out.push_str(": ");
                write_repr(x, out);
            }
            out.push('}');
        }
    }
}

/// Python's `repr` of a str: single quotes unless the text has a `'` and no `"`.
fn repr_str(t: &str, out: &mut String) {
    let q = if t.contains('\'') && !t.contains('"') { '"' } else { '\'' };
    out.push(q);
    for c in t.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(q);
}

/// Salt's `txt` outputter: for a mapping, `key: line` for each line of a text value and
/// `key: repr` for any other; anything else as text.
pub fn txt(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut lines = Vec::new();
            for (k, x) in m {
                match x {
                    Value::String(t) => lines.extend(t.lines().map(|l| format!("{k}: {l}"))),
                    other => lines.push(format!("{k}: {}", python_repr(other))),
                }
            }
            lines.join("\n")
        }
        Value::String(t) => t.clone(),
        other => python_repr(other),
    }
}

/// Salt's `nested` outputter, simplified: mappings as `key:` with children indented by
/// four spaces, lists as `- item`, scalars as text.
pub fn nested(v: &Value, indent: usize) -> String {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) => m
            .iter()
            .map(|(k, x)| match x {
                Value::Object(_) | Value::Array(_) => format!("{pad}{k}:\n{}", nested(x, indent + 4)),
                _ => format!("{pad}{k}:\n{}", nested(x, indent + 4)),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Array(a) => a.iter().map(|x| format!("{pad}- {}", nested(x, 0).trim_start())).collect::<Vec<_>>().join("\n"),
        Value::String(s) => s.lines().map(|l| format!("{pad}{l}")).collect::<Vec<_>>().join("\n"),
        // Python's str of True, False and None, as Salt prints them.
        other => format!("{pad}{}", python_repr(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_json_shape() {
        let v: Value = serde_json::from_str(r#"{"minions_pre": [], "minions": ["a", "ü"], "n": {"x": 1}}"#).unwrap();
        assert_eq!(python_json(&v), "{\n    \"minions_pre\": [],\n    \"minions\": [\n        \"a\",\n        \"\\u00fc\"\n    ],\n    \"n\": {\n        \"x\": 1\n    }\n}");
    }

    #[test]
    fn raw_and_txt_are_pythons_str() {
        let v: Value = serde_json::from_str(r#"{"m1": {"a": [1, true, null], "q": "it's", "e": "x\ny\\"}}"#).unwrap();
        assert_eq!(python_repr(&v), r#"{'m1': {'a': [1, True, None], 'q': "it's", 'e': 'x\ny\\'}}"#);
        assert_eq!(python_repr(&Value::String("a'b\"c".into())), r#"'a\'b"c'"#);
        let t: Value = serde_json::from_str(r#"{"m1": "line one\nline two", "m2": true, "m3": {"k": "v"}}"#).unwrap();
        assert_eq!(txt(&t), "m1: line one\nm1: line two\nm2: True\nm3: {'k': 'v'}");
    }

    #[test]
    fn key_outputter_order() {
        let v: Value = serde_json::from_str(r#"{"minions_pre": ["p"], "minions_rejected": ["r"], "minions": ["b", "A"], "minions_denied": []}"#).unwrap();
        let s = key_outputter(v.as_object().unwrap(), false);
        assert_eq!(s, "Accepted Keys:\nA\nb\nDenied Keys:\nUnaccepted Keys:\np\nRejected Keys:\nr");
    }
}
