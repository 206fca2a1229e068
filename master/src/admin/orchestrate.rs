//! `salt-run state.orchestrate SLS [saltenv=base] [pillar={...}]` (aliases `state.orch`,
//! `state.sls`), the master's half: the request parsed, the run's job recorded
//! ([`super::runs`]) and the SLS rendered into its steps from the `file_roots` the admin
//! verbs read ([`AdminView::roots`], [`crate::orchestrate::sls`]). The caller drives the steps (`crate::orchestrate`).

use serde_json::{json, Value as J};

use super::runner_args::RunnerArgs;
use super::runs;
use super::{AdminView, Plan};
use crate::error::{Error, Result};
use crate::orchestrate::sls;

/// `state.orchestrate`, as the master sees it: which SLS, in which saltenv, with which
/// pillar, and who runs it (the request's `user`, beside `arg` and `kwarg`: salt-api
/// names its eauth user; `root` unset), recorded as the run job's `user`.
#[derive(Debug, Clone, PartialEq)]
pub struct OrchCmd {
    pub mods: String,
    pub saltenv: String,
    pub pillar: J,
    pub user: String,
}

impl OrchCmd {
    pub fn parse(fun: &str, req: &J) -> Result<OrchCmd> {
        let b = RunnerArgs::from_req(req).bind(
            fun,
            &[
                ("mods", None),
                ("saltenv", Some(json!("base"))),
                ("test", Some(J::Null)),
                ("exclude", Some(J::Null)),
                ("pillar", Some(J::Null)),
                ("pillarenv", Some(J::Null)),
                ("pillar_enc", Some(J::Null)),
                ("orchestration_jid", Some(J::Null)),
            ],
            true,
        )?;
        let mods = match b.get("mods") {
            J::String(s) => s.clone(),
            J::Array(a) if a.len() == 1 => a[0].as_str().unwrap_or_default().to_string(),
            J::Array(_) => return Err(Error::refused("state.orchestrate: one SLS at a time")),
            _ => return Err(Error::refused("state.orchestrate needs an SLS name")),
        };
        let pillar = match b.get("pillar") {
            J::Null => json!({}),
            p @ J::Object(_) => p.clone(),
            _ => {
                return Err(Error::refused(
                    "Pillar data must be formatted as a dictionary",
                ))
            }
        };
        let user = runs::user_of(req, "state.orchestrate")?;
        Ok(OrchCmd {
            mods,
            saltenv: b.text("saltenv").unwrap_or_else(|| "base".into()),
            pillar,
            user,
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let master_id = runs::master_id(view);
        let mut fun_args = vec![J::String(self.mods.clone())];
        if self.saltenv != "base" {
            fun_args.push(json!({ "saltenv": self.saltenv }));
        }
        if self.pillar.as_object().is_some_and(|p| !p.is_empty()) {
            fun_args.push(json!({ "pillar": self.pillar }));
        }
        let (jid, rec, ev) = runs::start(view, &master_id, J::Array(fun_args), &self.user);
        let v = match sls::load(&view.file_server(), &self.saltenv, &self.mods, &self.pillar) {
            Ok(steps) => {
                json!({ "master_id": master_id, "jid": jid, "sls": self.mods, "steps": steps.iter().map(sls::Step::to_json).collect::<Vec<_>>() })
            }
            Err(e) => json!({ "master_id": master_id, "jid": jid, "sls": self.mods, "errors": [e.to_string()] }),
        };
        let mut plan = Plan::answer(json!({ "return": v }));
        plan.proposals = vec![vec![rec]];
        plan.events = vec![ev];
        Ok(plan)
    }
}
