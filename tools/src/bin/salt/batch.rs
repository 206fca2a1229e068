//! `salt --batch`: the command drives the run (its bookkeeping is
//! `halite_tools::batch`), or with `--async` asks the master to (Salt 3008).

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use halite_master::admin::client::AdminClient;
use halite_tools::batch::{retcode, slots, BatchSpec, Clock};
use halite_tools::common::{Failure, Result};
use halite_tools::follow::Arrival;
use halite_tools::output::python_repr;
use halite_tools::printer::Printer;

use crate::{collect, no_return, publish, start_follow, Job};

/// Salt's batch `gather_minions`: `test.ping` to the target; the minions that answered
/// (in id order) take part, each of the others is named as not responding.
fn gather(client: &mut AdminClient, sock_dir: &Path, tgt: &Value, tgt_type: &str, timeout: Duration, printer: &Printer) -> Result<Vec<String>> {
    let ping = publish(client, tgt, tgt_type, "test.ping", &[], &Map::new(), &Map::new())?;
    let (answered, mut down) = collect(sock_dir, &ping.jid, timeout)?;
    if ping.unresolved {
        down.clear();
    }
    down.extend(ping.missing);
    down.sort();
    for m in &down {
        printer.say(&format!("Minion {m} did not respond. No job will be sent."));
    }
    let mut minions: Vec<String> = answered.into_iter().map(|(id, _)| id).collect();
    minions.sort();
    Ok(minions)
}

/// How a batch runs.
pub(crate) struct BatchRun {
    pub spec: BatchSpec,
    /// What each start's publish carries beyond the job (`--return`, `--metadata`,
    /// `--start-event`).
    pub returners: Map<String, Value>,
    pub wait: Duration,
    pub failhard: bool,
    pub timeout: Duration,
}

/// `salt --batch`: resolves the target once with `test.ping` (the minions that answer
/// are the run; the others are named and skipped), then keeps at most the batch size
/// of them running, every start published under the run's one jid (as Salt 3008 does),
/// printing each return as it comes. Exits with the largest retcode returned, as Salt's
/// batch does.
pub(crate) fn run_batch(client: &mut AdminClient, sock_dir: &Path, job: &Job, run: BatchRun, printer: &mut Printer) -> Result<()> {
    let Job { fun, args, kwargs, .. } = *job;
    let minions = gather(client, sock_dir, job.tgt, job.tgt_type, run.timeout, printer)?;
    if minions.is_empty() {
        return Err(Failure::new("ERROR: No return received", 2));
    }
    let size = run.spec.size(minions.len());
    let mut batch = slots(minions, size, run.wait, run.failhard);
    let clock = Clock::start();
    let (tx, rx) = mpsc::channel();
    let mut worst = 0i64;
    // The run's one jid (Salt 3008): the first start makes the job, each next start
    // joins it, and each start's follow waits for its own minions.
    let mut run_jid: Option<String> = None;
    loop {
        let now = Instant::now();
        let start = batch.start(clock.ns(now));
        if !start.is_empty() {
            printer.say(&format!("\nExecuting run on {}\n", python_repr(&json!(start))));
            let list = Value::Array(start.iter().cloned().map(Value::String).collect());
            let mut extra = run.returners.clone();
            if let Some(j) = &run_jid {
                extra.insert("jid".into(), Value::String(j.clone()));
            }
            let p = publish(client, &list, "list", fun, args, kwargs, &extra)?;
            let jid = run_jid.get_or_insert_with(|| p.jid.clone()).clone();
            // A minion whose key went away since the ping was sent nothing.
            for m in &p.missing {
                batch.timed_out(m, clock.ns(now));
            }
            start_follow(sock_dir, &jid, Some(&start), run.timeout, &tx)?;
        }
        if batch.finished() {
            break;
        }
        let arrival = match batch.next_free().map(|ns| clock.at(ns)) {
            Some(t) => match rx.recv_timeout(t.saturating_duration_since(now)) {
                Ok(a) => a,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(a) => a,
                Err(_) => break,
            },
        };
        match arrival {
            Arrival::Return { jid, id, load } => {
                let rc = retcode(&load);
                if batch.returned(&id, rc, clock.ns(Instant::now())) {
                    worst = worst.max(rc);
                    printer.batch_return(&jid, &id, rc, load.get("return").cloned().unwrap_or(Value::Null), load.get("out").and_then(Value::as_str));
                }
            }
            Arrival::Done { jid, missing } => {
                for m in missing {
                    batch.timed_out(&m, clock.ns(Instant::now()));
                    printer.one(&m, Value::String(no_return(&jid)), None);
                }
            }
            Arrival::Failed { error, .. } => {
                printer.finish();
                return Err(Failure::new(error, 2));
            }
        }
    }
    printer.finish();
    if batch.halted.is_some() {
        eprintln!("ERROR: the batch run stopped at a failed return (--failhard); minions not yet started were not run");
    }
    if worst != 0 {
        return Err(Failure::new("", worst.clamp(1, 255) as i32));
    }
    Ok(())
}


/// `salt --async --batch`: the target is pinged here, then the master starts the run
/// (`batch.start`) and keeps it going; prints the run's jid as Salt does.
pub(crate) fn start_on_master(client: &mut AdminClient, sock_dir: &Path, job: &Job, spec: &str, run: &BatchRun, batch_wait: f64, printer: &Printer) -> Result<()> {
    let minions = gather(client, sock_dir, job.tgt, job.tgt_type, run.timeout, printer)?;
    if minions.is_empty() {
        println!("No minions matched the target.");
        return Ok(());
    }
    let mut req = json!({ "cmd": "batch.start", "tgt": job.tgt, "tgt_type": job.tgt_type, "fun": job.fun, "arg": job.args, "kwarg": job.kwargs, "minions": minions, "batch": spec, "batch_wait": batch_wait, "failhard": run.failhard, "timeout": run.timeout.as_secs() });
    if let Value::Object(m) = &mut req {
        m.extend(run.returners.clone());
    }
    let r = client.call(&req).map_err(|e| Failure::new(e.to_string(), 2))?;
    println!("Executed batch command with job ID: {}", r["jid"].as_str().unwrap_or(""));
    Ok(())
}
