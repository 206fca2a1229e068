//! `salt`: publish a job through the running master and print the returns as they are
//! committed.
//!
//! `salt [-c DIR] TARGET FUN [ARG ...] [-L|-E|-G|-P|-I|-J|-S|-N|-C] [--subset N]
//! [-t SECONDS] [--async] [-s|--static] [--out nested|json|yaml|txt|raw|pprint|table|highstate]
//! [--out-indent N] [--out-file FILE [--out-file-append]] [--no-color|--force-color]
//! [--state-output FORM] [--state-verbose BOOL] [--output-diff] [-v|--show-jid]
//! [--hide-timeout] [--summary] [--return RETURNER [--return_config PROFILE]
//! [--return_kwargs YAML]] [--metadata YAML] [--start-event]
//! [-b N|N% [--batch-wait S] [--failhard]] [--batch-safe-limit N [--batch-safe-size N]]`,
//! `salt -d [TARGET [FUN]]` (the function's `sys.doc`), `salt --preview-target TARGET`
//! (the matching minions, nothing run). Arguments are parsed as Salt parses them:
//! `key=value` becomes a keyword argument, every value is YAML-typed (`1` is an int,
//! `True` a bool).
//!
//! Returns are followed with the admin socket's `job.follow` (a cursor on the job cache
//! the master wakes with its event bus; see `halite_master::admin::follow`): each is
//! printed once it is committed, as `{minion: return}` in the outputter Salt would choose
//! (`halite_tools::printer`: `--out`, else the one the return names), then a
//! "Minion did not return" line for each minion that did not return in time. `--static`
//! gathers them and prints one document. The exit code is Salt's: 1 when a minion
//! returned a non-zero retcode or did not return, 2 when nothing could be sent. A batch
//! run (`--batch`) is `batch.rs` (its bookkeeping `halite_tools::batch`); with `--async`
//! the master runs it (`batch.start`, `halite_master::batch`) and `salt` only starts it.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use clap::Parser;
use serde_json::{json, Map, Value};

use halite_master::admin::client::{is_timeout, AdminClient, CALL_GRACE, NOT_RESPONDING};
use halite_tools::batch::{retcode, BatchSpec};
use halite_tools::common::{init_logging, load_config, run, Failure, Result};
use halite_tools::follow::{follow, Arrival};
use halite_tools::output::Out;
use halite_tools::printer::{OutputFlags, Printer};

/// mimalloc, as the master and the swarm: following a job to 8,000 minions parses 8,000
/// answer lines, and with glibc's heap `malloc` and `free` were a quarter of this
/// command's CPU, CPU the master and its minions share the machine with in a benchmark
/// (docs/benchmarks.md, "`test.ping` fan-out"). A
/// short-lived process: mimalloc's own defaults.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// The target is a range expression, expanded by the master's `range_server`.
    #[arg(short = 'R', long = "range")]
    range: bool,
    /// The target is a compound expression.
    #[arg(short = 'C', long = "compound")]
    compound: bool,
    /// Run on N minions chosen at random among the matching ones that answer and have
    /// the function (Salt's `--subset`; 0, its default, takes no subset).
    #[arg(long = "subset")]
    subset: Option<usize>,
    /// Seconds to wait for returns.
    #[arg(short = 't', long = "timeout")]
    timeout: Option<u64>,
    /// Print the jid and return without waiting.
    #[arg(long = "async")]
    asynchronous: bool,
    /// Gather every return and print them as one document at the end (instead of each
    /// as it arrives).
    #[arg(short = 's', long = "static")]
    static_: bool,
    /// Print the job's jid first (`Executing job with jid ...`).
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    /// Print the job's jid first (`jid: ...`), without the rest of `--verbose`.
    #[arg(long = "show-jid")]
    show_jid: bool,
    /// Leave out the minions that did not return (and do not count them as failed).
    #[arg(long = "hide-timeout")]
    hide_timeout: bool,
    /// Returners the minions also send the returns to (comma-separated).
    #[arg(long = "return", value_name = "RETURNER")]
    ret: Option<String>,
    /// The returner profile (`<profile>.<returner>.*` options in the minion config).
    #[arg(long = "return_config", alias = "return-config", value_name = "RETURNER_CONF")]
    ret_config: Option<String>,
    /// Options for the returners, a YAML mapping.
    #[arg(long = "return_kwargs", alias = "return-kwargs", value_name = "RETURNER_KWARGS")]
    ret_kwargs: Option<String>,
    /// Run on N minions at a time, or N% of the targeted minions (`--batch-size` too).
    #[arg(short = 'b', long = "batch", alias = "batch-size")]
    batch: Option<String>,
    /// Seconds to wait after a minion returns before its slot in the batch is reused.
    #[arg(long = "batch-wait", default_value_t = 0.0)]
    batch_wait: f64,
    /// Stop the batch at the first minion that returns a non-zero retcode.
    #[arg(long = "failhard")]
    failhard: bool,
    /// Run as a batch of `--batch-safe-size` when the target matches at least this many
    /// minions (0 or 1: never).
    #[arg(long = "batch-safe-limit", default_value_t = 0)]
    batch_safe_limit: usize,
    /// The batch size `--batch-safe-limit` switches to (N or N%).
    #[arg(long = "batch-safe-size", default_value = "8")]
    batch_safe_size: String,
    /// The function's documentation (`sys.doc`) instead of running it: `salt -d '*'
    /// test.ping`.
    #[arg(short = 'd', long = "doc", alias = "documentation")]
    doc: bool,
    /// After the returns, print how many minions were targeted, returned, did not
    /// return and failed.
    #[arg(long = "summary")]
    summary: bool,
    /// Print the minions the target matches, and run nothing.
    #[arg(long = "preview-target")]
    preview_target: bool,
    /// Metadata kept with the job (a YAML value; `jobs.list_jobs search_metadata=...`
    /// finds the job by it, minions copy a mapping into their returns).
    #[arg(long = "metadata")]
    metadata: Option<String>,
    /// Each minion fires `salt/job/<jid>/start/<id>` when it takes the job.
    #[arg(long = "start-event")]
    start_event: bool,
    #[command(flatten)]
    output: OutputFlags,
    #[arg(short = 'l', long = "log-level", default_value = "warning")]
    log_level: String,
    /// The target, then the function and its arguments (`-d` and `--preview-target`
    /// need less).
    #[arg(value_name = "TARGET FUN ARGS")]
    words: Vec<String>,
}

