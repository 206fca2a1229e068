//! Lowstate clients: what one chunk (`{"client": ..., "fun": ..., ...}`) does, checked
//! against the caller's `external_auth` rules first, then carried out through the
//! master's admin socket as `salt` and `salt-run` do. A chunk is parsed into a
//! [`Command`] (every field checked: a bad one is a 400 before anything runs), then
//! answered; one file per client family.
//!
//! | client | does | answers | file |
//! |---|---|---|---|
//! | `local` | publishes, waits for the returns (the chunk's `timeout`, else the master's `timeout`) | `{minion: return}`, `false` for a minion the job went to that did not return in time | [`local`] |
//! | `local_async` | publishes | `{"jid", "minions"}` | [`local`] |
//! | `local_batch` | Salt's `cmd_batch`: `test.ping`s the target, then runs on `batch` (N or N%, default `10%`) of the minions that answered at a time (`batch_wait`, `failhard`) | one `{minion: return}` per minion as it returns, each an item of the answer's `return` list (`{minion: {}}` for one that did not return in time) | [`batch`] |
//! | `local_subset` | Salt's `cmd_subset`: asks the target for `sys.list_functions`, runs on `subset` (default 3) of the minions that have `fun`, picked at random | `{minion: return}` (`false` for a picked minion that did not return) | [`subset`] |
//! | `runner` | a runner the master answers (`jobs.*`, `manage.present`, `fileserver.*`, ...), `manage.status`/`up`/`down` (every accepted minion `test.ping`ed, [`runner`]); `state.orchestrate` (`state.orch`, `state.sls`) run to its end (`halite_tools::orchestrate`); every call kept as a job with its `salt/run/<jid>/new` and `/ret` events, as Salt keeps it | the runner's return; for an orchestration Salt's `{"data": {"<id>_master": ...}, "outputter": "highstate", "retcode"}` | [`runner`] |
//! | `runner_async` | starts the runner in the background (at most [`runner::MAX_IN_FLIGHT`] at once, with `wheel_async`) | `{"tag": "salt/run/<jid>", "jid"}`; the run fires `salt/run/<jid>/new` and `/ret`, and `jobs.lookup_jid` shows it (an orchestration's jid is its run job's) | [`runner`] |
//! | `wheel` | `key.list_all`, `key.accept`, `key.reject`, `key.delete` (`match`), `key.finger`, `key.gen_accept` (a key pair made here), kept as a job with its `salt/wheel/<jid>/new` and `/ret` events | `{"tag", "data": {"fun", "jid", "user", "return", "success", ...}}` | [`wheel`] |
//! | `wheel_async` | starts the wheel function in the background | `{"tag": "salt/wheel/<jid>", "jid"}`; the run fires `salt/wheel/<jid>/new` and `/ret` | [`wheel`] |
//!
//! The runner and wheel clients read a chunk's arguments as Salt's runner client reads
//! them ([`Special`]): `arg` (`name=value` texts are keyword arguments), `kwarg`, then
//! the chunk's other keys; a chunk field a client does not read is named in a warning.
//!
//! A call the rules do not allow is refused with 401 ("Authorization error occurred."),
//! as rest_cherrypy answers Salt's authorization errors. The rules apply as Salt's
//! master applies them to what each client publishes: `local_batch`'s `test.ping` of the
//! target and each batch's call (on the batch's minions), `local_subset`'s
//! `sys.list_functions` of the target and its call on the picked minions; `@runner` and
//! `@wheel` rules for the runner and wheel clients.

pub mod batch;
pub mod local;
pub mod runner;
pub mod subset;
pub mod wheel;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value as J};

use super::acl;
use super::admin;
use super::config::ApiConfig;
use super::reply::ApiError;

/// The clients salt-api knows (`GET /` lists them).
pub const CLIENTS: [&str; 8] = ["local", "local_async", "local_batch", "local_subset", "runner", "runner_async", "wheel", "wheel_async"];

/// Chunk keys that are not a runner's keyword arguments (and that every `local*`
/// client reads, with [`local::PUBLISH_KEYS`]).
const RESERVED: [&str; 12] = ["client", "fun", "arg", "kwarg", "token", "eauth", "username", "password", "tgt", "tgt_type", "timeout", "full_return"];

