//! Salt's outputters, as far as the tools print them: `nested` (the default), `json`
//! (Python's `json.dumps`, `indent=4` unless `--out-indent` says otherwise,
//! ASCII-escaped), `yaml` (keys sorted, as PyYAML's `safe_dump`), `txt`, `raw`,
//! `pprint` ([`crate::pprint`]), `table` ([`crate::table`]), `highstate`
//! ([`crate::highstate`]) and `key` (what `salt-key -L` prints by default). `nested` is
//! [`crate::nested`]; Python's `str`/`repr`/truth of a value, [`crate::pyvalue`].

use serde_json::Value;

use halite_storage::keys::KeyListing;

pub use crate::nested::{nested, nested_colored, nested_colored_at};
pub use crate::pyvalue::{py_repr, py_str, py_truthy};

/// `--out` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Out {
    Json,
    Yaml,
    #[default]
    Nested,
    Key,
    Txt,
    /// Python's `repr` of the data (Salt's `raw` outputter).
    Raw,
    /// A state run's returns (`crate::highstate`); other data is printed `nested`.
    Highstate,
    /// Python's `pprint.pformat` (`crate::pprint`).
    Pprint,
    /// Lists drawn as tables (`crate::table`).
    Table,
}


impl Out {
    /// The outputter Salt names `name` (`text` is `txt`), if the tools have it.
    pub fn from_salt(name: &str) -> Option<Out> {
        Some(match name {
            "nested" => Out::Nested,
            "json" => Out::Json,
            "yaml" => Out::Yaml,
            "txt" | "text" => Out::Txt,
            "raw" => Out::Raw,
            "key" => Out::Key,
            "highstate" => Out::Highstate,
            "pprint" => Out::Pprint,
            "table" => Out::Table,
            _ => return None,
        })
    }
}

/// How an outputter prints, beyond its name: Salt's `color`, `output_indent` and the
/// highstate options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Style {
    pub color: bool,
    /// `--out-indent` (`output_indent`): `None` when not set (`json` indents by 4); a
    /// negative value prints `json` on one line.
    pub indent: Option<i64>,
    pub state: crate::highstate::Style,
}

/// Python `json.dumps(v, indent=4)` (ensure_ascii, `", "`/`": "` separators, key order kept).
pub fn python_json(v: &Value) -> String {
    python_json_indent(v, Some(4))
}

/// Python `json.dumps(v, indent=indent)`: `None` is one line (separators `", "` and
/// `": "`, as Python's with no indent).
pub fn python_json_indent(v: &Value, indent: Option<usize>) -> String {
    let mut s = String::new();
    write_json(v, 0, indent, &mut s);
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

fn write_json(v: &Value, depth: usize, indent: Option<usize>, out: &mut String) {
    // Before an item: a new line indented (with an indent), else nothing; between items
    // the comma, then a space on one line.
    let pad = |d: usize, out: &mut String| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * d));
        }
    };
    let sep = |out: &mut String| {
        out.push(',');
        if indent.is_none() {
            out.push(' ');
        }
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
                    sep(out);
                }
                pad(depth + 1, out);
                write_json(x, depth + 1, indent, out);
            }
            pad(depth, out);
            out.push(']');
        }
        Value::Object(m) if m.is_empty() => out.push_str("{}"),
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    sep(out);
                }
                pad(depth + 1, out);
                write_str(k, out);
                out.push_str(": ");
                write_json(x, depth + 1, indent, out);
            }
            pad(depth, out);
            out.push('}');
        }
    }
}

/// YAML like Salt's yaml outputter (block style, mapping keys sorted as PyYAML's
/// `safe_dump` sorts them).
pub fn yaml(v: &Value) -> String {
    serde_yaml::to_string(&sorted(v)).unwrap_or_else(|e| format!("# cannot render yaml: {e}\n"))
}

/// `v` with the keys of every mapping in it sorted.
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&m[k]))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
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

/// Prints `v` in the chosen format (`key` and `highstate` fall back to `nested` for other
/// shapes).
pub fn render(v: &Value, out: Out, color: bool) -> String {
    render_styled(v, out, &Style { color, ..Style::default() })
}

/// [`render`] with Salt's output options.
pub fn render_styled(v: &Value, out: Out, style: &Style) -> String {
    let color = style.color;
    match out {
        Out::Json => match style.indent {
            None => python_json(v),
            Some(n) if n >= 0 => python_json_indent(v, Some(n as usize)),
            Some(_) => python_json_indent(v, None),
        },
        Out::Pprint => crate::pprint::pformat(v, style.indent.filter(|n| *n >= 0).map_or(1, |n| n as usize)),
        Out::Highstate => match v {
            Value::Object(m) => crate::highstate::render_with(m, &crate::highstate::Style { color, ..style.state }),
            other => nested_colored(other, color),
        },
        Out::Yaml => yaml(v).trim_end().to_string(),
        Out::Key => match v {
            Value::Object(m) => key_outputter(m, color),
            other => nested_colored(other, color),
        },
        Out::Nested => nested_colored(v, color),
        Out::Txt => txt(v).trim_end_matches('\n').to_string(),
        Out::Raw => py_repr(v),
        Out::Table => crate::table::render(v, color).unwrap_or_else(|| nested_colored(v, color)),
    }
}

