//! Record format tests: every kind round-trips, every flipped byte is caught, and
//! decoding random or mutated bytes never panics.

use super::*;
use proptest::prelude::*;

pub(crate) fn samples() -> Vec<Record> {
    let mut counts = BTreeMap::new();
    counts.insert("accepted".to_string(), 3);
    vec![
        Record::KeySet(KeySet { id: "web01".into(), state: KeyState::Accepted, pub_key: b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----".to_vec(), time_ns: 1, expect: None, pending_below: None }),
        Record::KeySet(KeySet { id: "web01".into(), state: KeyState::Deleted, pub_key: vec![], time_ns: 2, expect: None, pending_below: None }),
        Record::JobPublished(JobPublished { jid: "20261122021944123456".into(), load: vec![0x80], minions: vec!["web01".into()], time_ns: 3, started_by: None, joins: false }),
        Record::JobReturn(JobReturn { jid: "20261122021944123456".into(), id: "web01".into(), load: vec![0xc3], time_ns: 4, first_only: false }),
        Record::GrainsReport(GrainsReport { id: "web01".into(), grains: vec![0x80], time_ns: 5 }),
        Record::RootsBlob(RootsBlob { tree: RootsTree::File, saltenv: "base".into(), path: "top.sls".into(), mode: 0o644, sha256: vec![7; 32], size: 3, chunk: 0, chunks: 1, data: b"abc".to_vec() }),
        Record::RootsTombstone(RootsTombstone { tree: RootsTree::Pillar, saltenv: "base".into(), path: "a/b.sls".into() }),
        Record::AesKeyRotation(AesKeyRotation { generation: 2, key: vec![1; 56], time_ns: 6 }),
        Record::ImportMarker(ImportMarker { source: "localfs_key:/x".into(), phase: ImportPhase::End, counts, time_ns: 7 }),
        Record::JobsExpired(JobsExpired { before_jid: "20261121021944123456".into(), time_ns: 8 }),
        Record::ClusterKeyPair(ClusterKeyPair { private_pem: b"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n".to_vec(), time_ns: 9 }),
        Record::MasterKeyPair(MasterKeyPair { name: "salt".into(), private_pem: b"-----BEGIN RSA PRIVATE KEY-----\nBBBB\n-----END RSA PRIVATE KEY-----\n".to_vec(), time_ns: 10 }),
    ]
}

#[test]
fn round_trip_every_kind() {
    for r in samples() {
        let bytes = r.encode().unwrap();
        assert_eq!(bytes[3], r.kind() as u8);
        assert_eq!(Record::decode(&bytes).unwrap(), r);
    }
}

#[test]
fn every_flipped_byte_is_caught() {
    for r in samples() {
        let bytes = r.encode().unwrap();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            assert!(Record::decode(&b).is_err(), "flip at {i} of {:?} not caught", r.kind());
        }
    }
}

#[test]
fn errors_name_offsets() {
    let mut b = samples()[0].encode().unwrap();
    b[3] = 99;
    match Record::decode(&b) {
        // Past the newest kind this build knows: named as a newer release's record.
        Err(Error::BadRecord { offset: 3, why }) => assert!(why.contains("unknown record kind 99") && why.contains("newer Halite"), "{why}"),
        other => panic!("{other:?}"),
    }
    b[2] = 7;
    match Record::decode(&b) {
        Err(Error::BadRecord { offset: 2, why }) => assert!(why.contains("version 7") && why.contains("newer Halite"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn invalid_ids_refused_on_encode_and_decode() {
    for id in ["../etc", "a/b", ".", "..", "x\0y", ""] {
        let r = Record::KeySet(KeySet { id: id.into(), state: KeyState::Pending, pub_key: b"k".to_vec(), time_ns: 0, expect: None, pending_below: None });
        assert!(r.encode().is_err(), "{id:?}");
        // Forge a well-framed record carrying the bad id: decode must still refuse it.
        let mut forged = Vec::new();
        forged.extend_from_slice(&MAGIC);
        forged.push(VERSION);
        forged.push(RecordKind::KeySet as u8);
        forged.extend_from_slice(&[0; 8]);
        rmp_serde::encode::write_named(&mut forged, &r).unwrap();
        let len = (forged.len() - HEADER_LEN) as u32;
        forged[4..8].copy_from_slice(&len.to_le_bytes());
        let crc = frame_crc(&forged[..8], &forged[HEADER_LEN..]);
        forged[8..12].copy_from_slice(&crc.to_le_bytes());
        let err = Record::decode(&forged).unwrap_err().to_string();
        assert!(err.contains("refused"), "{err}");
    }
}

#[test]
fn roots_chunks_must_fit() {
    let mut b = RootsBlob { tree: RootsTree::File, saltenv: "base".into(), path: "f".into(), mode: 0o644, sha256: vec![0; 32], size: 10, chunk: 0, chunks: 1, data: vec![0; 9] };
    assert!(Record::RootsBlob(b.clone()).encode().is_err());
    b.data.push(0);
    assert!(Record::RootsBlob(b.clone()).encode().is_ok());
    b.path = "../escape".into();
    assert!(Record::RootsBlob(b).encode().is_err());
}

proptest! {
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Record::decode(&bytes);
    }

    #[test]
    fn decode_of_mutated_records_never_panics(idx in any::<usize>(), pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>()) {
        // Every kind (this once stopped at the first nine samples).
        let all = samples();
        let mut b = all[idx % all.len()].encode().unwrap();
        let p = pos % b.len();
        b[p] = val;
        // Also fix the CRC up so the payload decoder sees the mutation.
        if b.len() >= HEADER_LEN {
            let crc = frame_crc(&b[..8], &b[HEADER_LEN..]);
            b[8..12].copy_from_slice(&crc.to_le_bytes());
        }
        let c = cut % (b.len() + 1);
        let _ = Record::decode(&b[..c]);
        // What decodes was validated: it encodes again, to a record that decodes equal.
        if let Ok(r) = Record::decode(&b) {
            prop_assert_eq!(Record::decode(&r.encode().unwrap()).unwrap(), r);
        }
    }

    /// A well-framed record (header and CRC right) of any kind byte around any payload:
    /// the payload decoder of every kind meets arbitrary bytes.
    #[test]
    fn fuzz_payloads_of_every_kind(kind in any::<u8>(), payload in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut b = vec![MAGIC[0], MAGIC[1], VERSION, kind];
        b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        let crc = frame_crc(&b[..8], &payload);
        b.extend_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&payload);
        if let Ok(r) = Record::decode(&b) {
            prop_assert_eq!(r.kind() as u8, kind);
            prop_assert_eq!(Record::decode(&r.encode().unwrap()).unwrap(), r);
        }
    }
}

/// Records written before `expect` existed decode with no expectation, and a record
/// without one encodes to the same bytes as before (the field is left out).
#[test]
fn key_set_expectation_is_optional_on_the_wire() {
    use crate::format::KeyExpect;
    let plain = Record::KeySet(KeySet::new("web01", KeyState::Accepted, b"-----BEGIN PUBLIC KEY-----\nA\n-----END PUBLIC KEY-----".to_vec(), 7));
    let bytes = plain.encode().unwrap();
    assert!(!bytes.windows(6).any(|w| w == b"expect"));
    assert_eq!(Record::decode(&bytes).unwrap(), plain);
    let Record::KeySet(k) = plain else { unreachable!() };
    for e in [KeyExpect::Absent, KeyExpect::Holds { state: KeyState::Pending, pub_key: b"P".to_vec() }] {
        let r = Record::KeySet(k.clone().expecting(e));
        assert_eq!(Record::decode(&r.encode().unwrap()).unwrap(), r);
    }
    // An expectation about the other bank is refused.
    let bad = Record::KeySet(k.clone().expecting(KeyExpect::Holds { state: KeyState::Denied, pub_key: b"P".to_vec() }));
    assert!(bad.encode().is_err());
    let bad = Record::KeySet(KeySet::new("web01", KeyState::DeniedCleared, vec![], 1).expecting(KeyExpect::Holds { state: KeyState::Accepted, pub_key: b"P".to_vec() }));
    assert!(bad.encode().is_err());
}

/// A return, a job or a report is encoded into one buffer sized up front
/// ([`Record::payload_len_hint`]): the output never grows (a vector grown from 140
/// bytes would double two or three times for a return of a few hundred bytes).
#[test]
fn large_fields_are_encoded_without_regrowing() {
    let load = vec![0xa1; 3000];
    for rec in [
        Record::JobReturn(JobReturn { jid: "20261122021944123456".into(), id: "web01".into(), load: load.clone(), time_ns: 4, first_only: false }),
        Record::JobPublished(JobPublished { jid: "20261122021944123456".into(), load: load.clone(), minions: (0..200).map(|i| format!("minion-{i}")).collect(), time_ns: 1, started_by: None, joins: false }),
    ] {
        let out = rec.encode().unwrap();
        assert_eq!(out.capacity(), HEADER_LEN + rec.payload_len_hint(), "{}: {} bytes", rec.kind().name(), out.len());
        assert_eq!(Record::decode(&out).unwrap(), rec);
    }
}
