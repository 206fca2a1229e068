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
//!   shared by both). Salt runs a runner in the `salt-run` (or salt-api's) process
//!   too; here it means a step's job is an ordinary `publish` (a `job_published`
//!   record, decided at apply like any job, in the job cache of every member), its
//!   returns read back with `job.returns`, and the master
//!   keeps no long-lived per-run state: a run that `salt-run` abandons leaves finished
//!   jobs, nothing half-applied;
//! - the run itself is a job (`crate::admin::runs`): recorded when the master renders
//!   it, its return (the highstate data) recorded when the driver reports the end
//!   (`orchestrate.return`). An abandoned run is a job without a return.
//!
//! The admin verbs (parsing the request, the plan it commits) are `crate::admin`'s
//! (`orchestrate.rs`, `runs.rs`); this module is what they and the tools share: the SLS
//! renderer and the run's driver.

pub mod run;
pub mod sls;

/// The orchestrate runner names `salt-run` accepts.
pub const NAMES: [&str; 3] = ["state.orchestrate", "state.orch", "state.sls"];
