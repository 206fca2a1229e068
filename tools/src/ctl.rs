//! `halite-ctl`: the recovery tool (like raft-engine's `ctl`). Every command works on a
//! stopped master's data directory, whose lock the binary holds ([`crate::offline`]).
//!
//! * `dump`: records as text or JSON lines, by index range and kind;
//! * `verify`: every checksum — the log files' framing and batch checksums, every entry
//!   block, every record's CRC — then the state machine against the log and the key view
//!   against the state machine; names the first bad record and where it is;
//! * `replay`: rebuilds the state machine from the log (from its snapshot when the log
//!   is compacted), then the views;
//! * `snapshot`, `compact`: see [`crate::snapshots`];
//! * `rebuild-views`: rebuilds the key view and roots trees from the state machine;
//! * `import-shared`: imports a shared-filesystem cluster tree as records.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use halite_master::{start, store, MasterConfig};
use halite_storage::format::{now_ns, ImportMarker, ImportPhase, Record, RecordKind, RootsTree};
use halite_storage::import::{read_job_cache, read_localfs_pki, read_roots_dir};
use halite_storage::log::RaftLog;
use halite_storage::state::StateMachine;
use halite_storage::framing;
use halite_storage::tail::{check_tail, TailState};

use crate::common::{Failure, Progress, Result};

/// One record as a JSON object for `dump --json`.
pub fn record_json(index: u64, r: &Record) -> Value {
    let text = |b: &[u8]| match std::str::from_utf8(b) {
        Ok(s) => Value::String(s.to_string()),
        Err(_) => Value::String(format!("<{} bytes, not UTF-8>", b.len())),
    };
    let msgpack = |b: &[u8]| -> Value {
        if b.is_empty() {
            return Value::Null;
        }
        let mut rd = b;
        match rmpv::decode::read_value(&mut rd) {
            Ok(v) => serde_json::to_value(&v).unwrap_or(Value::Null),
            Err(_) => Value::String(format!("<{} bytes, not msgpack>", b.len())),
        }
    };
    let body = match r {
        Record::KeySet(k) => json!({"id": k.id, "state": k.state.as_str(), "pub": text(&k.pub_key), "time_ns": k.time_ns}),
        Record::JobPublished(j) => json!({"jid": j.jid, "minions": j.minions, "load": msgpack(&j.load), "time_ns": j.time_ns, "started_by": j.started_by, "joins": j.joins}),
        // A pushed file's bytes are shown by size only.
        Record::FileRecv(f) => json!({"id": f.id, "path": f.path, "size": f.size, "loc": f.loc, "bytes": f.data.len(), "time_ns": f.time_ns}),
        Record::BatchRun(b) => json!({"jid": b.jid, "stop": b.stop, "expect": b.expect, "state": if b.stop { Value::Null } else { msgpack(&b.state) }, "time_ns": b.time_ns}),
        Record::JobReturn(j) => json!({"jid": j.jid, "id": j.id, "load": msgpack(&j.load), "time_ns": j.time_ns}),
        Record::GrainsReport(g) => json!({"id": g.id, "grains": msgpack(&g.grains), "time_ns": g.time_ns}),
        // Pillar holds secrets: shown by size only.
        Record::PillarCache(p) => json!({"id": p.id, "pillar_bytes": p.pillar.len(), "time_ns": p.time_ns}),
        Record::RootsBlob(b) => json!({"tree": b.tree.as_str(), "saltenv": b.saltenv, "path": b.path, "mode": format!("{:o}", b.mode), "sha256": hex::encode(&b.sha256), "size": b.size, "chunk": b.chunk, "chunks": b.chunks, "bytes": b.data.len()}),
        Record::RootsTombstone(t) => json!({"tree": t.tree.as_str(), "saltenv": t.saltenv, "path": t.path}),
        Record::RootsStage(st) => {
            let b = &st.blob;
            json!({"sync": hex::encode(&st.sync), "tree": b.tree.as_str(), "saltenv": b.saltenv, "path": b.path, "mode": format!("{:o}", b.mode), "sha256": hex::encode(&b.sha256), "size": b.size, "chunk": b.chunk, "chunks": b.chunks, "bytes": b.data.len()})
        }
        Record::RootsSync(sy) => json!({
            "sync": hex::encode(&sy.sync),
            "trees": sy.trees.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
            "files": sy.files.iter().map(|f| json!({"tree": f.tree.as_str(), "saltenv": f.saltenv, "path": f.path, "mode": format!("{:o}", f.mode), "size": f.size, "sha256": hex::encode(&f.sha256)})).collect::<Vec<_>>(),
            "remove": sy.remove.iter().map(|t| json!({"tree": t.tree.as_str(), "saltenv": t.saltenv, "path": t.path})).collect::<Vec<_>>(),
        }),
        Record::MineUpdate(m) => json!({"id": m.id, "op": format!("{:?}", m.op).to_lowercase(), "clear": m.clear, "functions": m.entries.iter().map(|e| json!({"fun": e.fun, "data": msgpack(&e.data)})).collect::<Vec<_>>(), "time_ns": m.time_ns}),
        Record::Reaction(r) => json!({"id": r.id, "member": r.member, "tag": r.tag, "reactions": serde_json::from_slice::<serde_json::Value>(&r.reactions).unwrap_or(serde_json::Value::Null), "time_ns": r.time_ns}),
        Record::MemberKey(k) => json!({"member": k.id, "public": hex::encode(&k.public), "time_ns": k.time_ns}),
        Record::MemberRelease(r) => json!({"member": r.id, "record_set": r.record_set, "release": r.release, "time_ns": r.time_ns}),
        // The hash only: the token itself is never stored.
        Record::EauthToken(t) => json!({"op": format!("{:?}", t.op).to_lowercase(), "hash": t.hash, "user": t.user, "eauth": t.eauth, "perms": serde_json::from_slice::<serde_json::Value>(&t.perms).unwrap_or(serde_json::Value::Null), "start_ns": t.start_ns, "expire_ns": t.expire_ns, "time_ns": t.time_ns}),
        Record::AesKeyRotation(a) => json!({"generation": a.generation, "key_bytes": a.key.len(), "time_ns": a.time_ns}),
        Record::ImportMarker(m) => json!({"source": m.source, "phase": format!("{:?}", m.phase).to_lowercase(), "counts": m.counts, "time_ns": m.time_ns}),
        Record::JobsExpired(e) => json!({"before_jid": e.before_jid, "time_ns": e.time_ns}),
        // A secret: shown by size and fingerprint only.
        Record::ClusterKeyPair(k) => json!({"private_pem_bytes": k.private_pem.len(), "sha256": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&k.private_pem)), "time_ns": k.time_ns}),
        Record::MasterKeyPair(k) => json!({"name": k.name, "private_pem_bytes": k.private_pem.len(), "sha256": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&k.private_pem)), "time_ns": k.time_ns}),
    };
    json!({"index": index, "kind": r.kind().name(), "record": body})
}

