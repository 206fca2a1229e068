//! A raft entry's data: the records of one proposal, or of a group of proposals.
//!
//! A proposal's records are in one entry, whatever their number, so that they commit,
//! are deduplicated and are applied as one unit (`state/proposals.rs`) and the proposer
//! answers once, for exactly that proposal. The entry's `data` is:
//!
//! - **one record**: the framed record itself (`format.rs`);
//! - **several records**: a batch:
//!
//! ```text
//! offset  size  field
//! 0       2     magic, the ASCII bytes "HB" (0x48 0x42)
//! 2       1     batch version, 1
//! 3       1     reserved, 0
//! 4       4     count N of records, u32 LE, 2 ..= MAX_BATCH_RECORDS
//! 8       ...   N framed records back to back (each with its own header and CRC)
//! ```
//!
//! The whole entry is at most [`MAX_ENTRY_LEN`] bytes (one record of the largest
//! payload fits). A decoder checks the bounds before it allocates (the count against
//! what the bytes could hold), every record as [`Record::decode_prefix`] does, and that
//! the records end exactly where the entry ends; any failure is an
//! [`Error::BadRecord`] naming the offset, never a panic.
//!
//! - **several proposals** of one proposer (a group):
//!   concurrent proposals handed to raft together share one entry, so a burst of
//!   thousands of one-record proposals (a job's returns) costs raft a few entries, not
//!   thousands. Each keeps its own identity and is deduplicated and answered on its own:
//!
//! ```text
//! offset  size  field
//! 0       2     magic, the ASCII bytes "HG" (0x48 0x47)
//! 2       1     group version, 1
//! 3       1     reserved, 0
//! 4       4     count N of proposals, u32 LE, 2 ..= MAX_GROUP_PROPOSALS
//! 8       ...   N items: seq u64 LE (the proposal's sequence number; its proposer and
//!               incarnation are the entry context's), len u32 LE, then len bytes of
//!               the proposal's data (one record or a batch, never a group)
//! ```
//!
//! [`LogEntry`] is a proposal as the state machine sees it: its entry's index, the
//! proposal identity (the [context](crate::context)'s, with a group item's own sequence
//! number), and its records. A group entry gives one per item, all with its index.

use std::io::Write;
use std::ops::Range;

use raft::eraftpb::{Entry, EntryType};

use crate::context::{self, ProposalId};
use crate::error::{Error, Result};
use crate::format::{Record, HEADER_LEN, MAGIC};

/// The magic of a batch entry.
pub const BATCH_MAGIC: [u8; 2] = *b"HB";
/// The batch layout version this build writes and reads.
pub const BATCH_VERSION: u8 = 1;
/// Length of a batch's header.
pub const BATCH_HEADER_LEN: usize = 8;
/// Upper bound of an entry's data.
pub const MAX_ENTRY_LEN: usize = 65 << 20;
/// Upper bound of the records in one batch.
pub const MAX_BATCH_RECORDS: usize = 1 << 20;
/// The magic of a group entry.
pub const GROUP_MAGIC: [u8; 2] = *b"HG";
/// The group layout version this build writes and reads.
pub const GROUP_VERSION: u8 = 1;
/// Length of a group's header.
pub const GROUP_HEADER_LEN: usize = 8;
/// Length of a group item's header (seq and len).
pub const GROUP_ITEM_HEADER_LEN: usize = 12;
/// Upper bound of the proposals in one group.
pub const MAX_GROUP_PROPOSALS: usize = 1 << 16;

