//! Tests of the torn-tail check (`tail.rs`): one or more per row of the start-up table in
//! `docs/formats.md` §2, each on a real log directory written by raft-engine, damaged the
//! way the row says, then opened. Each checks the documented outcome (opened as is, cut,
//! or refused with an error naming `halite-ctl verify`) and that every entry before the
//! damage is still read back.

use std::path::{Path, PathBuf};

use raft::eraftpb::{Entry, HardState};

use super::*;
use crate::framing::{bad_entry_blocks, batch_len, batch_offsets};
use crate::log::RaftLog;

/// Entries written, each in its own batch.
const N: u64 = 5;

fn entry(index: u64) -> Entry {
    Entry { index, term: 1, data: format!("entry-{index}").into_bytes().into(), ..Default::default() }
}

/// The whole batches of a file's bytes: (offset, length).
fn batches(data: &[u8]) -> Vec<(u64, u64)> {
    batch_offsets(data)
        .into_iter()
        .map(|at| {
            let h: [u8; 16] = data[at as usize..at as usize + 16].try_into().unwrap();
            (at, batch_len(&h).unwrap())
        })
        .collect()
}

/// A closed log of [`N`] entries, each appended and fsynced as its own batch, its newest
/// file cut to end right after its last batch. Returns that file, its bytes and batches.
fn written_log(dir: &Path) -> (PathBuf, Vec<u8>, Vec<(u64, u64)>) {
    let log = RaftLog::open(dir).unwrap();
    for i in 1..=N {
        let hs = HardState { term: 1, commit: i, ..Default::default() };
        log.append(&[entry(i)], Some(&hs), None, true).unwrap();
    }
    drop(log);
    let f = newest_log_file(dir).unwrap().unwrap();
    let data = std::fs::read(&f).unwrap();
    let b = batches(&data);
    assert!(b.len() as u64 >= N, "one batch per append: {b:?}");
    let end = b.last().map(|(s, l)| s + l).unwrap();
    let data = data[..end as usize].to_vec();
    std::fs::write(&f, &data).unwrap();
    (f, data, b)
}

/// The batch that holds entry `i`'s bytes.
fn batch_of(data: &[u8], b: &[(u64, u64)], i: u64) -> (u64, u64) {
    let needle = format!("entry-{i}").into_bytes();
    let pos = data.windows(needle.len()).position(|w| w == needle.as_slice()).unwrap() as u64;
    *b.iter().rev().find(|(s, _)| *s <= pos).unwrap()
}

/// The entries' data the log holds once opened.
fn entries_after_open(dir: &Path) -> Result<Vec<String>> {
    let log = RaftLog::open(dir)?;
    let last = log.last_entry_index().unwrap_or(0);
    Ok(log.read_entries(1, last + 1, None)?.iter().map(|e| String::from_utf8_lossy(&e.data).into_owned()).collect())
}

fn first(n: u64) -> Vec<String> {
    (1..=n).map(|i| format!("entry-{i}")).collect()
}

fn append(f: &Path, bytes: &[u8]) {
    let mut d = std::fs::read(f).unwrap();
    d.extend_from_slice(bytes);
    std::fs::write(f, d).unwrap();
}

// Row "nothing": open.
#[test]
fn nothing_after_the_last_batch_opens_as_is() {
    let dir = tempfile::tempdir().unwrap();
    let (f, data, _) = written_log(dir.path());
    assert_eq!(check_tail(dir.path(), true).unwrap(), TailState::Clean);
    assert_eq!(std::fs::read(&f).unwrap(), data, "nothing cut");
    assert_eq!(entries_after_open(dir.path()).unwrap(), first(N));
}

// Row "only zeros": cut the zeros, open.
#[test]
fn zeros_after_the_last_batch_are_cut_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (f, data, _) = written_log(dir.path());
    append(&f, &vec![0u8; 64 << 10]);
    let end = data.len() as u64;
    assert_eq!(check_tail(dir.path(), false).unwrap(), TailState::ZerosCut { file: f.clone(), at: end }, "reported");
    assert_eq!(std::fs::metadata(&f).unwrap().len(), end + (64 << 10), "a check without repair cuts nothing");
    assert_eq!(repair_torn_tail(dir.path()).unwrap(), TailState::ZerosCut { file: f.clone(), at: end });
    assert_eq!(std::fs::read(&f).unwrap(), data, "exactly the zeros are cut");
    assert_eq!(entries_after_open(dir.path()).unwrap(), first(N));
}