/// One record as a line of text for `dump`.
pub fn record_text(index: u64, r: &Record) -> String {
    let v = record_json(index, r);
    let mut parts = vec![format!("{index:>10}"), format!("{:<16}", r.kind().name())];
    if let Some(m) = v["record"].as_object() {
        for (k, x) in m {
            let s = match x {
                Value::String(s) if k == "pub" => format!("<{} bytes>", s.len()),
                Value::String(s) => s.clone(),
                Value::Object(_) | Value::Array(_) if x.to_string().len() > 120 => format!("<{} chars of json>", x.to_string().len()),
                other => other.to_string(),
            };
            parts.push(format!("{k}={s}"));
        }
    }
    parts.join(" ")
}

/// `dump`: prints records in `[from, to]` (optionally of one kind).
/// On a compacted log the records start after the snapshot; a note on stderr says so
/// when `from` asks for earlier ones.
pub fn dump(log_dir: &Path, from: u64, to: Option<u64>, kind: Option<RecordKind>, as_json: bool, out: &mut dyn std::io::Write) -> Result<u64> {
    let log = RaftLog::open(log_dir)?;
    let meta = log.snapshot_meta()?;
    if meta.index > 0 && from <= meta.index {
        eprintln!("note: entries up to {} are compacted into the snapshot at index {} (term {}); records from {}", meta.index, meta.index, meta.term, meta.index + 1);
    }
    let mut n = 0;
    log.for_each_record(from, to.map(|t| t + 1), |index, rec| {
        let rec = rec.map_err(|e| halite_storage::Error::CorruptLog(format!("entry {index}: {e}")))?;
        if kind.is_some_and(|k| k != rec.kind()) {
            return Ok(());
        }
        let line = if as_json { record_json(index, &rec).to_string() } else { record_text(index, &rec) };
        writeln!(out, "{line}").map_err(|e| halite_storage::Error::io("writing output", e))?;
        n += 1;
        Ok(())
    })?;
    Ok(n)
}

