//! `ext_pillar`: the external pillars Halite implements, in the order listed.
//!
//! - `git`: git_pillar ([`super::git`]), compiled from the `git_pillar` roots tree the
//!   log carries.
//! - `cmd_yaml` / `cmd_json`: a shell command (`%s` stands for the minion id) whose
//!   standard output, read as YAML or JSON, is merged into the pillar.
//!
//! Any other entry is named in a warning at start ([`ExtPillarConfig::warnings`], the
//! config check) and left out, never dropped silently.
//!
//! ## Commands, and what is decided the same on every member
//!
//! A command is I/O, so a handler does not run it: it asks the [`ExtRun`] the daemon
//! implements (`daemon/ext_cmd.rs`), on the request's blocking thread, never on the async
//! runtime's. The run is bounded: [`CMD_TIMEOUT`] (then the process group is killed) and
//! [`MAX_CMD_OUTPUT`] bytes of standard output (then it is killed too). The minion id
//! reaches the shell as a positional argument: Salt's `%s` becomes `"$1"` (so it is
//! expanded outside single quotes), never the id spliced into the command text, so no id
//! can inject shell syntax. A command that fails (exit status, time, size,
//! output that is not YAML/JSON or not a mapping) is logged as `Failed to load
//! ext_pillar <type>: <why>` and merges nothing; the rest of the pillar is compiled as
//! usual. As in Salt, it is not put in `_errors`, which would stop the minion's state
//! runs.
//!
//! What is guaranteed: the git_pillar part of a pillar is a function of the log — every
//! member that applied the same index compiles it from the same commits. A command's
//! output is not: it is what the command printed on the member that compiled the pillar,
//! at that moment. That member's whole compiled pillar (command output included) is what
//! the minion receives and what enters the log as the minion's `pillar_cache` record
//! (kind 14), so pillar targeting (`-I`, `I@`) on every member decides from that one
//! result at the same index. Two members compiling the same minion's pillar at once run
//! the command each; if the command prints different things on different members (a
//! per-host file, the time), they answer differently — exactly as two Salt masters of a
//! multi-master setup do. A command that prints the same for the same minion gives the
//! same pillar everywhere.

use std::time::Duration;

use serde_json::Value as J;
use serde_yaml::Value as Y;

use super::git::{GitPillarConfig, GitRemote};

/// How long a command may run.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(30);
/// The most standard output a command may print (bytes).
pub const MAX_CMD_OUTPUT: usize = 4 << 20;

/// Which shape a command prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdFormat {
    Yaml,
    Json,
}

impl CmdFormat {
    pub fn name(self) -> &'static str {
        match self {
            CmdFormat::Yaml => "cmd_yaml",
            CmdFormat::Json => "cmd_json",
        }
    }
}

/// One `ext_pillar` entry Halite implements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtSource {
    /// A `git:` entry: its remotes, as indices into [`GitPillarConfig::remotes`].
    Git(Vec<usize>),
    Cmd { format: CmdFormat, command: String },
}

/// The `ext_pillar` list and the git_pillar options of a master config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtPillarConfig {
    pub sources: Vec<ExtSource>,
    pub git: GitPillarConfig,
    /// What was left out or is not implemented, for the warning at start.
    pub warnings: Vec<String>,
}