/// The chunk's keys `client` does not read, each named in a warning (a key whose value
/// is null asks for nothing: pepper sends `batch: null` with every `local` chunk). The
/// runner clients read every other key as a keyword argument; the wheel clients take
/// no `timeout` or `full_return`.
fn warn_unread(chunk: &Map<String, J>, client: &str) {
    let extra: &[&str] = match client {
        "local_batch" => &["batch", "batch_wait", "failhard"],
        "local_subset" => &["subset", "sub"],
        "wheel" | "wheel_async" => {
            for k in ["timeout", "full_return", "tgt", "tgt_type"].into_iter().filter(|k| chunk.get(*k).is_some_and(|v| !v.is_null())) {
                tracing::warn!(client, field = k, "salt-api: a chunk field the wheel client does not read");
            }
            return;
        }
        c if c.starts_with("runner") => {
            for k in ["tgt", "tgt_type"].into_iter().filter(|k| chunk.get(*k).is_some_and(|v| !v.is_null())) {
                tracing::warn!(client, field = k, "salt-api: a chunk field the runner client does not read");
            }
            return;
        }
        _ => &[],
    };
    for (k, v) in chunk {
        let read = RESERVED.contains(&k.as_str()) || local::PUBLISH_KEYS.contains(&k.as_str()) || extra.contains(&k.as_str());
        if !read && !v.is_null() {
            if k == "expr_form" {
                tracing::warn!(client, field = %k, "salt-api: expr_form is not read (Salt 3008 names it tgt_type); the target is read as tgt_type says (glob by default)");
            } else {
                tracing::warn!(client, field = %k, "salt-api: a chunk field this client does not read");
            }
        }
    }
}

/// A logged-in caller, from a token the master holds.
#[derive(Debug, Clone)]
pub struct Session {
    pub hash: String,
    pub user: String,
    pub eauth: String,
    pub perms: Vec<J>,
    pub start: f64,
    pub expire: f64,
}

/// What a chunk answers: one item of the lowstate's `return` list, or several (a
/// `local_batch` yields one per minion, and rest_cherrypy lists each).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    One(J),
    Many(Vec<J>),
}

/// A parsed chunk.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Local(local::Call),
    LocalAsync(local::Call),
    LocalBatch(local::Call, batch::Opts),
    LocalSubset(local::Call, usize),
    Runner(Special),
    RunnerAsync(Special),
    Wheel(Special),
    WheelAsync(Special),
}

/// A runner's or a wheel's call: its function and arguments (the chunk's keys that are
/// not the client's own become keyword arguments, as Salt passes them).
#[derive(Debug, Clone, PartialEq)]
pub struct Special {
    pub fun: String,
    pub arg: Vec<J>,
    pub kwarg: Map<String, J>,
    /// The chunk's `timeout` (seconds): how long an orchestration's steps wait for
    /// their minions ([`runner`]).
    pub timeout: Option<f64>,
    /// `full_return`: the `runner` client answers the run's whole `ret` event data
    /// (`fun`, `fun_args`, `jid`, `user`, `_stamp`, `return`, `success`), as Salt's
    /// `cmd_sync(full_return=True)` does.
    pub full_return: bool,
}

impl Command {
    /// Parses a chunk; `client` overrides the chunk's own (the endpoints that fix it).
    pub fn parse(chunk: &Map<String, J>, client: Option<&str>) -> Result<Command, ApiError> {
        let client = match client {
            Some(c) => c,
            None => match chunk.get("client") {
                Some(J::String(c)) => c.as_str(),
                None | Some(J::Null) => return Err(ApiError::new(400, "No client specified")),
                Some(_) => return Err(ApiError::new(400, "client must be a string")),
            },
        };
        let fun = match chunk.get("fun") {
            Some(J::String(f)) if !f.is_empty() => f.clone(),
            Some(J::String(_)) | None | Some(J::Null) => return Err(ApiError::new(400, "Missing fun")),
            Some(_) => return Err(ApiError::new(400, "fun must be a string")),
        };
        warn_unread(chunk, client);
        Ok(match client {
            "local" => Command::Local(local::Call::parse(chunk, fun)?),
            "local_async" => Command::LocalAsync(local::Call::parse(chunk, fun)?),
            "local_batch" => Command::LocalBatch(local::Call::parse(chunk, fun)?, batch::Opts::parse(chunk)?),
            "local_subset" => Command::LocalSubset(local::Call::parse(chunk, fun)?, subset::parse(chunk)?),
            "runner" => Command::Runner(Special::parse(chunk, fun)?),
            "runner_async" => Command::RunnerAsync(Special::parse(chunk, fun)?),
            "wheel" => Command::Wheel(Special::parse(chunk, fun)?),
            "wheel_async" => Command::WheelAsync(Special::parse(chunk, fun)?),
            other => return Err(ApiError::new(400, format!("Invalid client {other:?}: Halite's salt-api has {}", CLIENTS.join(", ")))),
        })
    }