/// The target, function and arguments of a command line, as Salt's parser reads them
/// (`-d` runs `sys.doc` on the function named; `--preview-target` needs only a target).
fn job_words(a: &Args) -> Result<(String, String, Vec<String>)> {
    let mut w = a.words.clone();
    if a.doc {
        if w.is_empty() {
            w.push("*".into());
        }
        if w.len() < 2 || w[1] != "sys.doc" {
            w.insert(1, "sys.doc".into());
        }
        if w.len() > 3 {
            return Err(Failure::new("You can only get documentation for one method at one time.", 2));
        }
    }
    let mut it = w.into_iter();
    let target = it.next().ok_or_else(|| Failure::new("Cannot execute command without defining a target.", 42))?;
    let fun = match it.next() {
        Some(f) => f,
        None if a.preview_target => String::new(),
        None => return Err(Failure::new("Incomplete options passed.", 42)),
    };
    Ok((target, fun, it.collect()))
}

mod batch;
use batch::BatchRun;

/// A job as the command line names it.
pub(crate) struct Job<'a> {
    pub tgt: &'a Value,
    pub tgt_type: &'a str,
    pub fun: &'a str,
    pub args: &'a [Value],
    pub kwargs: &'a Map<String, Value>,
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

/// What `publish` answered.
struct Published {
    jid: String,
    minions: Vec<String>,
    missing: Vec<String>,
    /// The master could not resolve the target (`minion_data_cache: False`): every
    /// accepted minion was expected, the ones that do not match stay silent.
    unresolved: bool,
}

/// Publishes `fun`; `extra` joins the request (the returners: `ret`, `ret_config`,
/// `ret_kwargs`).
fn publish(client: &mut AdminClient, tgt: &Value, tgt_type: &str, fun: &str, args: &[Value], kwargs: &Map<String, Value>, extra: &Map<String, Value>) -> Result<Published> {
    let mut req = json!({ "cmd": "publish", "tgt": tgt, "tgt_type": tgt_type, "fun": fun, "arg": args, "kwarg": kwargs });
    if let Value::Object(m) = &mut req {
        m.extend(extra.clone());
    }
    let r = client.call(&req).map_err(|e| Failure::new(e.to_string(), 2))?;
    Ok(Published { jid: r["jid"].as_str().unwrap_or("").to_string(), minions: names(&r["minions"]), missing: names(&r["missing"]), unresolved: r["unresolved"].as_bool().unwrap_or(false) })
}

fn start_follow(sock_dir: &Path, jid: &str, only: Option<&[String]>, timeout: Duration, tx: &mpsc::Sender<Arrival>) -> Result<()> {
    follow(sock_dir, jid, only, timeout, tx.clone()).map_err(|e| {
        if is_timeout(&e) {
            Failure::new(NOT_RESPONDING, 2)
        } else {
            Failure::new(format!("Salt request timed out. The master is not responding ({e})."), 2)
        }
    })
}

