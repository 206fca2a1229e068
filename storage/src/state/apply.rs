//! Applying committed entries to the state machine: one RocksDB write batch per group,
//! with the new `applied_index`, so applying is atomic and idempotent (entries at or
//! below the applied index are skipped, and so are copies of a proposal applied before:
//! `proposals.rs`). What each record kind does to the column
//! families is here, in one `match`; what a view must do about it comes back as
//! [`Effect`]s.

use std::collections::{HashMap, HashSet};

use rocksdb::WriteBatch;

use super::returns::return_key;
use super::{from_msgpack, no_wal, to_msgpack, to_msgpack_sized, Effect, RootsMeta, StateMachine, APPLIED_INDEX, CF_AES, CF_DENIED, CF_GRAINS, CF_IMPORTS, CF_JOBS, CF_KEYS, CF_META, CF_MINE, CF_PILLAR, CF_RETURNS, CLUSTER_KEY, MASTER_KEY};
use super::proposals::{Outcome, Tracker};
use super::KeyPrint;
use crate::context::ProposalId;
use crate::entry::LogEntry;
use crate::error::{Error, Result};
use crate::format::{JobPublished, KeyExpect, KeySet, KeyState, MineOp, Record};
use crate::keys::BankState;

/// What applying a group of entries did.
#[derive(Debug, Default)]
pub struct Applied {
    /// What the views must do.
    pub effects: Vec<Effect>,
    /// One per entry, in order: applied, or why it was skipped.
    pub outcomes: Vec<Outcome>,
}

impl StateMachine {
    /// Applies committed records in log order, each as an entry of its own that names
    /// no proposal (replays of bare records, tests). Returns what the views must do.
    pub fn apply(&self, entries: &[(u64, Record)]) -> Result<Vec<Effect>> {
        let refs: Vec<EntryRef> = entries.iter().map(|(i, r)| EntryRef { index: *i, id: None, settled_below: 0, records: std::slice::from_ref(r) }).collect();
        Ok(self.apply_refs(&refs)?.effects)
    }

    /// Applies committed entries in log order (a group entry's proposals one after the
    /// other, with its index, all in the same call: one that came after its entry's
    /// index was applied would be taken for a copy), each all-or-nothing: an entry at or below the applied
    /// index, or whose proposal was applied before or is stale
    /// (`proposals.rs`), changes nothing; otherwise all its records apply. One RocksDB
    /// write holds the whole group and the new applied index. (RocksDB's WAL is never
    /// written; see the module docs. A bulk replay calls [`StateMachine::flush`] once
    /// at the end.)
    pub fn apply_entries(&self, entries: &[LogEntry]) -> Result<Applied> {
        let refs: Vec<EntryRef> = entries.iter().map(|e| EntryRef { index: e.index, id: e.id, settled_below: e.settled_below, records: &e.records }).collect();
        self.apply_refs(&refs)
    }