/// What `verify` found.
#[derive(Debug, Default)]
pub struct VerifyReport {
    pub problems: Vec<String>,
    pub notes: Vec<String>,
    pub entries: u64,
    pub records: u64,
}

/// `verify`: checks the log (and with `views`, the key view), reporting the first bad
/// record. Cuts a torn tail exactly as start-up would, and says so.
pub fn verify(cfg: &MasterConfig, check_views: bool) -> Result<VerifyReport> {
    let data = store::data_dir(cfg);
    let log_dir = data.log();
    let mut rep = VerifyReport::default();
    if !log_dir.exists() {
        rep.problems.push(format!("no log at {}", log_dir.display()));
        return Ok(rep);
    }
    // The newest file's zero padding (a stopped or crashed master leaves its
    // preallocated space) is not damage: that file is checked up to where it ends.
    let mut padded: Option<(std::path::PathBuf, u64)> = None;
    match check_tail(&log_dir, false) {
        Ok(TailState::Clean) => {}
        Ok(TailState::ZerosCut { file, at }) => {
            rep.notes.push("zero padding after the last batch (normal after a crash); start-up cuts it".into());
            padded = Some((file, at));
        }
        Ok(TailState::TornCut { file, at, bytes }) => rep.notes.push(format!("torn tail: {bytes} bytes of an unfinished batch at {}:{at} (never acknowledged); start-up cuts it", file.display())),
        Err(e) => rep.problems.push(e.to_string()),
    }
    // Batches whose entries block is damaged (file and byte offset).
    let mut blocks: Vec<String> = Vec::new();
    for f in framing::log_files(&log_dir)? {
        let checked = match &padded {
            // A newest file of only zeros (its header too): start-up removes it.
            Some((p, 0)) if *p == f => continue,
            Some((p, at)) if *p == f => framing::check_prefix(&f, *at),
            _ => framing::check_file(&f),
        };
        if let Err(e) = checked {
            let at = framing::first_bad_batch(&f)?.map(|o| format!(" (first bad batch at byte offset {o})")).unwrap_or_default();
            rep.problems.push(format!("{}: {e}{at}", f.display()));
            continue;
        }
        // raft-engine checks an entries block only when it is read: name the batch here
        // (the entry scan below then names the entry).
        let bytes = std::fs::read(&f).map_err(|e| halite_storage::Error::io(format!("reading {}", f.display()), e))?;
        if let Some(o) = framing::bad_entry_blocks(&bytes).first() {
            blocks.push(format!("{}: the entries block of the batch at byte offset {o} fails its checksum (first bad batch)", f.display()));
        }
    }
    if !rep.problems.is_empty() {
        rep.problems.push(format!("the log cannot be opened safely; entries after the damage may be lost. Keep a copy of {} before repairing", log_dir.display()));
        return Ok(rep);
    }
    rep.problems.extend(blocks);
    let log = match RaftLog::open(&log_dir) {
        Ok(l) => l,
        Err(e) => {
            rep.problems.push(e.to_string());
            return Ok(rep);
        }
    };
    let snap_index = log.snapshot_meta()?.index;
    let first = log.first_entry_index().unwrap_or(snap_index + 1);
    let last = log.last_entry_index().unwrap_or(snap_index);
    let mut at = first;
    while at <= last {
        let hi = (at + 4096).min(last + 1);
        match log.read_entries(at, hi, None) {
            Ok(es) => {
                for e in es {
                    rep.entries += 1;
                    if !RaftLog::is_record_entry(&e) {
                        continue;
                    }
                    match Record::decode_entry(&e.data) {
                        Ok(recs) => rep.records += recs.len() as u64,
                        Err(err) => {
                            rep.problems.push(format!("entry {}: {err}", e.index));
                            return Ok(rep);
                        }
                    }
                }
            }
            Err(_) => {
                // Narrow down to the first unreadable entry.
                for i in at..hi {
                    if let Err(e) = log.read_entries(i, i + 1, None) {
                        rep.problems.push(format!("entry {i}: its block in the log fails its checksum: {e}"));
                        return Ok(rep);
                    }
                }
            }
        }
        at = hi;
    }
    if snap_index > 0 {
        match crate::snapshots::log_snapshot(&log, &data) {
            Ok(Some(s)) => {
                let mut p = Progress::new("verifying the snapshot", s.manifest().total_bytes());
                match s.verify(|d| p.set(d)) {
                    Ok(()) => rep.notes.push(format!("log compacted through {snap_index}; {} verified", crate::snapshots::describe(&s))),
                    Err(e) => rep.problems.push(e.to_string()),
                }
                p.finish();
            }
            Ok(None) => {}
            Err(e) => rep.problems.push(e.msg),
        }
    }
    drop(log);
    let state = data.state();
    if state.exists() {
        let sm = StateMachine::open(&state)?;
        let applied = sm.applied_index()?;
        if applied > last {
            rep.problems.push(format!(
                "the state machine applied index {applied} is past the end of the log ({last}): the log is older than the state (restored from an older backup, or lost) and committed entries are missing; \
                 start-up refuses it. Restore the log and the state from the same backup, or on a cluster member move the data dir away and start again to rejoin, \
                 or `halite-ctl replay` (what was applied after {last} is lost)"
            ));
        }
        if applied < snap_index {
            rep.notes.push(format!("the state machine (applied {applied}) is behind the log's snapshot {snap_index}: start-up installs the snapshot"));
        }
        rep.notes.push(format!("log entries {first}..={last}, state machine applied {applied}, views at {}", sm.views_index()?));
        // Equal on members that applied the same log to the same index (compare them).
        rep.notes.push(format!("state digest {}", sm.digest()?));
        if check_views {
            let views = store::views(cfg, store::key_view(cfg)?);
            for d in views.diff_keys(&sm)? {
                rep.problems.push(format!("key view ({}): {d}", views.keys.driver()));
            }
        }
    }
    Ok(rep)
}

