//! After the faults: what every member holds, read once the links are healed and every
//! member runs again (process `final` of the history).

use serde_json::{json, Value};

use super::{clients, ready, runner, said, tool, ROOTS_FILE};
use crate::support::history::{History, Outcome, FINAL};
use crate::support::*;

/// Every `[minion, value, jid]` of the `test.echo` jobs in a member's job cache.
fn returns_of(env: &Env) -> Option<Vec<(String, String, String)>> {
    let jobs = runner(env, &["jobs.list_jobs"])?;
    let mut out = Vec::new();
    for (jid, job) in jobs.as_object()? {
        if job["Function"] != "test.echo" {
            continue;
        }
        for (minion, ret) in runner(env, &["jobs.lookup_jid", jid])?.as_object()? {
            out.push((minion.clone(), ret.as_str().unwrap_or_default().to_string(), jid.clone()));
        }
    }
    Some(out)
}

/// How often the minion's log says it was handed each `test.echo` job.
fn handed(log: &str) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    for l in log.lines().filter(|l| l.contains("Executing command test.echo with jid ")) {
        if let Some(jid) = l.rsplit(' ').next() {
            let n = m.get(jid).and_then(Value::as_u64).unwrap_or(0);
            m.insert(jid.to_string(), json!(n + 1));
        }
    }
    m
}

/// The members read at the end: each env with its health port.
pub struct Members<'a> {
    pub envs: Vec<&'a Env>,
    pub health: Vec<u16>,
}

/// Readiness, digests, keys and job caches of every member, how often each real minion
/// was handed each job, what the fleet says was acknowledged, and the synced file.
pub fn reads(h: &History, ms: &Members, minions: &[(&str, usize)], fleet: Option<&mut Lines>, roots_via: usize) {
    let envs = &ms.envs;
    for (m, env) in envs.iter().enumerate() {
        let mut last = None;
        let ok = within(120, || {
            last = ready(&env.ip, ms.health[m]);
            last.as_ref().is_some_and(|(s, _)| *s == 200)
        });
        h.op(FINAL, "ready", json!({ "member": m }), || (if ok { Outcome::Ok } else { Outcome::Fail }, json!(format!("{last:?}")), ()));
    }
    // The file synced last is synced once more through the member it was changed on
    // (an earlier sync's outcome may be unknown), then read from every member.
    let content = format!("final {}\n", h.now());
    within(60, || clients::sync_roots(h, envs[roots_via], roots_via, &content, FINAL) == Outcome::Ok);
    // The members settle (the same applied index everywhere), then their digests.
    let mut digests = Vec::new();
    within(120, || {
        digests = envs.iter().map(|e| runner(e, &["cluster.digest"])).collect();
        let idx: Vec<Option<u64>> = digests.iter().map(|d| d.as_ref().and_then(|d| d["applied_index"].as_u64())).collect();
        idx[0].is_some() && idx.iter().all(|x| *x == idx[0])
    });
    for (m, d) in digests.into_iter().enumerate() {
        h.op(FINAL, "digest", json!({ "member": m }), || match d {
            Some(d) => (Outcome::Ok, d, ()),
            None => (Outcome::Unknown, Value::Null, ()),
        });
    }
    for (m, env) in envs.iter().enumerate() {
        clients::read_keys(h, env, m, FINAL);
        h.op(FINAL, "returns", json!({ "member": m }), || match returns_of(env) {
            Some(r) => (Outcome::Ok, json!({ "returns": r }), ()),
            None => (Outcome::Unknown, Value::Null, ()),
        });
        // The file as the member serves it (its own `file_roots`, written from the log).
        let path = env.root.join("srv/salt").join(ROOTS_FILE);
        let mut got = None;
        within(60, || {
            got = std::fs::read_to_string(&path).ok();
            got.as_deref() == Some(content.as_str())
        });
        h.op(FINAL, "roots", json!({ "member": m }), || (Outcome::Ok, json!({ "content": got }), ()));
    }
    // The file as each real minion is served it by its member.
    let ids: Vec<&str> = minions.iter().map(|(id, _)| *id).collect();
    let url = format!("salt://{ROOTS_FILE}");
    // Only the minions that answered are in the result (one that did not is no
    // violation: an answer within the timeout is not promised).
    h.op(FINAL, "served", json!({ "minions": ids }), || match tool(envs[0], SALT, &["-L", &ids.join(","), "cp.get_file_str", &url, "-t", "30", "--static", "--out", "json"], 60) {
        Ok(o) => match serde_json::from_slice::<Value>(&o.stdout) {
            Ok(Value::Object(m)) => {
                let answered: serde_json::Map<String, Value> = m.into_iter().filter(|(_, v)| !v.as_str().is_some_and(|t| t.starts_with("Minion did not return"))).collect();
                let outcome = if answered.len() == ids.len() { Outcome::Ok } else { Outcome::Unknown };
                (outcome, Value::Object(answered), ())
            }
            _ => (Outcome::Unknown, json!({ "said": said(&o) }), ()),
        },
        Err(o) => (Outcome::Unknown, json!({ "said": said(&o) }), ()),
    });
    for (id, home) in minions {
        let log = minion_log(&envs[*home].root, id);
        h.op(FINAL, "minion_jobs", json!({ "minion": id }), || (Outcome::Ok, json!({ "jids": handed(&log) }), ()));
    }
    if let Some(lines) = fleet {
        // Every `job` line the fleet printed: how many of its minions' returns of that
        // job a member acknowledged.
        lines.poll(std::time::Duration::from_secs(2), |_| false);
        let acked: serde_json::Map<String, Value> = lines
            .seen()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["event"] == "job")
            .filter_map(|v| Some((v["jid"].as_str()?.to_string(), v["returned"].clone())))
            .collect();
        h.op(FINAL, "fleet_acks", json!({}), || (Outcome::Ok, json!({ "jids": acked }), ()));
    }
}