    fn apply_refs(&self, entries: &[EntryRef]) -> Result<Applied> {
        let db = self.db()?;
        let applied = self.applied_index()?;
        let mut batch = WriteBatch::default();
        let mut out = Applied { effects: Vec::new(), outcomes: Vec::with_capacity(entries.len()) };
        let mut last = applied;
        // Changes earlier in this batch that later records of the batch must see.
        let mut overlay = Overlay::default();
        let mut tracker = Tracker::default();
        // The previous entry's index and where its records' positions ended.
        let mut prev: Option<(u64, usize)> = None;
        for e in entries {
            // The proposals of a group entry share its index: after the first, the
            // others come with the index just taken (`crate::entry`).
            if e.index <= applied || e.index < last {
                out.outcomes.push(Outcome::Past);
                continue;
            }
            // A record's position in its entry: a group's proposals after the first
            // continue the numbering (keys made of index and position stay unique).
            let base = match prev {
                Some((index, end)) if index == e.index => end,
                _ => 0,
            };
            prev = Some((e.index, base + e.records.len()));
            last = e.index;
            let mut outcome = match &e.id {
                Some(id) => self.admit(id, e.settled_below, &mut tracker, &mut batch)?,
                None => Outcome::Applied,
            };
            if outcome == Outcome::Applied {
                if let Some(first) = e.records.first() {
                    if !self.leads_its_entry(e.index, first, &overlay)? {
                        outcome = Outcome::Duplicate;
                    }
                }
            }
            if outcome == Outcome::Applied {
                for (pos, rec) in e.records.iter().enumerate() {
                    if let Record::MemberKey(k) = rec {
                        self.apply_member_key(e.index, e.id.map(|i| i.proposer), k, &mut batch, &mut overlay)?;
                        continue;
                    }
                    if let Record::MemberRelease(r) = rec {
                        self.apply_member_release(e.index, e.id.map(|i| i.proposer), r, &mut batch)?;
                        continue;
                    }
                    self.apply_one(e.index, base + pos, rec, &mut batch, &mut out.effects, &mut overlay)?;
                }
            } else {
                tracing::info!(index = e.index, id = ?e.id, ?outcome, "entry skipped: its proposal was applied before or its proposer has restarted");
            }
            out.outcomes.push(outcome);
        }
        if last == applied {
            return Ok(out);
        }
        self.put_returns(&mut overlay.returns_out, &mut batch)?;
        self.settle_marks(&mut tracker)?;
        self.record_proposals(&tracker, &mut batch)?;
        batch.put_cf(db.cf(CF_META)?, APPLIED_INDEX, last.to_be_bytes());
        let written = db.write_opt(batch, &no_wal());
        self.proposals_written(&tracker, written.is_ok());
        written?;
        if !overlay.keys.is_empty() {
            // What a read would now give for an accepted key; any other state is read
            // on use (a flood of pending ids must not crowd the prints out).
            let print = |id: &String| match overlay.keys_held.get(id) {
                Some(Some((KeyState::Accepted, pem))) => Some(KeyPrint::new(BankState::Accepted, pem)),
                _ => None,
            };
            self.prints.replace(overlay.keys.keys().map(|id| (id, print(id))));
        }
        self.pending_changed(overlay.pending_delta);
        Ok(out)
    }