/// `replay`: a new state machine from the whole log, then new views. Returns the number
/// of records applied.
///
/// On a compacted log the new state machine starts as a copy of the log's snapshot (its
/// files checked against the manifest first) and the tail after it is applied.
pub fn replay(cfg: &MasterConfig) -> Result<u64> {
    let data = store::data_dir(cfg);
    let log = RaftLog::open(&data.log())?;
    let state = data.state();
    let fresh = state.with_extension("replay");
    let _ = std::fs::remove_dir_all(&fresh);
    let snap = crate::snapshots::log_snapshot(&log, &data)?;
    let first = match &snap {
        Some(s) => {
            s.verify(|_| {}).map_err(|e| Failure::new(format!("{e}; replay cannot start from it"), 1))?;
            halite_storage::snapshot::swap_in(s, &fresh)?;
            tracing::info!("replay starts from the {}", crate::snapshots::describe(s));
            s.index() + 1
        }
        None => log.first_entry_index().unwrap_or(1),
    };
    if snap.is_none() && first > 1 {
        return Err(Failure::new(format!("the log starts at entry {first} and names no snapshot: the entries before it are lost"), 1));
    }
    let last = log.last_entry_index().unwrap_or(0);
    let sm = StateMachine::open(&fresh)?;
    let mut progress = Progress::new("replaying the log", last);
    // Whole entries, with the proposal identities their contexts name, so the replay
    // skips exactly the copies the live apply skipped.
    let mut batch = Vec::with_capacity(4096);
    let (mut n, mut in_batch) = (0u64, 0usize);
    let mut last_seen = 0;
    let apply = |batch: &mut Vec<halite_storage::LogEntry>| -> halite_storage::Result<u64> {
        let out = sm.apply_entries(batch)?;
        let applied = batch.iter().zip(&out.outcomes).filter(|(_, o)| **o == halite_storage::state::Outcome::Applied).map(|(e, _)| e.records.len() as u64).sum();
        batch.clear();
        Ok(applied)
    };
    log.for_each_entry(first, None, |index, e| {
        let e = e.map_err(|e| halite_storage::Error::CorruptLog(format!("entry {index}: {e}. Run `halite-ctl verify`")))?;
        // A batch ends between entries, never inside a group entry: its proposals are
        // applied in one call, as the live apply does.
        if in_batch >= 65536 && index != last_seen {
            n += apply(&mut batch)?;
            in_batch = 0;
            progress.set(last_seen);
        }
        in_batch += e.records.len();
        batch.push(e);
        last_seen = index;
        Ok(())
    })?;
    n += apply(&mut batch)?;
    sm.advance_applied(last.max(last_seen))?;
    sm.flush()?;
    progress.set(last);
    progress.finish();
    drop(sm);
    let old = state.with_extension(format!("old-{}", now_ns()));
    if state.exists() {
        std::fs::rename(&state, &old)?;
    }
    std::fs::rename(&fresh, &state)?;
    let sm = StateMachine::open(&state)?;
    rebuild_views_with(cfg, &sm)?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(n)
}