impl ExtPillarConfig {
    pub fn from_raw(raw: &serde_yaml::Mapping) -> ExtPillarConfig {
        let mut out = ExtPillarConfig { git: GitPillarConfig::globals(raw), ..Default::default() };
        let list = match raw.get("ext_pillar") {
            None | Some(Y::Null) => return out,
            Some(Y::Sequence(s)) => s,
            Some(_) => {
                out.warnings.push("ext_pillar is not a list (Salt calls it malformed): no external pillar is read".into());
                return out;
            }
        };
        for entry in list {
            let Some((kind, val)) = entry.as_mapping().filter(|m| m.len() == 1).and_then(|m| m.iter().next()) else {
                out.warnings.push("an ext_pillar entry is not a mapping of one type to its value (Salt calls it malformed); left out".into());
                continue;
            };
            let kind = kind.as_str().unwrap_or("");
            match kind {
                "git" => {
                    let Some(remotes) = val.as_sequence() else {
                        out.warnings.push("ext_pillar git: not a list of remotes; left out".into());
                        continue;
                    };
                    let mut idx = Vec::new();
                    for r in remotes {
                        if let Some(remote) = GitRemote::parse(r, &out.git, &mut out.warnings) {
                            if out.git.remotes.iter().any(|o| o.fetch.key == remote.fetch.key) {
                                out.warnings.push(format!("git_pillar remote {} is listed twice (give each a distinct name); the second is left out", remote.fetch.id));
                                continue;
                            }
                            idx.push(out.git.remotes.len());
                            out.git.remotes.push(remote);
                        }
                    }
                    out.sources.push(ExtSource::Git(idx));
                }
                "cmd_yaml" | "cmd_json" => match val {
                    Y::String(c) if !c.trim().is_empty() && !c.contains('\0') => {
                        let format = if kind == "cmd_yaml" { CmdFormat::Yaml } else { CmdFormat::Json };
                        out.sources.push(ExtSource::Cmd { format, command: c.clone() });
                    }
                    _ => out.warnings.push(format!("ext_pillar {kind}: the value is not a command (a non-empty string); left out")),
                },
                "" => out.warnings.push("an ext_pillar entry's type is not a string; left out".into()),
                other => out.warnings.push(format!("ext_pillar {other} is not implemented by Halite (it implements git, cmd_yaml and cmd_json); left out")),
            }
        }
        out
    }
}

