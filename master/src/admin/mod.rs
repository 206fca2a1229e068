//! The admin verbs: what `salt`, `salt-key` and `salt-run` ask a master for.
//!
//! Each request (one JSON object on the admin socket, see [`client`]) is parsed into a
//! [`Command`], which is answered from a read-only [`AdminView`] with a [`Plan`]: the
//! answer, the groups of records to commit (in order) before it is given, a membership
//! change, the events to fire and the [`Effect`]s on the daemon once committed. The
//! daemon (`crate::daemon::admin`) carries a plan out; the offline tools carry out the
//! same plans over a stopped master's log. The unit tests answer commands from an
//! in-memory state machine.
//!
//! | `cmd` | verb | file |
//! |---|---|---|
//! | `key.list`, `key.select`, `key.apply` | `salt-key` | [`keys`] |
//! | `key.finger`, `key.gen_accept` | `salt-api` `/keys` | [`wheel_keys`] |
//! | `hook.fire` | `salt-api` `/hook` | [`hooks`] |
//! | `publish`, `job.returns`, `job.list` | `salt`, `manage.*` | [`jobs`] |
//! | `runner` `jobs.list_jobs` (filters: [`job_search`]), `jobs.list_jobs_filter`, `jobs.last_run`, `jobs.lookup_jid`, `jobs.list_job`, `jobs.print_job`, `jobs.exit_success`, `jobs.active` | `salt-run` | [`jobs`] |
//! | `runner` `manage.present`, `manage.not_present`, `manage.versions` | `salt-run` | [`manage`] |
//! | `runner` `fileserver.file_list`, `fileserver.dir_list`, `fileserver.envs`, `fileserver.update` | `salt-run` | [`fileserver`] |
//! | `runner` `git_pillar.update` | `salt-run` | [`git_pillar`] |
//! | `runner` `pillar.show_pillar`, `pillar.show_top` | `salt-run` | [`pillar`] |
//! | `runner` `cache.grains`, `cache.pillar`, `cache.mine` | `salt-run` | [`cache`] |
//! | `runner` `cluster.members`, `cluster.ring_info`, `cluster.remove_member`, `cluster.sync_roots` | `salt-run` | [`cluster`] |
//! | `runner` `pki.migrate_to_mmap` | `salt-run` | [`pki`] |
//! | `runner` `mine.get` | `salt-run` | [`mine`] |
//! | `runner` `state.orchestrate` (renders, records the run's job; the caller drives the steps with [`crate::orchestrate`]) | `salt-run`, `salt-api` `runner`/`runner_async` (`halite_tools::orchestrate`) | [`orchestrate`] |
//! | `orchestrate.return` (the run's return), `run.start`, `run.return` (a runner's or a wheel's run kept as a job, fired as events) | `salt-run`, `salt-api` `runner_async`, `wheel_async` | [`runs`] |
//! | `events.watch` | `salt-run state.event` | the daemon streams the bus |
//! | `job.follow` | `salt` | [`follow`]; the daemon streams the job's returns |
//! | `token.create`, `token.get`, `token.revoke`, `target.minions` | `salt-api` | [`tokens`] |
//! | `runner` `schedule.list` (the master's `schedule`; `crate::schedule`) | `salt-run` | [`schedule`] |
//! | `batch.start`; `runner` `batch.status`, `batch.list_active`, `batch.stop` | `salt --async --batch`, `salt-run` | [`batch`] |

pub mod batch;
pub mod cache;
pub mod client;
pub mod cluster;
pub mod fileserver;
pub mod git_pillar;
pub mod follow;
pub mod hooks;
pub mod job_search;
pub mod jobs;
pub mod keys;
pub mod manage;
pub mod mine;
pub mod orchestrate;
pub mod pillar;
pub mod pki;
pub mod publish_options;
pub mod returners;
pub mod runner_args;
pub mod runs;
pub mod schedule;
pub mod tokens;
pub mod wheel_keys;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod runners_tests;

use std::collections::BTreeMap;

use serde_json::Value as J;

use halite_storage::format::{Record, RootsTree};
use halite_storage::import::PkiCounts;
use halite_storage::state::StateRead;

use crate::config::MasterConfig;
use crate::error::{Error, Result};
use crate::events::Event;

