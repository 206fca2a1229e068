//! An update as records, through the path `cluster.sync_roots` takes
//! (`halite_storage::state::roots`): the contents that differ from the applied gitfs
//! tree are staged (`roots_stage`), then one `roots_sync` of the `gitfs` tree names
//! every file it must hold, the files it removes and the commits they come from. The
//! state machine decides at apply, the same way on every member.
//!
//! In the tree, a remote's files are kept under its key (`<key>/<served path>` in each
//! saltenv), so a remote that could not be read keeps its applied files: the sync names
//! them unchanged. Files of remotes or saltenvs no longer served are removed. A remote's
//! `fallback` tree is kept under `<key>.fallback/` in `base` ([`fallback_prefix`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use gix::ObjectId;
use sha2::{Digest, Sha256};

use halite_storage::format::{Record, RootsSync, RootsSyncFile, RootsTombstone, RootsTree, SYNC_ID_LEN};
use halite_storage::record::roots_commit::RootsCommit;
use halite_storage::state::{staged_records, RootsMeta};

use super::config::GitfsConfig;
use super::fetch::Fetched;

const TREE: RootsTree = RootsTree::Gitfs;

/// Where a remote's `fallback` tree is kept: in the `base` saltenv of the gitfs tree,
/// under `<key>.fallback/` (not a remote's key, so never served as `base`).
pub const FALLBACK_ENV: &str = "base";
const FALLBACK_SUFFIX: &str = ".fallback/";

/// The stored prefix of a remote's fallback files.
pub fn fallback_prefix(key: &str) -> String {
    format!("{key}{FALLBACK_SUFFIX}")
}

/// The records of one update and what they change.
#[derive(Debug)]
pub struct UpdatePlan {
    /// `roots_stage` records of the contents that differ from the applied tree.
    pub records: Vec<Record>,
    /// The `roots_sync` commit (proposed last).
    pub commit: RootsSync,
    pub written: u64,
    pub removed: u64,
    pub unchanged: u64,
    /// Remotes that could not be read (their applied files are kept).
    pub failed: Vec<String>,
}

impl UpdatePlan {
    /// Whether the update changes the served files (otherwise nothing is proposed).
    pub fn changes(&self) -> bool {
        self.written > 0 || self.removed > 0
    }
}

/// The plan that brings the applied gitfs tree (`applied`: saltenv, path, meta) to what
/// `fetched` read.
pub fn plan(cfg: &GitfsConfig, fetched: &Fetched, applied: &[(String, String, RootsMeta)]) -> UpdatePlan {
    plan_tree(TREE, cfg, fetched, applied)
}

/// [`plan`] for the roots tree `tree` (`gitfs`, or `git_pillar`: `crate::pillar::git`).
pub fn plan_tree(tree: RootsTree, cfg: &GitfsConfig, fetched: &Fetched, applied: &[(String, String, RootsMeta)]) -> UpdatePlan {
    let sync: [u8; SYNC_ID_LEN] = rand::random();
    let now: HashMap<(&str, &str), &RootsMeta> = applied.iter().map(|(e, p, m)| ((e.as_str(), p.as_str()), m)).collect();
    let mut p = UpdatePlan {
        records: Vec::new(),
        commit: RootsSync { sync: sync.to_vec(), trees: vec![tree], files: Vec::new(), remove: Vec::new(), commits: Vec::new() },
        written: 0,
        removed: 0,
        unchanged: 0,
        failed: Vec::new(),
    };
    let mut named: HashSet<(String, String)> = HashSet::new();
    let mut sums: BTreeMap<ObjectId, Vec<u8>> = BTreeMap::new();
    for (r, got) in cfg.remotes.iter().zip(&fetched.remotes) {
        let prefix = format!("{}/", r.key);
        let fallback_prefix = fallback_prefix(&r.key);
        match got {
            Ok(read) => {
                let fallback = read.fallback.iter().map(|et| (FALLBACK_ENV.to_string(), et, fallback_prefix.as_str()));
                for (env, et, prefix) in read.envs.iter().map(|(env, et)| (env.clone(), et, prefix.as_str())).chain(fallback) {
                    let env = &env;
                    if !prefix.ends_with(FALLBACK_SUFFIX) {
                        p.commit.commits.push(RootsCommit { remote: r.id.clone(), saltenv: env.clone(), commit: et.commit.to_string() });
                    }
                    for (served, (mode, blob)) in &et.files {
                        let Some(data) = fetched.contents.get(blob) else { continue };
                        let sha = sums.entry(*blob).or_insert_with(|| Sha256::digest(data).to_vec()).clone();
                        let path = format!("{prefix}{served}");
                        let same = now.get(&(env.as_str(), path.as_str())).is_some_and(|m| m.mode == *mode && m.sha256 == sha);
                        if same {
                            p.unchanged += 1;
                        } else {
                            p.written += 1;
                            p.records.extend(staged_records(&sync, tree, env, &path, *mode, data));
                        }
                        p.commit.files.push(RootsSyncFile { tree, saltenv: env.clone(), path: path.clone(), mode: *mode, size: data.len() as u64, sha256: sha });
                        named.insert((env.clone(), path));
                    }
                }
            }
            Err(e) => {
                if !matches!(e, super::GitfsError::NotRead) {
                    p.failed.push(r.id.clone());
                }
                for (env, path, m) in applied.iter().filter(|(_, path, _)| path.starts_with(&prefix) || path.starts_with(&fallback_prefix)) {
                    p.unchanged += 1;
                    p.commit.files.push(RootsSyncFile { tree, saltenv: env.clone(), path: path.clone(), mode: m.mode, size: m.size, sha256: m.sha256.clone() });
                    named.insert((env.clone(), path.clone()));
                }
            }
        }
    }
    for (env, path, _) in applied {
        if !named.contains(&(env.clone(), path.clone())) {
            p.removed += 1;
            p.commit.remove.push(RootsTombstone { tree, saltenv: env.clone(), path: path.clone() });
        }
    }
    p
}
