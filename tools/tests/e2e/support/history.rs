//! A history of a run under faults, as Jepsen keeps one: every client operation (which
//! process, what, its arguments, when it was invoked, its outcome and what it returned,
//! when it completed) and every fault (its kind, its target, when it started and ended).
//! Each event is appended to a JSON-lines file as it completes, so the file holds the run
//! up to the moment a test fails; [`super::checker`] judges it.
//!
//! One line per event:
//! `{"type":"op","process":"operator","op":"accept","args":{"id":"k3","via":1},"invoke":12.31,"complete":12.87,"outcome":"ok","result":null}`
//! `{"type":"fault","kind":"kill","target":"member 0 (leader)","start":20.1,"end":26.4}`
//! Times are seconds since the history began.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a client was told: the operation happened (`Ok`), did not happen (`Fail`: the
/// tool said nothing was done), or may have happened (`Unknown`: a timeout, an error, a
/// crash in the middle).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    Fail,
    Unknown,
}

/// One client operation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Op {
    pub process: String,
    pub op: String,
    pub args: Value,
    pub invoke: f64,
    pub complete: f64,
    pub outcome: Outcome,
    pub result: Value,
}

/// One fault, from its start to its end (when the nemesis undid it).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Fault {
    pub kind: String,
    pub target: String,
    pub start: f64,
    pub end: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    Op(Op),
    Fault(Fault),
}

/// The operations the checker reads (`op` of an [`Op`]):
///
/// | op | args | result |
/// |---|---|---|
/// | `register` | `id`, `via` | which answer came (a key sent with a minion's `_auth`; never `ok`: no answer says it was recorded) |
/// | `accept`, `reject`, `delete` | `id`, `via` | — (`salt-key -a/-r/-d ID -y`) |
/// | `keys` | `member` | `salt-key -L --out json` of that member |
/// | `job` | `value`, `via`, `minions` | `returns`: the minions `salt` printed `value` for |
/// | `returns` | `member` | `returns`: `[minion, value, jid]` of every `test.echo` in its job cache |
/// | `digest` | `member` | `cluster.digest` of that member (`digest`, `applied_index`) |
/// | `ready` | `member` | the body of its `/ready` (outcome `ok` when ready) |
/// | `minion_jobs` | `minion` | `jids`: how often the minion was handed each jid |
/// | `sync_roots` | `via`, `content` | what `salt-run cluster.sync_roots roots=file` printed (the file changed to `content` on member `via` first) |
/// | `roots` | `member` | `content`: the synced file in that member's `file_roots` |
/// | `served` | `minions` | `cp.get_file_str` of the synced file, per minion |
/// | `fleet_acks` | — | `jids`: how many of the simulated fleet's returns of each job a member acknowledged |
/// | `join` | `member`, `ip` | `serving`, `voter`: the new member serves and the others count it a voter |
/// | `exited` | `member` | `status`, `log`: the member's process ended by itself (started again) |
///
/// A `keys` read of process `final` is a read after the faults stopped and the members
/// settled: it must show every acknowledged key decision.
pub const FINAL: &str = "final";

/// A history being recorded (shared by the client threads and the nemesis).
pub struct History {
    t0: Instant,
    path: PathBuf,
    file: Mutex<std::fs::File>,
    events: Mutex<Vec<Event>>,
}

impl History {
    /// A new history written to `path` (created or emptied).
    pub fn create(path: &Path) -> History {
        let file = std::fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        History { t0: Instant::now(), path: path.to_path_buf(), file: Mutex::new(file), events: Mutex::new(Vec::new()) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Seconds since the history began.
    pub fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn push(&self, e: Event) {
        let line = serde_json::to_string(&e).expect("an event is JSON");
        {
            let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
            writeln!(f, "{line}").and_then(|()| f.flush()).unwrap_or_else(|err| panic!("{}: {err}", self.path.display()));
        }
        self.events.lock().unwrap_or_else(|e| e.into_inner()).push(e);
    }

    /// Runs `f` as operation `op` of `process` and records it with its times.
    pub fn op<T>(&self, process: &str, op: &str, args: Value, f: impl FnOnce() -> (Outcome, Value, T)) -> T {
        let invoke = self.now();
        let (outcome, result, t) = f();
        self.push(Event::Op(Op { process: process.into(), op: op.into(), args, invoke, complete: self.now(), outcome, result }));
        t
    }

    /// Records a fault that ran from `start` until now.
    pub fn fault(&self, kind: &str, target: &str, start: f64) {
        self.push(Event::Fault(Fault { kind: kind.into(), target: target.into(), start, end: self.now() }));
    }

    /// The events recorded so far, in the order they completed.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Reads a history file back (a line that is not an event is an error).
pub fn read_history(path: &Path) -> Result<Vec<Event>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines().filter(|l| !l.trim().is_empty()).enumerate().map(|(n, l)| serde_json::from_str(l).map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))).collect()
}
