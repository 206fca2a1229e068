//! Exact proposal tracking in the state machine: an entry applies all-or-nothing, a
//! copy of a proposal applied before is skipped, an older incarnation's entry is stale,
//! the same on every member (two state machines fed the same log), and the bookkeeping
//! stays small.

use crate::context::ProposalId;
use crate::entry::LogEntry;
use crate::format::{GrainsReport, KeySet, KeyState, Record};
use crate::state::{Outcome, StateMachine, CF_PROPOSALS};

fn grains(id: &str, v: u8) -> Record {
    Record::GrainsReport(GrainsReport { id: id.into(), grains: vec![0x91, v], time_ns: v as u64 })
}

fn entry(index: u64, proposer: u64, incarnation: u64, seq: u64, settled_below: u64, records: Vec<Record>) -> LogEntry {
    LogEntry { index, id: Some(ProposalId { proposer, incarnation, seq }), settled_below, records }
}

fn open(d: &tempfile::TempDir, name: &str) -> StateMachine {
    StateMachine::open(&d.path().join(name)).unwrap()
}

/// A log where proposer 7's proposal 1 was handed to raft twice (a forward resubmitted
/// after a leader change) around a newer write of the same key by proposer 8, and a
/// proposal of an older incarnation of 7 commits after its restart.
fn log() -> Vec<LogEntry> {
    vec![
        entry(1, 7, 100, 1, 1, vec![grains("a", 1), grains("b", 1)]),
        entry(2, 8, 50, 1, 1, vec![grains("a", 2)]),
        // The resubmitted copy: applying it again would undo proposer 8's newer write.
        entry(3, 7, 100, 1, 1, vec![grains("a", 1), grains("b", 1)]),
        entry(4, 7, 100, 2, 2, vec![grains("c", 1)]),
        // 7 restarted (incarnation 200) and proposed again...
        entry(5, 7, 200, 1, 1, vec![grains("d", 1)]),
        // ...then a proposal of the old process commits: nobody waits for it.
        entry(6, 7, 100, 3, 3, vec![grains("a", 9)]),
        // An untracked entry (an old log's, or an offline replay's) always applies.
        LogEntry::plain(7, vec![grains("e", 1)]),
    ]
}

#[test]
fn a_resubmitted_proposal_applies_once_and_stale_ones_not_at_all_on_every_member() {
    let d = tempfile::tempdir().unwrap();
    let want = vec![Outcome::Applied, Outcome::Applied, Outcome::Duplicate, Outcome::Applied, Outcome::Applied, Outcome::Stale, Outcome::Applied];
    // Member one applies the log in one batch, member two entry by entry.
    let one = open(&d, "one");
    assert_eq!(one.apply_entries(&log()).unwrap().outcomes, want);
    let two = open(&d, "two");
    let outcomes: Vec<Outcome> = log().into_iter().flat_map(|e| two.apply_entries(&[e]).unwrap().outcomes).collect();
    assert_eq!(outcomes, want);
    for sm in [&one, &two] {
        assert_eq!(sm.grains("a").unwrap(), Some(vec![0x91, 2]), "the newer write stands");
        for id in ["b", "c", "d", "e"] {
            assert!(sm.grains(id).unwrap().is_some(), "{id}");
        }
        assert_eq!(sm.applied_index().unwrap(), 7);
        assert_eq!(sm.proposer_mark(7).unwrap(), Some((200, 2)), "past the applied seq 1");
    }
    assert_eq!(one.scan(CF_PROPOSALS, b"").unwrap(), two.scan(CF_PROPOSALS, b"").unwrap());
    // Entries at or below the applied index are past; re-applying changes nothing.
    assert!(one.apply_entries(&log()).unwrap().outcomes.iter().all(|o| *o == Outcome::Past));
}