    /// Carries the chunk out for `s`.
    pub async fn answer(self, cfg: &ApiConfig, s: &Session) -> Result<Reply, ApiError> {
        Ok(match self {
            Command::Local(c) => Reply::One(local::local(cfg, s, &c).await?),
            Command::LocalAsync(c) => Reply::One(local::local_async(cfg, s, &c).await?),
            Command::LocalBatch(c, o) => Reply::Many(batch::answer(cfg, s, &c, &o).await?),
            Command::LocalSubset(c, n) => Reply::One(subset::answer(cfg, s, &c, n).await?),
            Command::Runner(c) => Reply::One(runner::runner(cfg, s, &c).await?),
            Command::RunnerAsync(c) => Reply::One(runner::runner_async(cfg, s, c).await?),
            Command::Wheel(c) => Reply::One(wheel::wheel(cfg, s, &c).await?),
            Command::WheelAsync(c) => Reply::One(wheel::wheel_async(cfg, s, c).await?),
        })
    }
}

/// Runs one chunk for `s`; `client` overrides the chunk's own (the endpoints that fix it).
pub async fn run(cfg: &ApiConfig, s: &Session, chunk: Map<String, J>, client: Option<&str>) -> Result<Reply, ApiError> {
    enabled(&cfg.enabled_clients, &chunk, client)?;
    Command::parse(&chunk, client)?.answer(cfg, s).await
}

/// Refuses a known client that `netapi_enable_clients` does not list, with Salt's 400
/// and message (an unknown or missing client is left to [`Command::parse`]'s errors).
pub(crate) fn enabled(enabled: &[String], chunk: &Map<String, J>, client: Option<&str>) -> Result<(), ApiError> {
    let client = match client {
        Some(c) => c,
        None => match chunk.get("client") {
            Some(J::String(c)) => c.as_str(),
            _ => return Ok(()),
        },
    };
    if !CLIENTS.contains(&client) || enabled.iter().any(|c| c == client) {
        return Ok(());
    }
    Err(ApiError::new(400, format!("Client disabled: '{client}'. Add to 'netapi_enable_clients' master config option to enable.")))
}

impl Special {
    /// A chunk's call, as Salt's runner client reads a low chunk (`_reformat_low`): the
    /// `arg` list through `parse_input` (a `name=value` text is a keyword argument, each
    /// value read as YAML, [`halite_tools::args::yamlify`]; a map with `__kwarg__: true`
    /// joins the keywords), then `kwarg`, then every other key of the chunk that is not
    /// the client's own (old-style keywords). Pepper sends `["jid=..."]` when the answer
    /// carries `X-Salt-Version`, top-level keys when not; both read the same.
    fn parse(chunk: &Map<String, J>, fun: String) -> Result<Special, ApiError> {
        let (arg, mut kwarg) = parse_input(args_of(chunk));
        kwarg.extend(kwargs_of(chunk)?);
        for (k, v) in chunk {
            if !RESERVED.contains(&k.as_str()) && !k.starts_with("__") {
                kwarg.insert(k.clone(), v.clone());
            }
        }
        Ok(Special { fun, arg, kwarg, timeout: local::timeout_of(chunk)?, full_return: local::full_return_of(chunk)? })
    }

    /// A call of `fun` with keyword arguments only (the endpoints that make one).
    pub fn call(fun: &str, kwarg: Map<String, J>) -> Special {
        Special { fun: fun.to_string(), arg: Vec::new(), kwarg, timeout: None, full_return: false }
    }

    /// `fun_args` as Salt's runner and wheel events list them: the arguments, then the
    /// keyword arguments as one map (when there are any).
    pub fn fun_args(&self) -> J {
        let mut a = self.arg.clone();
        if !self.kwarg.is_empty() {
            a.push(J::Object(self.kwarg.clone()));
        }
        J::Array(a)
    }
}

pub(crate) fn denied() -> ApiError {
    ApiError::new(401, "Authorization error occurred.")
}

fn args_of(chunk: &Map<String, J>) -> Vec<J> {
    match chunk.get("arg") {
        None | Some(J::Null) => vec![],
        Some(J::Array(a)) => a.clone(),
        Some(other) => vec![other.clone()],
    }
}

