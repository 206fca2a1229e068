//! `salt-run state.orchestrate SLS [saltenv=base] [pillar={...}]` (aliases `state.orch`,
//! `state.sls`): Salt's orchestrate runner for the steps Salt's orchestration docs use
//! (`salt.function`, `salt.state`, `salt.runner`, `salt.wheel`).
//!
//! Split in two, like every admin verb:
//!
//! - the master renders the SLS from the `file_roots` its applied state holds (every
//!   member holds the same roots, so any member renders the same steps): the `runner`
//!   verb `state.orchestrate` answers `{"return": {"master_id", "sls", "steps"}}` or
//!   `{"return": {"master_id", "sls", "errors"}}` ([`sls`]);
//! - `salt-run`, or salt-api's `runner`/`runner_async` clients, drive the steps through
//!   the admin socket ([`run`]; the tools' `halite_tools::orchestrate` is that driver,
//!   shared by both). Salt runs a runner in the `salt-run` (or salt-api's) process too; here it means a step's job is an ordinary
//!   `publish` (a `job_published` record, decided at apply like any job, in the job
//!   cache of every member), its returns read back with `job.returns`, and the master
//!   keeps no long-lived per-run state: a run that `salt-run` abandons leaves finished
//!   jobs, nothing half-applied;
//! - the run itself is a job ([`job`]): recorded when the master renders it, its
//!   return (the highstate data) recorded when the driver reports the end
//!   (`orchestrate.return`). An abandoned run is a job without a return.

pub mod job;
pub mod run;
pub mod sls;

use serde_json::{json, Value as J};

use crate::admin::runner_args::RunnerArgs;
use crate::admin::{AdminView, Plan};
use crate::error::{Error, Result};

/// The orchestrate runner names `salt-run` accepts.
pub const NAMES: [&str; 3] = ["state.orchestrate", "state.orch", "state.sls"];

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
        let user = job::user_of(req, "state.orchestrate")?;
        Ok(OrchCmd {
            mods,
            saltenv: b.text("saltenv").unwrap_or_else(|| "base".into()),
            pillar,
            user,
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let master_id = job::master_id(view);
        let mut fun_args = vec![J::String(self.mods.clone())];
        if self.saltenv != "base" {
            fun_args.push(json!({ "saltenv": self.saltenv }));
        }
        if self.pillar.as_object().is_some_and(|p| !p.is_empty()) {
            fun_args.push(json!({ "pillar": self.pillar }));
        }
        let (jid, rec, ev) = job::start(view, &master_id, J::Array(fun_args), &self.user);
        let v = match sls::load(view.state(), &self.saltenv, &self.mods, &self.pillar) {
            Ok(steps) => {
                json!({ "master_id": master_id, "jid": jid, "sls": self.mods, "steps": steps.iter().map(sls::Step::to_json).collect::<Vec<_>>() })
            }
            Err(e) => json!({ "master_id": master_id, "jid": jid, "sls": self.mods, "errors": [e] }),
        };
        let mut plan = Plan::answer(json!({ "return": v }));
        plan.proposals = vec![vec![rec]];
        plan.events = vec![ev];
        Ok(plan)
    }
}
