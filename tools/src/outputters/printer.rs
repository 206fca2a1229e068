//! Where `salt` prints a job's returns (and `salt-run`, `salt-key` their answers), and
//! with which outputter, as Salt's commands do (`salt/output/__init__.py` of Salt
//! 3008.5); [`OutputFlags`] are Salt's output options, the same on the three commands:
//!
//! - the outputter of a return is `--out` when given (and not `highstate`); else the one
//!   the minion named in its return (`out`: a state function names `highstate`); else,
//!   with `--static` and a `state.*` function, `highstate`; else `nested`. A name the
//!   tools do not have is logged and `nested` is used, as Salt falls back;
//! - each return is printed as it comes, or with `--static` all of them at the end as
//!   one document (in the outputter the last return named);
//! - `--out-file FILE` writes the printouts to FILE instead of standard output (emptied
//!   first, unless `--out-file-append`), each followed by a newline;
//! - colours on a terminal (standard output's), or always with `--force-color`, never
//!   with `--no-color`.

use std::io::Write;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::output::{render_styled, Out, Style};

/// Salt's output options (its `OutputOptionsMixIn`), the same flags on `salt`,
/// `salt-run` and `salt-key`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OutputFlags {
    /// The outputter: nested, json, yaml, txt (text), raw, pprint, table, highstate, key; by default
    /// the one the answer names (`highstate` for a state function), else the command's.
    #[arg(long = "out", alias = "output")]
    pub out: Option<String>,
    /// Indentation of the json outputter (a negative number: one line per minion).
    #[arg(long = "out-indent", alias = "output-indent", allow_negative_numbers = true)]
    pub out_indent: Option<i64>,
    /// Write the output to this file instead of standard output (emptied first).
    #[arg(long = "out-file", alias = "output-file")]
    pub out_file: Option<PathBuf>,
    /// Append to the `--out-file` instead of emptying it first.
    #[arg(long = "out-file-append", alias = "output-file-append")]
    pub out_file_append: bool,
    /// No colours, even on a terminal.
    #[arg(long = "no-color", alias = "no-colour")]
    pub no_color: bool,
    /// Colours, even when not on a terminal.
    #[arg(long = "force-color", alias = "force-colour")]
    pub force_color: bool,
    /// The highstate outputter's form: full, terse, mixed, changes or filter (each may
    /// end in `_id`); default the master config's `state_output`, else full.
    #[arg(long = "state-output", alias = "state_output")]
    pub state_output: Option<String>,
    /// `False` leaves out of the highstate the states that succeeded without changes;
    /// default the master config's `state_verbose`, else True.
    #[arg(long = "state-verbose", alias = "state_verbose")]
    pub state_verbose: Option<String>,
    /// Leave out of the highstate the states that succeeded without changes (Salt's
    /// `--output-diff`; the config's `state_output_diff`).
    #[arg(long = "output-diff")]
    pub output_diff: bool,
}

