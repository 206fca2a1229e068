//! The nemesis's clients, each a thread recording its operations in the history until
//! told to stop: jobs for the real minions and for the simulated fleet, an operator's
//! key decisions, a reader of every member's keys, and `cluster.sync_roots` of a file
//! changed on the member it goes through. Each goes through the members present: the
//! founders, and the member that joins once it has joined.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::{said, tool, ROOTS_FILE};
use crate::support::history::{History, Outcome};
use crate::support::*;

/// The members a client goes through: the first `present` of `envs`.
#[derive(Clone, Copy)]
pub struct At<'a> {
    pub envs: &'a [Env],
    pub present: &'a AtomicUsize,
}

impl<'a> At<'a> {
    /// The members present.
    fn now(&self) -> &'a [Env] {
        &self.envs[..self.present.load(SeqCst)]
    }

    /// A member present, drawn at random.
    fn draw(&self, rng: &mut StdRng) -> usize {
        rng.gen_range(0..self.now().len())
    }
}

/// `salt -L TARGETS test.echo VALUE` through a member drawn at random, recorded as a
/// `job` of `process`; the minions `salt` printed the value for are the acknowledged
/// returns (values `{prefix}{n}`).
pub fn jobs(h: &History, at: At, stop: &AtomicBool, seed: u64, process: &str, prefix: &str, targets: &[String]) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x10b5 ^ prefix.len() as u64);
    let list = targets.join(",");
    for n in 0.. {
        if stop.load(SeqCst) {
            return;
        }
        let via = at.draw(&mut rng);
        let value = format!("{prefix}{n}");
        let outcome = h.op(process, "job", json!({ "value": value, "via": via, "minions": targets }), || {
            match tool(&at.envs[via], SALT, &["-L", &list, "test.echo", &value, "-t", "8", "--static", "--out", "json"], 40) {
                Ok(o) => {
                    let out: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
                    let returns: Vec<&str> = targets.iter().map(String::as_str).filter(|m| out[*m] == json!(value)).collect();
                    let outcome = if returns.len() == targets.len() { Outcome::Ok } else { Outcome::Unknown };
                    let mut r = json!({ "returns": returns });
                    if outcome != Outcome::Ok {
                        r["said"] = json!(said(&o));
                    }
                    (outcome, r, outcome)
                }
                Err(o) => (Outcome::Unknown, json!({ "returns": [], "said": said(&o), "killed": true }), Outcome::Unknown),
            }
        });
        if outcome != Outcome::Ok {
            // Pacing: a member that answers at once with nothing is not asked in a loop.
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// A key decision with `salt-key -a/-r/-d ID -y` through member `via`.
pub fn decide(h: &History, env: &Env, via: usize, verb: &str, id: &str) -> Outcome {
    let (flag, done) = match verb {
        "accept" => ("-a", "accepted"),
        "reject" => ("-r", "rejected"),
        _ => ("-d", "deleted"),
    };
    h.op("operator", verb, json!({ "id": id, "via": via }), || {
        let (outcome, text) = match tool(env, SALT_KEY, &[flag, id, "-y"], 40) {
            Ok(o) => {
                let text = said(&o);
                let out = String::from_utf8_lossy(&o.stdout);
                if o.status.success() && out.contains(&format!("Key for minion {id} {done}.")) {
                    (Outcome::Ok, text)
                } else if o.status.success() && out.contains("does not match any") {
                    (Outcome::Fail, text)
                } else {
                    (Outcome::Unknown, text)
                }
            }
            Err(o) => (Outcome::Unknown, said(&o)),
        };
        (outcome, json!(text), outcome)
    })
}

/// A minion's `_auth` for a new key through member `via`. Its outcome is never `ok`:
/// Salt's answer for a key now pending and a member's "not ready, sign in again" answer
/// are the same signed `{"ret": true}` (`master/src/req/not_ready.rs`), so no reply says
/// the key was recorded; the result says which answer came.
fn register(h: &History, rt: &tokio::runtime::Runtime, env: &Env, via: usize, id: &str, pem: &[u8]) {
    use halite_tools::swarm::minion;
    h.op("operator", "register", json!({ "id": id, "via": via }), || {
        let key = halite_master::wire::crypto::PrivateKey::from_pem(pem).expect("key");
        let me = Identity::new(id.to_string(), key).expect("identity");
        let body = minion::auth_request(&me, &minion::nonce(), None).expect("auth request");
        let ep = format!("tcp://{}:{}", env.ip, env.ret);
        let said = match rt.block_on(minion::request_once(&ep, body, Duration::from_secs(15), "auth")) {
            Ok(r) if crate::partition::is_cluster_retry(&r) => "cluster_retry".to_string(),
            Ok(r) => format!("answered ({} bytes)", r.len()),
            Err(e) => e.to_string(),
        };
        (Outcome::Unknown, json!(said), ())
    })
}

/// Keys registered, then accepted or rejected, then deleted, each through a member
/// drawn at random. A key whose decision failed (the member did not see it pending) is
/// decided again later, up to 5 times; one whose outcome is unknown is only ever deleted.
pub fn operator(h: &History, at: At, stop: &AtomicBool, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0e7a);
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    // One key pair for every registered id (the master keys them by id).
    let pem = halite_master::wire::crypto::PrivateKey::generate(2048).expect("key pair").to_pem().expect("pem");
    let (mut pending, mut decided) = (Vec::<String>::new(), Vec::<String>::new());
    let mut tries = std::collections::HashMap::<String, u32>::new();
    for n in 0.. {
        if stop.load(SeqCst) {
            return;
        }
        let via = at.draw(&mut rng);
        let envs = at.envs;
        let roll: f64 = rng.gen();
        // At most 16 keys live at once (a listing, read thousands of times in a long run,
        // stays small).
        let full = pending.len() + decided.len() >= 16;
        if !pending.is_empty() && (roll < 0.45 || full && decided.is_empty()) {
            let id = pending.swap_remove(rng.gen_range(0..pending.len()));
            let verb = if rng.gen_bool(2.0 / 3.0) { "accept" } else { "reject" };
            match decide(h, &envs[via], via, verb, &id) {
                Outcome::Fail => {
                    let t = tries.entry(id.clone()).or_insert(0);
                    *t += 1;
                    if *t < 5 {
                        pending.push(id);
                    }
                }
                _ => decided.push(id),
            }
        } else if !decided.is_empty() && (roll < 0.6 || full) {
            let id = decided.swap_remove(rng.gen_range(0..decided.len()));
            if decide(h, &envs[via], via, "delete", &id) == Outcome::Fail {
                decided.push(id);
            }
        } else {
            // Decided next whatever the answer (a decision on a key that is not pending
            // fails: nothing is done).
            let id = format!("k{n}");
            register(h, &rt, &envs[via], via, &id, &pem);
            pending.push(id);
        }
        // Pacing (the machine is shared), not a wait for a signal.
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Every member's key listing, in turn.
pub fn reader(h: &History, at: At, stop: &AtomicBool, process: &str) {
    while !stop.load(SeqCst) {
        for (m, env) in at.now().iter().enumerate() {
            read_keys(h, env, m, process);
        }
        // Pacing, not a wait for a signal.
        std::thread::sleep(Duration::from_millis(500));
    }
}

pub fn read_keys(h: &History, env: &Env, m: usize, process: &str) {
    h.op(process, "keys", json!({ "member": m }), || match tool(env, SALT_KEY, &["-L", "--out", "json"], 30) {
        Ok(o) if o.status.success() => match serde_json::from_slice::<Value>(&o.stdout) {
            Ok(v) => (Outcome::Ok, v, ()),
            Err(_) => (Outcome::Unknown, json!(said(&o)), ()),
        },
        Ok(o) | Err(o) => (Outcome::Unknown, json!(said(&o)), ()),
    });
}

/// Writes `content` as [`ROOTS_FILE`] in member `via`'s `file_roots` (its own disk: the
/// members' filesystems are isolated) and syncs the roots through it with
/// `salt-run cluster.sync_roots roots=file`, recorded as `sync_roots` of `process`.
pub fn sync_roots(h: &History, env: &Env, via: usize, content: &str, process: &str) -> Outcome {
    let path = env.root.join("srv/salt").join(ROOTS_FILE);
    h.op(process, "sync_roots", json!({ "via": via, "content": content }), || {
        if let Err(e) = std::fs::create_dir_all(path.parent().expect("a folder")).and_then(|()| std::fs::write(&path, content)) {
            return (Outcome::Fail, json!(format!("{}: {e}", path.display())), Outcome::Fail);
        }
        let (outcome, r) = match tool(env, SALT_RUN, &["cluster.sync_roots", "roots=file", "--out", "json"], 40) {
            Ok(o) => match serde_json::from_slice::<Value>(&o.stdout) {
                Ok(v) if o.status.success() && v["status"] == "committed" => (Outcome::Ok, v),
                _ => (Outcome::Unknown, json!(said(&o))),
            },
            Err(o) => (Outcome::Unknown, json!(said(&o))),
        };
        (outcome, r, outcome)
    })
}

/// A file of the state tree changed on a member drawn at random and synced through it,
/// every few seconds; returns the member the last change was made on.
pub fn roots(h: &History, at: At, stop: &AtomicBool, seed: u64) -> usize {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5007);
    let mut last = 0;
    for n in 0.. {
        if stop.load(SeqCst) {
            return last;
        }
        last = at.draw(&mut rng);
        sync_roots(h, &at.envs[last], last, &format!("r{n}\n"), "roots");
        // Pacing, not a wait for a signal.
        std::thread::sleep(Duration::from_millis(2000));
    }
    last
}
