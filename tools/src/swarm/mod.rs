//! `halite-swarm`: many light simulated minions in one process, speaking the real
//! protocol to a master (Halite or the reference), for the end-to-end benchmarks.
//!
//! Phases, each reported as one JSON line on stdout:
//!
//! 1. `keys`: one RSA-2048 key pair per minion, cached in `--key-dir` (`<n>.pem`) so
//!    later runs skip the generation;
//! 2. `authenticated`: every minion signs in at once, as a fleet does after a master
//!    start, with salt-minion's timeouts and retries; wall time until the last accept
//!    reply is in, and (with `--master-pid`) the CPU time the master's process tree spent
//!    meanwhile. Replies are checked (signatures, nonce, the publish key's X9.31 `sig`)
//!    after that, so the swarm's RSA work does not skew the master's numbers;
//! 3. `ready`: each minion subscribed to the publish port with a return socket open
//!    and its start event (`salt/minion/<id>/start`) answered, as salt-minion fires it
//!    once connected, plus the master tree's memory (RSS and PSS) with them all
//!    connected;
//! 4. `job`, once per publish: seconds from the first minion receiving it to the last
//!    return acknowledged by the master, and how many minions returned.
//!
//! The swarm stops on SIGINT/SIGTERM or after `--jobs N` publishes. With `--blast N`
//! ([`blast`]) the minions instead hold their first N publishes and then send all their
//! returns at once: the master's own rate of acknowledged returns.
//!
//! A fleet larger than one process's open-file limit (two connections a minion) is
//! several swarm processes, each with its own range of ids (`first..first+count`); one
//! process can spread its minions over several masters (minion n signs in to
//! `masters[n % len]`), and minions can share key pairs (`distinct_keys`).
//!
//! Across master restarts, failovers and key changes each minion does what salt-minion
//! 3008.5 does: its subscription reconnects by itself; a request socket that failed is
//! replaced; it signs in again only when told to, by a publish it cannot decrypt (the
//! publish key changed) or a `"bad load"` reply (its session key is unknown), and then
//! emits a `signed_in_again` line. Such a sign-in, like salt-minion's, retries for ever:
//! after `auth_tries` unanswered sends, or while pending or full, it waits
//! `acceptance_wait` and starts over. A sign-in that fails otherwise (the key rejected,
//! a reply that does not verify) is what makes salt-minion restart its process after a
//! random 1..=`random_reauth_delay` seconds; the swarm minion waits the same and tries
//! again. Salt applies no random delay to the re-authentication a publish or a bad load
//! calls for; neither does the swarm. The first sign-in retries the same way when its
//! first try goes unanswered or is refused (a master not yet listening, a connection
//! reset in a storm), for ten rounds `acceptance_wait` apart, and the
//! `authenticated` line says how many did (`retried`).

pub mod blast;
pub mod minion;
pub mod procstat;
mod requests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc;
use zeromq::{Socket, SocketRecv};

use halite_master::wire::crypto::{PrivateKey, PublicKey};

use crate::common::{Failure, Progress, Result};
use minion::{Creds, Identity, MinionError};
use requests::{renew_request_socket, send_return, start_event};

/// How the swarm runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The masters' addresses: minion `i` signs in to `masters[i % len]` (several cluster
    /// members, without a balancer in front).
    pub masters: Vec<String>,
    pub ret_port: u16,
    pub count: usize,
    /// The first minion's number: ids run `PREFIX<first>..PREFIX<first+count-1>`, so
    /// several swarm processes (each under the per-process file limit) make one fleet.
    pub first: usize,
    pub prefix: String,
    pub key_dir: PathBuf,
    /// Key pairs in use: minion `n` takes key `n % distinct_keys` (default: one each).
    /// The master's work per sign-in is the same either way (it encrypts to whatever
    /// key the id presents); sharing only spares generating tens of thousands of keys.
    pub distinct_keys: Option<usize>,
    pub master_pid: Option<u32>,
    /// salt-minion's `auth_timeout` (5 s) and `auth_tries` (7).
    pub auth_timeout: Duration,
    pub auth_tries: u32,
    /// salt-minion's `acceptance_wait_time` (10 s) between sign-ins while pending.
    pub acceptance_wait: Duration,
    /// salt-minion's `random_reauth_delay` (10 s): the upper bound of the random wait
    /// before a minion starts over after a failed sign-in.
    pub random_reauth_delay: Duration,
    /// Stop after this many publishes have been answered by every minion.
    pub jobs: Option<usize>,
    /// Hold this many publishes per minion, then send all their returns at once and
    /// report the master's rate of acknowledged returns ([`blast`]); then stop.
    pub blast: Option<usize>,
}