impl OutputFlags {
    /// The style these flags and the master config ask for (the flags win over the
    /// config's `state_output`, `state_verbose` and `output_indent`).
    pub fn style(&self, cfg: &halite_master::MasterConfig) -> Style {
        let text = |k: &str| {
            cfg.raw.get(k).and_then(|v| match v {
                serde_yaml::Value::String(s) => Some(s.clone()),
                serde_yaml::Value::Bool(b) => Some(if *b { "True" } else { "False" }.to_string()),
                serde_yaml::Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
        };
        let mut state = crate::highstate::Style::default();
        if let Some(o) = self.state_output.clone().or_else(|| text("state_output")) {
            state = state.with_state_output(&o);
        }
        if let Some(v) = self.state_verbose.clone().or_else(|| text("state_verbose")) {
            // Salt turns only these two spellings into False (any other text is true).
            state.verbose = !(v == "False" || v == "false");
        }
        state.diff = self.output_diff
            || match cfg.raw.get("state_output_diff") {
                Some(serde_yaml::Value::Bool(b)) => *b,
                Some(serde_yaml::Value::String(s)) => !s.is_empty(),
                Some(serde_yaml::Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
                _ => false,
            };
        let indent = self.out_indent.or_else(|| text("output_indent").and_then(|t| if t == "pretty" { Some(4) } else { t.parse().ok() }));
        use std::io::IsTerminal;
        let color = self.force_color || (!self.no_color && std::io::stdout().is_terminal());
        Style { color, indent, state }
    }

    /// A printer for a command whose own outputter is `default` (`fun`: the job's
    /// function; `gather`: `--static`). `Err`: Salt's complaint about an `--out-file` it
    /// cannot empty.
    pub fn printer(&self, cfg: &halite_master::MasterConfig, default: Out, fun: &str, gather: bool) -> Result<Printer, OutFileError> {
        let options = Options { out: self.out.clone(), style: self.style(cfg), gather, file: self.out_file.clone(), append: self.out_file_append, fun: fun.to_string(), default };
        Printer::new(options).map_err(|source| OutFileError { path: self.out_file.clone().unwrap_or_default(), source })
    }
}

/// An `--out-file` that cannot be emptied, in Salt's words.
#[derive(Debug, thiserror::Error)]
#[error("{}: Access denied: {source}", path.display())]
pub struct OutFileError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// `salt`'s output options, as parsed from its flags and the master config.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--out`, as given.
    pub out: Option<String>,
    pub style: Style,
    /// `--static`.
    pub gather: bool,
    /// `--out-file`.
    pub file: Option<PathBuf>,
    /// `--out-file-append`.
    pub append: bool,
    /// The job's function (`--static` prints a `state.*` function's returns as
    /// `highstate` when no outputter is named).
    pub fun: String,
    /// The command's own outputter (`nested`; `key` for `salt-key`).
    pub default: Out,
}

/// Prints returns as `salt` does (see the module docs).
pub struct Printer {
    forced: Option<Out>,
    default: Out,
    style: Style,
    file: Option<PathBuf>,
    state_fun: bool,
    /// `--static`: the returns so far and the outputter the last one named.
    gather: Option<(Map<String, Value>, Option<String>)>,
}

/// The outputter Salt names `name`, or `nested` (with Salt's error) if there is none.
fn named(name: &str) -> Out {
    Out::from_salt(name).unwrap_or_else(|| {
        tracing::error!("Invalid outputter {name} specified, fall back to nested");
        Out::Nested
    })
}

impl Printer {
    /// A printer for `o`; empties `--out-file` first unless appending (keeping the
    /// file's permissions, as Salt does).
    pub fn new(o: Options) -> std::io::Result<Printer> {
        if let (Some(f), false) = (&o.file, o.append) {
            if f.is_file() {
                std::fs::OpenOptions::new().write(true).truncate(true).open(f)?;
            }
        }
        let forced = o.out.as_deref().filter(|n| *n != "highstate" && !n.is_empty()).map(named);
        Ok(Printer { forced, default: o.default, style: o.style, file: o.file, state_fun: o.fun.starts_with("state."), gather: o.gather.then(|| (Map::new(), None)) })
    }

    /// The outputter for data whose return named `hint`.
    pub fn outputter(&self, hint: Option<&str>) -> Out {
        if let Some(o) = self.forced {
            return o;
        }
        match hint.filter(|h| !h.is_empty()) {
            Some(h) => named(h),
            None if self.gather.is_some() && self.state_fun => Out::Highstate,
            None => self.default,
        }
    }

    /// The outputter a plain `{id: value}` (not a minion's return) is printed with.
    pub fn plain_out(&self) -> Out {
        self.forced.unwrap_or(self.default)
    }

    /// Whether `--out` named an outputter (other than `highstate`).
    pub fn forced(&self) -> bool {
        self.forced.is_some()
    }

    /// Prints (or gathers) `{id: value}`; `hint` is the outputter the return named.
    pub fn one(&mut self, id: &str, value: Value, hint: Option<&str>) {
        match &mut self.gather {
            Some((all, last)) => {
                all.insert(id.to_string(), value);
                if hint.is_some() {
                    *last = hint.map(String::from);
                }
            }
            None => {
                let mut m = Map::new();
                m.insert(id.to_string(), value);
                let out = self.outputter(hint);
                self.print(&Value::Object(m), out);
            }
        }
    }

    /// Prints `v` with `out` to standard output or the out-file.
    pub fn print(&self, v: &Value, out: Out) {
        self.print_text(&render_styled(v, out, &self.style));
    }

    /// Prints text already rendered; nothing when it is empty (as Salt's
    /// `display_output`).
    pub fn print_text(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        // The text and its newline in one write: `println!` hands them to stdout's line
        // buffer in two, and a return of several lines (`--out json`) cost two system
        // calls, 16,000 for a `test.ping` to 8,000 minions, each waking the reader of a
        // pipe.
        let line = format!("{text}\n");
        match &self.file {
            // A write that fails ends the command as `println!` did.
            None => {
                if let Err(e) = std::io::stdout().lock().write_all(line.as_bytes()) {
                    panic!("failed printing to stdout: {e}");
                }
            }
            Some(f) => {
                let written = std::fs::OpenOptions::new().create(true).append(true).open(f).and_then(|mut h| h.write_all(line.as_bytes()));
                if let Err(e) = written {
                    tracing::error!("cannot write the output to {}: {e}", f.display());
                }
            }
        }
    }

    /// A line of progress on standard output (not in a gathered document).
    pub fn say(&self, line: &str) {
        if self.gather.is_none() {
            println!("{line}");
        }
    }

    /// Prints the gathered document, if gathering.
    pub fn finish(&mut self) {
        if let Some((all, last)) = self.gather.take() {
            let out = self.outputter(last.as_deref());
            self.print(&Value::Object(all), out);
        }
    }
}

impl Printer {
    /// One return of a batch run, shaped as Salt's batch prints it: the return under the
    /// minion id beside the job's `jid` and the `retcode` (keys sorted for `nested`, as
    /// Salt's nested outputter sorts them), in the outputter the return named (`hint`)
    /// unless `--out` names one; gathered as `{id: return}`.
    pub fn batch_return(&mut self, jid: &str, id: &str, rc: i64, value: Value, hint: Option<&str>) {
        if self.gather.is_some() {
            return self.one(id, value, hint);
        }
        let out = self.outputter(hint);
        let mut fields = vec![("retcode".to_string(), serde_json::json!(rc)), ("jid".to_string(), serde_json::json!(jid)), (id.to_string(), value)];
        if out == Out::Nested {
            fields.sort_by(|a, b| a.0.cmp(&b.0));
        }
        self.print(&Value::Object(fields.into_iter().collect()), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printer(out: Option<&str>, gather: bool, fun: &str) -> Printer {
        Printer::new(Options { out: out.map(String::from), gather, fun: fun.into(), ..Default::default() }).unwrap()
    }

    #[test]
    fn the_outputter_is_chosen_as_salt_chooses_it() {
        // The return's own outputter unless --out names another (not highstate).
        assert_eq!(printer(None, false, "state.apply").outputter(Some("highstate")), Out::Highstate);
        assert_eq!(printer(Some("json"), false, "state.apply").outputter(Some("highstate")), Out::Json);
        assert_eq!(printer(Some("highstate"), false, "test.ping").outputter(None), Out::Nested, "--out highstate keeps the return's");
        assert_eq!(printer(Some("text"), false, "test.ping").outputter(None), Out::Txt);
        assert_eq!(printer(Some("pprint"), false, "test.ping").outputter(None), Out::Pprint);
        // Unknown names fall back to nested.
        assert_eq!(printer(Some("quiet"), false, "test.ping").outputter(None), Out::Nested);
        assert_eq!(printer(None, false, "test.ping").outputter(Some("progress")), Out::Nested);
        // --static and a state function: highstate when nothing is named.
        assert_eq!(printer(None, true, "state.sls").outputter(None), Out::Highstate);
        assert_eq!(printer(None, false, "state.sls").outputter(None), Out::Nested);
    }

    #[test]
    fn the_out_file_is_emptied_then_appended_to() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("out");
        std::fs::write(&f, "old\n").unwrap();
        let opts = |append| Options { out: Some("json".into()), file: Some(f.clone()), append, style: Style { indent: Some(-1), ..Style::default() }, ..Default::default() };
        let mut p = Printer::new(opts(false)).unwrap();
        p.one("m1", Value::Bool(true), None);
        p.one("m2", Value::Bool(false), None);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "{\"m1\": true}\n{\"m2\": false}\n");
        let mut p = Printer::new(opts(true)).unwrap();
        p.one("m3", Value::Null, None);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "{\"m1\": true}\n{\"m2\": false}\n{\"m3\": null}\n");
    }
}
