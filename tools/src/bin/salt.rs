//! `salt`: publish a job through the running master and print the returns.
//!
//! `salt [-c DIR] TARGET FUN [ARG ...] [-L|-E|-G|-P|-I|-J|-S|-N|-C] [--subset N]
//! [-t SECONDS] [--async] [--out json|yaml|nested]`. Arguments are parsed as Salt parses them: `key=value` becomes
//! a keyword argument, every value is YAML-typed (`1` is an int, `True` a bool).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{json, Map, Value};

use halite_master::admin::client::AdminClient;
use halite_tools::common::{init_logging, load_config, run, Failure, Result};
use halite_tools::output::{render, Out};

#[derive(Parser, Debug)]
#[command(name = "salt", about = "Publish Salt jobs through a Halite master", version)]
struct Args {
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    config_dir: PathBuf,
    /// The target is a list of ids (comma-separated).
    #[arg(short = 'L', long = "list")]
    list: bool,
    /// The target is a regular expression.
    #[arg(short = 'E', long = "pcre")]
    pcre: bool,
    /// The target is a grain glob `key:value`.
    #[arg(short = 'G', long = "grain")]
    grain: bool,
    /// The target is a grain regex `key:regex`.
    #[arg(short = 'P', long = "grain-pcre")]
    grain_pcre: bool,
    /// The target is a pillar glob `key:value` (matched on the pillar the master cached).
    #[arg(short = 'I', long = "pillar")]
    pillar: bool,
    /// The target is a pillar regex `key:regex`.
    #[arg(short = 'J', long = "pillar-pcre")]
    pillar_pcre: bool,
    /// The target is an IP address or a CIDR network, matched on the ipv4/ipv6 grains.
    #[arg(short = 'S', long = "ipcidr")]
    ipcidr: bool,
    /// The target is a nodegroup from the master's `nodegroups` option.
    #[arg(short = 'N', long = "nodegroup")]
    nodegroup: bool,
    /// The target is a compound expression.
    #[arg(short = 'C', long = "compound")]
    compound: bool,
    /// Run on N minions chosen at random among the matching ones that answer and have
    /// the function (Salt's `--subset`).
    #[arg(long = "subset")]
    subset: Option<usize>,
    /// Seconds to wait for returns.
    #[arg(short = 't', long = "timeout")]
    timeout: Option<u64>,
    /// Print the jid and return without waiting.
    #[arg(long = "async")]
    asynchronous: bool,
    /// Print each minion's return as it arrives (accepted for compatibility).
    #[arg(long = "static")]
    static_: bool,
    #[arg(long = "out", value_enum)]
    out: Option<Out>,
    #[arg(long = "log-level", default_value = "warning")]
    log_level: String,
    target: String,
    fun: String,
    args: Vec<String>,
}

fn main() {
    let args = Args::parse();
    init_logging(&args.log_level);
    run(|| real_main(args))
}

/// YAML-types a CLI value the way Salt does (`1` → int, `True` → bool, `[a]` → list).
fn yaml_value(s: &str) -> Value {
    match serde_yaml::from_str::<serde_yaml::Value>(s) {
        Ok(serde_yaml::Value::String(_)) | Err(_) => Value::String(s.to_string()),
        Ok(v) => serde_json::to_value(v).unwrap_or(Value::String(s.to_string())),
    }
}

/// Splits Salt CLI arguments into positional args and keyword args.
pub fn parse_args(raw: &[String]) -> (Vec<Value>, Map<String, Value>) {
    let mut args = Vec::new();
    let mut kwargs = Map::new();
    for a in raw {
        match a.split_once('=') {
            Some((k, v)) if !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                kwargs.insert(k.to_string(), yaml_value(v));
            }
            _ => args.push(yaml_value(a)),
        }
    }
    (args, kwargs)
}

/// The line for a minion that did not return (its prefix is what Salt prints, and what
/// operators' scripts look for).
fn no_return(jid: &str) -> String {
    format!("Minion did not return. [No response]\nLook up the job's returns later with: salt-run jobs.lookup_jid {jid}")
}

fn names(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect()
}