#[test]
fn an_entry_is_all_or_nothing() {
    let d = tempfile::tempdir().unwrap();
    let sm = open(&d, "s");
    let pk = |id: &str| format!("PUB {id}").into_bytes();
    let recs = vec![Record::KeySet(KeySet::new("k1", KeyState::Pending, pk("k1"), 1)), Record::KeySet(KeySet::new("k2", KeyState::Pending, pk("k2"), 1)), grains("k1", 1)];
    let fx = sm.apply_entries(&[entry(1, 3, 1, 5, 5, recs.clone())]).unwrap();
    assert_eq!(fx.outcomes, vec![Outcome::Applied]);
    assert_eq!(fx.effects.len(), 2);
    // Its copy: none of its records, no effects.
    sm.apply_entries(&[entry(2, 9, 1, 1, 1, vec![Record::KeySet(KeySet::new("k2", KeyState::Deleted, vec![], 2))])]).unwrap();
    let fx = sm.apply_entries(&[entry(3, 3, 1, 5, 5, recs)]).unwrap();
    assert_eq!((fx.outcomes, fx.effects.len()), (vec![Outcome::Duplicate], 0));
    assert!(sm.get_key("k2").unwrap().is_none(), "the deleted key stays deleted");
}

#[test]
fn the_settled_mark_prunes_the_bookkeeping_and_skips_what_it_covers() {
    let d = tempfile::tempdir().unwrap();
    let sm = open(&d, "s");
    // Proposal 1 waits (say, its forward was lost) while 2..=200 apply.
    let mut index = 0;
    let mut next = |seq, settled| {
        index += 1;
        entry(index, 4, 1, seq, settled, vec![grains("x", seq as u8)])
    };
    let batch: Vec<LogEntry> = (2..=200).map(|s| next(s, 1)).collect();
    sm.apply_entries(&batch).unwrap();
    assert_eq!(sm.count(CF_PROPOSALS).unwrap(), 1 + 199);
    // Proposal 1 applies, and the next entry says everything below 201 is settled.
    let e1 = next(1, 1);
    let e201 = next(201, 201);
    assert_eq!(sm.apply_entries(&[e1.clone(), e201]).unwrap().outcomes, vec![Outcome::Applied, Outcome::Applied]);
    assert_eq!(sm.count(CF_PROPOSALS).unwrap(), 1, "the mark alone: it moved over 1..=201, all applied");
    assert_eq!(sm.proposer_mark(4).unwrap(), Some((1, 202)));
    // Anything below the mark is skipped, found or not.
    let again = LogEntry { index: 1000, ..e1 };
    assert_eq!(sm.apply_entries(&[again]).unwrap().outcomes, vec![Outcome::Duplicate]);
    // A mark far ahead (a long-waiting proposal settled at last) prunes with a range.
    let far = entry(1001, 4, 1, 100_000, 100_000, vec![grains("y", 1)]);
    assert_eq!(sm.apply_entries(&[far]).unwrap().outcomes, vec![Outcome::Applied]);
    assert_eq!(sm.count(CF_PROPOSALS).unwrap(), 1);
    // A new incarnation drops what the old one left.
    let restarted = entry(1002, 4, 2, 1, 1, vec![grains("z", 1)]);
    assert_eq!(sm.apply_entries(&[restarted]).unwrap().outcomes, vec![Outcome::Applied]);
    assert_eq!(sm.count(CF_PROPOSALS).unwrap(), 1);
    assert_eq!(sm.proposer_mark(4).unwrap(), Some((2, 2)));
}

#[test]
fn a_mark_above_the_entry_itself_is_capped_at_its_seq() {
    // A hostile or buggy context claiming its own proposal is settled must not make the
    // entry's copies apply twice or hide it.
    let d = tempfile::tempdir().unwrap();
    let sm = open(&d, "s");
    let e = entry(1, 6, 1, 3, u64::MAX, vec![grains("q", 1)]);
    assert_eq!(sm.apply_entries(std::slice::from_ref(&e)).unwrap().outcomes, vec![Outcome::Applied]);
    assert_eq!(sm.proposer_mark(6).unwrap(), Some((1, 4)), "capped at 3, then past 3 itself");
    assert_eq!(sm.apply_entries(&[LogEntry { index: 2, ..e }]).unwrap().outcomes, vec![Outcome::Duplicate]);
}