// Row "only zeros", on a newest file whose header never reached the disk.
#[test]
fn a_newest_file_of_only_zeros_is_emptied_and_the_older_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let (f, _, _) = written_log(dir.path());
    let name = f.file_name().unwrap().to_str().unwrap();
    let seq: u64 = name.trim_end_matches(".raftlog").parse().unwrap();
    let next = dir.path().join(format!("{:016}.raftlog", seq + 1));
    std::fs::write(&next, vec![0u8; 4096]).unwrap();
    assert_eq!(repair_torn_tail(dir.path()).unwrap(), TailState::ZerosCut { file: next.clone(), at: 0 });
    assert!(!next.exists(), "the headerless file is removed (raft-engine refuses it even empty)");
    assert_eq!(entries_after_open(dir.path()).unwrap(), first(N));
    // And the log goes on: a write after it is kept with the others.
    let log = RaftLog::open(dir.path()).unwrap();
    log.append(&[entry(N + 1)], None, None, true).unwrap();
    drop(log);
    assert_eq!(entries_after_open(dir.path()).unwrap(), first(N + 1));
}

// Row "the last batch ends in zeros where its checksum footer belongs": cut it, open.
#[test]
fn a_last_batch_ending_in_zeros_is_cut_as_an_unfinished_write() {
    let dir = tempfile::tempdir().unwrap();
    let (f, mut data, b) = written_log(dir.path());
    let (start, len) = *b.last().unwrap();
    // The header made it to disk, the rest of the batch did not: the preallocated
    // zeros are still there, and more after it.
    for x in &mut data[(start + 16) as usize..(start + len) as usize] {
        *x = 0;
    }
    data.extend_from_slice(&[0u8; 4096]);
    std::fs::write(&f, &data).unwrap();
    assert_eq!(check_tail(dir.path(), false).unwrap(), TailState::TornCut { file: f.clone(), at: start, bytes: len });
    assert_eq!(repair_torn_tail(dir.path()).unwrap(), TailState::TornCut { file: f.clone(), at: start, bytes: len });
    assert_eq!(std::fs::metadata(&f).unwrap().len(), start);
    // The unfinished batch held the last entry; every one before it is there.
    assert_eq!(entries_after_open(dir.path()).unwrap(), first(N - 1));
}

// Row "a batch header whose batch runs past the end of the file": cut, open.
#[test]
fn a_last_batch_cut_short_is_cut_as_a_torn_write() {
    let dir = tempfile::tempdir().unwrap();
    let (f, data, b) = written_log(dir.path());
    let (start, len) = *b.last().unwrap();
    let torn = &data[..(start + len / 2) as usize];
    std::fs::write(&f, torn).unwrap();
    assert_eq!(repair_torn_tail(dir.path()).unwrap(), TailState::TornCut { file: f.clone(), at: start, bytes: len / 2 });
    assert_eq!(std::fs::read(&f).unwrap(), data[..start as usize].to_vec());
    assert_eq!(entries_after_open(dir.path()).unwrap(), first(N - 1));
}

// Row "a batch header whose batch runs past the end of the file", the header alone
// followed by the preallocated zeros.
#[test]
fn a_lone_batch_header_before_zeros_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (f, data, _) = written_log(dir.path());
    let mut h = (8192u64 << 8).to_be_bytes().to_vec();
    h.extend_from_slice(&64u64.to_be_bytes());
    append(&f, &h);
    append(&f, &[0u8; 1024]);
    let end = data.len() as u64;
    assert_eq!(repair_torn_tail(dir.path()).unwrap(), TailState::TornCut { file: f.clone(), at: end, bytes: 16 });
    assert_eq!(entries_after_open(dir.path()).unwrap(), first(N));
}