    /// Puts the returns gathered so far into `b` in key order (and empties `out`).
    ///
    /// A batch's returns come in the order minions answered, which is no order: put as
    /// they came, each one costs RocksDB a search of its memtable's skip list from the
    /// top, mostly cache misses (about two fifths of the log thread's CPU in a
    /// `test.ping` to 8,000 minions). In key order an insert next to the previous one
    /// starts where that one ended (the skip list keeps the position), and the nodes on
    /// the way are still in cache. That pays in large batches (replay, catching up:
    /// a third more returns applied a second); a live master's batches are small, and
    /// there it measures the same (docs/benchmarks.md, "Returns"). The sort is stable, so two
    /// puts of one key keep their order and the later still wins; returns are only
    /// ever put, and a range deletion of returns takes the returns before it first
    /// (`JobsExpired`), so the order of what the batch does is otherwise unchanged.
    fn put_returns(&self, out: &mut Vec<(Vec<u8>, Vec<u8>)>, b: &mut WriteBatch) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let db = self.db()?;
        let cf = db.cf(CF_RETURNS)?;
        out.sort_by(|a, b| a.0.cmp(&b.0));
        for (k, v) in out.drain(..) {
            b.put_cf(cf, k, v);
        }
        Ok(())
    }

    fn apply_one(&self, index: u64, pos: usize, rec: &Record, b: &mut WriteBatch, fx: &mut Vec<Effect>, ov: &mut Overlay) -> Result<()> {
        let db = self.db()?;
        match rec {
            Record::KeySet(k) if !self.expectation_holds(k, ov)? => {
                // Decided from a read the log has since moved past: nothing changes, on
                // every member alike. The proposer reads the applied outcome.
                tracing::info!(index, id = %k.id, to = k.state.as_str(), "key change skipped: the key is no longer in the state it was decided from");
            }
            Record::KeySet(k) if !self.pending_place(k, ov)? => {
                // `halite_max_pending_keys` reached at this log position: the sign-in
                // is answered "full" by its member, on every member alike.
                tracing::info!(index, id = %k.id, cap = ?k.pending_below, "new pending key skipped: the cap on pending keys is reached");
            }
            Record::KeySet(k) => match k.state {
                KeyState::Accepted | KeyState::Pending | KeyState::Rejected => {
                    let state = BankState::from_key_state(k.state).ok_or_else(|| Error::Invalid("bad key state".into()))?;
                    let was_pending = self.held_key(&k.id, ov)?.is_some_and(|(s, _)| s == KeyState::Pending);
                    ov.pending_delta += i64::from(k.state == KeyState::Pending) - i64::from(was_pending);
                    let mut v = Vec::with_capacity(9 + k.pub_key.len());
                    v.push(state.mmap_byte());
                    v.extend_from_slice(&k.time_ns.to_be_bytes());
                    v.extend_from_slice(&k.pub_key);
                    b.put_cf(db.cf(CF_KEYS)?, k.id.as_bytes(), v);
                    ov.keys.insert(k.id.clone(), true);
                    ov.keys_held.insert(k.id.clone(), Some((k.state, k.pub_key.clone())));
                    fx.push(Effect::KeySet { id: k.id.clone(), state, pub_key: k.pub_key.clone(), time_ns: k.time_ns });
                }
                KeyState::Deleted => {
                    let exists = match ov.keys.get(&k.id) {
                        Some(e) => *e,
                        None => db.get_pinned_cf(db.cf(CF_KEYS)?, k.id.as_bytes())?.is_some(),
                    };
                    if exists {
                        if self.held_key(&k.id, ov)?.is_some_and(|(s, _)| s == KeyState::Pending) {
                            ov.pending_delta -= 1;
                        }
                        b.delete_cf(db.cf(CF_KEYS)?, k.id.as_bytes());
                        // A deleted minion's cached pillar (its secrets) and the files it
                        // pushed go with its key.
                        b.delete_cf(db.cf(CF_PILLAR)?, k.id.as_bytes());
                        self.drop_pushed(index, &k.id, b, fx, ov)?;
                        ov.keys.insert(k.id.clone(), false);
                        ov.keys_held.insert(k.id.clone(), None);
                        fx.push(Effect::KeyRemoved { id: k.id.clone() });
                    }
                }
                KeyState::Denied => {
                    // Only the first denied key of an id is kept (Salt's rule).
                    let exists = match ov.denied.get(&k.id) {
                        Some(e) => *e,
                        None => db.get_pinned_cf(db.cf(CF_DENIED)?, k.id.as_bytes())?.is_some(),
                    };
                    if !exists {
                        let mut v = Vec::with_capacity(8 + k.pub_key.len());
                        v.extend_from_slice(&k.time_ns.to_be_bytes());
                        v.extend_from_slice(&k.pub_key);
                        b.put_cf(db.cf(CF_DENIED)?, k.id.as_bytes(), v);
                        ov.denied.insert(k.id.clone(), true);
                        ov.denied_held.insert(k.id.clone(), Some(k.pub_key.clone()));
                        fx.push(Effect::DeniedSet { id: k.id.clone(), pub_key: k.pub_key.clone(), time_ns: k.time_ns });
                    }
                }
                KeyState::DeniedCleared => {
                    let exists = match ov.denied.get(&k.id) {
                        Some(e) => *e,
                        None => db.get_pinned_cf(db.cf(CF_DENIED)?, k.id.as_bytes())?.is_some(),
                    };
                    if exists {
                        b.delete_cf(db.cf(CF_DENIED)?, k.id.as_bytes());
                        ov.denied.insert(k.id.clone(), false);
                        ov.denied_held.insert(k.id.clone(), None);
                        fx.push(Effect::DeniedRemoved { id: k.id.clone() });
                    }
                }
            },
            Record::JobPublished(j) => {
                // A group joining a stored job adds its minions to the job's; the first
                // record's load and time stay (decided here, the same on every member).
                let stored = match (j.joins, ov.jobs.get(&j.jid)) {
                    (false, _) => None,
                    (true, Some(held)) => Some(held.clone()),
                    (true, None) => match db.get_pinned_cf(db.cf(CF_JOBS)?, j.jid.as_bytes())? {
                        // A stored job that does not decode (a damaged value) is replaced
                        // by this group, which heals it, rather than stopping the apply.
                        Some(v) => from_msgpack::<JobPublished>("jobs", &v).inspect_err(|e| tracing::error!(index, jid = %j.jid, "stored job does not decode, replaced by the joining group: {e}")).ok(),
                        None => None,
                    },
                };
                let job = match stored {
                    Some(mut held) => {
                        let mut seen: HashSet<String> = held.minions.iter().cloned().collect();
                        for m in &j.minions {
                            if seen.insert(m.clone()) {
                                held.minions.push(m.clone());
                            }
                        }
                        held
                    }
                    None => JobPublished { joins: false, ..j.clone() },
                };
                b.put_cf(db.cf(CF_JOBS)?, j.jid.as_bytes(), to_msgpack_sized(&job, rec.payload_len_hint())?);
                ov.jobs.insert(j.jid.clone(), job);
            }
            Record::JobReturn(r) => {
                let k = return_key(&r.jid, &r.id);
                if r.first_only && (ov.returns.contains(&k) || db.get_cf(db.cf(CF_RETURNS)?, &k)?.is_some()) {
                    // Decided here, the same on every member: a return that must be the
                    // first for (jid, id) and is not changes nothing.
                    tracing::info!(index, jid = %r.jid, id = %r.id, "return skipped: a return for this job and id is stored already");
                    return Ok(());
                }
                ov.returns_out.push((k.clone(), to_msgpack_sized(r, rec.payload_len_hint())?));
                ov.returns.insert(k);
            }
            Record::GrainsReport(g) => b.put_cf(db.cf(CF_GRAINS)?, g.id.as_bytes(), to_msgpack_sized(g, rec.payload_len_hint())?),
            Record::PillarCache(p) => b.put_cf(db.cf(CF_PILLAR)?, p.id.as_bytes(), to_msgpack_sized(p, rec.payload_len_hint())?),
            Record::MineUpdate(m) => {
                // Keys `id NUL fun`: one range (`id NUL` .. `id SOH`) is the whole mine.
                // Later operations of a batch win over earlier ones (RocksDB applies a
                // batch in order), so a clear followed by puts keeps the puts.
                let prefix = |end: u8| {
                    let mut k = m.id.as_bytes().to_vec();
                    k.push(end);
                    k
                };
                let key = |fun: &str| {
                    let mut k = prefix(0);
                    k.extend_from_slice(fun.as_bytes());
                    k
                };
                let cf = db.cf(CF_MINE)?;
                match m.op {
                    MineOp::Flush => b.delete_range_cf(cf, prefix(0), prefix(1)),
                    MineOp::Delete => m.entries.iter().for_each(|e| b.delete_cf(cf, key(&e.fun))),
                    MineOp::Send => {
                        if m.clear {
                            b.delete_range_cf(cf, prefix(0), prefix(1));
                        }
                        m.entries.iter().for_each(|e| b.put_cf(cf, key(&e.fun), &e.data));
                    }
                }
            }
            Record::RootsBlob(blob) => self.apply_roots_blob(index, blob, b, fx, ov)?,
            Record::RootsTombstone(t) => self.apply_roots_tombstone(t, b, fx, ov)?,
            Record::RootsStage(st) => self.apply_roots_stage(index, &st.sync, &st.blob, b, ov)?,
            Record::RootsSync(sy) => self.apply_roots_sync(index, sy, b, fx, ov)?,
            // Secrets every member must hold identically are set once: if two leaders in
            // a row propose one (a leader change while proposing), the first committed
            // wins on every node.
            Record::AesKeyRotation(a) => {
                let k = a.generation.to_be_bytes();
                let mut tag = b"aes:".to_vec();
                tag.extend_from_slice(&k);
                if !ov.set_once.contains(&tag) && db.get_pinned_cf(db.cf(CF_AES)?, k)?.is_none() {
                    b.put_cf(db.cf(CF_AES)?, k, to_msgpack(a)?);
                    ov.set_once.insert(tag);
                }
            }
            Record::ImportMarker(m) => {
                // Keyed by the entry's index, and its position in a batch entry after the first.
                let mut k = index.to_be_bytes().to_vec();
                if pos > 0 {
                    k.extend_from_slice(&(pos as u32).to_be_bytes());
                }
                b.put_cf(db.cf(CF_IMPORTS)?, k, to_msgpack(m)?)
            }
            Record::ClusterKeyPair(k) => {
                if !ov.set_once.contains(CLUSTER_KEY) && db.get_pinned_cf(db.cf(CF_META)?, CLUSTER_KEY)?.is_none() {
                    b.put_cf(db.cf(CF_META)?, CLUSTER_KEY, to_msgpack(k)?);
                    ov.set_once.insert(CLUSTER_KEY.to_vec());
                    fx.push(Effect::ClusterKeyPair { private_pem: k.private_pem.clone() });
                }
            }
            Record::MasterKeyPair(k) => {
                if !ov.set_once.contains(MASTER_KEY) && db.get_pinned_cf(db.cf(CF_META)?, MASTER_KEY)?.is_none() {
                    b.put_cf(db.cf(CF_META)?, MASTER_KEY, to_msgpack(k)?);
                    ov.set_once.insert(MASTER_KEY.to_vec());
                    fx.push(Effect::MasterKeyPair { name: k.name.clone(), private_pem: k.private_pem.clone() });
                }
            }
            Record::Reaction(r) => {
                let claim = crate::reaction::Claim { index, member: r.member.clone() };
                b.put_cf(db.cf(CF_META)?, crate::reaction::claim_key(&r.id), claim.encode());
                ov.reactions.insert(r.id.clone());
            }
            // Applied with their entry's proposer (`member_keys.rs`, `member_releases.rs`).
            Record::MemberKey(_) | Record::MemberRelease(_) => {}
            Record::EauthToken(t) => self.apply_eauth_token(t, b, ov)?,
            Record::BatchRun(r) => self.apply_batch_run(r, b, ov)?,
            Record::FileRecv(f) => self.apply_file_recv(index, f, b, fx, ov)?,
            Record::JobsExpired(e) => {
                // Returns are keyed `jid NUL id`, so one range covers the jobs' returns
                // too. Only jids from the digits range are touched.
                const FIRST: &[u8] = b"0";
                let before = e.before_jid.as_bytes();
                b.delete_range_cf(db.cf(CF_JOBS)?, FIRST, before);
                // The returns put so far go in first: the range is deleted after them.
                self.put_returns(&mut ov.returns_out, b)?;
                b.delete_range_cf(db.cf(CF_RETURNS)?, FIRST, before);
                // Reaction claims start with their event's time as a jid.
                b.delete_range_cf(db.cf(CF_META)?, crate::reaction::claim_key("0"), crate::reaction::claim_key(&e.before_jid));
                // So do batch runs (keyed by their jid).
                b.delete_range_cf(db.cf(CF_META)?, crate::batch_run::run_key("0"), crate::batch_run::run_key(&e.before_jid));
                self.expire_eauth_tokens(e.time_ns, b)?;
            }
        }
        Ok(())
    }
}

