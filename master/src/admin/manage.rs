//! `salt-run manage.present`, `manage.not_present` and the shaping of `manage.versions`.
//!
//! **Presence.** Salt calls a minion present when the master sees a TCP connection from
//! one of its addresses on the publish port: a fact about one master's sockets, which
//! two members of a cluster see differently. Halite decides presence from the applied
//! state instead, so every member answers the same: an accepted minion is present when
//! the cluster heard from it within [`PRESENCE_WINDOW`] of the question: its last grains
//! report (every minion sends its grains when it starts and whenever it refreshes its
//! pillar) or its last job return. A minion that started and stayed idle longer than
//! the window, or one that went away less than the window ago, is therefore judged
//! by that last contact; `manage.up` (which pings, and so refreshes presence) asks the
//! minions themselves.
//!
//! **Versions.** As Salt does, `salt-run` publishes `test.version` to every minion and
//! gathers the returns for the timeout; [`versions`] shapes them: `{label: {minion:
//! version}}` with the labels `Minion offline` (no answer, or a failed one), `Minion
//! requires update`, `Up to date`, `Minion newer than master`, and `Master` (the Salt
//! release Halite answers as, [`SALT_VERSION`]).

use serde_json::{json, Map, Value as J};

use halite_storage::keys::BankState;
use halite_storage::state::StateRead;

use super::runner_args::{id_list, RunnerArgs};
use super::{AdminView, Plan};
use crate::error::{Error, Result};
use crate::wire::payload;

/// The Salt release Halite's master speaks as (`manage.versions` compares with it).
pub const SALT_VERSION: &str = "3008.5";

/// How recent a minion's last contact must be for it to count as present.
pub const PRESENCE_WINDOW: std::time::Duration = std::time::Duration::from_secs(3600);

/// A `manage.*` runner answered by the master.
#[derive(Debug, Clone, PartialEq)]
pub enum ManageCmd {
    /// `manage.present` (`present`) or `manage.not_present`.
    Present { present: bool, subset: Option<Vec<String>>, show_ip: bool },
    /// `manage.versions`, with each targeted minion's `test.version` return load
    /// (`null`: it did not answer).
    Versions { returns: Map<String, J> },
}