/// What an admin verb reads.
///
/// Its applied state is [`StateRead`], the state machine's queries: a verb answered
/// from a view can read keys, jobs and the rest, and cannot apply a record or touch the
/// database, which this does not compile:
///
/// ```compile_fail
/// fn sneaks_a_write(view: &dyn halite_master::admin::AdminView) {
///     view.state().apply(&[]).unwrap();
/// }
/// ```
///
/// while a read does:
///
/// ```
/// fn applied(view: &dyn halite_master::admin::AdminView) -> halite_storage::Result<u64> {
///     view.state().applied_index()
/// }
/// ```
pub trait AdminView {
    fn config(&self) -> &MasterConfig;
    /// The applied state, as its queries only: no verb can apply a record through the
    /// view (its changes are the plan's records, committed by the caller).
    fn state(&self) -> &dyn StateRead;
    /// The raft group as this master knows it.
    fn members(&self) -> Result<Members>;
    fn new_jid(&self) -> String;
    fn now_ns(&self) -> u64;
    /// The roots trees the admin verbs read (`fileserver.*`, `state.orchestrate`, the
    /// reactor's `salt://` files, `pillar.*`): the `file_roots`/`pillar_roots` minions are
    /// served from on a lone master and on a shared-filesystem member, the applied
    /// state's roots records on an isolated-filesystem member
    /// (`MasterConfig::roots_from_log`).
    fn roots(&self) -> &dyn crate::view::RootsSource;
    /// The file server in `fileserver_backend` order, the first backend holding a path
    /// serving it, as minions are served: what `state.orchestrate` and the reactor's
    /// `salt://` files read (`file_roots` alone unless gitfs is listed).
    fn file_server(&self) -> crate::view::chained::Chained<'_> {
        crate::view::chained::Chained(vec![self.roots()])
    }
    /// This master's own directory of a saltenv's roots (the first listed, where the
    /// materialiser writes), read as the records it would become.
    fn local_roots(&self, tree: RootsTree, saltenv: &str) -> Result<Vec<Record>>;
    /// The `localfs_key` tree of the keys directory, read as records, with its counts.
    fn localfs_pki(&self) -> Result<(Vec<Record>, PkiCounts)>;
    /// The gitfs options and the applied gitfs tree, when `fileserver_backend` lists
    /// gitfs.
    fn gitfs(&self) -> Option<(&crate::gitfs::GitfsConfig, &dyn crate::view::RootsSource)> {
        None
    }
    /// The gitfs remotes read for an update (I/O, on the daemon's side): those `only`
    /// names (all with `None`).
    fn gitfs_fetch(&self, _only: Option<&[String]>) -> Result<crate::gitfs::fetch::Fetched> {
        Err(Error::refused("gitfs is not configured"))
    }
    /// The applied `git_pillar` tree (`None`: git_pillar is not compiled here).
    fn git_pillar_roots(&self) -> Option<&dyn crate::view::RootsSource> {
        None
    }
    /// Every git_pillar remote read for an update (I/O, on the daemon's side).
    fn git_pillar_fetch(&self, _cfg: &crate::gitfs::GitfsConfig) -> Result<crate::gitfs::fetch::Fetched> {
        Err(Error::refused("git_pillar remotes are not read here"))
    }
    /// Who runs `ext_pillar` commands.
    fn ext_run(&self) -> &dyn crate::pillar::ext::ExtRun {
        &crate::pillar::ext::NoRun
    }
}

/// The raft group as one master knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    pub term: u64,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    pub leader: Option<u64>,
    /// Raft id → member name (its address, Salt's identity).
    pub names: BTreeMap<u64, String>,
    /// What this master knows of each member's progress: its own applied index and
    /// readiness, and, on the leader, how far each peer's log matches.
    pub progress: BTreeMap<u64, MemberProgress>,
    /// What each member recorded of its build (`member_release` records), by raft id.
    pub releases: BTreeMap<u64, halite_storage::state::RecordedRelease>,
}

/// One member's progress as this master sees it (`None`: not known here).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberProgress {
    /// Its last applied index (known for this master only).
    pub applied: Option<u64>,
    /// The highest index the leader knows is in its log (known on the leader).
    pub matched: Option<u64>,
    /// Entries it is behind the commit index this master knows.
    pub lag: Option<u64>,
    /// Caught up with the cluster (known for this master only).
    pub ready: Option<bool>,
}

impl Members {
    pub fn name(&self, id: u64) -> String {
        self.names.get(&id).cloned().unwrap_or_else(|| id.to_string())
    }

    /// Names of `ids`, sorted.
    pub fn sorted_names(&self, ids: &[u64]) -> Vec<String> {
        let mut v: Vec<String> = ids.iter().map(|i| self.name(*i)).collect();
        v.sort();
        v
    }
}

