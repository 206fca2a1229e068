//! `salt-run`: runners. Through the running master's admin socket: `jobs.list_jobs`,
//! `jobs.lookup_jid JID`, `manage.up`, `manage.down`, `manage.status`, `cluster.members`,
//! `cluster.digest` (this master's state digest and applied index),
//! `mine.get TGT FUN [TGT_TYPE]`, `mine.update TGT [TGT_TYPE] [clear=] [mine_functions=]`
//! (the minions' `mine.update` published to the target, returns gathered for the
//! timeout), and the runners of [`MASTER_RUNNERS`] (answered by the
//! master from its applied state, arguments bound there as Salt binds them).
//! `jobs.active` and `manage.versions` ask the minions first, as Salt does
//! (`saltutil.running`, `test.version` published to `*`, returns gathered for the
//! timeout), and let the master shape the answers.
//! `pki.migrate_to_mmap` goes through the running master's log. With `--offline`, it,
//! the `jobs.*` runners above and `cluster.members`/`cluster.ring_info` work on a stopped
//! master's data directory instead (refused while a master holds it:
//! `halite_tools::offline`); without it, a master that cannot be reached is Salt's
//! "could not be contacted".

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{json, Value};

use halite_master::admin::client::{request_timeout, AdminClient, CALL_GRACE};
use halite_master::admin::{cluster, jobs, Members};
use halite_master::{start, store};
use halite_tools::args::{split_args, yamlify};
use halite_tools::common::{init_logging, load_config, run, Failure, Result};
use halite_tools::offline;
use halite_tools::output::Out;
use halite_tools::printer::{OutputFlags, Printer};
use halite_tools::pki;

#[derive(Parser, Debug)]
#[command(name = "salt-run", about = "Run Salt runners (Halite)", version)]
struct Args {
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    config_dir: PathBuf,
    #[arg(short = 'l', long = "log-level", default_value = "warning")]
    log_level: String,
    /// Seconds manage.* wait for minions to answer.
    #[arg(short = 't', long = "timeout")]
    timeout: Option<u64>,
    /// Read (or, for pki.migrate_to_mmap, change) a stopped master's data directory
    /// instead of asking the running master (refused while a master runs or starts on it).
    #[arg(long = "offline")]
    offline: bool,
    #[command(flatten)]
    output: OutputFlags,
    /// Runner function, e.g. pki.migrate_to_mmap.
    fun: String,
    /// Arguments; `key=value` are keyword arguments.
    args: Vec<String>,
}

/// Runners the master answers from `{"fun", "arg", "kwarg"}` (`halite_master::admin`).
const MASTER_RUNNERS: &[&str] = &[
    "jobs.list_job",
    "jobs.print_job",
    "jobs.exit_success",
    "manage.present",
    "manage.not_present",
    "fileserver.file_list",
    "fileserver.dir_list",
    "fileserver.envs",
    "fileserver.update",
    "git_pillar.update",
    "pillar.show_pillar",
    "pillar.show_top",
    "cache.grains",
    "cache.pillar",
    "cache.mine",
    "batch.status",
    "batch.list_active",
    "batch.stop",
];

/// Runners whose work on the master can take long (a whole tree committed, every key
/// copied, a member's removal agreed): their answer comes when the work is done.
const LONG_RUNNERS: &[&str] = &["cluster.sync_roots", "cluster.remove_member", "pki.migrate_to_mmap", "fileserver.update", "git_pillar.update"];

/// Runners `--offline` serves from a stopped master's data directory.
const OFFLINE_RUNNERS: &[&str] = &["jobs.list_jobs", "jobs.list_jobs_filter", "jobs.last_run", "jobs.lookup_jid", "cluster.members", "cluster.ring_info", "pki.migrate_to_mmap", "pki.status"];

/// How long a [`LONG_RUNNERS`] runner's answer may take when `-t` does not say.
const LONG_RUNNER_WAIT: Duration = Duration::from_secs(3600);

