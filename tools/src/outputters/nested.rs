//! Salt's `nested` outputter, the default of `salt` and `salt-run`, and what other
//! outputters fall back to.

use serde_json::Value;

use crate::pyvalue::py_repr;

/// Salt's `nested` outputter without colours (`--no-color`, or not a terminal).
pub fn nested(v: &Value, indent: usize) -> String {
    nested_colored_at(v, indent, false)
}

/// Salt's `nested` outputter, coloured as Salt colours it on a terminal.
pub fn nested_colored(v: &Value, color: bool) -> String {
    nested_colored_at(v, 0, color)
}

/// [`nested_colored`] `indent` columns in (Salt's `nested_indent`).
pub fn nested_colored_at(v: &Value, indent: usize, color: bool) -> String {
    let mut out = Vec::new();
    Nest { color }.display(v, indent, "", &mut out);
    out.join("\n")
}

/// Salt's `NestDisplay`: mappings as `key:` with the value four spaces further in (keys
/// sorted; a nested mapping opens with `----------`), lists as `- item` (a list or a
/// mapping inside a list as `|_` with the item two spaces further in), scalars as
/// Python prints them (`True`, `None`), multi-line text one line each.
struct Nest {
    color: bool,
}

const LIGHT_YELLOW: &str = "\x1b[0;1;33m";
const GREEN: &str = "\x1b[0;32m";
const CYAN: &str = "\x1b[0;36m";
const ENDC: &str = "\x1b[0;0m";

impl Nest {
    fn line(&self, indent: usize, color: &str, prefix: &str, msg: &str, suffix: &str) -> String {
        let (c, e) = if self.color { (color, ENDC) } else { ("", "") };
        format!("{}{c}{prefix}{msg}{e}{suffix}", " ".repeat(indent))
    }

    fn display(&self, v: &Value, indent: usize, prefix: &str, out: &mut Vec<String>) {
        match v {
            Value::Null | Value::Bool(_) | Value::Number(_) => out.push(self.line(indent, LIGHT_YELLOW, prefix, &py_repr(v), "")),
            Value::String(s) => {
                for (i, l) in s.lines().enumerate() {
                    let p = if i == 0 { prefix.to_string() } else { " ".repeat(prefix.len()) };
                    out.push(self.line(indent, GREEN, &p, l, ""));
                }
            }
            Value::Array(a) => {
                for x in a {
                    match x {
                        Value::Array(_) | Value::Object(_) => {
                            out.push(self.line(indent, GREEN, "", "|_", ""));
                            let p = if x.is_object() { "" } else { "- " };
                            self.display(x, indent + 2, p, out);
                        }
                        _ => self.display(x, indent, "- ", out),
                    }
                }
            }
            Value::Object(m) => {
                if indent > 0 {
                    out.push(self.line(indent, CYAN, "", "----------", ""));
                }
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                for k in keys {
                    out.push(self.line(indent, CYAN, prefix, k, ":"));
                    self.display(&m[k], indent + 4, "", out);
                }
            }
        }
    }
}