/// Why an `ext_pillar` command gave no pillar data: the run failed, or its output is
/// not a mapping. (Logged as Salt logs a failed `cmd_yaml`/`cmd_json`; nothing merged.)
#[derive(Debug, thiserror::Error)]
pub enum ExtCmdError {
    /// A view that runs no commands.
    #[error("commands are not run here")]
    NotRun,
    /// Every place to run a command stayed taken for the whole time bound.
    #[error("{running} commands were running for {secs} s; this one did not start")]
    Busy { running: usize, secs: u64 },
    #[error("cannot start /bin/sh: {0}")]
    Spawn(std::io::Error),
    #[error("cannot start a thread to read the command's output")]
    Thread,
    /// Past the bound on standard output: the command was killed.
    #[error("the command printed more than {0} bytes")]
    TooMuchOutput(usize),
    /// Past the time bound: the command was killed.
    #[error("the command ran longer than {0} s")]
    TooLong(u64),
    #[error("waiting for the command: {0}")]
    Wait(std::io::Error),
    /// A non-zero exit, with the end of what the command wrote on standard error.
    #[error("the command exited with {status}{}", colon(.stderr))]
    Exited { status: std::process::ExitStatus, stderr: String },
    #[error("the command did not finish")]
    Unfinished,
    #[error("the output is not UTF-8")]
    NotUtf8,
    #[error("the output is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the output is not YAML: {0}")]
    NotYaml(serde_yaml::Error),
    /// Valid output that is not a mapping (`a list`, `a string`, ...).
    #[error("the output is not a mapping but {0}")]
    NotAMapping(&'static str),
}

/// `": text"`, or nothing for no text.
fn colon(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

/// Runs an `ext_pillar` command (the daemon's side; handlers only call it).
pub trait ExtRun: Send + Sync {
    /// The standard output of `command` run by `sh -c` for minion `id`, or why not.
    fn run(&self, command: &str, id: &str) -> Result<Vec<u8>, ExtCmdError>;
}

/// Runs nothing: a view that does not run commands.
pub struct NoRun;

impl ExtRun for NoRun {
    fn run(&self, _command: &str, _id: &str) -> Result<Vec<u8>, ExtCmdError> {
        Err(ExtCmdError::NotRun)
    }
}

/// The command text `sh -c` is given: Salt's `%s` (the minion id) becomes `"$1"`, the id
/// being passed as that positional argument.
pub fn shell_text(command: &str) -> String {
    command.replace("%s", "\"$1\"")
}

/// A command's output as the pillar data it merges, or why it cannot be.
pub fn parse_output(format: CmdFormat, out: &[u8]) -> Result<J, ExtCmdError> {
    let text = std::str::from_utf8(out).map_err(|_| ExtCmdError::NotUtf8)?;
    let v = match format {
        CmdFormat::Json => serde_json::from_str::<J>(text).map_err(ExtCmdError::NotJson)?,
        CmdFormat::Yaml => super::yaml_to_json(serde_yaml::from_str::<Y>(text).map_err(ExtCmdError::NotYaml)?),
    };
    match v {
        J::Object(_) => Ok(v),
        // Empty output: nothing to merge, as in Salt.
        J::Null => Ok(J::Object(Default::default())),
        other => Err(ExtCmdError::NotAMapping(kind_of(&other))),
    }
}

fn kind_of(v: &J) -> &'static str {
    match v {
        J::Array(_) => "a list",
        J::String(_) => "a string",
        J::Number(_) => "a number",
        J::Bool(_) => "a boolean",
        _ => "null",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ext_pillar_entries_and_warnings() {
        let raw: serde_yaml::Mapping = serde_yaml::from_str(
            "ext_pillar:\n  - cmd_yaml: cat /etc/x/%s.yaml\n  - mongo: {collection: x}\n  - git:\n    - master file:///srv/p.git\n    - dev /srv/q.git:\n      - env: d\n      - root: sub\n    - main https://example.com/r.git\n  - cmd_json: ''\n  - just a string\n",
        )
        .unwrap();
        let c = ExtPillarConfig::from_raw(&raw);
        assert_eq!(c.sources.len(), 2, "{:?}", c.sources);
        assert_eq!(c.sources[0], ExtSource::Cmd { format: CmdFormat::Yaml, command: "cat /etc/x/%s.yaml".into() });
        assert_eq!(c.sources[1], ExtSource::Git(vec![0, 1]));
        assert_eq!(c.git.remotes.len(), 2);
        let w = c.warnings.join("\n");
        for named in ["mongo", "example.com", "cmd_json", "malformed"] {
            assert!(w.contains(named), "{named} not named in {w}");
        }
        let bad: serde_yaml::Mapping = serde_yaml::from_str("ext_pillar: {git: x}\n").unwrap();
        assert!(ExtPillarConfig::from_raw(&bad).warnings[0].contains("not a list"));
    }

    #[test]
    fn command_output_is_parsed_or_refused() {
        assert_eq!(parse_output(CmdFormat::Yaml, b"a: 1\nb: [x]\n").unwrap(), serde_json::json!({"a": 1, "b": ["x"]}));
        assert_eq!(parse_output(CmdFormat::Json, br#"{"a": {"b": true}}"#).unwrap(), serde_json::json!({"a": {"b": true}}));
        assert_eq!(parse_output(CmdFormat::Yaml, b"").unwrap(), serde_json::json!({}));
        assert!(parse_output(CmdFormat::Json, b"a: 1").unwrap_err().to_string().contains("not JSON"));
        assert!(parse_output(CmdFormat::Yaml, b"a: [").unwrap_err().to_string().contains("not YAML"));
        assert!(parse_output(CmdFormat::Yaml, b"- 1\n").unwrap_err().to_string().contains("a list"));
        assert!(parse_output(CmdFormat::Yaml, b"\xff").unwrap_err().to_string().contains("UTF-8"));
        assert_eq!(shell_text("cat /x/%s.yaml"), "cat /x/\"$1\".yaml");
    }
}