/// How long each request to the master waits for its answer before the master is
/// declared not responding: `-t` (plus [`CALL_GRACE`]) when given, otherwise
/// `request_channel_timeout` (60 s unset), or [`LONG_RUNNER_WAIT`] for [`LONG_RUNNERS`].
/// (Salt's `salt-run` runs most runners in its own process, reading the job cache and
/// key directories itself; its requests to the master wait `request_channel_timeout`.)
fn call_timeout(fun: &str, t: Option<u64>, cfg: &halite_master::MasterConfig) -> Duration {
    match t {
        Some(t) => Duration::from_secs(t).saturating_add(CALL_GRACE),
        None if LONG_RUNNERS.contains(&fun) => LONG_RUNNER_WAIT,
        None => request_timeout(cfg),
    }
}

fn main() {
    let args = Args::parse();
    init_logging(&args.log_level);
    run(|| real_main(args))
}

/// Salt's truthy strings for a keyword like `test=True`.
fn truthy(v: &str) -> Result<bool> {
    halite_master::config::parse_bool(v).ok_or_else(|| Failure::new(format!("expected True or False, got {v:?}"), 2))
}

fn real_main(a: Args) -> Result<()> {
    let cfg = load_config(&a.config_dir)?;
    let (positional, kwargs) = split_args(&a.args);
    let dry = || -> Result<bool> {
        let mut d = false;
        for k in ["test", "dry_run"] {
            if let Some(v) = kwargs.get(k) {
                d |= truthy(v)?;
            }
        }
        Ok(d)
    };
    let jid = || positional.first().cloned().or_else(|| kwargs.get("jid").cloned()).ok_or_else(|| Failure::new(format!("{} needs a jid", a.fun), 2));
    if a.offline && !OFFLINE_RUNNERS.contains(&a.fun.as_str()) {
        return Err(Failure::new(format!("{} needs the running master: --offline serves {} only", a.fun, OFFLINE_RUNNERS.join(", ")), 2));
    }
    let mut admin = if a.offline { None } else { AdminClient::connect(&cfg.sock_dir) };
    let offline_hint = format!("salt-run --offline {} reads a stopped master's data directory", a.fun);
    if let Some(c) = &mut admin {
        c.set_timeout(Some(call_timeout(&a.fun, a.timeout, &cfg)));
    }
    let ret: Value = match a.fun.as_str() {
        f if MASTER_RUNNERS.contains(&f) => {
            let c = admin.as_mut().ok_or_else(|| offline::no_master(None))?;
            let arg: Vec<Value> = positional.iter().map(|v| yamlify(v)).collect();
            let kwarg: serde_json::Map<String, Value> = kwargs.iter().map(|(k, v)| (k.clone(), yamlify(v))).collect();
            c.call(&json!({ "cmd": "runner", "fun": f, "arg": arg, "kwarg": kwarg }))?["return"].clone()
        }
        "jobs.active" => {
            let c = admin.as_mut().ok_or_else(|| offline::no_master(None))?;
            let (returns, _) = gather_all(c, "saltutil.running", Duration::from_secs(a.timeout.unwrap_or(cfg.timeout)))?;
            let running: serde_json::Map<String, Value> = returns.into_iter().map(|(m, load)| (m, load["return"].clone())).collect();
            c.call(&json!({ "cmd": "runner", "fun": "jobs.active", "running": running }))?["return"].clone()
        }
        "manage.versions" => {
            let c = admin.as_mut().ok_or_else(|| offline::no_master(None))?;
            let (mut returns, expected) = gather_all(c, "test.version", Duration::from_secs(a.timeout.unwrap_or(cfg.timeout)))?;
            for m in expected {
                returns.entry(m).or_insert(Value::Null);
            }
            c.call(&json!({ "cmd": "runner", "fun": "manage.versions", "returns": returns }))?["return"].clone()
        }
        f if halite_tools::orchestrate::is_orchestrate(f) => {
            let c = admin.as_mut().ok_or_else(|| offline::no_master(None))?;
            let timeout = a.timeout.map_or(halite_tools::orchestrate::STEP_TIMEOUT, Duration::from_secs);
            let printer = a.output.printer(&cfg, Out::Nested, f, false).map_err(|e| Failure::new(e.to_string(), 1))?;
            return orchestrate(c, f, &positional, &kwargs, timeout, &printer);
        }
        "pki.status" => Value::String(pki::status(&cfg)),
        "pki.migrate_to_mmap" => match &mut admin {
            // A dry run reads the key files only.
            _ if dry()? => Value::String(pki::status(&cfg)),
            // Online: through the running master's log.
            Some(c) => c.call(&json!({ "cmd": "runner", "fun": "pki.migrate_to_mmap" }))?["return"].clone(),
            None if a.offline => {
                let _held = offline::hold(&cfg, "salt-run --offline pki.migrate_to_mmap", Some("without --offline, salt-run migrates through the running master"))?;
                Value::String(pki::migrate_offline(&cfg, false)?)
            }
            None => return Err(offline::no_master(Some(&offline_hint))),
        },
        "jobs.list_jobs" | "jobs.list_jobs_filter" | "jobs.last_run" | "jobs.lookup_jid" | "cluster.members" | "cluster.ring_info" => {
            let arg: Vec<Value> = positional.iter().map(|v| yamlify(v)).collect();
            let kwarg: serde_json::Map<String, Value> = kwargs.iter().map(|(k, v)| (k.clone(), yamlify(v))).collect();
            let mut req = json!({ "cmd": "runner", "fun": a.fun, "arg": arg, "kwarg": kwarg });
            if a.fun == "jobs.lookup_jid" {
                req["jid"] = Value::String(jid()?);
            }
            match &mut admin {
                Some(c) => c.call(&req)?["return"].clone(),
                None if a.offline => {
                    let _held = offline::hold(&cfg, &format!("salt-run --offline {}", a.fun), Some("without --offline, salt-run asks the running master"))?;
                    offline_runner(&cfg, &a.fun, &req)?
                }
                None => return Err(offline::no_master(Some(&offline_hint))),
            }
        }
        "schedule.list" => {
            let c = admin.as_mut().ok_or_else(|| offline::no_master(None))?;
            c.call(&json!({ "cmd": "runner", "fun": "schedule.list" }))?["return"].clone()
        }
        "cluster.digest" => {
            let c = admin.as_mut().ok_or_else(|| offline::no_master(Some("halite-ctl verify prints a stopped master's digest")))?;
            c.call(&json!({ "cmd": "runner", "fun": "cluster.digest" }))?["return"].clone()
        }
        "mine.get" => {
            // Salt's `mine.get(tgt, fun, tgt_type='glob')`, positional or keyword.
            let c = admin.as_mut().ok_or_else(|| offline::no_master(None))?;
            let arg = |i: usize, k: &str| kwargs.get(k).cloned().or_else(|| positional.get(i).cloned());
            let tgt = arg(0, "tgt").ok_or_else(|| Failure::new("mine.get needs a target and a function", 2))?;
            let fun = arg(1, "fun").ok_or_else(|| Failure::new("mine.get needs a target and a function", 2))?;
            let tgt_type = arg(2, "tgt_type").unwrap_or_else(|| "glob".into());
            c.call(&json!({ "cmd": "runner", "fun": "mine.get", "tgt": tgt, "mine_fun": fun, "tgt_type": tgt_type }))?["return"].clone()
        }
        "mine.update" => {
            // Salt's `mine.update(tgt, tgt_type='glob', clear=False, mine_functions=None)`:
            // the minions' own `mine.update` run on the target; their returns by minion.
            // Unlike Salt's runner (which hands `clear` and `mine_functions` to the
            // publish, where they are lost) they reach the minions' function.
            let c = admin.as_mut().ok_or_else(|| offline::no_master(None))?;
            let arg = |i: usize, k: &str| kwargs.get(k).cloned().or_else(|| positional.get(i).cloned());
            let tgt = arg(0, "tgt").ok_or_else(|| Failure::new("Passed invalid arguments: update() missing 1 required positional argument: 'tgt'", 1))?;
            let tgt_type = arg(1, "tgt_type").unwrap_or_else(|| "glob".into());
            let mut fkw = serde_json::Map::new();
            for (i, k) in [(2, "clear"), (3, "mine_functions")] {
                if let Some(v) = arg(i, k) {
                    fkw.insert(k.into(), yamlify(&v));
                }
            }
            let (returns, _) = gather(c, &json!(tgt), &tgt_type, "mine.update", fkw, Duration::from_secs(a.timeout.unwrap_or(cfg.timeout)))?;
            Value::Object(returns.into_iter().map(|(m, load)| (m, load["return"].clone())).collect())
        }
        "cluster.remove_member" => {
            let c = admin.as_mut().ok_or_else(|| offline::no_master(None))?;
            let name = kwargs.get("name").cloned().or_else(|| positional.first().cloned()).ok_or_else(|| Failure::new("cluster.remove_member needs the member's name", 2))?;
            c.call(&json!({ "cmd": "runner", "fun": "cluster.remove_member", "name": name }))?["return"].clone()
        }
        "cluster.sync_roots" => {
            let c = admin.as_mut().ok_or_else(|| offline::no_master(None))?;
            let roots = kwargs.get("roots").cloned().or_else(|| positional.first().cloned()).unwrap_or_else(|| "both".into());
            c.call(&json!({ "cmd": "runner", "fun": "cluster.sync_roots", "roots": roots }))?["return"].clone()
        }
        "manage.status" | "manage.up" | "manage.down" => {
            let c = admin.as_mut().ok_or_else(|| offline::no_master(None))?;
            let (up, down) = manage(c, Duration::from_secs(a.timeout.unwrap_or(cfg.timeout)))?;
            match a.fun.as_str() {
                "manage.up" => json!(up),
                "manage.down" => json!(down),
                _ => json!({ "up": up, "down": down }),
            }
        }
        "state.event" => {
            // Salt's `state.event tagmatch='*' count=-1`: `tag<TAB>json` per event.
            let c = admin.take().ok_or_else(|| offline::no_master(None))?;
            let tagmatch = kwargs.get("tagmatch").cloned().or_else(|| positional.first().cloned()).unwrap_or_else(|| "*".into());
            let mut count: i64 = kwargs.get("count").and_then(|c| c.parse().ok()).unwrap_or(-1);
            use std::io::Write;
            let stdout = std::io::stdout();
            for e in c.watch()? {
                let tag = e["tag"].as_str().unwrap_or("");
                if !halite_master::glob::fnmatch(&tagmatch, tag) {
                    continue;
                }
                let mut lock = stdout.lock();
                let _ = writeln!(lock, "{tag}\t{}", e["data"]);
                let _ = lock.flush();
                count -= 1;
                if count == 0 {
                    break;
                }
            }
            return Ok(());
        }
        other => return Err(Failure::new(format!("'{other}' is not available."), 1)),
    };
    let printer = a.output.printer(&cfg, Out::Nested, &a.fun, false).map_err(|e| Failure::new(e.to_string(), 1))?;
    // A runner's `{"outputter", "data"}` (jobs.lookup_jid of a state run): the data, in
    // that outputter unless --out names one, as Salt's runner client prints it.
    let (ret, named) = match ret {
        Value::Object(mut m) if m.len() == 2 && m.contains_key("data") && m.get("outputter").is_some_and(Value::is_string) => {
            let named = m.remove("outputter").and_then(|o| o.as_str().map(String::from));
            (m.remove("data").unwrap_or(Value::Null), named)
        }
        other => (other, None),
    };
    match (&ret, named) {
        (Value::String(s), None) if !printer.forced() => printer.print_text(s),
        (v, named) => printer.print(v, printer.outputter(named.as_deref())),
    }
    Ok(())
}