/// A parsed admin request.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Keys(keys::KeyCmd),
    WheelKeys(wheel_keys::WheelKeyCmd),
    Hook(hooks::HookFire),
    Jobs(jobs::JobCmd),
    Cluster(cluster::ClusterCmd),
    MigrateToMmap,
    Mine(mine::MineCmd),
    Manage(manage::ManageCmd),
    Fileserver(fileserver::FileserverCmd),
    GitPillarUpdate(git_pillar::GitPillarUpdate),
    Pillar(pillar::PillarCmd),
    Cache(cache::CacheCmd),
    Orchestrate(orchestrate::OrchCmd),
    OrchReturn(runs::OrchReturn),
    RunStart(runs::RunStart),
    RunReturn(runs::RunReturn),
    Tokens(tokens::TokenCmd),
    Batch(batch::BatchCmd),
    /// `schedule.list`: the master's own schedule.
    ScheduleList,
    /// Turns the connection into an event stream (handled by the daemon).
    EventsWatch,
    /// Streams a job's returns as they are committed (handled by the daemon).
    JobFollow(follow::FollowCmd),
}

/// How to carry out a command.
#[derive(Default)]
pub struct Plan {
    pub answer: Answer,
    /// Groups of records committed in order, each group one proposal.
    pub proposals: Vec<Vec<Record>>,
    /// A membership change committed before the answer.
    pub membership: Option<MemberChange>,
    /// Fired once everything is committed.
    pub events: Vec<Event>,
    /// Carried out once everything is committed.
    pub effects: Vec<Effect>,
    /// A long operation: progress is logged under this label.
    pub progress: Option<&'static str>,
}

/// The answer of a plan.
pub enum Answer {
    /// Known now; given once the plan is committed.
    Now(J),
    /// Computed from the view once the plan is committed: what applied, with the events
    /// and effects that depend on it (a change whose expectation no longer held when it
    /// applied did nothing, and is neither reported nor followed up).
    After(Box<dyn FnOnce(&dyn AdminView) -> Result<Settled> + Send>),
}

/// An answer read after the commit, and what else follows from what applied.
#[derive(Debug, Default)]
pub struct Settled {
    pub value: J,
    pub events: Vec<Event>,
    pub effects: Vec<Effect>,
}

impl From<J> for Settled {
    fn from(value: J) -> Self {
        Settled { value, ..Default::default() }
    }
}

impl Default for Answer {
    fn default() -> Self {
        Answer::Now(J::Null)
    }
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan").field("proposals", &self.proposals.len()).field("membership", &self.membership).field("events", &self.events).field("effects", &self.effects).finish()
    }
}

impl Plan {
    pub fn answer(v: J) -> Self {
        Plan { answer: Answer::Now(v), ..Default::default() }
    }
}

impl Command {
    /// The target a command names (a publish's, `mine.get`'s, `cache.*`'s), so the
    /// daemon can expand range words in it (network I/O) before the command is answered.
    pub fn target_mut(&mut self) -> Option<(&mut J, &mut String)> {
        match self {
            Command::Jobs(jobs::JobCmd::Publish { tgt, tgt_type, .. }) => Some((tgt, tgt_type)),
            Command::Mine(m) => Some((&mut m.tgt, &mut m.tgt_type)),
            Command::Cache(c) => Some((&mut c.tgt, &mut c.tgt_type)),
            Command::Tokens(tokens::TokenCmd::Minions { tgt, tgt_type }) => Some((tgt, tgt_type)),
            _ => None,
        }
    }
}

/// A membership change an admin verb asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange {
    Remove(u64),
}

/// What the daemon does once a plan is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Replace the publish AES key (Salt's `rotate_aes_key` on reject and delete).
    RotateAes,
    /// These minions no longer count against `max_minions`.
    Uncount(Vec<String>),
    /// Finish `pki.migrate_to_mmap`: copy the master key files into the `mmap_key`
    /// master bank and, when this master's own view is `localfs_key`, first build the
    /// `mmap_key` view beside it from the state machine.
    FinishMmapMigration { build_view: bool },
}