// Row "a fragment shorter than a header": cut, open.
#[test]
fn a_fragment_shorter_than_a_batch_header_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (f, data, _) = written_log(dir.path());
    append(&f, &[0xAB; 10]);
    append(&f, &[0u8; 1024]);
    let end = data.len() as u64;
    assert_eq!(repair_torn_tail(dir.path()).unwrap(), TailState::TornCut { file: f.clone(), at: end, bytes: 10 });
    assert_eq!(std::fs::read(&f).unwrap(), data);
    assert_eq!(entries_after_open(dir.path()).unwrap(), first(N));
}

/// Row "anything else": opening is refused with an error naming the file, the byte
/// offset and `halite-ctl verify`, and the file is left exactly as it was (nothing of
/// what follows the damage is cut).
fn assert_refused(dir: &Path, f: &Path, at: u64) {
    let before = std::fs::read(f).unwrap();
    let e = match RaftLog::open(dir) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a damaged log opened"),
    };
    assert!(e.contains("halite-ctl verify") && e.contains(&f.display().to_string()) && e.contains(&format!("at byte {at}")), "{e}");
    assert!(matches!(check_tail(dir, false), Err(Error::CorruptLog(_))));
    assert_eq!(std::fs::read(f).unwrap(), before, "a refused log is not touched");
}

#[test]
fn bytes_after_the_last_batch_that_are_no_torn_write_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (f, data, _) = written_log(dir.path());
    append(&f, &[0xAB; 64]);
    assert_refused(dir.path(), &f, data.len() as u64);
}

#[test]
fn a_flipped_byte_in_an_earlier_batch_header_is_refused_not_cut() {
    // The walk stops at the damaged header; what follows it is whole batches of
    // acknowledged entries, which a tolerant repair would drop.
    let dir = tempfile::tempdir().unwrap();
    let (f, mut data, b) = written_log(dir.path());
    let (start, _) = batch_of(&data, &b, 2);
    data[start as usize + 9] ^= 0x40;
    std::fs::write(&f, &data).unwrap();
    assert_refused(dir.path(), &f, start);
}

#[test]
fn a_torn_looking_header_longer_than_any_batch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (f, data, _) = written_log(dir.path());
    let mut h = ((MAX_TORN_BATCH + 1) << 8).to_be_bytes().to_vec();
    h.extend_from_slice(&64u64.to_be_bytes());
    h.extend_from_slice(&[0xAB; 100]);
    append(&f, &h);
    assert_refused(dir.path(), &f, data.len() as u64);
}

#[test]
fn a_damaged_file_header_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (f, mut data, _) = written_log(dir.path());
    data[3] ^= 0x01;
    std::fs::write(&f, &data).unwrap();
    assert_refused(dir.path(), &f, 0);
}

/// After the table: a whole, well-framed batch whose entries block is damaged is no tail
/// matter. The tail check leaves it, raft-engine opens the file (it checks an entries
/// block only when reading it), reading that entry fails, and the framing names the
/// batch (what `halite-ctl verify` reports), while the entries before it still read.
#[test]
fn a_flipped_byte_in_an_entries_block_is_named_and_fails_its_read() {
    let dir = tempfile::tempdir().unwrap();
    let (f, mut data, b) = written_log(dir.path());
    assert!(bad_entry_blocks(&data).is_empty(), "a written log has no bad block");
    let (start, _) = batch_of(&data, &b, 3);
    let pos = data.windows(7).position(|w| w == b"entry-3").unwrap();
    data[pos + 6] ^= 0x01;
    std::fs::write(&f, &data).unwrap();
    assert_eq!(bad_entry_blocks(&data), vec![start]);
    assert_eq!(check_tail(dir.path(), true).unwrap(), TailState::Clean);
    let log = RaftLog::open(dir.path()).unwrap();
    assert!(log.read_entries(1, N + 1, None).is_err(), "the damaged entry is not read as good");
    let before: Vec<String> = log.read_entries(1, 3, None).unwrap().iter().map(|e| String::from_utf8_lossy(&e.data).into_owned()).collect();
    assert_eq!(before, first(2));
}
