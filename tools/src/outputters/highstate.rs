//! Salt's `highstate` outputter: per host its states in run order (ID, Function, Name
//! when it differs from the ID, Result, Comment, Started, Duration, Changes: nested,
//! or for a `salt.state` step the minions' own highstates inside), then the Summary.
//! `salt` prints a state function's returns with it (the minion names the outputter in
//! its return), `salt-run state.orchestrate` its run.
//!
//! The options are Salt's, with Salt's defaults ([`Style::default`]):
//! - `state_verbose` (`--state-verbose`): `False` leaves out the states that succeeded
//!   without changes (they still count in the Summary);
//! - `state_output` (`--state-output`): `full`; `terse` (one line a state); `mixed`
//!   (terse unless the state failed); `changes` (terse unless it failed or changed);
//!   `filter` (full, as `filter` is with no `state_output_exclude`/`terse` lists); each
//!   with an `_id` form that shows the ID in place of the name;
//! - colours as Salt's default theme, on a terminal or with `--force-color`.
//!
//! - `state_output_diff` (`--output-diff`): the states that succeeded without changes
//!   left out, as with `state_verbose: False`.
//!
//! `state_output_profile` is Salt's default (`True`: Started and Duration shown, the
//! total run time summed); `state_tabular`, `state_compress_ids` and `state_output_pct`
//! are not read.

use serde_json::{Map, Value};

use crate::nested::nested_colored_at;
use crate::pyvalue::{py_repr, py_str, py_truthy};

const RED: &str = "\x1b[0;31m";
const LIGHT_RED: &str = "\x1b[0;1;31m";
const GREEN: &str = "\x1b[0;32m";
const CYAN: &str = "\x1b[0;36m";
const LIGHT_YELLOW: &str = "\x1b[0;1;33m";
const ENDC: &str = "\x1b[0;0m";

/// Salt's `state_output` values (the `_id` forms are [`Style::ids`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateOutput {
    #[default]
    Full,
    Terse,
    Mixed,
    Changes,
}

/// How the highstate is printed (Salt's options; see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub color: bool,
    /// `state_verbose`.
    pub verbose: bool,
    pub output: StateOutput,
    /// An `_id` form of `state_output`: the ID shown where the name would be.
    pub ids: bool,
    /// `state_output_diff` (`--output-diff`): leave out the states that succeeded
    /// without changes, as `state_verbose: False` does.
    pub diff: bool,
}

impl Default for Style {
    fn default() -> Self {
        Style { color: false, verbose: true, output: StateOutput::Full, ids: false, diff: false }
    }
}

impl Style {
    /// Sets `state_output` from Salt's value as Salt reads it (case ignored): starting
    /// with `terse`, `mixed` or `changes` selects that form, anything else (`full`,
    /// `filter`) is full; ending in `_id` shows IDs for names.
    pub fn with_state_output(mut self, value: &str) -> Style {
        let v = value.to_ascii_lowercase();
        self.ids = v.ends_with("_id");
        self.output = if v.starts_with("terse") {
            StateOutput::Terse
        } else if v.starts_with("mixed") {
            StateOutput::Mixed
        } else if v.starts_with("changes") {
            StateOutput::Changes
        } else {
            StateOutput::Full
        };
        self
    }

    /// `color`'s code, or nothing without colours.
    fn paint(&self, color: &'static str) -> &'static str {
        if self.color {
            color
        } else {
            ""
        }
    }

    /// `text` in `color`, ended by the reset code (nothing without colours).
    fn colored(&self, color: &'static str, text: &str) -> String {
        format!("{}{text}{}", self.paint(color), self.paint(ENDC))
    }
}

/// Formats `{host: {tag: state return}}` (or `{host: [errors]}`) with Salt's defaults.
pub fn render(data: &Map<String, Value>) -> String {
    render_with(data, &Style::default())
}

/// [`render`] with the options of `style`. Like Salt's, a return wrapped in `return`
/// or `data` (a job cache or orchestrate envelope) is unwrapped first.
pub fn render_with(data: &Map<String, Value>, style: &Style) -> String {
    render_at(data, style, 1)
}

/// [`render_with`] for an orchestration nested `level` deep.
fn render_at(data: &Map<String, Value>, style: &Style, level: usize) -> String {
    let mut data = data;
    for key in ["return", "data"] {
        if let Some(Value::Object(inner)) = data.get(key) {
            data = inner;
        }
    }
    data.iter().map(|(h, d)| host(h, d, style, level).0).collect::<Vec<_>>().join("\n")
}

/// A state's result as Salt counts it: `True`, `False`, or anything else (`None`: not
/// run, a test run's would-change).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Failed,
    NotRun,
}

