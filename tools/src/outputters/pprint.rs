//! Salt's `pprint` outputter: Python's `pprint.pformat(data)` (CPython 3.11's algorithm:
//! width 80, mapping keys sorted, a value that does not fit on the rest of its line
//! broken over lines; text too long for its line cut into adjacent literals at
//! whitespace), with `--out-indent N` as `pformat(data, indent=N)`.

use serde_json::{Map, Value};

use crate::pyvalue::py_repr;

/// Python's `pprint.pformat(v, indent=indent)` (Python's default indent is 1).
pub fn pformat(v: &Value, indent: usize) -> String {
    let p = Printer { per_level: indent, width: 80 };
    let mut out = String::new();
    p.format(v, &mut out, 0, 0, 0);
    out
}

/// Python's `repr`, mappings with their keys sorted (`pprint`'s `safe_repr`).
fn repr(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys.into_iter().map(|k| format!("{}: {}", py_repr(&Value::String(k.clone())), repr(&m[k]))).collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(repr).collect::<Vec<_>>().join(", ")),
        other => py_repr(other),
    }
}

/// Python's `len` of a text: code points.
fn len(s: &str) -> isize {
    s.chars().count() as isize
}

struct Printer {
    per_level: usize,
    width: usize,
}

impl Printer {
    fn format(&self, v: &Value, out: &mut String, indent: usize, allowance: usize, level: usize) {
        let rep = repr(v);
        let max_width = self.width as isize - indent as isize - allowance as isize;
        if len(&rep) > max_width {
            match v {
                Value::Object(m) => return self.dict(m, out, indent, allowance, level + 1),
                Value::Array(a) => return self.list(a, out, indent, allowance, level + 1),
                Value::String(s) => return self.text(s, out, indent, allowance, level + 1),
                _ => {}
            }
        }
        out.push_str(&rep);
    }

    fn dict(&self, m: &Map<String, Value>, out: &mut String, indent: usize, allowance: usize, level: usize) {
        out.push('{');
        if self.per_level > 1 {
            out.push_str(&" ".repeat(self.per_level - 1));
        }
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort();
        let indent = indent + self.per_level;
        let allowance = allowance + 1;
        for (i, k) in keys.iter().enumerate() {
            let last = i + 1 == keys.len();
            let rep = py_repr(&Value::String((*k).clone()));
            out.push_str(&rep);
            out.push_str(": ");
            self.format(&m[*k], out, indent + len(&rep) as usize + 2, if last { allowance } else { 1 }, level);
            if !last {
                out.push_str(",\n");
                out.push_str(&" ".repeat(indent));
            }
        }
        out.push('}');
    }

    fn list(&self, a: &[Value], out: &mut String, indent: usize, allowance: usize, level: usize) {
        out.push('[');
        let indent = indent + self.per_level;
        if self.per_level > 1 {
            out.push_str(&" ".repeat(self.per_level - 1));
        }
        let allowance = allowance + 1;
        for (i, x) in a.iter().enumerate() {
            let last = i + 1 == a.len();
            if i > 0 {
                out.push_str(",\n");
                out.push_str(&" ".repeat(indent));
            }
            self.format(x, out, indent, if last { allowance } else { 1 }, level);
        }
        out.push(']');
    }

    /// Text that does not fit: each line (ends kept) one literal if it fits, else cut at
    /// whitespace into literals that do; several literals at the top level in `()`.
    fn text(&self, s: &str, out: &mut String, mut indent: usize, mut allowance: usize, level: usize) {
        if s.is_empty() {
            out.push_str(&py_repr(&Value::String(String::new())));
            return;
        }
        if level == 1 {
            indent += 1;
            allowance += 1;
        }
        let lit = |t: &str| py_repr(&Value::String(t.to_string()));
        let max_width = self.width as isize - indent as isize;
        let mut max_width1 = max_width;
        let lines = split_lines_keep_ends(s);
        let mut chunks: Vec<String> = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let rep = lit(line);
            let last_line = i + 1 == lines.len();
            if last_line {
                max_width1 -= allowance as isize;
            }
            if len(&rep) <= max_width1 {
                chunks.push(rep);
                continue;
            }
            let parts = words(line);
            let mut max_width2 = max_width;
            let mut current = String::new();
            for (j, part) in parts.iter().enumerate() {
                let candidate = format!("{current}{part}");
                if j + 1 == parts.len() && last_line {
                    max_width2 -= allowance as isize;
                }
                if len(&lit(&candidate)) > max_width2 {
                    if !current.is_empty() {
                        chunks.push(lit(&current));
                    }
                    current = part.to_string();
                } else {
                    current = candidate;
                }
            }
            if !current.is_empty() {
                chunks.push(lit(&current));
            }
        }
        if chunks.len() == 1 {
            out.push_str(&lit(s));
            return;
        }
        if level == 1 {
            out.push('(');
        }
        for (i, c) in chunks.iter().enumerate() {
            if i > 0 {
                out.push('\n');
                out.push_str(&" ".repeat(indent));
            }
            out.push_str(c);
        }
        if level == 1 {
            out.push(')');
        }
    }
}

/// Python's `str.splitlines(True)` for `\n`, `\r\n` and `\r`.
fn split_lines_keep_ends(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let end = match b[i] {
            b'\n' => i + 1,
            b'\r' if b.get(i + 1) == Some(&b'\n') => i + 2,
            b'\r' => i + 1,
            _ => {
                i += 1;
                continue;
            }
        };
        out.push(&s[start..end]);
        start = end;
        i = end;
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// Python's `re.findall(r'\S*\s*', line)` without its empty last match: each run of
/// non-space followed by the spaces after it.
fn words(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_space = false;
    for (i, c) in line.char_indices() {
        if c.is_whitespace() {
            in_space = true;
        } else if in_space {
            out.push(&line[start..i]);
            start = i;
            in_space = false;
        }
    }
    if start < line.len() {
        out.push(&line[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What CPython 3.11's `pprint.pformat` printed for the same data
    /// (`tests/vectors/pprint.json`, written by `tests/vectors/make_pprint.py`).
    #[test]
    fn pformat_is_pythons() {
        let v: Value = serde_json::from_str(include_str!("../../tests/vectors/pprint.json")).expect("vectors");
        let mut n = 0;
        for case in v.as_array().expect("cases") {
            let indent = case["indent"].as_u64().unwrap_or(1) as usize;
            assert_eq!(pformat(&case["data"], indent), case["text"].as_str().expect("text"), "case {n}");
            n += 1;
        }
        assert!(n >= 8);
    }
}