/// A job's returns in the order they came (`(id, load)`), and who did not return.
type Collected = (Vec<(String, Value)>, Vec<String>);

/// Follows one job to its end: its returns in the order they came, and the minions that
/// did not return.
fn collect(sock_dir: &Path, jid: &str, timeout: Duration) -> Result<Collected> {
    let (tx, rx) = mpsc::channel();
    start_follow(sock_dir, jid, None, timeout, &tx)?;
    drop(tx);
    let mut got = Vec::new();
    for a in rx {
        match a {
            Arrival::Return { id, load, .. } => got.push((id, load)),
            Arrival::Done { missing, .. } => return Ok((got, missing)),
            Arrival::Failed { error, .. } => return Err(Failure::new(error, 2)),
        }
    }
    Err(Failure::new("the follow of the job ended without an answer", 2))
}

/// Salt's `cmd_subset`: asks the target for `sys.list_functions`, and picks `n` of the
/// minions that answered with `fun` among their functions, at random
/// (`halite_tools::subset`).
fn subset(client: &mut AdminClient, sock_dir: &Path, tgt: &Value, tgt_type: &str, fun: &str, n: usize, timeout: Duration) -> Result<Vec<String>> {
    let p = publish(client, tgt, tgt_type, "sys.list_functions", &[], &Map::new(), &Map::new())?;
    let (returns, _) = collect(sock_dir, &p.jid, timeout)?;
    let able = halite_tools::subset::pick(returns.into_iter().map(|(id, load)| (id, load.get("return").cloned().unwrap_or(Value::Null))), fun, n, &mut rand::thread_rng());
    if able.is_empty() {
        return Err(Failure::new(halite_master::Error::NoMinionsMatched.to_string(), 2));
    }
    Ok(able)
}

/// `sys.doc`, printed as Salt's `salt` prints it: every function's docstring once
/// (the first minion that has one gives it), functions sorted, each as `fun:`, the text
/// and an empty line; with `--out`, each `{fun: doc}` through `nested`.
fn print_docs(returns: &[(String, Value)], printer: &Printer, out_given: bool) -> Result<()> {
    if returns.is_empty() {
        return Err(Failure::new("No minions found to gather docs from", 2));
    }
    let mut docs: std::collections::BTreeMap<&str, &Value> = std::collections::BTreeMap::new();
    for (_, load) in returns {
        let Some(funs) = load.get("return").and_then(Value::as_object) else { continue };
        for (fun, doc) in funs {
            if halite_tools::output::py_truthy(doc) {
                docs.entry(fun.as_str()).or_insert(doc);
            }
        }
    }
    for (fun, doc) in docs {
        if out_given {
            printer.print(&json!({ fun: doc }), Out::Nested);
        } else {
            println!("{fun}:\n{}\n", halite_tools::output::py_str(doc));
        }
    }
    Ok(())
}

/// The exit of a run: Salt's message and code when a minion failed.
fn exit_for(failed: bool) -> Result<()> {
    if failed {
        return Err(Failure::new("ERROR: Minions returned with non-zero exit code", 1));
    }
    Ok(())
}