/// Counts printed by `rebuild-views`.
pub fn rebuild_views(cfg: &MasterConfig) -> Result<String> {
    let sm = StateMachine::open(&store::data_dir(cfg).state())?;
    rebuild_views_with(cfg, &sm)
}

fn rebuild_views_with(cfg: &MasterConfig, sm: &StateMachine) -> Result<String> {
    let mut views = store::views(cfg, store::key_view(cfg)?);
    let total = (sm.count("keys")? + sm.count("denied")?).max(1);
    let mut p = Progress::new("rebuilding the key view", total);
    let c = views.rebuild_keys(sm, |d, _| p.set(d))?;
    p.finish();
    let roots = views.roots.rebuild(sm)?;
    sm.set_views_index(sm.applied_index()?)?;
    Ok(format!(
        "Key view ({}) rebuilt in {}:\n  Accepted: {}\n  Pending:  {}\n  Rejected: {}\n  Denied:   {}\n  Refused:  {}\nRoots files written: {roots}",
        views.keys.driver(),
        cfg.keys_dir().display(),
        c.accepted,
        c.pending,
        c.rejected,
        c.denied,
        c.refused
    ))
}

/// Where `import-shared` reads from.
#[derive(Debug, Clone)]
pub struct SharedTree {
    pub pki_dir: PathBuf,
    pub cachedir: Option<PathBuf>,
    pub file_roots: BTreeMap<String, Vec<PathBuf>>,
    pub pillar_roots: BTreeMap<String, Vec<PathBuf>>,
}

impl SharedTree {
    /// The shared tree a (shared-filesystem) cluster config describes.
    pub fn from_config(cfg: &MasterConfig) -> Self {
        SharedTree {
            pki_dir: cfg.cluster_pki_dir.clone().unwrap_or_else(|| cfg.pki_dir.clone()),
            cachedir: Some(cfg.cachedir.clone()),
            file_roots: cfg.file_roots.clone(),
            pillar_roots: cfg.pillar_roots.clone(),
        }
    }
}