/// Polls the job's returns until every expected minion returned or `timeout` passed.
fn wait_returns(client: &mut AdminClient, jid: &str, expected: &[String], timeout: Duration) -> Result<Map<String, Value>> {
    let start = Instant::now();
    let mut returns = Map::new();
    loop {
        let r = client.call(&json!({ "cmd": "job.returns", "jid": jid }))?;
        if let Some(m) = r["returns"].as_object() {
            returns = m.clone();
        }
        if expected.iter().all(|m| returns.contains_key(m)) || start.elapsed() >= timeout {
            return Ok(returns);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Salt's `cmd_subset`: asks the target for `sys.list_functions`, and picks `n` of the
/// minions that answered with `fun` among their functions, at random.
fn subset(client: &mut AdminClient, tgt: &Value, tgt_type: &str, fun: &str, n: usize, timeout: Duration) -> Result<Vec<String>> {
    use rand::seq::SliceRandom;
    let pubd = client
        .call(&json!({ "cmd": "publish", "tgt": tgt, "tgt_type": tgt_type, "fun": "sys.list_functions", "arg": [], "kwarg": {} }))
        .map_err(|e| Failure::new(e.to_string(), 2))?;
    let expected = names(&pubd["minions"]);
    let returns = wait_returns(client, pubd["jid"].as_str().unwrap_or(""), &expected, timeout)?;
    let mut able: Vec<String> = returns
        .iter()
        .filter(|(_, load)| load.get("return").and_then(Value::as_array).is_some_and(|f| f.iter().any(|x| x.as_str() == Some(fun))))
        .map(|(id, _)| id.clone())
        .collect();
    able.shuffle(&mut rand::thread_rng());
    able.truncate(n);
    if able.is_empty() {
        return Err(Failure::new("No minions matched the target. No command was sent, no jid was assigned.", 2));
    }
    Ok(able)
}

fn real_main(a: Args) -> Result<()> {
    let cfg = load_config(&a.config_dir)?;
    let mut client = AdminClient::connect(&cfg.sock_dir)
        .ok_or_else(|| Failure::new(format!("Salt request timed out. The master is not responding (no admin socket in {}).", cfg.sock_dir.display()), 2))?;
    let tgt_type = [
        (a.list, "list"),
        (a.pcre, "pcre"),
        (a.grain, "grain"),
        (a.grain_pcre, "grain_pcre"),
        (a.pillar, "pillar"),
        (a.pillar_pcre, "pillar_pcre"),
        (a.ipcidr, "ipcidr"),
        (a.nodegroup, "nodegroup"),
        (a.compound, "compound"),
    ]
    .into_iter()
    .find_map(|(on, t)| on.then_some(t))
    .unwrap_or("glob");
    let mut tgt = if a.list { Value::Array(a.target.split(',').map(|s| Value::String(s.trim().to_string())).collect()) } else { Value::String(a.target.clone()) };
    let mut tgt_type = tgt_type.to_string();
    let timeout = Duration::from_secs(a.timeout.unwrap_or(cfg.timeout));
    if let Some(n) = a.subset {
        tgt = Value::Array(subset(&mut client, &tgt, &tgt_type, &a.fun, n, timeout)?.into_iter().map(Value::String).collect());
        tgt_type = "list".into();
    }
    let (args, kwargs) = parse_args(&a.args);
    let pubd = client
        .call(&json!({ "cmd": "publish", "tgt": tgt, "tgt_type": tgt_type, "fun": a.fun, "arg": args, "kwarg": kwargs }))
        .map_err(|e| Failure::new(e.to_string(), 2))?;
    let jid = pubd["jid"].as_str().unwrap_or("").to_string();
    if a.asynchronous {
        println!("Executed command with job ID: {jid}");
        return Ok(());
    }
    let expected = names(&pubd["minions"]);
    if expected.is_empty() {
        return Err(Failure::new("No minions matched the target. No command was sent, no jid was assigned.", 2));
    }
    let returns = wait_returns(&mut client, &jid, &expected, timeout)?;
    let mut out = Map::new();
    let mut failed = false;
    for m in &expected {
        match returns.get(m) {
            Some(load) => {
                if load.get("retcode").and_then(Value::as_i64).unwrap_or(0) != 0 || load.get("success") == Some(&Value::Bool(false)) {
                    failed = true;
                }
                out.insert(m.clone(), load.get("return").cloned().unwrap_or(Value::Null));
            }
            None => {
                failed = true;
                out.insert(m.clone(), Value::String(no_return(&jid)));
            }
        }
    }
    // Listed ids the master has no accepted key for: published to nobody, reported as
    // not returning, as Salt does.
    for m in pubd["missing"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        failed = true;
        out.insert(m.to_string(), Value::String(no_return(&jid)));
    }
    let color = std::io::stdout().is_terminal();
    println!("{}", render(&Value::Object(out), a.out.unwrap_or(Out::Nested), color));
    if failed {
        return Err(Failure::new("", 1));
    }
    Ok(())
}