/// The data of one entry holding several proposals (`(seq, data)` each, in order;
/// each `data` as [`Record::encode_batch`] makes it). Refuses fewer than two, more
/// than [`MAX_GROUP_PROPOSALS`], a group inside a group, and more than
/// [`MAX_ENTRY_LEN`] bytes.
pub fn encode_group(items: &[(u64, &[u8])]) -> Result<Vec<u8>> {
    if !(2..=MAX_GROUP_PROPOSALS).contains(&items.len()) {
        return Err(Error::Invalid(format!("a group holds 2 to {MAX_GROUP_PROPOSALS} proposals, not {}", items.len())));
    }
    let len = GROUP_HEADER_LEN + items.iter().map(|(_, d)| GROUP_ITEM_HEADER_LEN + d.len()).sum::<usize>();
    if len > MAX_ENTRY_LEN {
        return Err(Error::Invalid(format!("a group of {} proposals is {len} bytes, over the {MAX_ENTRY_LEN}-byte limit of one entry", items.len())));
    }
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&GROUP_MAGIC);
    out.push(GROUP_VERSION);
    out.push(0);
    out.extend_from_slice(&(items.len() as u32).to_le_bytes());
    for (seq, data) in items {
        if data.starts_with(&GROUP_MAGIC) {
            return Err(Error::Invalid("a group cannot hold a group".into()));
        }
        out.extend_from_slice(&seq.to_le_bytes());
        // At most MAX_ENTRY_LEN (checked above), so it fits a u32.
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(data);
    }
    Ok(out)
}

/// A group entry's items: `(seq, data)`, borrowed from the entry.
pub type GroupItems<'a> = Vec<(u64, &'a [u8])>;

/// The items `(seq, data)` of a group entry's data, or `None` when `buf` is not a
/// group (a record or a batch). Bounds are checked before anything is allocated; an
/// item that is itself a group is refused.
pub fn decode_group(buf: &[u8]) -> Result<Option<GroupItems<'_>>> {
    if buf.len() < 2 || buf[0..2] != GROUP_MAGIC {
        return Ok(None);
    }
    if buf.len() > MAX_ENTRY_LEN {
        return Err(bad(0, format!("entry of {} bytes exceeds the {MAX_ENTRY_LEN}-byte limit", buf.len())));
    }
    let count = checked_count(buf, Layout { name: "group", version: GROUP_VERSION, item_min: GROUP_ITEM_HEADER_LEN, max: MAX_GROUP_PROPOSALS, items: "proposals" })?;
    let mut out = Vec::with_capacity(count);
    let mut at = GROUP_HEADER_LEN;
    for i in 0..count {
        let Some(head) = buf.get(at..at + GROUP_ITEM_HEADER_LEN) else {
            return Err(bad(at, format!("item {i} of the group: its header is cut off")));
        };
        let seq = u64::from_le_bytes(head[0..8].try_into().unwrap_or([0; 8]));
        let len = u32::from_le_bytes(head[8..12].try_into().unwrap_or([0; 4])) as usize;
        let start = at + GROUP_ITEM_HEADER_LEN;
        let Some(data) = buf.get(start..start.saturating_add(len)) else {
            return Err(bad(at + 8, format!("item {i} of the group declares {len} bytes, {} are left", buf.len() - start)));
        };
        if data.starts_with(&GROUP_MAGIC) {
            return Err(bad(start, format!("item {i} of the group is itself a group")));
        }
        out.push((seq, data));
        at = start + len;
    }
    if at != buf.len() {
        return Err(bad(at, format!("{} trailing bytes after the group's {count} proposals", buf.len() - at)));
    }
    Ok(Some(out))
}

impl Record {
    /// The data of one entry holding `records`, in order: the record itself for one, a
    /// batch for several. Refuses none, too many, and more than [`MAX_ENTRY_LEN`] bytes.
    pub fn encode_batch(records: &[Record]) -> Result<Vec<u8>> {
        match records {
            [] => Err(Error::Invalid("an entry needs at least one record".into())),
            [one] => one.encode(),
            _ if records.len() > MAX_BATCH_RECORDS => Err(Error::Invalid(format!("{} records exceed the {MAX_BATCH_RECORDS}-record limit of one entry", records.len()))),
            _ => {
                let mut out = Vec::with_capacity(BATCH_HEADER_LEN + records.len() * 256);
                out.extend_from_slice(&BATCH_MAGIC);
                out.push(BATCH_VERSION);
                out.push(0);
                out.extend_from_slice(&(records.len() as u32).to_le_bytes());
                for r in records {
                    out.extend_from_slice(&r.encode()?);
                    if out.len() > MAX_ENTRY_LEN {
                        return Err(Error::Invalid(format!("{} records exceed the {MAX_ENTRY_LEN}-byte limit of one entry", records.len())));
                    }
                }
                Ok(out)
            }
        }
    }

