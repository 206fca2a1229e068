//! `local_batch`: Salt's `cmd_batch`, driven by the CLI's own batch bookkeeping
//! ([`halite_tools::batch`]): the target is `test.ping`ed once, the minions that answered (in
//! id order) run `batch` at a time, every start under the run's one jid (as Salt 3008
//! publishes a batch), a return freeing its slot
//! (`batch_wait` seconds later), a minion silent past `timeout` freeing it too; with
//! `failhard` the first non-zero retcode stops the run. Each return is one `{id:
//! return}` item of the answer, in the order they came (`{id: {}}` for a minion that
//! did not return), as Salt's generator yields them and rest_cherrypy lists them.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value as J};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::local::{publish, ret_of, Arrival, Call, Follow};
use super::{short, ApiConfig, ApiError, Rules, Session};
use halite_tools::batch::{retcode, slots, BatchSpec, Clock};

/// Longest `batch` string read (`"10%"`, `"3"`).
pub const MAX_SPEC_LEN: usize = 24;
/// Most seconds of `batch_wait`.
pub const MAX_BATCH_WAIT_SECS: u64 = 3600;

/// A `local_batch` chunk's own options.
#[derive(Debug, Clone, PartialEq)]
pub struct Opts {
    pub spec: BatchSpec,
    pub wait: Duration,
    pub failhard: bool,
}

impl Opts {
    /// `batch` (an integer N >= 1, or a string `N`, `N%`, `%N`; Salt's default `10%`),
    /// `batch_wait` (whole seconds), `failhard` (a boolean).
    pub fn parse(chunk: &Map<String, J>) -> Result<Opts, ApiError> {
        let bad = |v: &J| ApiError::new(400, format!("Invalid batch data sent: {}. Data must be in the form of %10, 10% or 3", short(v)));
        let spec = match chunk.get("batch") {
            None | Some(J::Null) => BatchSpec::Percent(10.0),
            Some(v @ J::Number(n)) => BatchSpec::Count(n.as_u64().filter(|n| *n >= 1).ok_or_else(|| bad(v))?),
            Some(v @ J::String(s)) if s.len() <= MAX_SPEC_LEN => match s.parse::<BatchSpec>() {
                Ok(BatchSpec::Count(0)) | Err(_) => return Err(bad(v)),
                Ok(spec) => spec,
            },
            Some(v) => return Err(bad(v)),
        };
        let wait = match chunk.get("batch_wait") {
            None | Some(J::Null) => Duration::ZERO,
            Some(J::Number(n)) if n.as_u64().is_some_and(|s| s <= MAX_BATCH_WAIT_SECS) => Duration::from_secs(n.as_u64().unwrap_or(0)),
            Some(J::String(s)) if s.trim().parse::<u64>().is_ok_and(|s| s <= MAX_BATCH_WAIT_SECS) => Duration::from_secs(s.trim().parse().unwrap_or(0)),
            Some(v) => return Err(ApiError::new(400, format!("batch_wait must be whole seconds from 0 to {MAX_BATCH_WAIT_SECS}, not {}", short(v)))),
        };
        let failhard = match chunk.get("failhard") {
            None | Some(J::Null) => false,
            Some(J::Bool(b)) => *b,
            Some(J::String(s)) if s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false") => s.eq_ignore_ascii_case("true"),
            Some(v) => return Err(ApiError::new(400, format!("failhard must be true or false, not {}", short(v)))),
        };
        Ok(Opts { spec, wait, failhard })
    }
}

/// What a batch's follow hands the driver: the jid's arrival, or its failure.
type News = Result<Arrival, ApiError>;

/// Runs a batch; the items of the answer.
pub async fn answer(cfg: &ApiConfig, s: &Session, c: &Call, o: &Opts) -> Result<Vec<J>, ApiError> {
    let rules = Rules::load(cfg, s).await?;
    let none = Map::new();
    // Salt's gather_minions publishes test.ping to the target as the caller.
    rules.check(cfg, "test.ping", &[], &none, &c.tgt, &c.tgt_type).await?;
    let timeout = c.timeout(cfg);
    let Some(ping) = publish(cfg, s, &c.tgt, &c.tgt_type, "test.ping", &[], &none, &none).await? else { return Ok(vec![]) };
    let (answered, _) = Follow::open(cfg, &ping.jid, timeout).await?.collect().await?;
    let mut minions: Vec<String> = answered.into_iter().map(|(id, _)| id).collect();
    minions.sort();
    minions.dedup();
    if minions.is_empty() {
        return Ok(vec![]);
    }
    let mut batch = slots(minions.clone(), o.spec.size(minions.len()), o.wait, o.failhard);
    let clock = Clock::start();
    let (tx, mut rx) = mpsc::channel::<News>(64);
    // The follows end with the run (dropped, they are aborted), or at their timeout.
    let mut follows = JoinSet::new();
    let mut out = Vec::new();
    // The run's jid: the first start makes the job, the next ones join it.
    let mut run_jid: Option<String> = None;
    loop {
        let now = Instant::now();
        let start = batch.start(clock.ns(now));
        if !start.is_empty() {
            // Each batch is a publish of its own, checked on its own minions.
            rules.check_on(&c.fun, &c.arg, &c.kwarg, &start.iter().cloned().collect::<BTreeSet<_>>())?;
            let list = J::Array(start.iter().cloned().map(J::String).collect());
            let mut extra = c.publish_opts.clone();
            if let Some(j) = &run_jid {
                extra.insert("jid".into(), J::String(j.clone()));
            }
            match publish(cfg, s, &list, "list", &c.fun, &c.arg, &c.kwarg, &extra).await? {
                None => {
                    for m in &start {
                        batch.timed_out(m, clock.ns(now));
                        out.push(json!({ m.clone(): {} }));
                    }
                }
                Some(p) => {
                    // A minion whose key went away since the ping was sent nothing.
                    for m in &p.missing {
                        batch.timed_out(m, clock.ns(now));
                        out.push(json!({ m.clone(): {} }));
                    }
                    let jid = run_jid.get_or_insert_with(|| p.jid.clone()).clone();
                    let mut f = Follow::open_some(cfg, &jid, &start, timeout).await?;
                    let tx = tx.clone();
                    follows.spawn(async move {
                        loop {
                            let news = match f.next().await {
                                Ok(Some(a)) => Ok(a),
                                Ok(None) => Err(ApiError::new(503, "the master ended a batch's follow before its end")),
                                Err(e) => Err(e),
                            };
                            let last = !matches!(news, Ok(Arrival::Return { .. }));
                            if tx.send(news).await.is_err() || last {
                                return;
                            }
                        }
                    });
                }
            }
        }
        if batch.finished() {
            break;
        }
        let news = match batch.next_free().map(|ns| clock.at(ns)) {
            Some(t) => match tokio::time::timeout(t.saturating_duration_since(now), rx.recv()).await {
                Ok(n) => n,
                Err(_) => continue,
            },
            None => rx.recv().await,
        };
        let Some(news) = news else { break };
        match news? {
            Arrival::Return { id, load } => {
                if batch.returned(&id, retcode(&load), clock.ns(Instant::now())) {
                    out.push(json!({ id: ret_of(&load) }));
                }
            }
            Arrival::Done { missing } => {
                for m in missing {
                    batch.timed_out(&m, clock.ns(Instant::now()));
                    out.push(json!({ m: {} }));
                }
            }
        }
    }
    follows.abort_all();
    if batch.halted.is_some() {
        tracing::warn!(user = %s.user, fun = %c.fun, "salt-api: local_batch stopped at a failed return (failhard)");
    }
    Ok(out)
}
