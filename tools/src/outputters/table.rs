//! Salt's `table` outputter (`--out table`): each list found in the return is drawn as
//! a table, the mappings around it as `key:` and `----------` headings.
//!
//! As Salt 3008.5 draws it, with its defaults (`out.table.*` options are not read):
//! - mapping keys sorted, each a heading, its value 4 columns further in;
//! - a list of mappings is a table with a header row (the keys sorted, `_` as a space,
//!   each word capitalised: Python's `str.title`) and a row a mapping (Python's `str` of
//!   each value); a list of text a one-column table; a list of lists of text a row a
//!   list; a list whose items are not all of one type, or an empty one, draws nothing;
//!   a list of anything else (numbers, lists holding numbers) is where Salt's outputter
//!   fails, and the whole return is printed `nested`, as Salt then falls back;
//! - cells centred as Python's `str.center` centres, columns separated by ` | `, rows
//!   by a line of `-`, a cell wrapped at spaces once its line reaches 50 characters;
//! - colours on a terminal: headings dark grey, rules light grey, rows white.
//!
//! One difference, on purpose: when the cells of a row wrap onto different numbers of
//! lines, Salt (Python 3's `map`) drops the lines beyond the shortest cell's; Halite
//! keeps them, the shorter cells padded with empty lines (what the outputter's own
//! `substr or ""` was written for). Held to what Salt's outputter printed
//! (`tests/vectors/table.json`, `tests/vectors/make_table.py`).

use serde_json::{Map, Value};

use crate::pyvalue::py_str;

const DARK_GRAY: &str = "\x1b[0;1;30m";
const LIGHT_GRAY: &str = "\x1b[0;37m";
const WHITE: &str = "\x1b[0;1;37m";
const ENDC: &str = "\x1b[0;0m";

/// Column width at which a cell wraps.
const WIDTH: usize = 50;

struct Table {
    color: bool,
    out: Vec<String>,
    /// A list the outputter cannot draw was met (Salt's outputter raises).
    failed: bool,
}

impl Table {
    /// One output line: indent, colour, text, end of colour, suffix.
    fn line(&mut self, indent: usize, color: &str, msg: &str, suffix: &str) {
        let (c, e) = if self.color { (color, ENDC) } else { ("", "") };
        self.out.push(format!("{}{c}{msg}{e}{suffix}", " ".repeat(indent)));
    }

    fn display(&mut self, v: &Value, indent: usize) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                for k in keys {
                    self.line(indent, DARK_GRAY, k, ":");
                    self.line(indent, DARK_GRAY, "----------", "");
                    match &m[k] {
                        Value::Array(rows) => self.rows(rows, indent),
                        other => self.display(other, indent + 4),
                    }
                }
            }
            Value::Array(rows) => self.rows(rows, indent),
            _ => {}
        }
    }

    /// A list as a table (Salt's `display_rows`).
    fn rows(&mut self, rows: &[Value], indent: usize) {
        let Some(first) = rows.first() else { return };
        // Python's `type(row)`: int and float are different types.
        let same = |a: &Value, b: &Value| std::mem::discriminant(a) == std::mem::discriminant(b) && !matches!((a, b), (Value::Number(x), Value::Number(y)) if x.is_f64() != y.is_f64());
        if rows.iter().skip(1).any(|r| !same(first, r)) {
            return;
        }
        let (labels, cells): (Option<Vec<String>>, Vec<Vec<String>>) = match first {
            Value::Object(m) => {
                let labels = sorted_keys(m).into_iter().map(|k| title(&k.replace('_', " "))).collect();
                let cells = rows.iter().filter_map(Value::as_object).map(|r| sorted_keys(r).into_iter().map(|k| py_str(&r[k])).collect()).collect();
                (Some(labels), cells)
            }
            Value::String(_) => (None, rows.iter().map(|r| vec![py_str(r)]).collect()),
            Value::Array(_) if rows.iter().filter_map(Value::as_array).flatten().all(Value::is_string) => (None, rows.iter().filter_map(Value::as_array).map(|r| r.iter().map(py_str).collect()).collect()),
            _ => {
                self.failed = true;
                return;
            }
        };
        let has_header = labels.is_some();
        let all: Vec<Vec<String>> = labels.into_iter().chain(cells).collect();
        self.draw(&all, indent + 4, has_header);
    }

    /// Salt's `prepare_rows`, with the defaults (separate rows, centred, `| ` ` | ` ` |`).
    fn draw(&mut self, rows: &[Vec<String>], indent: usize, _has_header: bool) {
        // Each logical row: its cells wrapped, as physical lines (shorter cells padded).
        let logical: Vec<Vec<Vec<String>>> = rows
            .iter()
            .map(|row| {
                let wrapped: Vec<Vec<String>> = row.iter().map(|c| wrap(c).split('\n').map(String::from).collect()).collect();
                let height = wrapped.iter().map(Vec::len).max().unwrap_or(0);
                (0..height).map(|i| wrapped.iter().map(|c| c.get(i).cloned().unwrap_or_default()).collect()).collect()
            })
            .collect();
        let ncols = logical.iter().flatten().map(Vec::len).min().unwrap_or(0);
        let widths: Vec<usize> = (0..ncols).map(|c| logical.iter().flatten().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
        let rule = "-".repeat(2 + 2 + widths.iter().sum::<usize>() + 3 * widths.len().saturating_sub(1));
        self.line(indent, LIGHT_GRAY, &rule, "");
        for physical in &logical {
            for row in physical {
                let cells: Vec<String> = row.iter().zip(&widths).map(|(c, w)| center(c, *w)).collect();
                self.line(indent, WHITE, &format!("| {} |", cells.join(" | ")), "");
            }
            self.line(indent, LIGHT_GRAY, &rule, "");
        }
    }
}