/// Salt's `parse_input` (without conditioning) over a chunk's `arg`: positional
/// arguments and keyword arguments.
fn parse_input(arg: Vec<J>) -> (Vec<J>, Map<String, J>) {
    let (mut pos, mut kw) = (Vec::new(), Map::new());
    for a in arg {
        match a {
            J::String(t) => {
                let (p, k) = halite_tools::args::split_args(std::slice::from_ref(&t));
                for (name, v) in k {
                    kw.insert(name, halite_tools::args::yamlify(&v));
                }
                pos.extend(p.iter().map(|p| halite_tools::args::yamlify(p)));
            }
            J::Object(mut m) if m.get("__kwarg__") == Some(&J::Bool(true)) => {
                m.remove("__kwarg__");
                kw.extend(m);
            }
            other => pos.push(other),
        }
    }
    (pos, kw)
}

fn kwargs_of(chunk: &Map<String, J>) -> Result<Map<String, J>, ApiError> {
    match chunk.get("kwarg") {
        None | Some(J::Null) => Ok(Map::new()),
        Some(J::Object(m)) => Ok(m.clone()),
        Some(_) => Err(ApiError::new(400, "kwarg must be a map")),
    }
}

/// A positive count from a chunk: a JSON integer or a string of digits (a form sends
/// strings), 1 to `max`; `what` names it in the 400.
pub(crate) fn count(v: &J, what: &str, max: u64) -> Result<u64, ApiError> {
    let n = match v {
        J::Number(n) => n.as_u64(),
        J::String(s) if !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()) => s.parse().ok(),
        _ => None,
    };
    n.filter(|n| (1..=max).contains(n)).ok_or_else(|| ApiError::new(400, format!("{what} must be a whole number from 1 to {max}, not {}", short(v))))
}

/// A value for an error message, cut short.
pub(crate) fn short(v: &J) -> String {
    let s = v.to_string();
    if s.len() <= 40 {
        return s;
    }
    let mut end = 40;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// The minions a target names, as the master resolves it.
async fn minions_of(cfg: &ApiConfig, tgt: &J, tgt_type: &str) -> Result<BTreeSet<String>, ApiError> {
    let v = admin::call(&cfg.sock_dir, &json!({ "cmd": "target.minions", "tgt": tgt, "tgt_type": tgt_type })).await?;
    Ok(v.get("minions").and_then(J::as_array).map(|a| a.iter().filter_map(J::as_str).map(str::to_string).collect()).unwrap_or_default())
}

/// A caller's minion rules with the minions of their targets, looked up once (Salt's
/// `validate_tgt`), for the several checks of one chunk.
pub(crate) struct Rules<'a> {
    s: &'a Session,
    targets: BTreeMap<String, BTreeSet<String>>,
}

impl<'a> Rules<'a> {
    pub(crate) async fn load(cfg: &ApiConfig, s: &'a Session) -> Result<Rules<'a>, ApiError> {
        let mut targets = BTreeMap::new();
        for t in acl::targets_needed(&s.perms) {
            let m = minions_of(cfg, &J::String(t.clone()), "compound").await?;
            targets.insert(t, m);
        }
        Ok(Rules { s, targets })
    }

    /// Whether `fun` may run on the minions `tgt` names (looked up only when a target
    /// rule needs them); a refusal is logged and is the 401.
    pub(crate) async fn check(&self, cfg: &ApiConfig, fun: &str, arg: &[J], kwarg: &Map<String, J>, tgt: &J, tgt_type: &str) -> Result<(), ApiError> {
        let minions = if self.targets.is_empty() { BTreeSet::new() } else { minions_of(cfg, tgt, tgt_type).await? };
        self.check_on(fun, arg, kwarg, &minions)
    }

    /// Whether `fun` may run on `minions`.
    pub(crate) fn check_on(&self, fun: &str, arg: &[J], kwarg: &Map<String, J>, minions: &BTreeSet<String>) -> Result<(), ApiError> {
        if acl::minion_call_allowed(&self.s.perms, fun, arg, kwarg, minions, &self.targets) {
            return Ok(());
        }
        tracing::warn!(user = %self.s.user, fun, "salt-api: call refused by external_auth");
        Err(denied())
    }
}

/// Checks a runner or wheel call against `@runner`/`@wheel` rules (`form`).
fn check_special(s: &Session, form: &str, c: &Special) -> Result<(), ApiError> {
    if acl::special_call_allowed(&s.perms, form, &c.fun, &c.arg, &c.kwarg) {
        return Ok(());
    }
    tracing::warn!(user = %s.user, fun = %c.fun, "salt-api: {form} refused by external_auth");
    Err(denied())
}

#[cfg(test)]
mod tests;