/// Under load, proposals apply in the order they were made, in group entries whose
/// settled mark lags a group behind (the proposer still waits for the group before).
/// The mark moves over them all, so the family holds the proposer's mark and nothing
/// else after every batch: no key is put for a proposal and deleted a batch later.
#[test]
fn proposals_applied_in_order_leave_only_the_mark() {
    let d = tempfile::tempdir().unwrap();
    let sm = open(&d, "in-order");
    let mut seq: u64 = 0;
    for index in 1..=20u64 {
        let first = seq + 1;
        let settled_below = first.saturating_sub(100).max(1);
        let group: Vec<LogEntry> = (0..100)
            .map(|_| {
                seq += 1;
                entry(index, 5, 1, seq, settled_below, vec![grains("r", seq as u8)])
            })
            .collect();
        assert!(sm.apply_entries(&group).unwrap().outcomes.iter().all(|o| *o == Outcome::Applied));
        assert_eq!(sm.count(CF_PROPOSALS).unwrap(), 1, "after entry {index}");
        assert_eq!(sm.proposer_mark(5).unwrap(), Some((1, seq + 1)));
    }
    // A copy of an early proposal is still a duplicate.
    let copy = entry(21, 5, 1, 150, 150, vec![grains("r", 0)]);
    assert_eq!(sm.apply_entries(&[copy]).unwrap().outcomes, vec![Outcome::Duplicate]);
}

/// A group entry: its proposals share its index, each applies (once) on its own; a copy
/// of the group later in the log applies none of them; a replay of the entry is past.
#[test]
fn the_proposals_of_a_group_entry_apply_each_once() {
    let d = tempfile::tempdir().unwrap();
    let sm = open(&d, "g");
    let group = |index| vec![entry(index, 7, 100, 1, 1, vec![grains("a", 1)]), entry(index, 7, 100, 2, 1, vec![grains("b", 1), grains("c", 1)]), entry(index, 7, 100, 3, 1, vec![grains("d", 1)])];
    let out = sm.apply_entries(&group(1)).unwrap();
    assert_eq!(out.outcomes, vec![Outcome::Applied; 3]);
    for id in ["a", "b", "c", "d"] {
        assert!(sm.grains(id).unwrap().is_some(), "{id}");
    }
    assert_eq!(sm.applied_index().unwrap(), 1);
    // The same group again at index 2 (a duplicated forward), with one new proposal.
    let mut again = group(2);
    again.push(entry(2, 7, 100, 4, 1, vec![grains("e", 1)]));
    let out = sm.apply_entries(&again).unwrap();
    assert_eq!(out.outcomes, vec![Outcome::Duplicate, Outcome::Duplicate, Outcome::Duplicate, Outcome::Applied]);
    // Entry 1 handed over once more: past, every proposal of it.
    assert_eq!(sm.apply_entries(&group(1)).unwrap().outcomes, vec![Outcome::Past; 3]);
    // The same log applied in one batch gives the same outcomes.
    let other = open(&d, "h");
    let mut all = group(1);
    all.extend(again);
    let out = other.apply_entries(&all).unwrap();
    assert_eq!(out.outcomes, [vec![Outcome::Applied; 3], vec![Outcome::Duplicate; 3], vec![Outcome::Applied]].concat());
}

mod model {
    //! The bookkeeping against a model of its rules, whatever the batches: a log of
    //! proposals from a few proposers (copies, restarts, late entries of an older
    //! incarnation, marks that lag or jump) applied in one batch, entry by entry, and in
    //! random batches with the state machine reopened between some of them (so what is
    //! kept in memory starts over) gives the model's outcomes and leaves exactly the
    //! model's keys in the family.

    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    struct Step {
        proposer: u64,
        /// Index into the proposer's incarnations (1, 2, 3).
        incarnation: u64,
        seq: u64,
        /// How far below its seq the proposer's lowest waiting proposal is.
        lag: u64,
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        prop::collection::vec((1u64..=3, 1u64..=3, 1u64..=40, 0u64..=6).prop_map(|(proposer, incarnation, seq, lag)| Step { proposer, incarnation, seq, lag }), 1..120)
    }