impl StateMachine {
    /// Who claimed the reaction to an event, if anyone did (`crate::reaction`).
    pub fn reaction(&self, id: &str) -> Result<Option<crate::reaction::Claim>> {
        let db = self.db()?;
        let v = db.get_pinned_cf(db.cf(CF_META)?, crate::reaction::claim_key(id))?;
        Ok(v.and_then(|v| crate::reaction::Claim::decode(&v)))
    }

    /// Whether an entry that starts with `first` applies: an entry that starts with a
    /// reaction only if it is the first for its event (`crate::reaction`), one that
    /// starts with a batch run's step only on the version the step follows
    /// (`crate::batch_run`); any other entry always. One that does not is skipped whole.
    fn leads_its_entry(&self, index: u64, first: &Record, ov: &Overlay) -> Result<bool> {
        Ok(match first {
            Record::Reaction(r) if self.reaction_claimed(&r.id, ov)? => {
                tracing::info!(index, id = %r.id, member = %r.member, "reaction skipped: another member's reaction to this event applied first");
                false
            }
            Record::BatchRun(r) if !self.batch_step_fits(r, ov)? => {
                tracing::info!(index, jid = %r.jid, expect = r.expect, "batch run step skipped: the run moved on since it was computed");
                false
            }
            _ => true,
        })
    }