/// `import-shared`: the shared tree becomes records (between import markers), proposed
/// through this node's log and applied to its state and views. Returns counts.
pub fn import_shared(cfg: &MasterConfig, tree: &SharedTree) -> Result<BTreeMap<String, u64>> {
    let mut recs = Vec::new();
    let (keys, kc) = read_localfs_pki(&tree.pki_dir)?;
    recs.extend(keys);
    let mut counts: BTreeMap<String, u64> = kc.as_map();
    if let Some(c) = &tree.cachedir {
        read_job_cache(c, &mut recs, &mut counts)?;
    }
    for (t, roots) in [(RootsTree::File, &tree.file_roots), (RootsTree::Pillar, &tree.pillar_roots)] {
        for (env, dirs) in roots {
            // Salt searches an env's dirs in order: the first dir holding a path wins.
            let mut seen = std::collections::HashSet::new();
            for d in dirs {
                let mut these = Vec::new();
                let mut scratch = BTreeMap::new();
                read_roots_dir(t, env, d, &mut these, &mut scratch)?;
                *counts.entry("skipped".into()).or_default() += scratch.get("skipped").copied().unwrap_or(0);
                // Paths an earlier dir of this env already provided are shadowed.
                let fresh: std::collections::HashSet<String> = these
                    .iter()
                    .filter_map(|r| match r {
                        Record::RootsBlob(b) if b.chunk == 0 && !seen.contains(&b.path) => Some(b.path.clone()),
                        _ => None,
                    })
                    .collect();
                for r in these {
                    if let Record::RootsBlob(b) = &r {
                        if !fresh.contains(&b.path) {
                            continue;
                        }
                        if b.chunk == 0 {
                            *counts.entry(format!("{}_roots", t.as_str())).or_default() += 1;
                        }
                    }
                    recs.push(r);
                }
                seen.extend(fresh);
            }
        }
    }
    let node = start::start_node(cfg, store::views(cfg, store::key_view(cfg)?)).map_err(crate::pki::in_use(cfg))?;
    let source = format!("shared:{}", tree.pki_dir.display());
    let total = recs.len() as u64;
    let mut p = Progress::new("importing the shared tree", total);
    node.propose(&[Record::ImportMarker(ImportMarker { source: source.clone(), phase: ImportPhase::Begin, counts: BTreeMap::new(), time_ns: now_ns() })])?;
    // One entry per group of at most 4,096 records and 32 MiB.
    let groups = Record::fit_groups(recs, 4096, 32 << 20)?;
    node.propose_all(&groups, 1, &mut |done, _| p.set(done))?;
    node.propose(&[Record::ImportMarker(ImportMarker { source, phase: ImportPhase::End, counts: counts.clone(), time_ns: now_ns() })])?;
    p.finish();
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use halite_storage::context::{encode, EntryContext, ProposalId};
    use halite_storage::entry::encode_group;
    use halite_storage::format::GrainsReport;
    use raft::eraftpb::Entry;

    use super::*;

    fn grains(id: &str) -> Record {
        Record::GrainsReport(GrainsReport { id: id.into(), grains: vec![0x80], time_ns: 1 })
    }

    /// A group entry whose proposals straddle the replay's batch bound is applied whole:
    /// every proposal of it, not only those before the bound.
    #[test]
    fn replay_applies_every_proposal_of_a_group_entry_across_its_batch_bound() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("master"), format!("root_dir: {0}\nhalite_data_dir: {0}/data\n", d.path().display())).unwrap();
        let cfg = MasterConfig::load(d.path()).unwrap();
        let data = store::data_dir(&cfg);
        std::fs::create_dir_all(data.log()).unwrap();
        let log = RaftLog::open(&data.log()).unwrap();
        let ctx = |seq| encode(&EntryContext::proposal(ProposalId { proposer: 1, incarnation: 1, seq }, 1, None));
        let entry = |index, data: Vec<u8>, context: Vec<u8>| Entry { index, term: 1, data: data.into(), context: context.into(), ..Default::default() };
        // 65,535 records, one short of the bound, then a group of three proposals.
        let first: Vec<Record> = (0..65_535).map(|i| grains(&format!("m{i}"))).collect();
        let items: Vec<Vec<u8>> = ["g1", "g2", "g3"].iter().map(|id| Record::encode_batch(&[grains(id)]).unwrap()).collect();
        let group = encode_group(&[(2, &items[0]), (3, &items[1]), (4, &items[2])]).unwrap();
        let entries = vec![entry(1, Record::encode_batch(&first).unwrap(), ctx(1)), entry(2, group, ctx(2)), entry(3, Record::encode_batch(&[grains("after")]).unwrap(), ctx(5))];
        log.append(&entries, None, None, true).unwrap();
        drop(log);
        assert_eq!(replay(&cfg).unwrap(), 65_535 + 4);
        let sm = StateMachine::open(&data.state()).unwrap();
        for id in ["m0", "m65534", "g1", "g2", "g3", "after"] {
            assert!(sm.grains(id).unwrap().is_some(), "{id} was not replayed");
        }
    }
}
