//! Entry (batch) encoding tests: round trips, the old single-record layout, hostile
//! lengths refused before allocating, and random bytes never panicking the decoder.

use super::*;
use crate::format::tests::samples;
use crate::format::{JobReturn, RootsBlob, RootsTree};
use proptest::prelude::*;

#[test]
fn batches_round_trip_and_one_record_is_the_record_itself() {
    let all = samples();
    let data = Record::encode_batch(&all).unwrap();
    assert_eq!(&data[..4], &[b'H', b'B', 1, 0]);
    assert_eq!(u32::from_le_bytes(data[4..8].try_into().unwrap()) as usize, all.len());
    assert_eq!(Record::decode_entry(&data).unwrap(), all);
    for r in &all {
        let one = Record::encode_batch(std::slice::from_ref(r)).unwrap();
        assert_eq!(one, r.encode().unwrap(), "a one-record entry keeps the pre-batch layout");
        assert_eq!(Record::decode_entry(&one).unwrap(), vec![r.clone()]);
        assert_eq!(r.encoded_len().unwrap(), one.len());
    }
    assert!(Record::encode_batch(&[]).is_err());
}

#[test]
fn hostile_lengths_are_refused_before_allocating() {
    let data = Record::encode_batch(&samples()[..3]).unwrap();
    for count in [0u32, 1, 4, 1 << 20, (1 << 20) + 1, u32::MAX] {
        let mut b = data.clone();
        b[4..8].copy_from_slice(&count.to_le_bytes());
        let err = Record::decode_entry(&b).unwrap_err().to_string();
        assert!(err.contains("offset 4") || err.contains("trailing") || err.contains("record 3"), "count {count}: {err}");
    }
    // A header claiming a million records over a few bytes.
    let mut tiny = b"HB\x01\x00".to_vec();
    tiny.extend_from_slice(&u32::MAX.to_le_bytes());
    tiny.extend_from_slice(&[0; 30]);
    assert!(Record::decode_entry(&tiny).is_err());
    // Unknown version, reserved byte, short header, trailing bytes, a truncated record.
    for (at, v) in [(2usize, 9u8), (3, 1)] {
        let mut b = data.clone();
        b[at] = v;
        assert!(Record::decode_entry(&b).is_err());
    }
    assert!(Record::decode_entry(b"HB\x01").is_err());
    let mut trailing = data.clone();
    trailing.push(0);
    assert!(Record::decode_entry(&trailing).unwrap_err().to_string().contains("trailing"));
    assert!(Record::decode_entry(&data[..data.len() - 1]).is_err());
    // Every flipped byte of a batch is caught (record CRCs, header checks).
    for i in 0..data.len() {
        let mut b = data.clone();
        b[i] ^= 0x01;
        assert!(Record::decode_entry(&b).is_err(), "flip at {i} not caught");
    }
    // An entry over the bound is refused whole.
    assert!(Record::decode_entry(&vec![0u8; MAX_ENTRY_LEN + 1]).unwrap_err().to_string().contains("limit"));
}

fn ret(i: usize, load: usize) -> Record {
    Record::JobReturn(JobReturn { jid: "20261122021944123456".into(), id: format!("m{i}"), load: vec![0xc3; load], time_ns: i as u64, first_only: false })
}

#[test]
fn fit_groups_respects_both_bounds_and_keeps_order() {
    let recs: Vec<Record> = (0..100).map(|i| ret(i, 1000)).collect();
    let groups = Record::fit_groups(recs.clone(), 7, MAX_ENTRY_LEN).unwrap();
    assert!(groups.iter().all(|g| g.len() <= 7));
    assert_eq!(groups.concat(), recs);
    let groups = Record::fit_groups(recs.clone(), 1000, 10_000).unwrap();
    for g in &groups {
        assert!(Record::encode_batch(g).unwrap().len() <= 10_000);
    }
    assert_eq!(groups.concat(), recs);
    // A record larger than the bound on its own gets its own group.
    let big = Record::fit_groups(vec![ret(0, 10), ret(1, 20_000), ret(2, 10)], 100, 10_000).unwrap();
    assert_eq!(big.iter().map(Vec::len).collect::<Vec<_>>(), vec![1, 1, 1]);
    // Roots chunks of 1 MiB: at most 64 of them fit one entry.
    let chunk = |c: u32| {
        Record::RootsBlob(RootsBlob { tree: RootsTree::File, saltenv: "base".into(), path: "big".into(), mode: 0o644, sha256: vec![0; 32], size: 100 << 20, chunk: c, chunks: 100, data: vec![1; 1 << 20] })
    };
    let groups = Record::fit_groups((0..100).map(chunk).collect(), usize::MAX, MAX_ENTRY_LEN).unwrap();
    assert_eq!(groups.len(), 2);
    for g in &groups {
        let data = Record::encode_batch(g).unwrap();
        assert!(data.len() <= MAX_ENTRY_LEN);
        assert_eq!(Record::decode_entry(&data).unwrap().len(), g.len());
    }
}