    fn reaction_claimed(&self, id: &str, ov: &Overlay) -> Result<bool> {
        let db = self.db()?;
        Ok(ov.reactions.contains(id) || db.get_pinned_cf(db.cf(CF_META)?, crate::reaction::claim_key(id))?.is_some())
    }

    /// Whether the bank a key change acts on holds what the change expects (always,
    /// without an expectation), as of this record: the applied state plus the changes
    /// earlier in the same batch.
    fn expectation_holds(&self, k: &KeySet, ov: &Overlay) -> Result<bool> {
        let Some(expect) = &k.expect else { return Ok(true) };
        let denied_bank = matches!(k.state, KeyState::Denied | KeyState::DeniedCleared);
        let held: Option<(KeyState, Vec<u8>)> = if denied_bank {
            match ov.denied_held.get(&k.id) {
                Some(h) => h.clone().map(|p| (KeyState::Denied, p)),
                None => self.get_denied(&k.id)?.map(|(_, p)| (KeyState::Denied, p)),
            }
        } else {
            self.held_key(&k.id, ov)?
        };
        Ok(match (expect, held) {
            (KeyExpect::Absent, None) => true,
            (KeyExpect::Holds { state, pub_key }, Some((s, p))) => *state == s && *pub_key == p,
            _ => false,
        })
    }

