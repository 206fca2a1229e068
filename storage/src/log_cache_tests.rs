//! Tests of the cache of the newest entries (`log_cache.rs`).

use super::*;

fn entries(first: u64, term: u64, n: u64, bytes: usize) -> Vec<Entry> {
    (first..first + n).map(|index| Entry { index, term, data: vec![index as u8; bytes].into(), ..Default::default() }).collect()
}

fn indexes(got: Option<Vec<Entry>>) -> Option<Vec<(u64, u64)>> {
    got.map(|es| es.iter().map(|e| (e.index, e.term)).collect())
}

/// The bytes counted are those of the entries held, recounted from scratch.
fn assert_counts(c: &EntryCache) {
    let all: usize = c.entries.iter().map(size).sum();
    let applied: usize = c.entries.iter().filter(|e| e.index <= c.applied).map(size).sum();
    assert_eq!(c.bytes(), (all, applied));
}

#[test]
fn appends_replace_the_suffix_they_overlap_and_a_gap_starts_over() {
    let mut c = EntryCache::default();
    assert_eq!(indexes(c.get(1, 2)), None);
    c.appended(&entries(5, 1, 5, 10));
    assert_eq!(indexes(c.get(5, 7)), Some(vec![(5, 1), (6, 1)]));
    assert_eq!(indexes(c.get(4, 6)), None, "a range the cache does not wholly hold");
    assert_eq!(indexes(c.get(9, 11)), None);
    assert_eq!(indexes(c.get(6, 6)), None);
    // A new leader's entries replace the tail from 7 on.
    c.appended(&entries(7, 2, 1, 10));
    assert_eq!(indexes(c.get(5, 8)), Some(vec![(5, 1), (6, 1), (7, 2)]));
    assert_eq!(indexes(c.get(8, 9)), None, "the replaced entries are gone");
    assert_counts(&c);
    // Right after the last: appended on.
    c.appended(&entries(8, 2, 2, 10));
    assert_eq!(indexes(c.get(5, 10)).map(|v| v.len()), Some(5));
    // Below what is held, or after a gap: only the new entries are held.
    c.appended(&entries(2, 3, 1, 10));
    assert_eq!((indexes(c.get(2, 3)), indexes(c.get(5, 6))), (Some(vec![(2, 3)]), None));
    c.appended(&entries(9, 4, 1, 10));
    assert_eq!((indexes(c.get(2, 3)), indexes(c.get(9, 10))), (None, Some(vec![(9, 4)])));
    assert_counts(&c);
    c.clear();
    assert_eq!(indexes(c.get(9, 10)), None);
    assert_counts(&c);
}

#[test]
fn a_compaction_drops_what_the_log_no_longer_holds() {
    let mut c = EntryCache::default();
    c.appended(&entries(1, 1, 10, 10));
    c.compacted(4);
    assert_eq!((indexes(c.get(3, 4)), indexes(c.get(4, 11)).map(|v| v.len())), (None, Some(7)));
    c.compacted(20);
    assert_eq!(indexes(c.get(10, 11)), None);
    assert_counts(&c);
}

#[test]
fn applied_entries_are_let_go_beyond_a_small_tail() {
    let mb = 1 << 20;
    let mut c = EntryCache::default();
    c.appended(&entries(1, 1, 10, mb));
    assert_eq!(indexes(c.get(1, 11)).map(|v| v.len()), Some(10), "nothing applied: all held");
    c.applied(8);
    assert_counts(&c);
    let (_, applied) = c.bytes();
    assert!(applied <= KEEP_APPLIED, "{applied} bytes of applied entries held");
    // The newest applied entries stay, for a follower a little behind; the unapplied all.
    assert!(c.get(8, 11).is_some());
    assert!(c.get(1, 2).is_none());
    // Applying more lets more go; an older index changes nothing.
    c.applied(10);
    c.applied(3);
    assert!(c.get(10, 11).is_some() && c.get(6, 7).is_none());
    assert_counts(&c);
    // Entries appended after are counted as not applied.
    c.appended(&entries(11, 1, 2, mb));
    assert!(c.get(9, 13).is_some());
    assert_counts(&c);
}

#[test]
fn the_cache_never_holds_more_than_its_budget() {
    let mut c = EntryCache::default();
    let big = 3 << 20;
    c.appended(&entries(1, 1, 8, big));
    c.appended(&entries(9, 1, 8, big));
    let (bytes, _) = c.bytes();
    assert!(bytes <= BUDGET, "{bytes} bytes held");
    assert!(c.get(16, 17).is_some(), "the newest entries are the ones kept");
    assert!(c.get(1, 2).is_none());
    assert_counts(&c);
    // One entry over the budget by itself is not held (the log has it).
    c.appended(&entries(17, 1, 1, BUDGET + 1));
    assert!(c.get(17, 18).is_none());
    assert_counts(&c);
}