/// `state.orchestrate`: the master renders the SLS into steps, this process drives them
/// and stores the run's return (`halite_tools::orchestrate`), then prints the run as
/// Salt does (`highstate`, or `{"data", "outputter", "retcode"}` with `--out`); exits
/// with the retcode.
fn orchestrate(c: &mut AdminClient, fun: &str, positional: &[String], kwargs: &BTreeMap<String, String>, timeout: Duration, printer: &Printer) -> Result<()> {
    let arg: Vec<Value> = positional.iter().map(|v| yamlify(v)).collect();
    let kwarg: serde_json::Map<String, Value> = kwargs.iter().map(|(k, v)| (k.clone(), yamlify(v))).collect();
    let done = halite_tools::orchestrate::run(c, fun, &arg, &kwarg, None, timeout).map_err(|e| Failure::new(e.to_string(), 1))?;
    if let Err(e) = &done.stored {
        eprintln!("The run's return was not stored in the job cache: {e}");
    }
    if printer.forced() {
        printer.print(&done.ret, printer.plain_out());
    } else {
        printer.print(&Value::Object(done.data()), Out::Highstate);
    }
    if done.retcode == 0 {
        Ok(())
    } else {
        Err(Failure::new("", done.retcode))
    }
}

/// Runners read from a stopped master's data directory.
fn offline_runner(cfg: &halite_master::MasterConfig, fun: &str, req: &Value) -> Result<Value> {
    let data = store::data_dir(cfg);
    if fun == "cluster.ring_info" || fun == "cluster.members" {
        let log = halite_storage::log::RaftLog::open(&data.log())?;
        let (hs, cs) = (log.hard_state()?, log.conf_state()?);
        // Offline: the leader is unknown, except that a lone voter leads itself.
        let leader = (cs.voters.len() == 1).then(|| cs.voters[0]);
        let releases = halite_storage::state::StateMachine::open(&data.state())?.member_releases()?;
        let m = Members { term: hs.term, voters: cs.voters, learners: cs.learners, leader, names: start::member_names(cfg, None), progress: Default::default(), releases };
        return Ok(if fun == "cluster.members" { cluster::members(&cfg.node_id(), &m) } else { cluster::ring_info(cfg.cluster_id.is_some(), &m) });
    }
    let sm = halite_storage::state::StateMachine::open(&data.state())?;
    Ok(jobs::JobCmd::parse(req)?.runner_answer(&sm, cfg.job_cache_store_endtime)?)
}