#[test]
fn log_entries_carry_the_proposal_identity() {
    use crate::context::{encode, EntryContext, ProposalId};
    let id = ProposalId { proposer: 4, incarnation: 9, seq: 12 };
    let e = Entry { index: 30, data: Record::encode_batch(&samples()[..2]).unwrap().into(), context: encode(&EntryContext::proposal(id, 10, None)).into(), ..Default::default() };
    let le = LogEntry::from_raft(&e).unwrap().remove(0);
    assert_eq!((le.index, le.id, le.settled_below, le.records.len()), (30, Some(id), 10, 2));
    // An old entry: one record, no context.
    let old = Entry { index: 3, data: samples()[0].encode().unwrap().into(), ..Default::default() };
    assert_eq!(LogEntry::from_raft(&old).unwrap(), vec![LogEntry::plain(3, vec![samples()[0].clone()])]);
    // A context that does not decode names nothing; the records still apply.
    let odd = Entry { index: 4, data: samples()[0].encode().unwrap().into(), context: vec![1, 2, 3].into(), ..Default::default() };
    assert_eq!(LogEntry::from_raft(&odd).unwrap()[0].id, None);
    assert!(LogEntry::from_raft(&Entry { index: 5, ..Default::default() }).unwrap().is_empty());
}

/// Several proposals in one entry: each its own identity and records, in order.
#[test]
fn a_group_entry_gives_each_proposal_with_its_own_identity() {
    use crate::context::{encode, EntryContext, ProposalId};
    let all = samples();
    let (a, b, c) = (Record::encode_batch(&all[..1]).unwrap(), Record::encode_batch(&all[1..3]).unwrap(), Record::encode_batch(&all[3..4]).unwrap());
    let data = encode_group(&[(7, &a), (8, &b), (11, &c)]).unwrap();
    assert_eq!(&data[..4], &[b'H', b'G', 1, 0]);
    assert_eq!(Record::decode_entry(&data).unwrap(), all[..4].to_vec(), "every proposal's records, in order");
    let id = ProposalId { proposer: 4, incarnation: 9, seq: 7 };
    let e = Entry { index: 30, data: data.clone().into(), context: encode(&EntryContext::proposal(id, 5, None)).into(), ..Default::default() };
    let got = LogEntry::from_raft(&e).unwrap();
    let want = |seq, records: &[Record]| LogEntry { index: 30, id: Some(ProposalId { seq, ..id }), settled_below: 5, records: records.to_vec() };
    assert_eq!(got, vec![want(7, &all[..1]), want(8, &all[1..3]), want(11, &all[3..4])]);
    // Without a context the proposals apply untracked, as a plain entry's would.
    let bare = Entry { index: 31, data: data.into(), ..Default::default() };
    assert!(LogEntry::from_raft(&bare).unwrap().iter().all(|le| le.id.is_none() && le.index == 31));
    // Fewer than two, or a group inside a group, is refused.
    assert!(encode_group(&[(1, &a)]).is_err());
    let inner = encode_group(&[(1, &a), (2, &b)]).unwrap();
    assert!(encode_group(&[(1, &a), (2, &inner)]).is_err());
}

#[test]
fn hostile_groups_are_refused_before_allocating() {
    let (a, b) = (samples()[0].encode().unwrap(), samples()[1].encode().unwrap());
    let data = encode_group(&[(1, &a), (2, &b)]).unwrap();
    for count in [0u32, 1, 3, 1 << 16, (1 << 16) + 1, u32::MAX] {
        let mut g = data.clone();
        g[4..8].copy_from_slice(&count.to_le_bytes());
        assert!(matches!(Record::decode_entry(&g), Err(Error::BadRecord { .. })), "count {count}");
    }
    // An item declaring more bytes than are left.
    for len in [u32::MAX, (a.len() + b.len() + 100) as u32] {
        let mut g = data.clone();
        g[16..20].copy_from_slice(&len.to_le_bytes());
        assert!(matches!(Record::decode_entry(&g), Err(Error::BadRecord { .. })), "len {len}");
    }
    // Trailing bytes, a cut, a wrong version or reserved byte, a nested group.
    let mut long = data.clone();
    long.push(0);
    assert!(Record::decode_entry(&long).is_err());
    assert!(Record::decode_entry(&data[..data.len() - 1]).is_err());
    assert!(Record::decode_entry(&data[..6]).is_err());
    for (at, v) in [(2, 2u8), (3, 1)] {
        let mut g = data.clone();
        g[at] = v;
        assert!(Record::decode_entry(&g).is_err());
    }
    let mut nested = data.clone();
    nested[20..22].copy_from_slice(b"HG");
    assert!(Record::decode_entry(&nested).is_err());
}

proptest! {
    #[test]
    fn decode_of_mutated_groups_never_panics(pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>(), tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        let (a, b) = (samples()[0].encode().unwrap(), Record::encode_batch(&samples()[1..3]).unwrap());
        let mut g = encode_group(&[(1, &a), (2, &b)]).unwrap();
        let p = pos % g.len();
        g[p] = val;
        let c = cut % (g.len() + 1);
        let _ = Record::decode_entry(&g[..c]);
        let _ = Record::decode_entry(&g);
        let mut h = b"HG\x01\x00".to_vec();
        h.extend_from_slice(&tail);
        let _ = Record::decode_entry(&h);
    }

    #[test]
    fn decode_entry_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Record::decode_entry(&bytes);
        let mut b = b"HB\x01\x00".to_vec();
        b.extend_from_slice(&bytes);
        let _ = Record::decode_entry(&b);
    }

    #[test]
    fn decode_of_mutated_batches_never_panics(n in 2usize..6, pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>()) {
        let mut b = Record::encode_batch(&samples()[..n]).unwrap();
        let p = pos % b.len();
        b[p] = val;
        let c = cut % (b.len() + 1);
        let _ = Record::decode_entry(&b[..c]);
        let _ = Record::decode_entry(&b);
    }
}
