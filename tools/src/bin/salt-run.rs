//! `salt-run`: runners. Through the running master's admin socket: `jobs.list_jobs`,
//! `jobs.lookup_jid JID`, `manage.up`, `manage.down`, `manage.status`, `cluster.members`,
//! `cluster.digest` (this master's state digest and applied index),
//! `mine.get TGT FUN [TGT_TYPE]`.
//! `pki.migrate_to_mmap` goes through the running master's log, or, with the master
//! stopped, through the data dir directly (as do `jobs.*` and `cluster.members`).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{json, Value};

use halite_master::admin::client::AdminClient;
use halite_master::admin::{cluster, jobs, Members};
use halite_master::{start, store};
use halite_tools::common::{init_logging, load_config, run, Failure, Result};
use halite_tools::output::{render, Out};
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
    #[arg(long = "out", value_enum)]
    out: Option<Out>,
    /// Runner function, e.g. pki.migrate_to_mmap.
    fun: String,
    /// Arguments; `key=value` are keyword arguments.
    args: Vec<String>,
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
    let mut kwargs = BTreeMap::new();
    let mut positional = Vec::new();
    for x in &a.args {
        match x.split_once('=') {
            Some((k, v)) => {
                kwargs.insert(k.to_string(), v.to_string());
            }
            None => positional.push(x.clone()),
        }
    }
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
    let mut admin = AdminClient::connect(&cfg.sock_dir);
    let ret: Value = match a.fun.as_str() {
        "pki.status" => Value::String(pki::status(&cfg)),
        "pki.migrate_to_mmap" => match &mut admin {
            // Online: through the running master's log.
            Some(c) if !dry()? => c.call(&json!({ "cmd": "runner", "fun": "pki.migrate_to_mmap" }))?["return"].clone(),
            _ => Value::String(pki::migrate_offline(&cfg, dry()?)?),
        },
        "jobs.list_jobs" | "jobs.lookup_jid" | "cluster.members" | "cluster.ring_info" => match &mut admin {
            Some(c) => {
                let mut req = json!({ "cmd": "runner", "fun": a.fun });
                if a.fun == "jobs.lookup_jid" {
                    req["jid"] = Value::String(jid()?);
                }
                c.call(&req)?["return"].clone()
            }
            None => offline_runner(&cfg, &a.fun, if a.fun == "jobs.lookup_jid" { Some(jid()?) } else { None })?,
        },
        "cluster.digest" => {
            let c = admin.as_mut().ok_or_else(|| Failure::new("cluster.digest: the master is not running (halite-ctl verify prints a stopped master's digest)", 1))?;
            c.call(&json!({ "cmd": "runner", "fun": "cluster.digest" }))?["return"].clone()
        }
        "mine.get" => {
            // Salt's `mine.get(tgt, fun, tgt_type='glob')`, positional or keyword.
            let c = admin.as_mut().ok_or_else(|| Failure::new("mine.get: the master is not running", 1))?;
            let arg = |i: usize, k: &str| kwargs.get(k).cloned().or_else(|| positional.get(i).cloned());
            let tgt = arg(0, "tgt").ok_or_else(|| Failure::new("mine.get needs a target and a function", 2))?;
            let fun = arg(1, "fun").ok_or_else(|| Failure::new("mine.get needs a target and a function", 2))?;
            let tgt_type = arg(2, "tgt_type").unwrap_or_else(|| "glob".into());
            c.call(&json!({ "cmd": "runner", "fun": "mine.get", "tgt": tgt, "mine_fun": fun, "tgt_type": tgt_type }))?["return"].clone()
        }
        "cluster.remove_member" => {
            let c = admin.as_mut().ok_or_else(|| Failure::new("cluster.remove_member: the master is not running", 1))?;
            let name = kwargs.get("name").cloned().or_else(|| positional.first().cloned()).ok_or_else(|| Failure::new("cluster.remove_member needs the member's name", 2))?;
            c.call(&json!({ "cmd": "runner", "fun": "cluster.remove_member", "name": name }))?["return"].clone()
        }
        "cluster.sync_roots" => {
            let c = admin.as_mut().ok_or_else(|| Failure::new("cluster.sync_roots: the master is not running", 1))?;
            let roots = kwargs.get("roots").cloned().or_else(|| positional.first().cloned()).unwrap_or_else(|| "both".into());
            c.call(&json!({ "cmd": "runner", "fun": "cluster.sync_roots", "roots": roots }))?["return"].clone()
        }
        "manage.status" | "manage.up" | "manage.down" => {
            let c = admin.as_mut().ok_or_else(|| Failure::new(format!("{}: the master is not running", a.fun), 1))?;
            let (up, down) = manage(c, Duration::from_secs(a.timeout.unwrap_or(cfg.timeout)))?;
            match a.fun.as_str() {
                "manage.up" => json!(up),
                "manage.down" => json!(down),
                _ => json!({ "up": up, "down": down }),
            }
        }
        "state.event" => {
            // Salt's `state.event tagmatch='*' count=-1`: `tag<TAB>json` per event.
            let c = admin.take().ok_or_else(|| Failure::new("state.event: the master is not running", 1))?;
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
    match (&ret, a.out) {
        (Value::String(s), None) => println!("{s}"),
        (v, out) => println!("{}", render(v, out.unwrap_or(Out::Nested), std::io::stdout().is_terminal())),
    }
    Ok(())
}

/// Runners read from a stopped master's data directory.
fn offline_runner(cfg: &halite_master::MasterConfig, fun: &str, jid: Option<String>) -> Result<Value> {
    let data = store::data_dir(cfg);
    if fun == "cluster.ring_info" || fun == "cluster.members" {
        let log = halite_storage::log::RaftLog::open(&data.log())?;
        let (hs, cs) = (log.hard_state()?, log.conf_state()?);
        // Offline: the leader is unknown, except that a lone voter leads itself.
        let leader = (cs.voters.len() == 1).then(|| cs.voters[0]);
        let m = Members { term: hs.term, voters: cs.voters, learners: cs.learners, leader, names: start::member_names(cfg, None), ..Default::default() };
        return Ok(if fun == "cluster.members" { cluster::members(&cfg.node_id(), &m) } else { cluster::ring_info(cfg.cluster_id.is_some(), &m) });
    }
    let sm = halite_storage::state::StateMachine::open(&data.state())?;
    Ok(match jid {
        Some(j) => jobs::lookup_jid(&sm, &j)?,
        None => jobs::list_jobs(&sm)?,
    })
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
