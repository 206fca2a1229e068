//! `salt-run pillar.show_pillar [MINION] [key=value...]` and `pillar.show_top [MINION]`:
//! the pillar compiled on the master, as Salt's runner does it, from the `pillar_roots`
//! tree the admin verbs read ([`AdminView::roots`]: the directories minions' pillar is
//! compiled from, or the log's roots records on an isolated-filesystem member) and the
//! grains the minion last reported (the minion data cache).
//!
//! - `show_pillar`: the minion's pillar (`minion` defaults to `*`, which no minion is
//!   called: the pillar every target matching `*` gets). A minion without cached grains
//!   is compiled with `{"fqdn": minion}`; keywords other than `saltenv` and `pillarenv`
//!   are set as grains first; `pillarenv` limits the top files read to that env. The
//!   external pillars are compiled too (git_pillar from the applied tree, commands run
//!   by the daemon), as Salt's runner does.
//! - `show_top`: the merged pillar top data (`crate::pillar::top`); with no minion, the
//!   first accepted minion (in id order) that has cached grains is used, as Salt uses the
//!   first one its cache lists. Rendering errors are the answer when there are any.

use serde_json::{json, Map, Value as J};

use halite_storage::keys::BankState;
use halite_storage::state::StateRead;

use super::runner_args::RunnerArgs;
use super::{AdminView, Plan};
use crate::error::{Error, Result};
use crate::wire::payload;

/// A `pillar.*` request.
#[derive(Debug, Clone, PartialEq)]
pub enum PillarCmd {
    ShowPillar { minion: String, saltenv: Option<String>, pillarenv: Option<String>, grains: Map<String, J> },
    ShowTop { minion: Option<String>, saltenv: String },
}

impl PillarCmd {
    pub fn parse(fun: &str, req: &J) -> Result<PillarCmd> {
        let args = RunnerArgs::from_req(req);
        Ok(match fun {
            "pillar.show_pillar" => {
                let b = args.bind(fun, &[("minion", Some(json!("*")))], true)?;
                let mut grains = b.extra.clone();
                let text = |v: Option<J>| v.map(|v| v.as_str().map(String::from).unwrap_or_else(|| v.to_string()));
                let saltenv = text(grains.remove("saltenv"));
                let pillarenv = text(grains.remove("pillarenv"));
                PillarCmd::ShowPillar { minion: b.text("minion").unwrap_or_else(|| "*".into()), saltenv, pillarenv, grains }
            }
            "pillar.show_top" => {
                let b = args.bind(fun, &[("minion", Some(J::Null)), ("saltenv", Some(json!("base")))], false)?;
                PillarCmd::ShowTop { minion: b.text("minion"), saltenv: b.text("saltenv").unwrap_or_else(|| "base".into()) }
            }
            other => return Err(Error::refused(format!("'{other}' is not available."))),
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let sm = view.state();
        let roots = view.roots();
        let v = match self {
            PillarCmd::ShowPillar { minion, saltenv, pillarenv, grains: extra } => {
                let mut grains = cached_grains(sm, &minion)?.unwrap_or_else(|| json!({ "fqdn": minion }));
                if let J::Object(g) = &mut grains {
                    g.extend(extra);
                }
                let src = crate::pillar::Sources { roots, git: view.git_pillar_roots(), run: view.ext_run() };
                let m = crate::pillar::Minion { id: &minion, grains: &grains, saltenv: saltenv.as_deref(), pillarenv: pillarenv.as_deref() };
                crate::pillar::compile(view.config(), &src, &m)
            }
            PillarCmd::ShowTop { minion, saltenv: _ } => {
                let (id, grains) = match minion {
                    Some(m) => {
                        let g = cached_grains(sm, &m)?.unwrap_or_else(|| json!({}));
                        (m, g)
                    }
                    None => first_with_grains(sm)?.unwrap_or_else(|| (String::new(), json!({}))),
                };
                let (top, errors) = crate::pillar::top(view.config(), roots, &id, &grains);
                if errors.is_empty() {
                    top
                } else {
                    json!(errors)
                }
            }
        };
        Ok(Plan::answer(json!({ "return": v })))
    }
}

fn decode(b: &[u8]) -> J {
    payload::decode(b).map(|v| payload::to_json(&v)).unwrap_or(J::Null)
}

/// The grains a minion last reported, if any.
pub fn cached_grains(sm: &dyn StateRead, id: &str) -> Result<Option<J>> {
    Ok(sm.grains(id)?.map(|g| decode(&g)).filter(J::is_object))
}

fn first_with_grains(sm: &dyn StateRead) -> Result<Option<(String, J)>> {
    let mut ids: Vec<String> = sm.ids_in(BankState::Accepted)?;
    ids.sort();
    for id in ids {
        if let Some(g) = cached_grains(sm, &id)? {
            return Ok(Some((id, g)));
        }
    }
    Ok(None)
}