    /// The records of one entry's data (a plain record, a batch, or every proposal's of
    /// a group, in order).
    pub fn decode_entry(buf: &[u8]) -> Result<Vec<Record>> {
        if let Some(items) = decode_group(buf)? {
            let mut out = Vec::new();
            for (i, (_, data)) in items.into_iter().enumerate() {
                out.extend(Record::decode_entry(data).map_err(|e| match e {
                    Error::BadRecord { offset, why } => Error::BadRecord { offset, why: format!("proposal {i} of the group: {why}") },
                    other => other,
                })?);
            }
            return Ok(out);
        }
        if buf.len() > MAX_ENTRY_LEN {
            return Err(bad(0, format!("entry of {} bytes exceeds the {MAX_ENTRY_LEN}-byte limit", buf.len())));
        }
        if buf.len() < 2 || buf[0..2] != BATCH_MAGIC {
            // A single record; its decoder reports a wrong magic.
            return Ok(vec![Record::decode(buf)?]);
        }
        let count = checked_count(buf, Layout { name: "batch", version: BATCH_VERSION, item_min: HEADER_LEN, max: MAX_BATCH_RECORDS, items: "records" })?;
        let mut out = Vec::with_capacity(count);
        let mut at = BATCH_HEADER_LEN;
        for i in 0..count {
            let (rec, used) = Record::decode_prefix(&buf[at..]).map_err(|e| match e {
                Error::BadRecord { offset, why } => bad(at + offset as usize, format!("record {i} of the batch: {why}")),
                other => other,
            })?;
            out.push(rec);
            at += used;
        }
        if at != buf.len() {
            return Err(bad(at, format!("{} trailing bytes after the batch's {count} records", buf.len() - at)));
        }
        Ok(out)
    }

    /// The length of this record's framed bytes, computed without building them.
    pub fn encoded_len(&self) -> Result<usize> {
        let mut n = Counter(0);
        rmp_serde::encode::write_named(&mut n, self).map_err(|e| Error::Invalid(format!("cannot encode {} record: {e}", self.kind().name())))?;
        Ok(HEADER_LEN + n.0)
    }

    /// Cuts `records` (in order) into groups that each make one entry of at most
    /// `max_records` records and `max_len` bytes (capped at [`MAX_ENTRY_LEN`]). A record
    /// too large for `max_len` on its own gets a group of its own.
    pub fn fit_groups(records: Vec<Record>, max_records: usize, max_len: usize) -> Result<Vec<Vec<Record>>> {
        let ranges = Self::fit_ranges(&records, max_records, max_len)?;
        let mut rest = records.into_iter();
        Ok(ranges.into_iter().map(|r| rest.by_ref().take(r.len()).collect()).collect())
    }

    /// [`Record::fit_groups`] as index ranges into `records` (nothing is copied).
    pub fn fit_ranges(records: &[Record], max_records: usize, max_len: usize) -> Result<Vec<Range<usize>>> {
        let max_records = max_records.clamp(1, MAX_BATCH_RECORDS);
        let max_len = max_len.min(MAX_ENTRY_LEN);
        let mut out = Vec::new();
        let (mut start, mut len) = (0, BATCH_HEADER_LEN);
        for (i, r) in records.iter().enumerate() {
            let n = r.encoded_len()?;
            if i > start && (i - start >= max_records || len + n > max_len) {
                out.push(start..i);
                (start, len) = (i, BATCH_HEADER_LEN);
            }
            len += n;
        }
        if start < records.len() {
            out.push(start..records.len());
        }
        Ok(out)
    }
}

