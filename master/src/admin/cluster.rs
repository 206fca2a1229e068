//! The cluster runners: `cluster.members` and `cluster.ring_info` (Salt 3008's shapes),
//! `cluster.remove_member` (Halite's explicit removal: the reference has none, and a
//! removed master keeps counting toward its quorum) and `cluster.sync_roots`.
//!
//! `cluster.sync_roots [roots=file|pillar|both]` makes every member's `file_roots` /
//! `pillar_roots` equal this master's: its roots directories (the first directory of
//! each saltenv, where the materialiser writes) are read, and the sync is proposed as one
//! unit: `roots_stage` records (1 MiB chunks with the file's sha256, staged apart from
//! the live roots) for the files whose content or mode differs from what this member has
//! applied, then one `roots_sync` naming every file the trees must hold and the applied
//! files it expects to remove. The state machine decides at apply, the same way on every
//! member (`halite_storage::state::roots`): all of it becomes live at once, or, if this
//! member read an older state than the log holds (another sync came first), nothing
//! does. The answer is read from the applied state once the commit has applied: a sync
//! that did not apply is an error that says to run it again. Once applied, every member
//! (this one included) materialises the files; a member that joins later gets them by
//! replay or snapshot. Symlinks are not followed. Unlike the reference's
//! fire-and-forget fan-out, the answer comes once the records are committed by a
//! majority and applied.
//!
//! `cluster.digest` (Halite's, for checks) answers this member's state digest
//! (`StateMachine::digest`, what `halite-ctl verify` prints on a stopped master) and its
//! applied index: members that applied the same log to the same index answer the same.

use std::collections::{BTreeMap, HashSet};

use serde_json::{json, Value as J};

use halite_storage::format::{Record, RootsStage, RootsSync, RootsSyncFile, RootsTombstone, RootsTree, SYNC_ID_LEN};

use super::{AdminView, Answer, MemberChange, Members, Plan};
use crate::error::{Error, Result};

/// Most staged roots records (1 MiB chunks) in one proposal; the commit is a proposal
/// of its own. Each entry is copied several times on every member (appended, sent,
/// read back, applied), each copy into freshly faulted pages: 4 MiB entries keep those
/// buffers small, a lost forward cheap to hand over again, and a heartbeat behind at
/// most a few of them on a peer's connection (docs/benchmarks.md, "Cluster as
/// deployed": with 32 MiB entries a 1 GiB sync did not apply on three processes).
pub const SYNC_GROUP: usize = 4;

/// A `cluster.*` runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterCmd {
    Members,
    RingInfo,
    RemoveMember { name: String },
    SyncRoots { trees: Vec<RootsTree> },
    Digest,
}

impl ClusterCmd {
    pub fn parse(fun: &str, req: &J) -> Result<ClusterCmd> {
        let s = |k: &str| req.get(k).and_then(J::as_str);
        Ok(match fun {
            "cluster.members" => ClusterCmd::Members,
            "cluster.ring_info" => ClusterCmd::RingInfo,
            "cluster.remove_member" => ClusterCmd::RemoveMember {
                name: s("name").ok_or_else(|| Error::refused("cluster.remove_member needs the member's name (its interface address)"))?.to_string(),
            },
            "cluster.sync_roots" => ClusterCmd::SyncRoots { trees: trees(s("roots").unwrap_or("both"))? },
            "cluster.digest" => ClusterCmd::Digest,
            other => return Err(Error::refused(format!("'{other}' is not available."))),
        })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let cfg = view.config();
        match self {
            ClusterCmd::Members => Ok(Plan::answer(json!({ "return": members(&cfg.node_id(), &view.members()?) }))),
            ClusterCmd::RingInfo => Ok(Plan::answer(json!({ "return": ring_info(cfg.cluster_id.is_some(), &view.members()?) }))),
            ClusterCmd::Digest => {
                let sm = view.state();
                Ok(Plan::answer(json!({ "return": { "digest": sm.digest()?.to_string(), "applied_index": sm.applied_index()? } })))
            }
            ClusterCmd::RemoveMember { name } => {
                if cfg.cluster_id.is_none() {
                    return Err(Error::refused("cluster.remove_member: this master is not a cluster member"));
                }
                let m = view.members()?;
                // A member's raft id is derived from its name (its interface address), or
                // from its name and incarnation once it joined again from an empty disk:
                // the member of that name, whichever incarnation is in the group.
                let is_member = |id: &u64| m.voters.contains(id) || m.learners.contains(id);
                let by_name = m.names.iter().filter(|(id, n)| **n == name && is_member(id)).map(|(id, _)| *id).next();
                let Some(id) = by_name.or(Some(crate::start::member_id(&name)).filter(is_member)) else {
                    return Err(Error::refused(format!("{name} is not a member")));
                };
                Ok(Plan {
                    membership: Some(MemberChange::Remove(id)),
                    answer: Answer::After(Box::new(move |v: &dyn AdminView| {
                        let m = v.members()?;
                        Ok(json!({ "return": { "removed": name, "voters": m.sorted_names(&m.voters), "learners": m.sorted_names(&m.learners) } }).into())
                    })),
                    ..Default::default()
                })
            }
            ClusterCmd::SyncRoots { trees } => {
                let plan = sync_plan(view, &trees)?;
                tracing::info!(written = plan.written, removed = plan.removed, unchanged = plan.unchanged, "cluster.sync_roots planned");
                let answer = json!({ "return": {
                    "status": "committed",
                    "channels": trees.iter().map(|t| format!("{}_roots", t.as_str())).collect::<Vec<_>>(),
                    "cluster_id": cfg.cluster_id,
                    "written": plan.written,
                    "removed": plan.removed,
                    "unchanged": plan.unchanged,
                }});
                Ok(committing(plan.records, plan.commit, "cluster.sync_roots", answer))
            }
        }
    }
}