impl Command {
    /// Parses a request object.
    pub fn parse(req: &J) -> Result<Command> {
        let s = |k: &str| req.get(k).and_then(J::as_str);
        Ok(match s("cmd").unwrap_or("") {
            "key.list" | "key.select" | "key.apply" => Command::Keys(keys::KeyCmd::parse(req)?),
            "key.finger" | "key.gen_accept" => Command::WheelKeys(wheel_keys::WheelKeyCmd::parse(req)?),
            "hook.fire" => Command::Hook(hooks::HookFire::parse(req)?),
            "publish" | "job.returns" | "job.list" => Command::Jobs(jobs::JobCmd::parse(req)?),
            "orchestrate.return" => Command::OrchReturn(runs::OrchReturn::parse(req)?),
            "run.start" => Command::RunStart(runs::RunStart::parse(req)?),
            "run.return" => Command::RunReturn(runs::RunReturn::parse(req)?),
            "events.watch" => Command::EventsWatch,
            "token.create" | "token.get" | "token.revoke" | "target.minions" => Command::Tokens(tokens::TokenCmd::parse(req)?),
            "job.follow" => Command::JobFollow(follow::FollowCmd::parse(req)?),
            "batch.start" => Command::Batch(batch::BatchCmd::parse(req)?),
            "runner" => match s("fun").unwrap_or("") {
                "jobs.list_jobs" | "jobs.list_jobs_filter" | "jobs.last_run" | "jobs.lookup_jid" | "jobs.list_job" | "jobs.print_job" | "jobs.exit_success" | "jobs.active" => Command::Jobs(jobs::JobCmd::parse(req)?),
                f @ ("manage.present" | "manage.not_present" | "manage.versions") => Command::Manage(manage::ManageCmd::parse(f, req)?),
                f @ ("fileserver.file_list" | "fileserver.dir_list" | "fileserver.envs" | "fileserver.update") => Command::Fileserver(fileserver::FileserverCmd::parse(f, req)?),
                f @ "git_pillar.update" => Command::GitPillarUpdate(git_pillar::GitPillarUpdate::parse(f, req)?),
                f @ ("pillar.show_pillar" | "pillar.show_top") => Command::Pillar(pillar::PillarCmd::parse(f, req)?),
                f @ ("cache.grains" | "cache.pillar" | "cache.mine") => Command::Cache(cache::CacheCmd::parse(f, req)?),
                "pki.migrate_to_mmap" => Command::MigrateToMmap,
                "batch.status" | "batch.list_active" | "batch.stop" => Command::Batch(batch::BatchCmd::parse(req)?),
                "mine.get" => Command::Mine(mine::MineCmd::parse(req)?),
                "schedule.list" => Command::ScheduleList,
                f if crate::orchestrate::NAMES.contains(&f) => Command::Orchestrate(orchestrate::OrchCmd::parse(f, req)?),
                f if f.starts_with("cluster.") => Command::Cluster(cluster::ClusterCmd::parse(f, req)?),
                other => return Err(Error::refused(format!("'{other}' is not available."))),
            },
            other => return Err(Error::refused(format!("unknown admin command {other:?}"))),
        })
    }

    /// The plan that carries the command out.
    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        match self {
            Command::Keys(c) => c.answer(view),
            Command::WheelKeys(c) => c.answer(view),
            Command::Hook(c) => c.answer(),
            Command::Jobs(c) => c.answer(view),
            Command::Cluster(c) => c.answer(view),
            Command::MigrateToMmap => pki::migrate_plan(view),
            Command::Mine(c) => c.answer(view),
            Command::Manage(c) => c.answer(view),
            Command::Fileserver(c) => c.answer(view),
            Command::GitPillarUpdate(c) => c.answer(view),
            Command::Pillar(c) => c.answer(view),
            Command::Cache(c) => c.answer(view),
            Command::Orchestrate(c) => c.answer(view),
            Command::OrchReturn(c) => c.answer(view),
            Command::RunStart(c) => c.answer(view),
            Command::RunReturn(c) => c.answer(view),
            Command::Tokens(c) => c.answer(view),
            Command::Batch(c) => c.answer(view),
            Command::ScheduleList => schedule::list(view),
            Command::EventsWatch => Err(Error::refused("events.watch streams; it has no single answer")),
            Command::JobFollow(_) => Err(Error::refused("job.follow streams; it has no single answer")),
        }
    }
}

/// An error answer.
pub fn error(msg: impl std::fmt::Display) -> J {
    serde_json::json!({ "error": msg.to_string() })
}

/// The answer that refuses a request with `e`: its message, and its kind when a caller
/// acts on it ([`Error::kind`]).
pub fn refusal(e: &Error) -> J {
    match e.kind() {
        Some(kind) => serde_json::json!({ "error": e.to_string(), "kind": kind }),
        None => error(e),
    }
}