fn sorted_keys(m: &Map<String, Value>) -> Vec<&String> {
    let mut k: Vec<&String> = m.keys().collect();
    k.sort();
    k
}

/// Python's `str.title`: a letter after a non-letter is upper case, others lower.
fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_cased = false;
    for c in s.chars() {
        if prev_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_cased = c.is_alphabetic();
    }
    out
}

/// Python's `str.center(width)` (CPython puts the odd space left when the padding and
/// the width are both odd).
fn center(s: &str, width: usize) -> String {
    let len = s.chars().count();
    if len >= width {
        return s.to_string();
    }
    let marg = width - len;
    let left = marg / 2 + (marg & width & 1);
    format!("{}{s}{}", " ".repeat(left), " ".repeat(marg - left))
}

/// Salt's `wrap_onspace`: words joined by a space, or by a line break once the current
/// line and the next word's first line reach [`WIDTH`].
fn wrap(text: &str) -> String {
    let mut words = text.split(' ');
    let mut out = words.next().unwrap_or("").to_string();
    for w in words {
        let last = out.rsplit('\n').next().unwrap_or("").chars().count();
        let first = w.split('\n').next().unwrap_or("").chars().count();
        out.push(if last + first >= WIDTH { '\n' } else { ' ' });
        out.push_str(w);
    }
    out
}

/// The `table` outputter's text for `v` (no line break at the end); `None` where Salt's
/// outputter fails (the caller prints `nested`, as Salt falls back).
pub fn render(v: &Value, color: bool) -> Option<String> {
    let mut t = Table { color, out: Vec::new(), failed: false };
    t.display(v, 0);
    (!t.failed).then(|| t.out.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Salt 3008.5's `table` outputter printed for the same data
    /// (`tests/vectors/table.json`, written by `tests/vectors/make_table.py`).
    #[test]
    fn tables_are_drawn_as_salt_draws_them() {
        let v: Value = serde_json::from_str(include_str!("../../tests/vectors/table.json")).expect("vectors");
        let mut n = 0;
        for case in v.as_array().expect("cases") {
            let color = case["color"].as_bool().unwrap_or(false);
            assert_eq!(render(&case["data"], color).as_deref(), case["text"].as_str(), "case {n}:\n{:?}", render(&case["data"], false));
            n += 1;
        }
        assert!(n >= 20);
    }

    #[test]
    fn python_string_helpers() {
        assert_eq!((center("ab", 5), center("ab", 6), center("abc", 6), center("long", 2)), ("  ab ".into(), "  ab  ".into(), " abc  ".into(), "long".into()));
        assert_eq!(title("last move x1y é"), "Last Move X1Y É");
        assert_eq!(wrap(""), "");
        assert_eq!(wrap(&"abcd ".repeat(12)).split('\n').map(str::len).collect::<Vec<_>>(), [49, 10]);
    }

    #[test]
    fn cells_that_wrap_unevenly_keep_every_line() {
        let long = "word ".repeat(14) + "end";
        let t = render(&serde_json::json!({"m": [{"a": long, "b": "short"}]}), false).unwrap_or_default();
        let lines: Vec<&str> = t.lines().filter(|l| l.trim_start().starts_with('|')).collect();
        assert_eq!(lines.len(), 3, "the header and both lines of the wrapped row:\n{t}");
        assert!(lines[2].contains("word end") && lines[2].trim_end().ends_with('|'), "{t}");
    }

    #[test]
    fn what_salts_outputter_cannot_draw_falls_back() {
        assert_eq!(render(&serde_json::json!({"m": [1, 2]}), false), None);
        assert_eq!(render(&serde_json::json!({"m": [["a", 1]]}), false), None);
        assert_eq!(render(&serde_json::json!({"m": [1, "mixed"]}), false).as_deref(), Some("m:\n----------"), "mixed types draw nothing");
    }
}