impl ManageCmd {
    pub fn parse(fun: &str, req: &J) -> Result<ManageCmd> {
        let params = || -> [super::runner_args::Param; 2] { [("subset", Some(J::Null)), ("show_ip", Some(J::Bool(false)))] };
        Ok(match fun {
            "manage.present" | "manage.not_present" => {
                let b = RunnerArgs::from_req(req).bind(fun, &params(), false)?;
                ManageCmd::Present { present: fun == "manage.present", subset: id_list(b.get("subset")), show_ip: b.truthy("show_ip") }
            }
            "manage.versions" => ManageCmd::Versions { returns: req.get("returns").and_then(J::as_object).cloned().unwrap_or_default() },
            other => return Err(Error::refused(format!("'{other}' is not available."))),
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let v = match self {
            ManageCmd::Present { present: true, subset, show_ip } => {
                let ids = present(view.state(), view.now_ns(), subset.as_deref())?;
                if show_ip {
                    let mut m = Map::new();
                    for id in ids {
                        let ip = first_ipv4(view.state(), &id)?;
                        m.insert(id, ip.map(J::String).unwrap_or(J::Null));
                    }
                    J::Object(m)
                } else {
                    json!(ids)
                }
            }
            ManageCmd::Present { present: false, subset, .. } => {
                let here = present(view.state(), view.now_ns(), None)?;
                let absent: Vec<String> = accepted(view.state())?.into_iter().filter(|m| !here.contains(m) && subset.as_ref().is_none_or(|s| s.contains(m))).collect();
                json!(absent)
            }
            ManageCmd::Versions { returns } => versions(&returns),
        };
        Ok(Plan::answer(json!({ "return": v })))
    }
}

fn accepted(sm: &dyn StateRead) -> Result<Vec<String>> {
    let mut ids: Vec<String> = sm.ids_in(BankState::Accepted)?;
    ids.sort();
    Ok(ids)
}

/// The last time the cluster heard from each minion: its grains report or a job return.
pub fn last_contact(sm: &dyn StateRead) -> Result<std::collections::BTreeMap<String, u64>> {
    let mut last = std::collections::BTreeMap::new();
    for id in accepted(sm)? {
        if let Some(t) = sm.grains_time_ns(&id)? {
            last.insert(id, t);
        }
    }
    for j in sm.jobs()? {
        for r in sm.job_returns(&j.jid)? {
            let t = last.entry(r.id).or_insert(0);
            *t = (*t).max(r.time_ns);
        }
    }
    Ok(last)
}

/// The accepted minions (sorted) heard from within [`PRESENCE_WINDOW`] before `now_ns`,
/// limited to `subset` when given.
pub fn present(sm: &dyn StateRead, now_ns: u64, subset: Option<&[String]>) -> Result<Vec<String>> {
    let last = last_contact(sm)?;
    let window = PRESENCE_WINDOW.as_nanos() as u64;
    Ok(accepted(sm)?
        .into_iter()
        .filter(|id| last.get(id).is_some_and(|t| now_ns.saturating_sub(*t) <= window))
        .filter(|id| subset.is_none_or(|s| s.iter().any(|x| x == id)))
        .collect())
}

/// A minion's first non-loopback `ipv4` grain (what `show_ip` shows; Salt shows the
/// address its connection comes from).
fn first_ipv4(sm: &dyn StateRead, id: &str) -> Result<Option<String>> {
    let Some(g) = sm.grains(id)? else { return Ok(None) };
    let g = payload::decode(&g).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
    let ips: Vec<&str> = g.get("ipv4").and_then(J::as_array).map(|a| a.iter().filter_map(J::as_str).collect()).unwrap_or_default();
    Ok(ips.iter().find(|ip| !ip.starts_with("127.")).or(ips.first()).map(|s| s.to_string()))
}

/// Numeric release parts of a version string (`3008.5` → `[3008, 5]`); `None` when it
/// is not a release number.
fn release(v: &str) -> Option<Vec<u64>> {
    let head = v.split(|c: char| !(c.is_ascii_digit() || c == '.')).next()?;
    let parts: Option<Vec<u64>> = head.split('.').filter(|p| !p.is_empty()).map(|p| p.parse().ok()).collect();
    parts.filter(|p| !p.is_empty())
}

/// `manage.versions` from the `test.version` returns.
pub fn versions(returns: &Map<String, J>) -> J {
    const LABELS: [(i32, &str); 4] = [(-2, "Minion offline"), (-1, "Minion requires update"), (0, "Up to date"), (1, "Minion newer than master")];
    let master = release(SALT_VERSION).unwrap_or_default();
    // Groups in the order they first appear, as Salt's dict keeps them; minions sorted.
    let mut groups: Vec<(i32, Map<String, J>)> = Vec::new();
    let mut ids: Vec<&String> = returns.keys().collect();
    ids.sort();
    for id in ids {
        let r = &returns[id];
        let ok = r.is_object() && r.get("retcode").and_then(J::as_i64).unwrap_or(0) == 0;
        let version = r.get("return").and_then(J::as_str).filter(|_| ok);
        let (diff, shown) = match version.and_then(|v| release(v).map(|p| (v, p))) {
            Some((v, p)) => (p.cmp(&master) as i32, J::String(v.to_string())),
            None => (-2, J::Bool(false)),
        };
        match groups.iter_mut().find(|g| g.0 == diff) {
            Some(g) => {
                g.1.insert(id.clone(), shown);
            }
            None => groups.push((diff, [(id.clone(), shown)].into_iter().collect())),
        }
    }
    let mut out = Map::new();
    for (diff, minions) in groups {
        let label = LABELS.iter().find(|l| l.0 == diff).map(|l| l.1).unwrap_or("Minion offline");
        out.insert(label.to_string(), J::Object(minions));
    }
    out.insert("Master".into(), J::String(SALT_VERSION.into()));
    J::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_grouped_as_salt_labels_them() {
        let r: Map<String, J> = serde_json::from_value(json!({
            "web2": {"return": "3008.5", "retcode": 0},
            "old": {"return": "3006.9", "retcode": 0},
            "web1": {"return": "3008.5", "retcode": 0},
            "gone": null,
            "broken": {"return": "'test.version' is not available.", "retcode": 254},
            "new": {"return": "3009.0rc1", "retcode": 0},
        }))
        .unwrap();
        let v = versions(&r);
        assert_eq!(
            v,
            json!({
                "Minion offline": {"broken": false, "gone": false},
                "Minion newer than master": {"new": "3009.0rc1"},
                "Minion requires update": {"old": "3006.9"},
                "Up to date": {"web1": "3008.5", "web2": "3008.5"},
                "Master": "3008.5",
            })
        );
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["Minion offline", "Minion newer than master", "Minion requires update", "Up to date", "Master"], "groups in the order minions first fall in them, Master last");
    }

    #[test]
    fn release_numbers() {
        assert_eq!(release("3008.5"), Some(vec![3008, 5]));
        assert_eq!(release("3009.0rc1"), Some(vec![3009, 0]));
        assert_eq!(release("not a version"), None);
    }
}