    /// What the keys bank holds for `id` as of this record: the applied state plus the
    /// changes earlier in the same batch.
    pub(super) fn held_key(&self, id: &str, ov: &Overlay) -> Result<Option<(KeyState, Vec<u8>)>> {
        Ok(match ov.keys_held.get(id) {
            Some(h) => h.clone(),
            None => self.get_key(id)?.map(|s| (s.state.key_state(), s.pub_key)),
        })
    }

    /// Whether a key change with `pending_below` has its place: it makes a new pending
    /// key and fewer than the cap are pending as of this record. Anything else (another
    /// state, no cap, the id already pending) has its place.
    fn pending_place(&self, k: &KeySet, ov: &Overlay) -> Result<bool> {
        let Some(cap) = k.pending_below else { return Ok(true) };
        if k.state != KeyState::Pending || self.held_key(&k.id, ov)?.is_some_and(|(s, _)| s == KeyState::Pending) {
            return Ok(true);
        }
        let now = (self.pending_keys() as i64).saturating_add(ov.pending_delta).max(0) as u64;
        Ok(now < cap)
    }
}

/// An entry to apply, borrowed.
struct EntryRef<'a> {
    index: u64,
    id: Option<ProposalId>,
    settled_below: u64,
    records: &'a [Record],
}

/// Changes made earlier in the same apply batch, which later records must see.
#[derive(Default)]
pub(super) struct Overlay {
    keys: HashMap<String, bool>,
    /// What the keys bank holds for an id after this batch's changes so far (`None`:
    /// nothing), and the same for the denied bank (the public key).
    keys_held: HashMap<String, Option<(KeyState, Vec<u8>)>>,
    denied_held: HashMap<String, Option<Vec<u8>>>,
    denied: HashMap<String, bool>,
    pub(super) roots: HashMap<Vec<u8>, Option<RootsMeta>>,
    pub(super) chunks: HashMap<Vec<u8>, Vec<u8>>,
    /// Set-once values written earlier in the same batch (cluster key, AES generations).
    set_once: HashSet<Vec<u8>>,
    /// Reactions claimed earlier in the same batch.
    reactions: HashSet<String>,
    /// eauth tokens created (true) or revoked (false) earlier in the same batch.
    pub(super) tokens: HashMap<Vec<u8>, bool>,
    /// Keys that became pending minus those that stopped being pending, in this batch.
    pending_delta: i64,
    /// Member keys written earlier in the same batch (`member_keys.rs`).
    pub(super) member_keys: HashMap<u64, [u8; 32]>,
    /// Returns (`jid NUL id`) written earlier in the same batch.
    returns: HashSet<Vec<u8>>,
    /// Returns to put (key, value), in the order they were applied: the batch takes them
    /// in key order ([`StateMachine::put_returns`]).
    returns_out: Vec<(Vec<u8>, Vec<u8>)>,
    /// Jobs written earlier in the same batch (a joining group reads them).
    jobs: HashMap<String, JobPublished>,
    /// Batch runs written earlier in the same batch (`batch_runs.rs`).
    pub(super) batch_runs: HashMap<String, crate::batch_run::StoredRun>,
    /// Pushed files' progress written earlier in the same batch (`pushed.rs`).
    pub(super) pushed: HashMap<Vec<u8>, Option<crate::file_recv::PushedMeta>>,
}