/// Publishes `fun` to every minion and gathers the return loads until every expected
/// minion answered or `timeout` passed; returns them and the minions expected.
fn gather_all(c: &mut AdminClient, fun: &str, timeout: Duration) -> Result<(serde_json::Map<String, Value>, Vec<String>)> {
    gather(c, &json!("*"), "glob", fun, serde_json::Map::new(), timeout)
}

/// Publishes `fun` (with keyword arguments `kwarg`) to a target and gathers the return
/// loads until every expected minion answered or `timeout` passed; returns them and the
/// minions expected.
fn gather(c: &mut AdminClient, tgt: &Value, tgt_type: &str, fun: &str, kwarg: serde_json::Map<String, Value>, timeout: Duration) -> Result<(serde_json::Map<String, Value>, Vec<String>)> {
    let p = match c.call(&json!({ "cmd": "publish", "tgt": tgt, "tgt_type": tgt_type, "fun": fun, "arg": [], "kwarg": kwarg })) {
        Ok(p) => p,
        // No accepted minion: nothing to ask.
        Err(halite_master::Error::NoMinionsMatched) => return Ok((serde_json::Map::new(), vec![])),
        Err(e) => return Err(e.into()),
    };
    let jid = p["jid"].as_str().unwrap_or("").to_string();
    let expected: Vec<String> = p["minions"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect();
    let start = Instant::now();
    let mut returned = serde_json::Map::new();
    while start.elapsed() < timeout {
        returned = c.call(&json!({ "cmd": "job.returns", "jid": jid }))?["returns"].as_object().cloned().unwrap_or_default();
        if expected.iter().all(|m| returned.contains_key(m)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok((returned, expected))
}

/// Pings every accepted minion; returns (up, down), each sorted.
fn manage(c: &mut AdminClient, timeout: Duration) -> Result<(Vec<String>, Vec<String>)> {
    let l = c.call(&json!({ "cmd": "key.list" }))?;
    let accepted: Vec<String> = l["listing"]["minions"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect();
    if accepted.is_empty() {
        return Ok((vec![], vec![]));
    }
    let p = c.call(&json!({ "cmd": "publish", "tgt": "*", "tgt_type": "glob", "fun": "test.ping", "arg": [] }))?;
    let jid = p["jid"].as_str().unwrap_or("").to_string();
    let start = Instant::now();
    let mut returned = serde_json::Map::new();
    while start.elapsed() < timeout {
        returned = c.call(&json!({ "cmd": "job.returns", "jid": jid }))?["returns"].as_object().cloned().unwrap_or_default();
        if accepted.iter().all(|m| returned.contains_key(m)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (up, down): (Vec<String>, Vec<String>) = accepted.into_iter().partition(|m| returned.contains_key(m));
    Ok((up, down))
}