fn outcome(ret: &Value) -> Outcome {
    match ret["result"] {
        Value::Bool(true) => Outcome::Ok,
        Value::Bool(false) => Outcome::Failed,
        _ => Outcome::NotRun,
    }
}

/// A duration as Salt reads it (a number, or text such as `"12.5 ms"`).
fn millis(d: &Value) -> Option<f64> {
    match d {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok().or_else(|| s.split(" ms").next()?.trim().parse().ok()),
        _ => None,
    }
}

/// One host's block, and whether anything changed (Salt's `_format_host`).
fn host(name: &str, data: &Value, style: &Style, level: usize) -> (String, bool) {
    let mut hcolor = GREEN;
    let mut lines: Vec<String> = Vec::new();
    let mut nchanges = 0usize;
    let states = match data {
        Value::Number(_) => {
            nchanges = 1;
            lines.push(style.colored(GREEN, &format!("    {data}")));
            hcolor = CYAN;
            None
        }
        Value::String(s) => {
            nchanges = 1;
            lines.extend(s.lines().map(|l| style.colored(GREEN, &format!("    {l}"))));
            hcolor = CYAN;
            None
        }
        Value::Array(errs) => {
            hcolor = LIGHT_RED;
            lines.push(format!("    {}", style.colored(LIGHT_RED, "Data failed to compile:")));
            for e in errs {
                lines.push(style.colored(LIGHT_RED, &format!("----------\n    {}", py_str(e))));
            }
            None
        }
        Value::Object(m) => Some(m),
        // Salt has no case for other values (`None` is printed before a host is).
        _ => None,
    };
    if let Some(states) = states {
        nchanges = states_block(name, states, style, level, &mut lines, &mut hcolor);
    }
    lines.insert(0, style.colored(hcolor, &format!("{name}:")));
    (lines.join("\n"), nchanges > 0)
}