fn emit(v: serde_json::Value) {
    println!("{v}");
}

/// Loads the cached key pairs `<n>.pem` for `n` in `range` from `dir`, generating (on
/// every core) the missing ones; `keys[i]` is key `range.start + i`.
pub fn load_keys(dir: &Path, range: std::ops::Range<usize>) -> Result<(Vec<PrivateKey>, usize)> {
    std::fs::create_dir_all(dir).map_err(|e| Failure::new(format!("creating {}: {e}", dir.display()), 1))?;
    let start = range.start;
    let mut keys: Vec<Option<PrivateKey>> = range.map(|i| std::fs::read(dir.join(format!("{i}.pem"))).ok().and_then(|p| PrivateKey::from_pem(&p).ok())).collect();
    let missing: Vec<usize> = keys.iter().enumerate().filter(|(_, k)| k.is_none()).map(|(i, _)| i).collect();
    if !missing.is_empty() {
        let progress = Mutex::new(Progress::new("generating minion keys", missing.len() as u64));
        let done = std::sync::atomic::AtomicU64::new(0);
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        let made: Vec<(usize, std::result::Result<PrivateKey, halite_master::Error>)> = std::thread::scope(|s| {
            let handles: Vec<_> = missing
                .chunks(missing.len().div_ceil(threads))
                .map(|chunk| {
                    let (progress, done) = (&progress, &done);
                    s.spawn(move || {
                        chunk
                            .iter()
                            .map(|&i| {
                                let k = PrivateKey::generate(2048).and_then(|k| {
                                    let pem = k.to_pem()?;
                                    Ok((k, pem))
                                });
                                let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                                progress.lock().unwrap_or_else(|p| p.into_inner()).set(n);
                                (i, k.map_err(halite_master::Error::from).and_then(|(k, pem)| write_key(dir, start + i, &pem).map(|_| k)))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
        });
        progress.into_inner().unwrap_or_else(|p| p.into_inner()).finish();
        for (i, k) in made {
            keys[i] = Some(k.map_err(|e| Failure::new(format!("minion key {}: {e}", start + i), 1))?);
        }
    }
    let keys: Option<Vec<PrivateKey>> = keys.into_iter().collect();
    Ok((keys.ok_or_else(|| Failure::new("a minion key could not be generated", 1))?, missing.len()))
}

fn write_key(dir: &Path, i: usize, pem: &[u8]) -> std::result::Result<(), halite_master::Error> {
    use halite_master::error::IoContext;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!(".{i}.pem.tmp"));
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp).ctx(|| format!("creating {}", tmp.display()))?;
    f.write_all(pem).ctx(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, dir.join(format!("{i}.pem"))).ctx(|| format!("renaming {}", tmp.display()))
}

/// One `_auth` exchange with salt-minion's retry rule: the same payload resent on each
/// timeout, up to `auth_tries` sends. Returns the nonce and the raw reply.
async fn auth_exchange(opts: &Options, endpoint: &str, me: &Identity, cached: Option<&PublicKey>) -> std::result::Result<(String, Vec<u8>), MinionError> {
    let nonce = minion::nonce();
    let body = minion::auth_request(me, &nonce, cached)?;
    let mut tries = 0;
    loop {
        tries += 1;
        match minion::request_once(endpoint, body.clone(), opts.auth_timeout, "_auth").await {
            Ok(r) => return Ok((nonce, r)),
            Err(MinionError::Timeout(..)) if tries < opts.auth_tries => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Signs in: exchanges until the key is no longer pending (`acceptance_wait` between
/// tries, as salt-minion does), then checks the reply.
async fn sign_in(opts: &Options, endpoint: &str, me: &Identity, cached: Option<&PublicKey>) -> std::result::Result<Creds, MinionError> {
    loop {
        let (nonce, reply) = auth_exchange(opts, endpoint, me, cached).await?;
        match minion::auth_reply(me, &nonce, &reply, cached) {
            Err(MinionError::Pending) => tokio::time::sleep(opts.acceptance_wait).await,
            other => return other,
        }
    }
}

/// A sign-in that went unanswered, was refused or found the master full: salt-minion
/// waits `acceptance_wait_time` and tries again (any other failure restarts it).
fn waits_to_retry(e: &MinionError) -> bool {
    matches!(e, MinionError::Timeout(..) | MinionError::Transport(_) | MinionError::Full)
}

/// Rounds of [`first_sign_in_again`] before a minion is reported as failed (salt-minion
/// tries for ever; a swarm must end when its master never comes).
const FIRST_SIGN_IN_ROUNDS: u32 = 10;

/// A first sign-in whose first try went unanswered, was refused or found the master
/// full: `acceptance_wait`, then [`sign_in`] again, up to [`FIRST_SIGN_IN_ROUNDS`] rounds.
async fn first_sign_in_again(opts: &Options, endpoint: &str, me: &Identity) -> std::result::Result<Creds, MinionError> {
    let mut round = 0;
    loop {
        round += 1;
        tokio::time::sleep(opts.acceptance_wait.max(Duration::from_millis(100))).await;
        match sign_in(opts, endpoint, me, None).await {
            Err(e) if waits_to_retry(&e) && round < FIRST_SIGN_IN_ROUNDS => continue,
            other => return other,
        }
    }
}

/// Signs in again when the master asked for it (a publish that does not decrypt, a
/// `"bad load"` reply), as salt-minion's `AsyncAuth.authenticate` does: until it works.
/// Unanswered or waiting (pending, full): `acceptance_wait`, then again. Any other
/// failure: a random 1..=`random_reauth_delay` wait (salt-minion restarts then).
async fn sign_in_again(swarm: &Swarm, me: &Identity, endpoint: &str, master_pub: &PublicKey) -> Creds {
    loop {
        let wait = match sign_in(&swarm.opts, endpoint, me, Some(master_pub)).await {
            Ok(c) => {
                let n = swarm.reauths.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                emit(json!({"event": "signed_in_again", "id": me.id, "total": n}));
                return c;
            }
            Err(e) if waits_to_retry(&e) => swarm.opts.acceptance_wait,
            Err(e) => {
                let bound = swarm.opts.random_reauth_delay.as_millis().max(1000) as u64;
                let ms = rand::Rng::gen_range(&mut rand::thread_rng(), 1000..=bound);
                tracing::warn!(id = %me.id, "signing in again failed ({e}): starting over in {ms} ms (random_reauth_delay)");
                Duration::from_millis(ms)
            }
        };
        tokio::time::sleep(wait.max(Duration::from_millis(100))).await;
    }
}

/// Per-publish bookkeeping across the swarm.
struct JobTrack {
    first_seen: Instant,
    evaluated: usize,
    matched: usize,
    returned: usize,
    failed: usize,
}

struct Swarm {
    opts: Options,
    jobs: Mutex<HashMap<String, JobTrack>>,
    members: usize,
    finished: mpsc::UnboundedSender<()>,
    /// Sign-ins the master asked for since the swarm was ready.
    reauths: std::sync::atomic::AtomicU64,
    /// With `--blast`: the blast the minions take part in.
    blast: Option<Arc<blast::Blast>>,
}

impl Swarm {
    fn seen(&self, jid: &str, matched: bool) {
        let done = {
            let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let j = jobs.entry(jid.to_string()).or_insert_with(|| JobTrack { first_seen: Instant::now(), evaluated: 0, matched: 0, returned: 0, failed: 0 });
            if matched {
                j.matched += 1;
            } else {
                j.evaluated += 1;
            }
            self.take_done(&mut jobs, jid)
        };
        self.report(jid, done);
    }

    fn returned(&self, jid: &str, ok: bool) {
        let done = {
            let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(j) = jobs.get_mut(jid) {
                j.evaluated += 1;
                if ok {
                    j.returned += 1;
                } else {
                    j.failed += 1;
                }
            }
            self.take_done(&mut jobs, jid)
        };
        self.report(jid, done);
    }

    /// Removes a job every minion has evaluated from the map (so it stays as small as
    /// the jobs in flight) and hands it back for [`Swarm::report`].
    fn take_done(&self, jobs: &mut HashMap<String, JobTrack>, jid: &str) -> Option<JobTrack> {
        if jobs.get(jid).is_some_and(|j| j.evaluated == self.members) {
            jobs.remove(jid)
        } else {
            None
        }
    }

    /// Prints a finished job's line, outside the map's lock: a slow reader of stdout
    /// then holds up only the minion that finished the job, not every minion.
    fn report(&self, jid: &str, done: Option<JobTrack>) {
        if let Some(j) = done {
            emit(json!({"event": "job", "jid": jid, "matched": j.matched, "returned": j.returned, "failed": j.failed,
                "seconds": j.first_seen.elapsed().as_secs_f64()}));
            let _ = self.finished.send(());
        }
    }
}

/// A simulated minion and the master it talks to.
struct Seat {
    me: Identity,
    /// The master's address and its request endpoint (`tcp://address:ret_port`).
    master: String,
    endpoint: String,
}

/// One minion after sign-in: subscribe, then answer publishes until the process ends.
async fn live(swarm: Arc<Swarm>, seat: Seat, mut creds: Creds, ready: mpsc::UnboundedSender<std::result::Result<(), zeromq::ZmqError>>) {
    let Seat { me, master, endpoint } = seat;
    let pub_ep = format!("tcp://{master}:{}", creds.publish_port);
    let mut sub = zeromq::SubSocket::new();
    let sub_events = sub.monitor();
    let subscribed = async {
        sub.connect(&pub_ep).await?;
        sub.subscribe("").await
    }
    .await;
    let mut first = zeromq::ReqSocket::new();
    let connected = first.connect(&endpoint).await;
    if connected.is_ok() {
        if let Err(e) = start_event(&me, &creds, &mut first).await {
            tracing::warn!(id = %me.id, "start event not delivered: {e}");
        }
    }
    let req = Arc::new(tokio::sync::Mutex::new(first));
    let _ = ready.send(subscribed.and(connected));
    tokio::spawn(renew_request_socket(sub_events, req.clone(), endpoint.clone()));
    let mut last_serial = 0i64;
    let mut held: Vec<minion::Job> = Vec::new();
    loop {
        let frame = match sub.recv().await {
            Ok(m) => m.into_vec().pop().map(|b| b.to_vec()).unwrap_or_default(),
            Err(e) => {
                tracing::warn!(id = %me.id, "publish socket: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let job = match minion::publish(&me.id, &creds.aes, &mut last_serial, &frame) {
            Ok(j) => j,
            Err(minion::PublishKeyChanged) => {
                // The publish key changed: sign in again (with our token) and retry.
                creds = sign_in_again(&swarm, &me, &endpoint, &creds.master_pub).await;
                last_serial = 0;
                minion::publish(&me.id, &creds.aes, &mut last_serial, &frame).unwrap_or(None)
            }
        };
        let Some(job) = job else { continue };
        if let Some(b) = &swarm.blast {
            if job.matched && held.len() < b.per_minion {
                held.push(job);
                if held.len() == b.per_minion {
                    b.fire(&me, &creds, &mut *req.lock().await, &held).await;
                }
            }
            continue;
        }
        swarm.seen(&job.jid, job.matched);
        if !job.matched {
            continue;
        }
        let ok = match send_return(&swarm, &me, &endpoint, &mut creds, &mut *req.lock().await, &job).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(id = %me.id, jid = %job.jid, "return not delivered: {e}");
                false
            }
        };
        swarm.returned(&job.jid, ok);
    }
}

/// Runs the swarm to completion (see the module docs).
pub async fn run(opts: Options) -> Result<()> {
    let started = Instant::now();
    if opts.masters.is_empty() {
        return Err(Failure::new("no master address given", 2));
    }
    let numbers = opts.first..opts.first + opts.count;
    // Minion n takes key n % distinct: key files first..first+count when each has its
    // own, else 0..distinct.
    let distinct = opts.distinct_keys.unwrap_or(usize::MAX).max(1);
    let key_range = if distinct >= numbers.end { numbers.clone() } else { 0..distinct };
    let (keys, generated) = tokio::task::block_in_place(|| load_keys(&opts.key_dir, key_range.clone()))?;
    let seats: Vec<Seat> = tokio::task::block_in_place(|| {
        let mut made: HashMap<usize, Identity> = HashMap::new();
        numbers
            .map(|n| {
                let k = n % distinct;
                let id = format!("{}{n}", opts.prefix);
                let me = match made.get(&k) {
                    Some(other) => Identity::sharing(id, other),
                    None => {
                        let me = Identity::new(id, keys[k - key_range.start].clone())?;
                        made.insert(k, Identity::sharing(me.id.clone(), &me));
                        me
                    }
                };
                let master = opts.masters[n % opts.masters.len()].clone();
                let endpoint = format!("tcp://{master}:{}", opts.ret_port);
                Ok(Seat { me, master, endpoint })
            })
            .collect::<std::result::Result<Vec<_>, halite_master::Error>>()
    })
    .map_err(|e| Failure::new(e.to_string(), 1))?;
    emit(json!({"event": "keys", "count": seats.len(), "distinct": keys.len(), "generated": generated, "seconds": started.elapsed().as_secs_f64()}));

    let before = opts.master_pid.map(procstat::tree_stats);
    let t0 = Instant::now();
    // Round one: every minion sends `_auth` at once. Replies are only collected here and
    // checked afterwards, so the swarm's own RSA work (two private-key decryptions per
    // minion) does not compete with the master for the CPU while it is being measured.
    let mut tasks = tokio::task::JoinSet::new();
    for seat in seats {
        let opts = opts.clone();
        tasks.spawn(async move {
            let r = auth_exchange(&opts, &seat.endpoint, &seat.me, None).await;
            (seat, r, t0.elapsed())
        });
    }
    let mut replies = Vec::new();
    let mut failures: HashMap<String, usize> = HashMap::new();
    let mut last = Duration::ZERO;
    let mut pending = tokio::task::JoinSet::new();
    while let Some(j) = tasks.join_next().await {
        let Ok((seat, r, at)) = j else { continue };
        match r {
            Ok(reply) => {
                last = last.max(at);
                replies.push((seat, reply));
            }
            // Unanswered, refused or full: salt-minion waits `acceptance_wait_time` and
            // tries again (its first sign-in retries for ever); so does the swarm, for
            // ten more rounds, so that a master that never comes is reported.
            Err(e) if waits_to_retry(&e) => {
                let opts = opts.clone();
                pending.spawn(async move {
                    let r = first_sign_in_again(&opts, &seat.endpoint, &seat.me).await;
                    (seat, r)
                });
            }
            Err(e) => *failures.entry(e.to_string()).or_default() += 1,
        }
    }
    let retried = pending.len();
    let after = opts.master_pid.map(procstat::tree_stats);
    let mut signed_in = Vec::new();
    for (seat, (nonce, reply)) in replies {
        match tokio::task::block_in_place(|| minion::auth_reply(&seat.me, &nonce, &reply, None)) {
            Ok(c) => signed_in.push((seat, c)),
            Err(MinionError::Pending) => {
                let opts = opts.clone();
                pending.spawn(async move {
                    tokio::time::sleep(opts.acceptance_wait).await;
                    let r = sign_in(&opts, &seat.endpoint, &seat.me, None).await;
                    (seat, r)
                });
            }
            Err(e) => *failures.entry(e.to_string()).or_default() += 1,
        }
    }
    let waited = !pending.is_empty();
    while let Some(j) = pending.join_next().await {
        let Ok((seat, r)) = j else { continue };
        match r {
            Ok(c) => signed_in.push((seat, c)),
            Err(e) => *failures.entry(e.to_string()).or_default() += 1,
        }
    }
    if waited {
        last = t0.elapsed();
    }
    let master_cpu = before.zip(after).map(|(b, a)| a.cpu_seconds - b.cpu_seconds);
    emit(json!({"event": "authenticated", "count": signed_in.len(), "failed": failures, "seconds": last.as_secs_f64(), "waited_for_acceptance": waited, "retried": retried,
        "master_cpu_seconds": master_cpu, "master_processes": after.map(|a| a.processes)}));
    if signed_in.is_empty() {
        return Err(Failure::new("no minion could sign in", 1));
    }

    let (finished_tx, mut finished_rx) = mpsc::unbounded_channel();
    let blast = opts.blast.map(|n| Arc::new(blast::Blast::new(n)));
    let swarm = Arc::new(Swarm { opts: opts.clone(), jobs: Mutex::new(HashMap::new()), members: signed_in.len(), finished: finished_tx, reauths: Default::default(), blast: blast.clone() });
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let n = signed_in.len();
    for (seat, creds) in signed_in {
        tokio::spawn(live(swarm.clone(), seat, creds, ready_tx.clone()));
    }
    let mut bad = 0;
    for _ in 0..n {
        match ready_rx.recv().await {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                bad += 1;
                tracing::warn!("a minion could not connect: {e}");
            }
            None => break,
        }
    }
    // Let the subscriptions reach the publisher before anyone publishes ("slow joiner").
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mem = opts.master_pid.map(procstat::tree_stats);
    emit(json!({"event": "ready", "count": n - bad, "failed": bad,
        "master_rss_kib": mem.map(|m| m.rss_kib), "master_pss_kib": mem.map(|m| m.pss_kib)}));

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| Failure::new(e.to_string(), 1))?;
    if let Some(b) = blast {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
            r = b.run(opts.master_pid, n - bad) => r.map_err(|e| Failure::new(e.to_string(), 1))?,
        }
        emit(json!({"event": "done", "jobs": 0}));
        return Ok(());
    }
    let mut done = 0usize;
    while opts.jobs != Some(0) {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            f = finished_rx.recv() => {
                if f.is_none() { break; }
                done += 1;
                if opts.jobs.is_some_and(|j| done >= j) { break; }
            }
        }
    }
    emit(json!({"event": "done", "jobs": done}));
    Ok(())
}