/// The plan of a roots sync (`cluster.sync_roots`, `fileserver.update`,
/// `git_pillar.update`): its staged records in order, at most [`SYNC_GROUP`] (4 MiB) a
/// proposal, then the commit alone; answered `ok` once the roots are what the commit
/// names, else `verb`'s refusal (nothing changed: run it again).
pub fn committing(records: Vec<Record>, commit: RootsSync, verb: &'static str, ok: serde_json::Value) -> Plan {
    let mut proposals: Vec<Vec<Record>> = records.chunks(SYNC_GROUP).map(<[Record]>::to_vec).collect();
    let check = commit.clone();
    proposals.push(vec![Record::RootsSync(commit)]);
    let answer = Answer::After(Box::new(move |v: &dyn AdminView| match sync_outcome(v.state(), &check)? {
        None => Ok(ok.into()),
        Some(why) => Err(Error::refused(format!("{verb} did not apply, nothing changed: {why}; run it again"))),
    }));
    Plan { proposals, progress: Some(verb), answer, ..Default::default() }
}

/// Whether the applied roots are what `commit` says (`None`), or what differs. Read
/// after the commit applied: a sync that did not apply left them as they were.
pub fn sync_outcome(sm: &dyn halite_storage::state::StateRead, commit: &RootsSync) -> Result<Option<String>> {
    let live: BTreeMap<(RootsTree, String, String), (u32, Vec<u8>)> = sm
        .roots_files()?
        .into_iter()
        .filter(|(t, ..)| commit.trees.contains(t))
        .map(|(t, env, path, meta)| ((t, env, path), (meta.mode, meta.sha256)))
        .collect();
    for f in &commit.files {
        if live.get(&(f.tree, f.saltenv.clone(), f.path.clone())) != Some(&(f.mode, f.sha256.clone())) {
            return Ok(Some(format!("{}_roots {} {} is not the synced content", f.tree.as_str(), f.saltenv, f.path)));
        }
    }
    if live.len() != commit.files.len() {
        return Ok(Some(format!("the trees hold {} files, the sync named {}", live.len(), commit.files.len())));
    }
    Ok(None)
}

/// `cluster.members` in Salt 3008's shape.
pub fn members(node_id: &str, m: &Members) -> J {
    json!({
        "node_id": node_id,
        "voters": m.sorted_names(&m.voters),
        "learners": m.sorted_names(&m.learners),
        "membership_version": -1,
        "voter_count": m.voters.len(),
        "learner_count": m.learners.len(),
        "leader_id": m.leader.map(|id| J::String(m.name(id))).unwrap_or(J::Null),
        "term": m.term,
        "unhealthy_voters": [],
        "recently_demoted": [],
        // Halite: each member's progress as this member knows it (its own applied
        // index; on the leader, every peer's matched index), by name.
        "progress": m.progress.iter().map(|(id, p)| (m.name(*id), json!({
            "applied_index": p.applied,
            "matched_index": p.matched,
            "lag": p.lag,
            "ready": p.ready,
        }))).collect::<serde_json::Map<String, J>>(),
        // Halite: each member's build as it recorded it in the log, and the cluster's
        // record set, the members' lowest (docs/operations.md, "Upgrading a cluster").
        "releases": m.releases.iter().map(|(id, r)| (m.name(*id), json!({"release": r.release, "record_set": r.record_set}))).collect::<serde_json::Map<String, J>>(),
        "record_set": halite_storage::state::lowest_record_set(&m.releases, m.voters.iter().chain(&m.learners).copied()),
    })
}