/// The states of one host and its Summary, appended to `lines`; the number of states
/// that changed something.
fn states_block(name: &str, states: &Map<String, Value>, style: &Style, level: usize, lines: &mut Vec<String>, hcolor: &mut &'static str) -> usize {
    let mut tags: Vec<(&String, &Value)> = states.iter().filter(|(_, v)| v.get("result").is_some()).collect();
    tags.sort_by_key(|(_, v)| v["__run_num__"].as_u64().unwrap_or(0));
    let (mut ok, mut failed, mut not_run, mut warned) = (0usize, 0usize, 0usize, 0usize);
    let mut nchanges = 0usize;
    let (mut run_ms, mut parallel_ms) = (0f64, Vec::new());
    for (tag, ret) in tags {
        let result = outcome(ret);
        match result {
            Outcome::Ok => ok += 1,
            Outcome::Failed => failed += 1,
            Outcome::NotRun => not_run += 1,
        }
        let duration = millis(ret.get("duration").unwrap_or(&Value::from(0)));
        if ret.get("__parallel__").is_some() {
            parallel_ms.extend(duration);
        } else {
            run_ms += duration.unwrap_or(0.0);
        }
        let name = ret["name"].as_str().unwrap_or("");
        let (changed, ctext) = if ["state.orch", "state.orchestrate", "state.sls"].contains(&name) {
            let inner = match &ret["changes"] {
                Value::Object(m) => render_at(m, style, level + 1),
                other => py_str(other),
            };
            let pad = " ".repeat(14 * level);
            (true, format!("\n{inner}").lines().map(|l| format!("{pad}{l}")).collect::<Vec<_>>().join("\n"))
        } else {
            changes(&ret["changes"], style)
        };
        nchanges += changed as usize;
        if (style.diff || !style.verbose) && result == Outcome::Ok && !changed {
            continue;
        }
        let mut tcolor = if changed { CYAN } else { GREEN };
        match result {
            Outcome::Failed => (*hcolor, tcolor) = (RED, RED),
            Outcome::NotRun => (*hcolor, tcolor) = (LIGHT_YELLOW, LIGHT_YELLOW),
            Outcome::Ok => {}
        }
        let mut comps: Vec<&str> = tag.split("_|-").collect();
        comps.resize(comps.len().max(4), "");
        if style.ids {
            comps[2] = comps[1];
        }
        let terse = match style.output {
            StateOutput::Full => false,
            StateOutput::Terse => true,
            StateOutput::Mixed => result != Outcome::Failed,
            StateOutput::Changes => result == Outcome::Ok && !changed,
        };
        if terse {
            lines.push(terse_line(tcolor, &comps, ret, style));
            continue;
        }
        // Each field four columns in, its colour after them (as Salt prints it).
        let mut block = vec![
            format!("      ID: {}", comps[1]),
            format!("Function: {}.{}", comps[0], comps[3]),
            format!("  Result: {}", py_repr(&ret["result"])),
            format!(" Comment: {}", comment(ret)),
        ];
        if ret.get("start_time").is_some() {
            block.push(format!(" Started: {}", py_str(&ret["start_time"])));
            let d = match ret.get("duration") {
                Some(Value::String(s)) if s.is_empty() => String::new(),
                Some(d) => format!("{} ms", py_str(d)),
                None => String::new(),
            };
            block.push(format!("Duration: {d}"));
        }
        if comps[1] != comps[2] {
            block.insert(2, format!("    Name: {}", comps[2]));
        }
        lines.push(style.colored(tcolor, "----------"));
        for l in block {
            lines.push(format!("    {}", style.colored(tcolor, &l)));
        }
        lines.push(style.colored(tcolor, &format!("     Changes:   {ctext}")));
        if let Some(w) = ret.get("warnings") {
            warned += 1;
            lines.push(format!("   {} Warnings: {}{}", style.paint(LIGHT_RED), wrap(&warnings_text(w), 80, 14).trim_start(), style.paint(ENDC)));
        }
    }
    // Parallel states ran at the same time: the longest of them counts.
    let millis = run_ms + parallel_ms.iter().copied().fold(0.0, f64::max);
    summary(name, &Tally { ok, failed, not_run, warned, changed: nchanges, millis }, style, lines);
    nchanges
}

/// The Summary lines (Salt's, with `state_output_profile`).
struct Tally {
    ok: usize,
    failed: usize,
    not_run: usize,
    warned: usize,
    changed: usize,
    millis: f64,
}

fn summary(name: &str, t: &Tally, style: &Style, lines: &mut Vec<String>) {
    // Salt sizes the column by the longest count it holds (one for each result that
    // occurred, and the warnings), not by the total.
    let count_len = [t.ok, t.failed, t.not_run, t.warned].iter().filter(|n| **n > 0).map(|n| n.to_string().len()).max().unwrap_or(0);
    let width = "Succeeded".len() + count_len + 2;
    let count = |label: &str, n: usize| format!("{label}: {n:>w$}", w = width - (label.len() + 2));
    lines.push(style.colored(CYAN, &format!("\nSummary for {name}\n{}", "-".repeat(width))));
    let mut stats = Vec::new();
    if t.not_run > 0 {
        stats.push(style.colored(LIGHT_YELLOW, &format!("unchanged={}", t.not_run)));
    }
    if t.changed > 0 {
        stats.push(style.colored(GREEN, &format!("changed={}", t.changed)));
    }
    let stats = if stats.is_empty() { String::new() } else { format!(" ({})", stats.join(", ")) };
    lines.push(style.colored(GREEN, &count("Succeeded", t.ok + t.not_run)) + &stats);
    lines.push(style.colored(if t.failed > 0 { RED } else { CYAN }, &count("Failed", t.failed)));
    if t.warned > 0 {
        lines.push(style.colored(LIGHT_RED, &count("Warnings", t.warned)));
    }
    lines.push(style.colored(CYAN, &format!("{}\nTotal states run: {:>w$}", "-".repeat(width), t.ok + t.failed + t.not_run, w = width - 7)));
    let (ms, unit) = if t.millis > 999.0 { (t.millis / 1000.0, "s") } else { (t.millis, "ms") };
    lines.push(style.colored(CYAN, &format!("Total run time: {:>w$} {unit}", format!("{ms:.3}"), w = width - 5)));
}

