//! Runner results computed from the state machine and the log, in Salt's output shapes:
//! `jobs.list_jobs`, `jobs.lookup_jid`, `cluster.members`. (`manage.*` publish a ping and
//! are run by `salt-run` through the admin socket.)

use serde_json::{json, Map, Value as J};

use halite_storage::state::StateMachine;

use crate::payload;

/// Salt's `jid_to_time`: `2026, Nov 22 03:51:19.123456`.
pub fn jid_to_time(jid: &str) -> String {
    const MONTHS: [&str; 13] = ["", "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    if jid.len() < 20 || !jid[..20].bytes().all(|b| b.is_ascii_digit()) {
        return String::new();
    }
    let month: usize = jid[4..6].parse().unwrap_or(0);
    format!("{}, {} {} {}:{}:{}.{}", &jid[..4], MONTHS.get(month).copied().unwrap_or(""), &jid[6..8], &jid[8..10], &jid[10..12], &jid[12..14], &jid[14..20])
}

/// Salt's `format_jid_instance` of a publish load.
fn job_instance(jid: &str, load: &J) -> J {
    let mut m = Map::new();
    m.insert("Function".into(), load.get("fun").cloned().unwrap_or(J::String("unknown-function".into())));
    m.insert("Arguments".into(), load.get("arg").cloned().unwrap_or(J::Array(vec![])));
    m.insert("Target".into(), load.get("tgt").cloned().unwrap_or(J::String("unknown-target".into())));
    m.insert("Target-type".into(), load.get("tgt_type").cloned().unwrap_or(J::String("list".into())));
    m.insert("User".into(), load.get("user").cloned().unwrap_or(J::String("root".into())));
    m.insert("StartTime".into(), J::String(jid_to_time(jid)));
    J::Object(m)
}

/// `jobs.list_jobs`: `{jid: {Function, Arguments, Target, Target-type, User, StartTime}}`.
pub fn list_jobs(sm: &StateMachine) -> halite_storage::Result<J> {
    let mut out = Map::new();
    for j in sm.jobs()? {
        let load = payload::decode(&j.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
        out.insert(j.jid.clone(), job_instance(&j.jid, &load));
    }
    Ok(J::Object(out))
}

/// `jobs.lookup_jid JID`: `{minion: return}`.
pub fn lookup_jid(sm: &StateMachine, jid: &str) -> halite_storage::Result<J> {
    let mut out = Map::new();
    for r in sm.job_returns(jid)? {
        let load = payload::decode(&r.load).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
        out.insert(r.id, load.get("return").cloned().unwrap_or(J::Null));
    }
    Ok(J::Object(out))
}

/// `cluster.members` in Salt 3008's shape. `voters`/`learners` are raft ids; a single
/// node (raft id 1) reports itself by its node id (`id`, falling back to `interface`).
pub fn cluster_members(node_id: &str, term: u64, voters: &[u64], learners: &[u64], leader: Option<u64>, names: &std::collections::BTreeMap<u64, String>) -> J {
    let name = |id: &u64| J::String(names.get(id).cloned().unwrap_or_else(|| id.to_string()));
    let sorted = |ids: &[u64]| {
        let mut v: Vec<J> = ids.iter().map(name).collect();
        v.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        v
    };
    let (v, l) = (sorted(voters), sorted(learners));
    json!({
        "node_id": node_id,
        "voters": v,
        "learners": l,
        "membership_version": -1,
        "voter_count": voters.len(),
        "learner_count": learners.len(),
        "leader_id": leader.map(|id| name(&id)).unwrap_or(J::Null),
        "term": term,
        "unhealthy_voters": [],
        "recently_demoted": [],
    })
}

/// `cluster.ring_info`: the HashRing over the committed voters, by name, in Salt's shape
/// (`vnodes` is tokens per member). A lone master is not clustered and has an empty ring.
pub fn ring_info(clustered: bool, voters: &[u64], names: &std::collections::BTreeMap<u64, String>) -> J {
    if !clustered {
        return json!({"is_clustered": false, "node_count": 0, "nodes": [], "vnodes": 0});
    }
    let members: Vec<String> = voters.iter().map(|id| names.get(id).cloned().unwrap_or_else(|| id.to_string())).collect();
    let ring = halite_replication::HashRing::new(&members);
    json!({
        "is_clustered": true,
        "node_count": ring.nodes().len(),
        "nodes": ring.nodes(),
        "vnodes": ring.token_count() / ring.nodes().len().max(1),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn jid_time() {
        assert_eq!(super::jid_to_time("20261122035119123456"), "2026, Nov 22 03:51:19.123456");
        assert_eq!(super::jid_to_time("req"), "");
    }
}