/// `cluster.ring_info`: the HashRing over the committed voters, by name, in Salt's shape
/// (`vnodes` is tokens per member). A lone master is not clustered and has an empty ring.
pub fn ring_info(clustered: bool, m: &Members) -> J {
    if !clustered {
        return json!({"is_clustered": false, "node_count": 0, "nodes": [], "vnodes": 0});
    }
    let names: Vec<String> = m.voters.iter().map(|id| m.name(*id)).collect();
    let ring = halite_replication::HashRing::new(&names);
    json!({
        "is_clustered": true,
        "node_count": ring.nodes().len(),
        "nodes": ring.nodes(),
        "vnodes": ring.token_count() / ring.nodes().len().max(1),
    })
}

/// What a sync found: the staged records, the commit, and counts.
#[derive(Debug, PartialEq, Eq)]
pub struct SyncPlan {
    /// `roots_stage` records of the files whose content differs from the applied state.
    pub records: Vec<Record>,
    /// The `roots_sync` commit (last).
    pub commit: RootsSync,
    pub written: u64,
    pub removed: u64,
    pub unchanged: u64,
}

/// Which trees a `roots=` argument names.
pub fn trees(arg: &str) -> Result<Vec<RootsTree>> {
    match arg {
        "file" => Ok(vec![RootsTree::File]),
        "pillar" => Ok(vec![RootsTree::Pillar]),
        "both" | "" => Ok(vec![RootsTree::File, RootsTree::Pillar]),
        other => Err(Error::refused(format!("roots must be file, pillar or both, not {other:?}"))),
    }
}

/// The records that bring the applied roots to this master's directories, as one unit.
pub fn sync_plan(view: &dyn AdminView, trees: &[RootsTree]) -> Result<SyncPlan> {
    let dirs = view.config().roots_dirs();
    let applied: BTreeMap<(RootsTree, String, String), (u32, Vec<u8>)> = view
        .state()
        .roots_files()?
        .into_iter()
        .filter(|(t, ..)| trees.contains(t))
        .map(|(t, env, path, meta)| ((t, env, path), (meta.mode, meta.sha256)))
        .collect();
    let sync: [u8; SYNC_ID_LEN] = rand::random();
    let mut plan = SyncPlan {
        records: Vec::new(),
        commit: RootsSync { sync: sync.to_vec(), trees: trees.to_vec(), files: Vec::new(), remove: Vec::new(), commits: Vec::new() },
        written: 0,
        removed: 0,
        unchanged: 0,
    };
    let mut seen: HashSet<(RootsTree, String, String)> = HashSet::new();
    for &tree in trees {
        let envs = match tree {
            RootsTree::File => &dirs.file,
            RootsTree::Pillar => &dirs.pillar,
            // gitfs has no directory: `fileserver.update` brings its tree.
            RootsTree::Gitfs | RootsTree::GitPillar => continue,
        };
        for env in envs.keys() {
            // Stage the chunks of files that differ from what this member has applied;
            // name every file in the commit.
            let mut keep = false;
            for r in view.local_roots(tree, env)? {
                if let Record::RootsBlob(b) = r {
                    if b.chunk == 0 {
                        let k = (tree, env.clone(), b.path.clone());
                        keep = applied.get(&k) != Some(&(b.mode, b.sha256.clone()));
                        if keep {
                            plan.written += 1;
                        } else {
                            plan.unchanged += 1;
                        }
                        plan.commit.files.push(RootsSyncFile { tree, saltenv: env.clone(), path: b.path.clone(), mode: b.mode, size: b.size, sha256: b.sha256.clone() });
                        seen.insert(k);
                    }
                    if keep {
                        plan.records.push(Record::RootsStage(RootsStage { sync: sync.to_vec(), blob: b }));
                    }
                }
            }
        }
    }
    for (tree, env, path) in applied.keys() {
        if !seen.contains(&(*tree, env.clone(), path.clone())) {
            plan.removed += 1;
            plan.commit.remove.push(RootsTombstone { tree: *tree, saltenv: env.clone(), path: path.clone() });
        }
    }
    Ok(plan)
}
