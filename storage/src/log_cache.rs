//! The entries this process appended last, kept in memory so that raft-rs's reads of
//! them are not reads of the log's files.
//!
//! raft-rs reads every entry back from the log at least once after it is written: to
//! apply it (a committed entry is handed over only once it is stable, that is once it
//! is in the log), and on a leader to send it to a follower that did not get it in the
//! first append. raft-engine answers each read with a `pread` of the entry's block, a
//! checksum over it and a decode that copies the data out, which for a lone master is
//! work done twice for every return it stores, and for a `cluster.sync_roots` a second
//! pass over every megabyte it stages.
//!
//! The cache holds a run of consecutive entries (the newest appended), following the
//! log's rules: an append at index `i` replaces the log from `i` on, so it replaces the
//! cache from `i` on; an append after a gap, a snapshot install and a compaction past the
//! cache drop what no longer matches. The data of an entry is a `Bytes`, so handing an
//! entry out is a reference count, not a copy. Memory is bounded twice: at most
//! [`BUDGET`] bytes of entry data, and of the entries already applied only the newest
//! [`KEEP_APPLIED`] bytes (for a follower a little behind), so an idle master holds
//! next to nothing here. A range the cache does not wholly hold is read from the log.

use std::collections::VecDeque;

use raft::eraftpb::Entry;

/// At most this many bytes of entries (data and context) are held.
pub(crate) const BUDGET: usize = 32 << 20;
/// Of the entries already applied, at most this many bytes are held.
pub(crate) const KEEP_APPLIED: usize = 4 << 20;

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct EntryCache {
    /// Consecutive entries, oldest first.
    entries: VecDeque<Entry>,
    /// The bytes [`size`] counts for `entries`.
    bytes: usize,
    /// The highest index applied, as last told ([`EntryCache::applied`]).
    applied: u64,
    /// The bytes of the held entries at or below `applied`.
    applied_bytes: usize,
}

/// What an entry counts against the budget (its payload; the struct itself is small).
fn size(e: &Entry) -> usize {
    e.data.len() + e.context.len() + 64
}

impl EntryCache {
    fn first(&self) -> Option<u64> {
        self.entries.front().map(|e| e.index)
    }

    fn last(&self) -> Option<u64> {
        self.entries.back().map(|e| e.index)
    }

    /// `entries` (consecutive) were written to the log: they replace whatever it held
    /// from their first index on.
    pub(crate) fn appended(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first().map(|e| e.index) else { return };
        match (self.first(), self.last()) {
            (Some(lo), Some(hi)) if first >= lo && first <= hi + 1 => {
                // Keep the entries below `first`; the rest is replaced.
                while self.last().is_some_and(|i| i >= first) {
                    self.pop_back();
                }
            }
            _ => self.clear(),
        }
        for e in entries {
            self.bytes += size(e);
            if e.index <= self.applied {
                self.applied_bytes += size(e);
            }
            self.entries.push_back(e.clone());
        }
        self.trim();
    }

    /// Entries `[low, high)`, if the cache holds every one of them.
    pub(crate) fn get(&self, low: u64, high: u64) -> Option<Vec<Entry>> {
        let (first, last) = (self.first()?, self.last()?);
        if low < first || high > last + 1 || low >= high {
            return None;
        }
        let at = (low - first) as usize;
        Some(self.entries.range(at..at + (high - low) as usize).cloned().collect())
    }

    /// Entries through `index` are applied: only the newest [`KEEP_APPLIED`] bytes of
    /// them stay.
    pub(crate) fn applied(&mut self, index: u64) {
        if index <= self.applied {
            return;
        }
        if let (Some(first), Some(last)) = (self.first(), self.last()) {
            let (from, to) = (first.max(self.applied + 1), last.min(index));
            if from <= to {
                let at = (from - first) as usize;
                self.applied_bytes += self.entries.range(at..=at + (to - from) as usize).map(size).sum::<usize>();
            }
        }
        self.applied = index;
        self.trim();
    }

    /// The log now starts at `first` (a compaction): entries below it go.
    pub(crate) fn compacted(&mut self, first: u64) {
        while self.first().is_some_and(|i| i < first) {
            self.pop_front();
        }
    }

    /// Forgets everything (the log was rewritten by a snapshot).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
        self.applied_bytes = 0;
    }

    fn trim(&mut self) {
        while self.bytes > BUDGET || (self.applied_bytes > KEEP_APPLIED && self.first().is_some_and(|i| i <= self.applied)) {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some(e) = self.entries.pop_front() {
            self.forget(&e);
        }
    }

    fn pop_back(&mut self) {
        if let Some(e) = self.entries.pop_back() {
            self.forget(&e);
        }
    }

    fn forget(&mut self, e: &Entry) {
        self.bytes -= size(e);
        if e.index <= self.applied {
            self.applied_bytes -= size(e);
        }
    }

    /// The bytes held, and of them the bytes of entries already applied.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> (usize, usize) {
        (self.bytes, self.applied_bytes)
    }
}

#[cfg(test)]
#[path = "log_cache_tests.rs"]
mod tests;