fn real_main(a: Args) -> Result<()> {
    let cfg = load_config(&a.config_dir)?;
    let mut client = AdminClient::connect(&cfg.sock_dir)
        .ok_or_else(|| Failure::new(format!("Salt request timed out. The master is not responding (no admin socket in {}).", cfg.sock_dir.display()), 2))?;
    let timeout = Duration::from_secs(a.timeout.unwrap_or(cfg.timeout));
    // Each request to the master (a publish, a batch's next publish) is answered within
    // the timeout, or the master is not responding (Salt bounds its publish the same
    // way); a stopped master still accepts the connection, so this is what ends the wait.
    client.set_timeout(Some(timeout.saturating_add(CALL_GRACE)));
    let tgt_type = [
        (a.list, "list"),
        (a.pcre, "pcre"),
        (a.grain, "grain"),
        (a.grain_pcre, "grain_pcre"),
        (a.pillar, "pillar"),
        (a.pillar_pcre, "pillar_pcre"),
        (a.ipcidr, "ipcidr"),
        (a.nodegroup, "nodegroup"),
        (a.range, "range"),
        (a.compound, "compound"),
    ]
    .into_iter()
    .find_map(|(on, t)| on.then_some(t))
    .unwrap_or("glob");
    let (target, fun, words) = job_words(&a)?;
    let mut tgt = if a.list { Value::Array(target.split(',').map(|s| Value::String(s.trim().to_string())).collect()) } else { Value::String(target.clone()) };
    let mut tgt_type = tgt_type.to_string();
    let (args, kwargs) = parse_args(&words);
    let mut printer = a.output.printer(&cfg, Out::Nested, &fun, a.static_).map_err(|e| Failure::new(e.to_string(), 2))?;
    if a.preview_target {
        // Salt's `--preview-target`: the matching minions, through the outputter.
        let r = client.call(&json!({ "cmd": "target.minions", "tgt": tgt, "tgt_type": tgt_type })).map_err(|e| Failure::new(e.to_string(), 2))?;
        printer.print(&Value::Array(names(&r["minions"]).into_iter().map(Value::String).collect()), printer.outputter(None));
        return Ok(());
    }
    // What the publish load carries beyond the job: Salt's `--return`, `--return_config`,
    // `--return_kwargs` (YAML-typed, a mapping), `--metadata`, `--start-event`.
    let mut extras = Map::new();
    if let Some(r) = &a.ret {
        extras.insert("ret".into(), Value::String(r.clone()));
    }
    if let Some(c) = &a.ret_config {
        extras.insert("ret_config".into(), Value::String(c.clone()));
    }
    if let Some(k) = &a.ret_kwargs {
        extras.insert("ret_kwargs".into(), yaml_value(k));
    }
    if let Some(m) = &a.metadata {
        extras.insert("metadata".into(), yaml_value(m));
    }
    if a.start_event {
        extras.insert("start_event".into(), Value::Bool(true));
    }
    let mut batch = a.batch.clone();
    if batch.is_none() && a.batch_safe_limit > 1 {
        // Salt's `--batch-safe-limit`: a large target runs as a batch.
        let r = client.call(&json!({ "cmd": "target.minions", "tgt": tgt, "tgt_type": tgt_type })).map_err(|e| Failure::new(e.to_string(), 2))?;
        if names(&r["minions"]).len() >= a.batch_safe_limit {
            println!("\nNOTICE: Too many minions targeted, switching to batch execution.");
            batch = Some(a.batch_safe_size.clone());
        }
    }
    if let Some(spec) = &batch {
        let parsed: BatchSpec = spec.parse().map_err(|e: halite_master::batch::InvalidBatch| Failure::new(e.to_string(), 2))?;
        if !a.batch_wait.is_finite() || a.batch_wait < 0.0 {
            return Err(Failure::new("--batch-wait takes a number of seconds", 2));
        }
        let run = BatchRun { spec: parsed, returners: extras.clone(), wait: Duration::from_secs_f64(a.batch_wait.min(86_400.0)), failhard: a.failhard, timeout };
        let job = Job { tgt: &tgt, tgt_type: &tgt_type, fun: &fun, args: &args, kwargs: &kwargs };
        if a.asynchronous {
            // Salt 3008: the master drives the run; this command only starts it.
            return batch::start_on_master(&mut client, &cfg.sock_dir, &job, spec, &run, a.batch_wait, &printer);
        }
        return batch::run_batch(&mut client, &cfg.sock_dir, &job, run, &mut printer);
    }
    if let Some(n) = a.subset.and_then(halite_tools::subset::of_cli) {
        tgt = Value::Array(subset(&mut client, &cfg.sock_dir, &tgt, &tgt_type, &fun, n, timeout)?.into_iter().map(Value::String).collect());
        tgt_type = "list".into();
    }
    let p = publish(&mut client, &tgt, &tgt_type, &fun, &args, &kwargs, &extras)?;
    if a.asynchronous {
        println!("Executed command with job ID: {}", p.jid);
        return Ok(());
    }
    if p.minions.is_empty() {
        return Err(Failure::new(halite_master::Error::NoMinionsMatched.to_string(), 2));
    }
    if a.verbose {
        let msg = format!("Executing job with jid {}", p.jid);
        println!("{msg}\n{}\n", "-".repeat(msg.len()));
    } else if a.show_jid {
        println!("jid: {}", p.jid);
    }
    if fun == "sys.doc" {
        let (returns, _) = collect(&cfg.sock_dir, &p.jid, timeout)?;
        return print_docs(&returns, &printer, a.output.out.is_some());
    }
    let (tx, rx) = mpsc::channel();
    start_follow(&cfg.sock_dir, &p.jid, None, timeout, &tx)?;
    drop(tx);
    let mut failed = false;
    let mut summary = halite_tools::summary::Summary::default();
    for arrival in rx {
        match arrival {
            Arrival::Return { id, mut load, .. } => {
                let rc = retcode(&load);
                failed |= rc != 0;
                summary.returned(&id, rc);
                let ret = load.get_mut("return").map(Value::take).unwrap_or(Value::Null);
                printer.one(&id, ret, load.get("out").and_then(Value::as_str));
            }
            Arrival::Done { mut missing, .. } => {
                // Without the minion data cache a grain or pillar target went to every
                // minion; those that did not match are silent, not missing (as in Salt).
                if p.unresolved {
                    missing.clear();
                }
                // Listed ids the master has no accepted key for were published to nobody;
                // they are reported as not returning, as Salt does.
                missing.extend(p.missing.iter().cloned());
                missing.sort();
                // `--hide-timeout`: Salt neither prints them nor counts them.
                if a.hide_timeout && !a.verbose {
                    missing.clear();
                }
                for m in missing {
                    failed = true;
                    summary.missing(&m);
                    printer.one(&m, Value::String(no_return(&p.jid)), None);
                }
                break;
            }
            Arrival::Failed { error, .. } => {
                printer.finish();
                return Err(Failure::new(error, 2));
            }
        }
    }
    printer.finish();
    // As Salt: only for the returns printed as they came, with no `--out`.
    if a.summary && !a.static_ && a.output.out.is_none() {
        print!("{}", summary.render(a.verbose));
    }
    exit_for(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_arguments_parse() {
        let a = Args::try_parse_from(["salt", "-b", "25%", "--batch-wait", "1.5", "--failhard", "*", "test.ping"]).unwrap();
        assert_eq!(a.batch.as_deref(), Some("25%"));
        assert_eq!(a.batch_wait, 1.5);
        assert!(a.failhard && !a.static_);
        let a = Args::try_parse_from(["salt", "--batch-size", "2", "--static", "--out", "raw", "*", "cmd.run", "echo hi", "shell=/bin/sh"]).unwrap();
        assert_eq!(a.batch.as_deref(), Some("2"));
        assert!(a.static_ && a.output.out.as_deref() == Some("raw"));
        let (_, _, words) = job_words(&a).unwrap();
        let (args, kwargs) = parse_args(&words);
        assert_eq!(args, vec![json!("echo hi")]);
        assert_eq!(kwargs["shell"], json!("/bin/sh"));
        let a = Args::try_parse_from(["salt", "*", "test.ping", "--out", "txt"]).unwrap();
        assert!(a.batch.is_none() && a.output.out.as_deref() == Some("txt"));
    }

    #[test]
    fn doc_and_preview_read_the_words_as_salt_does() {
        let words = |argv: &[&str]| {
            let a = Args::try_parse_from(std::iter::once("salt").chain(argv.iter().copied())).unwrap();
            job_words(&a).map_err(|e| e.msg)
        };
        let w = |t: &str, f: &str, r: &[&str]| Ok((t.to_string(), f.to_string(), r.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
        assert_eq!(words(&["-d"]), w("*", "sys.doc", &[]));
        assert_eq!(words(&["-d", "web*"]), w("web*", "sys.doc", &[]));
        assert_eq!(words(&["web*", "-d", "test.ping"]), w("web*", "sys.doc", &["test.ping"]));
        assert_eq!(words(&["--documentation", "*", "sys.doc", "pkg"]), w("*", "sys.doc", &["pkg"]));
        assert!(words(&["-d", "*", "a.b", "c.d"]).unwrap_err().contains("one method at one time"));
        assert_eq!(words(&["--preview-target", "-G", "os:Debian"]), w("os:Debian", "", &[]));
        assert!(words(&["web*"]).unwrap_err().contains("Incomplete options"));
        assert!(words(&[]).unwrap_err().contains("without defining a target"));
        let a = Args::try_parse_from(["salt", "-s", "-l", "debug", "--summary", "--metadata", "{ticket: OPS-1}", "--start-event", "--batch-safe-limit", "100", "*", "test.ping"]).unwrap();
        assert!(a.static_ && a.summary && a.start_event && a.log_level == "debug" && a.batch_safe_limit == 100 && a.batch_safe_size == "8");
        assert_eq!(yaml_value(a.metadata.as_deref().unwrap()), json!({"ticket": "OPS-1"}));
    }

    #[test]
    fn cli_values_are_yaml_typed() {
        let (args, kwargs) = parse_args(&["1".into(), "True".into(), "[a, b]".into(), "x=2".into(), "a=b=c".into(), "not a=kw".into()]);
        assert_eq!(args, vec![json!(1), json!(true), json!(["a", "b"]), json!("not a=kw")]);
        assert_eq!(kwargs["x"], json!(2));
        assert_eq!(kwargs["a"], json!("b=c"));
    }
}