/// Python's `repr` of the data as Salt holds it (`True`, `None`, `'text'`, `{'k': [1]}`):
/// what the `raw` outputter prints.
pub fn python_repr(v: &Value) -> String {
    py_repr(v)
}

/// Salt's `txt` outputter: for a mapping, `key: line` for each line of a text value and
/// `key: repr(value)` otherwise; text alone as it is; anything else as its repr.
pub fn txt(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match x {
                    Value::String(s) => {
                        for l in s.lines() {
                            out.push_str(&format!("{k}: {l}\n"));
                        }
                    }
                    other => out.push_str(&format!("{k}: {}\n", py_repr(other))),
                }
            }
        }
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        other => {
            out.push_str(&py_repr(other));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_indent_and_yaml_print_as_salts() {
        // What Salt 3008.5's json and yaml outputters print for this return (the json
        // one with --out-indent unset, 2 and -1).
        let v: Value = serde_json::from_str(r#"{"m1": true, "m2": {"b": [1, "x"], "a": null, "s": "it's"}}"#).unwrap();
        let style = |indent| Style { indent, ..Style::default() };
        assert_eq!(render_styled(&v, Out::Json, &style(None)), "{\n    \"m1\": true,\n    \"m2\": {\n        \"b\": [\n            1,\n            \"x\"\n        ],\n        \"a\": null,\n        \"s\": \"it's\"\n    }\n}");
        assert_eq!(render_styled(&v, Out::Json, &style(Some(2))), "{\n  \"m1\": true,\n  \"m2\": {\n    \"b\": [\n      1,\n      \"x\"\n    ],\n    \"a\": null,\n    \"s\": \"it's\"\n  }\n}");
        assert_eq!(render_styled(&v, Out::Json, &style(Some(-1))), r#"{"m1": true, "m2": {"b": [1, "x"], "a": null, "s": "it's"}}"#);
        assert_eq!(render_styled(&v, Out::Yaml, &style(None)), "m1: true\nm2:\n  a: null\n  b:\n  - 1\n  - x\n  s: it's");
    }

    #[test]
    fn python_json_shape() {
        let v: Value = serde_json::from_str(r#"{"minions_pre": [], "minions": ["a", "ü"], "n": {"x": 1}}"#).unwrap();
        assert_eq!(python_json(&v), "{\n    \"minions_pre\": [],\n    \"minions\": [\n        \"a\",\n        \"\\u00fc\"\n    ],\n    \"n\": {\n        \"x\": 1\n    }\n}");
    }

    #[test]
    fn nested_is_salts_nested() {
        let v: Value = serde_json::from_str(r#"{"web2": true, "web1": {"Result": {"b": [1, "x", {"k": null}, [2]], "a": "two\nlines"}, "n": 1.5}, "e": []}"#).unwrap();
        let expected = [
            "e:",
            "web1:",
            "    ----------",
            "    Result:",
            "        ----------",
            "        a:",
            "            two",
            "            lines",
            "        b:",
            "            - 1",
            "            - x",
            "            |_",
            "              ----------",
            "              k:",
            "                  None",
            "            |_",
            "              - 2",
            "    n:",
            "        1.5",
            "web2:",
            "    True",
        ]
        .join("\n");
        assert_eq!(nested(&v, 0), expected);
        assert_eq!(nested(&serde_json::json!(["a", "b"]), 0), "- a\n- b", "a runner's list, as manage.present prints it");
        assert_eq!(nested_colored(&serde_json::json!({"a": true}), true), "\x1b[0;36ma\x1b[0;0m:\n    \x1b[0;1;33mTrue\x1b[0;0m");
    }

    #[test]
    fn txt_is_salts_txt() {
        let v: Value = serde_json::from_str(r#"{"m1": "a\nb", "m2": {"k": [true, null, "it's"]}}"#).unwrap();
        assert_eq!(txt(&v), "m1: a\nm1: b\nm2: {'k': [True, None, \"it's\"]}\n");
        assert_eq!(txt(&serde_json::json!(["x"])), "['x']\n");
    }

    #[test]
    fn key_outputter_order() {
        let v: Value = serde_json::from_str(r#"{"minions_pre": ["p"], "minions_rejected": ["r"], "minions": ["b", "A"], "minions_denied": []}"#).unwrap();
        let s = key_outputter(v.as_object().unwrap(), false);
        assert_eq!(s, "Accepted Keys:\nA\nb\nDenied Keys:\nUnaccepted Keys:\np\nRejected Keys:\nr");
    }

    #[test]
    fn raw_and_txt_are_pythons_str() {
        let v: Value = serde_json::from_str(r#"{"m1": {"a": [1, true, null], "q": "it's", "e": "x\ny\\"}}"#).unwrap();
        assert_eq!(render(&v, Out::Raw, false), r#"{'m1': {'a': [1, True, None], 'q': "it's", 'e': 'x\ny\\'}}"#);
        assert_eq!(python_repr(&Value::String("a'b\"c".into())), r#"'a\'b"c'"#);
        let t: Value = serde_json::from_str(r#"{"m1": "line one\nline two", "m2": true, "m3": {"k": "v"}}"#).unwrap();
        assert_eq!(render(&t, Out::Txt, false), "m1: line one\nm1: line two\nm2: True\nm3: {'k': 'v'}");
    }
}