/// Counts the bytes written to it.
struct Counter(usize);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A batch's or a group's 8-byte header, as [`checked_count`] reads it.
struct Layout {
    name: &'static str,
    version: u8,
    /// The fewest bytes an item takes (its header).
    item_min: usize,
    max: usize,
    items: &'static str,
}

/// The item count of a batch's or a group's header (magic, version, reserved byte, u32
/// LE count), checked: the version this build reads, a zero reserved byte, and a count
/// from 2 to the layout's maximum that the bytes could hold (every item takes at least
/// `item_min` bytes), so a hostile count is refused before anything is allocated.
fn checked_count(buf: &[u8], l: Layout) -> Result<usize> {
    const HEADER: usize = 8;
    const _: () = assert!(BATCH_HEADER_LEN == HEADER && GROUP_HEADER_LEN == HEADER);
    if buf.len() < HEADER {
        return Err(bad(0, format!("{} bytes, shorter than the {HEADER}-byte {} header", buf.len(), l.name)));
    }
    if buf[2] != l.version {
        return Err(bad(2, format!("unknown {} version {} (this build reads version {})", l.name, buf[2], l.version)));
    }
    if buf[3] != 0 {
        return Err(bad(3, format!("reserved {} byte is {}, not 0", l.name, buf[3])));
    }
    let count = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    let room = (buf.len() - HEADER) / l.item_min;
    if !(2..=l.max).contains(&count) || count > room {
        return Err(bad(4, format!("{} of {count} {} refused (2 to {}, and at most {room} fit in {} bytes)", l.name, l.items, l.max, buf.len())));
    }
    Ok(count)
}

fn bad(offset: usize, why: impl Into<String>) -> Error {
    Error::BadRecord { offset: offset as u64, why: why.into() }
}

/// A committed entry that carries records, as the state machine applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub index: u64,
    /// The proposal the entry carries, when its context names one (see
    /// [`context::EntryContext::id`]); entries without one apply unconditionally.
    pub id: Option<ProposalId>,
    /// The proposer's settled mark at the time it handed the entry to raft.
    pub settled_below: u64,
    pub records: Vec<Record>,
}

impl LogEntry {
    /// An entry that names no proposal (tests, replays of records without entries).
    pub fn plain(index: u64, records: Vec<Record>) -> Self {
        LogEntry { index, id: None, settled_below: 0, records }
    }

    /// Reads a raft entry: its proposals (none for entries without records: a new
    /// leader's empty entry, membership changes; one, or a group's several), an error
    /// when its data does not decode. A context that does not decode names no proposal
    /// (logged; every member reads it the same).
    pub fn from_raft(e: &Entry) -> Result<Vec<LogEntry>> {
        if e.data.is_empty() || e.get_entry_type() != EntryType::EntryNormal {
            return Ok(Vec::new());
        }
        let ctx = match context::decode(&e.context) {
            Ok(c) => c,
            Err(err) => {
                tracing::warn!(index = e.index, "entry context not understood, the entry is applied untracked: {err}");
                None
            }
        };
        let (id, settled_below) = (ctx.and_then(|c| c.id()), ctx.map_or(0, |c| c.settled_below));
        let Some(items) = decode_group(&e.data)? else {
            return Ok(vec![LogEntry { index: e.index, id, settled_below, records: Record::decode_entry(&e.data)? }]);
        };
        let mut out = Vec::with_capacity(items.len());
        for (seq, data) in items {
            // Each item is its own proposal: the context's proposer and incarnation, the
            // item's sequence number (no context: untracked, as a plain entry would be).
            out.push(LogEntry { index: e.index, id: id.map(|i| ProposalId { seq, ..i }), settled_below, records: Record::decode_entry(data)? });
        }
        Ok(out)
    }
}

// The single-record layout's magic must differ from a batch's and a group's.
const _: () = assert!(MAGIC[1] != BATCH_MAGIC[1] && MAGIC[1] != GROUP_MAGIC[1] && BATCH_MAGIC[1] != GROUP_MAGIC[1]);

#[cfg(test)]
#[path = "entry_tests.rs"]
mod tests;