    /// The rules (`state/proposals.rs`, module docs): the outcome of each entry and the
    /// family's content after all of them.
    fn model(log: &[LogEntry]) -> (Vec<Outcome>, Vec<(Vec<u8>, Vec<u8>)>) {
        // proposer -> (incarnation, mark, applied seqs of that incarnation)
        let mut st: BTreeMap<u64, (u64, u64, BTreeSet<u64>)> = BTreeMap::new();
        let mut out = Vec::new();
        for e in log {
            let id = e.id.unwrap();
            let o = match st.get_mut(&id.proposer) {
                Some((inc, _, _)) if id.incarnation < *inc => Outcome::Stale,
                Some((inc, mark, applied)) if id.incarnation == *inc => {
                    if id.seq < *mark || applied.contains(&id.seq) {
                        Outcome::Duplicate
                    } else {
                        applied.insert(id.seq);
                        *mark = (*mark).max(e.settled_below.min(id.seq));
                        while applied.contains(mark) {
                            *mark += 1;
                        }
                        Outcome::Applied
                    }
                }
                _ => {
                    let mut mark = e.settled_below.min(id.seq);
                    if mark == id.seq {
                        mark += 1;
                    }
                    st.insert(id.proposer, (id.incarnation, mark, BTreeSet::from([id.seq])));
                    Outcome::Applied
                }
            };
            out.push(o);
        }
        let mut keys = Vec::new();
        for (p, (inc, mark, applied)) in &st {
            let mut v = inc.to_be_bytes().to_vec();
            v.extend_from_slice(&mark.to_be_bytes());
            keys.push((p.to_be_bytes().to_vec(), v));
            for s in applied.range(*mark..) {
                let mut k = p.to_be_bytes().to_vec();
                k.extend_from_slice(&inc.to_be_bytes());
                k.extend_from_slice(&s.to_be_bytes());
                keys.push((k, vec![]));
            }
        }
        keys.sort();
        (out, keys)
    }

    fn log_of(steps: &[Step]) -> Vec<LogEntry> {
        steps.iter().enumerate().map(|(i, s)| entry(i as u64 + 1, s.proposer, s.incarnation, s.seq, s.seq.saturating_sub(s.lag).max(1), vec![grains("x", i as u8)])).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
        #[test]
        fn any_batching_gives_the_models_outcomes_and_keys(steps in steps(), cuts in prop::collection::vec(any::<bool>(), 120), reopen in prop::collection::vec(any::<bool>(), 120)) {
            let log = log_of(&steps);
            let (want, keys) = model(&log);
            let d = tempfile::tempdir().unwrap();

            let one = open(&d, "one");
            prop_assert_eq!(&one.apply_entries(&log).unwrap().outcomes, &want);
            prop_assert_eq!(&one.scan(CF_PROPOSALS, b"").unwrap(), &keys);

            let each = open(&d, "each");
            let got: Vec<Outcome> = log.iter().flat_map(|e| each.apply_entries(std::slice::from_ref(e)).unwrap().outcomes).collect();
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(&each.scan(CF_PROPOSALS, b"").unwrap(), &keys);

            let mut some = Some(open(&d, "some"));
            let mut got = Vec::new();
            let mut batch = Vec::new();
            for (i, e) in log.iter().enumerate() {
                batch.push(e.clone());
                if cuts[i] || i + 1 == log.len() {
                    got.extend(some.as_ref().unwrap().apply_entries(&batch).unwrap().outcomes);
                    batch.clear();
                    if reopen[i] {
                        // Closed first: one process may hold a database only once.
                        drop(some.take());
                        some = Some(open(&d, "some"));
                    }
                }
            }
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(&some.unwrap().scan(CF_PROPOSALS, b"").unwrap(), &keys);
        }
    }
}