/// A state's comment as Salt prints it: text stripped, its later lines 14 columns in;
/// anything else as Python's `str` of it; `data` appended.
fn comment(ret: &Value) -> String {
    let mut c = py_str(&ret["comment"]).trim().replace('\n', &format!("\n{}", " ".repeat(14)));
    match ret.get("data") {
        Some(Value::Array(items)) => {
            for i in items {
                c = format!("{c} {}", py_str(i));
            }
        }
        Some(Value::Object(m)) => {
            for (k, v) in m {
                c = format!("{c}\n\t\t{k}: {}", py_str(v));
            }
        }
        Some(other) => c = format!("{c} {}", py_str(other)),
        None => {}
    }
    c
}

/// A state's `warnings`, one a line.
fn warnings_text(w: &Value) -> String {
    match w {
        Value::Array(a) => a.iter().map(py_str).collect::<Vec<_>>().join("\n"),
        other => py_str(other),
    }
}

/// One state on one line (Salt's `_format_terse`, not tabular).
fn terse_line(tcolor: &'static str, comps: &[&str], ret: &Value, style: &Style) -> String {
    let result = match outcome(ret) {
        Outcome::Failed => "Failed",
        Outcome::NotRun => "Differs",
        Outcome::Ok if py_truthy(&ret["changes"]) => "Changed",
        Outcome::Ok => "Clean",
    };
    let mut s = String::new();
    if let Some(w) = ret.get("warnings") {
        s.push_str(&format!("{}Warnings:\n{}{}", style.paint(LIGHT_RED), warnings_text(w), style.paint(ENDC)));
    }
    s.push_str(&format!(" {} Name: {} - Function: {}.{} - Result: {result}", style.paint(tcolor), comps[2], comps[0], comps[comps.len() - 1]));
    if ret.get("start_time").is_some() {
        s.push_str(&format!(" - Started: {} - Duration: {} ms", py_str(&ret["start_time"]), py_str(&ret["duration"])));
    }
    s.push_str(style.paint(ENDC));
    s
}

/// Python's `textwrap.fill(text, width)` with both indents `indent` spaces: words
/// (whitespace, newlines included, separates them) filled greedily.
fn wrap(text: &str, width: usize, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut out: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && pad.len() + line.len() + 1 + word.len() > width {
            out.push(format!("{pad}{line}"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push(format!("{pad}{line}"));
    }
    out.join("\n")
}

/// A state's changes (Salt's `_format_changes`): a `salt.state` step's minions'
/// highstates nested, anything else through the nested outputter 14 columns in.
fn changes(c: &Value, style: &Style) -> (bool, String) {
    if !py_truthy(c) {
        return (false, String::new());
    }
    let Value::Object(m) = c else {
        return (true, format!("Invalid Changes data: {}", py_str(c)));
    };
    if let (Some(Value::Object(ret)), Some("highstate")) = (m.get("ret"), m.get("out").and_then(Value::as_str)) {
        let mut text = String::new();
        let mut changed = false;
        for (h, d) in ret {
            let (s, ch) = host(h, d, style, 1);
            changed |= ch;
            for l in s.lines() {
                text.push('\n');
                text.push_str(&" ".repeat(14));
                text.push_str(l);
            }
        }
        return (changed, text);
    }
    (true, format!("\n{}", nested_colored_at(c, 14, style.color)))
}

#[cfg(test)]
#[path = "highstate_tests.rs"]
mod tests;
