//! The terms of the entries this process appended to the log, in memory.
//!
//! raft-rs asks the log for an entry's term all the time: the previous entry's term of
//! every append it sends, the term of every index a follower acknowledges, each
//! commit's check that the entry is of the current term. raft-engine answers that only
//! by reading the whole entry back from its file, so with entries of megabytes (a
//! `cluster.sync_roots` stages its files in entries of megabytes) each question cost
//! a read of megabytes and as many bytes allocated, faulted in and freed.
//!
//! Terms change rarely along a log, so they are kept as runs: `(first index, term)`,
//! each run lasting until the next one or the last index appended. Every append goes
//! through [`crate::log::RaftLog::append`], which records its entries here (an append
//! at index `i` replaces the log from `i` on, and so replaces the runs from `i` on).
//! Only what this process appended is known; an index below that, or after a snapshot
//! was installed (which rewrites the log), is read from the log as before.

use raft::eraftpb::Entry;

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Terms {
    /// `(first index, term)`, in index order; the last one lasts until `last`.
    runs: Vec<(u64, u64)>,
    /// The last index known (0: nothing known).
    last: u64,
}

impl Terms {
    /// `entries` (consecutive) were appended: they replace whatever the log held from
    /// their first index on.
    pub(crate) fn appended(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first().map(|e| e.index) else { return };
        let known_from = self.runs.first().map_or(0, |r| r.0);
        if self.runs.is_empty() || first < known_from || first > self.last + 1 {
            // Below what is known (the log was rewritten from there) or past a gap.
            self.runs.clear();
        } else {
            let keep = self.runs.partition_point(|r| r.0 < first);
            self.runs.truncate(keep);
        }
        for e in entries {
            if self.runs.last().is_none_or(|r| r.1 != e.term) {
                self.runs.push((e.index, e.term));
            }
        }
        self.last = entries.last().map_or(self.last, |e| e.index);
    }

    /// The term of the entry at `index`, if known.
    pub(crate) fn get(&self, index: u64) -> Option<u64> {
        if index > self.last || self.runs.first().is_none_or(|r| index < r.0) {
            return None;
        }
        let at = self.runs.partition_point(|r| r.0 <= index);
        Some(self.runs[at - 1].1)
    }

    /// Forgets everything (the log was rewritten by a snapshot).
    pub(crate) fn clear(&mut self) {
        self.runs.clear();
        self.last = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(first: u64, terms: &[u64]) -> Vec<Entry> {
        terms.iter().enumerate().map(|(i, t)| Entry { index: first + i as u64, term: *t, ..Default::default() }).collect()
    }

    #[test]
    fn terms_follow_appends_and_the_suffixes_they_replace() {
        let mut t = Terms::default();
        assert_eq!(t.get(1), None);
        t.appended(&entries(5, &[1, 1, 2, 2, 2]));
        assert_eq!((t.get(4), t.get(5), t.get(6), t.get(7), t.get(9), t.get(10)), (None, Some(1), Some(1), Some(2), Some(2), None));
        // A new leader's entries replace the tail from 8 on.
        t.appended(&entries(8, &[3, 3, 3]));
        assert_eq!((t.get(7), t.get(8), t.get(10), t.get(11)), (Some(2), Some(3), Some(3), None));
        // And from 6 on, with an older term than the replaced ones.
        t.appended(&entries(6, &[2]));
        assert_eq!((t.get(5), t.get(6), t.get(7), t.get(8)), (Some(1), Some(2), None, None));
        // Below what is known, or after a gap: only the new entries are known.
        t.appended(&entries(2, &[1]));
        assert_eq!((t.get(2), t.get(3), t.get(5)), (Some(1), None, None));
        t.appended(&entries(9, &[4]));
        assert_eq!((t.get(2), t.get(9)), (None, Some(4)));
        t.clear();
        assert_eq!(t.get(9), None);
    }
}
