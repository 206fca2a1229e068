//! `salt-run cluster.sync_roots [roots=file|pillar|both]`: make every member's
//! `file_roots` / `pillar_roots` equal this master's.
//!
//! This master's roots directories (the first directory of each saltenv, where the
//! materialiser writes) are compared with the roots the state machine holds: a file that
//! is new or whose content or mode differs becomes `roots_blob` records (1 MiB chunks
//! with the file's sha256), a file the state holds but the directory no longer has
//! becomes a `roots_tombstone`. Once committed, every member (this one included)
//! materialises them into its own directories; a member that joins later gets them by
//! replaying the log. Symlinks are not followed (logged and skipped).
//!
//! Unlike the reference's fire-and-forget fan-out, the answer comes once the records are
//! committed by a majority; members apply them as they receive the log.

use std::collections::{BTreeMap, HashSet};

use halite_storage::format::{Record, RootsTombstone, RootsTree};
use halite_storage::import::read_roots_dir;
use halite_storage::state::StateMachine;

use crate::config::MasterConfig;

/// What a sync found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub records: Vec<Record>,
    pub written: u64,
    pub removed: u64,
    pub unchanged: u64,
}

/// Which trees a `roots=` argument names.
pub fn trees(arg: &str) -> Result<Vec<RootsTree>, String> {
    match arg {
        "file" => Ok(vec![RootsTree::File]),
        "pillar" => Ok(vec![RootsTree::Pillar]),
        "both" | "" => Ok(vec![RootsTree::File, RootsTree::Pillar]),
        other => Err(format!("roots must be file, pillar or both, not {other:?}")),
    }
}

/// The records that bring the applied roots to this master's directories.
pub fn plan(cfg: &MasterConfig, sm: &StateMachine, trees: &[RootsTree]) -> Result<Plan, String> {
    let dirs = cfg.roots_dirs();
    let applied: BTreeMap<(RootsTree, String, String), (u32, Vec<u8>)> = sm
        .roots_files()
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|(t, ..)| trees.contains(t))
        .map(|(t, env, path, meta)| ((t, env, path), (meta.mode, meta.sha256)))
        .collect();
    let mut plan = Plan::default();
    let mut seen: HashSet<(RootsTree, String, String)> = HashSet::new();
    for &tree in trees {
        let envs = match tree {
            RootsTree::File => &dirs.file,
            RootsTree::Pillar => &dirs.pillar,
        };
        for (env, dir) in envs {
            let mut recs = Vec::new();
            let mut counts = BTreeMap::new();
            read_roots_dir(tree, env, dir, &mut recs, &mut counts).map_err(|e| e.to_string())?;
            // Keep the chunks of files that differ from what is applied.
            let mut keep = false;
            for r in recs {
                if let Record::RootsBlob(b) = &r {
                    if b.chunk == 0 {
                        let k = (tree, env.clone(), b.path.clone());
                        keep = applied.get(&k) != Some(&(b.mode, b.sha256.clone()));
                        if keep {
                            plan.written += 1;
                        } else {
                            plan.unchanged += 1;
                        }
                        seen.insert(k);
                    }
                    if keep {
                        plan.records.push(r);
                    }
                }
            }
        }
    }
    for (tree, env, path) in applied.keys() {
        if !seen.contains(&(*tree, env.clone(), path.clone())) {
            plan.removed += 1;
            plan.records.push(Record::RootsTombstone(RootsTombstone { tree: *tree, saltenv: env.clone(), path: path.clone() }));
        }
    }
    Ok(plan)
}
