use super::*;
use crate::format::{Record, RecordKind, HEADER_LEN};

fn rec(path: &str, size: u64, loc: u64, data: &[u8]) -> FileRecv {
    FileRecv { id: "m1".into(), path: path.into(), size, loc, data: data.to_vec(), time_ns: 7 }
}

#[test]
fn salts_path_rules() {
    let ok = |parts: &[&str], want: &str| assert_eq!(push_path(parts).as_deref(), Ok(want), "{parts:?}");
    ok(&["tmp", "x.txt"], "tmp/x.txt");
    ok(&["a", ".", "b"], "a/b");
    ok(&["a", "..", "b"], "b");
    ok(&["a//b/"], "a/b");
    ok(&["a\\b"], "a\\b");
    let no = |parts: &[&str], why: PathRefusal| assert_eq!(push_path(parts), Err(why), "{parts:?}");
    no(&["..", "etc", "passwd"], PathRefusal::Escapes);
    no(&[".."], PathRefusal::Escapes);
    no(&["../"], PathRefusal::Escapes);
    no(&["a", "..", "..", "b"], PathRefusal::Escapes);
    no(&["a/../../b"], PathRefusal::Escapes);
    no(&["/etc/passwd"], PathRefusal::Absolute);
    no(&["", "etc"], PathRefusal::Absolute);
    no(&[], PathRefusal::Empty);
    no(&["."], PathRefusal::Empty);
    no(&["a", ".."], PathRefusal::Empty);
    no(&["a\0b"], PathRefusal::Nul);
    no(&[&"x".repeat(MAX_NAME_LEN + 1)], PathRefusal::TooLong);
    no(&vec!["d"; MAX_PATH_LEN / 2 + 1], PathRefusal::TooLong);
    no(&vec!["."; MAX_PARTS + 1], PathRefusal::TooLong);
}

#[test]
fn records_carry_only_normal_paths() {
    for p in ["a/b", "x"] {
        assert!(check_path(p).is_ok(), "{p}");
    }
    for p in ["", "/a", "a/../b", "./a", "a//b", "a/", "..", "a\0"] {
        assert!(check_path(p).is_err(), "{p:?}");
    }
}

#[test]
fn the_bytes_round_trip() {
    for r in [rec("a/b", 5, 0, b"hello"), rec("a/b", 0, 0, b""), rec("z", 3 << 20, 1 << 20, &vec![7u8; PUSH_CHUNK_LEN])] {
        let record = Record::FileRecv(r);
        let bytes = record.encode().unwrap();
        assert_eq!(bytes[3], 20, "kind byte");
        assert_eq!(Record::decode(&bytes).unwrap(), record);
        assert_eq!(record.kind(), RecordKind::FileRecv);
        assert_eq!(RecordKind::from_name("file_recv"), Some(RecordKind::FileRecv));
    }
}

#[test]
fn hostile_lengths_and_offsets_are_refused_both_ways() {
    let bad = [
        rec("a", PUSH_CHUNK_LEN as u64 + 1, 0, &vec![0; PUSH_CHUNK_LEN + 1]),
        rec("a", 4, 0, b"hello"),
        rec("a", 10, 8, b"abc"),
        rec("a", u64::MAX, u64::MAX - 1, b"ab"),
        rec("a", MAX_PUSHED_SIZE + 1, 0, b""),
        rec("../a", 1, 0, b"x"),
        rec("/a", 1, 0, b"x"),
        FileRecv { id: "../m".into(), ..rec("a", 1, 0, b"x") },
    ];
    for r in bad {
        let record = Record::FileRecv(r.clone());
        assert!(record.encode().is_err(), "encoded {:?}", (&r.path, r.size, r.loc, r.data.len()));
        // The same bytes made by hand (a peer's or a damaged log's) do not decode.
        let mut payload = Vec::new();
        rmp_serde::encode::write_named(&mut payload, &r).unwrap();
        let mut framed = vec![b'H', b'L', 1, 20];
        framed.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&framed[..8]);
        h.update(&payload);
        framed.extend_from_slice(&h.finalize().to_le_bytes());
        framed.extend_from_slice(&payload);
        assert_eq!(framed.len(), HEADER_LEN + payload.len());
        assert!(Record::decode(&framed).is_err(), "decoded {:?}", (&r.path, r.size, r.loc));
    }
    // A length field that claims more than the frame holds, and every truncation.
    let good = Record::FileRecv(rec("a/b", 5, 0, b"hello")).encode().unwrap();
    for cut in 0..good.len() {
        assert!(Record::decode(&good[..cut]).is_err(), "cut at {cut}");
    }
    let mut lying = good.clone();
    lying[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(Record::decode(&lying).is_err());
}

#[test]
fn a_piece_is_cut_into_bounded_records() {
    let data = vec![1u8; 2 * PUSH_CHUNK_LEN + 3];
    let recs = split("m1", "f", 10 << 20, 5, &data, 1);
    assert_eq!(recs.iter().map(|r| (r.loc, r.data.len())).collect::<Vec<_>>(), vec![(5, PUSH_CHUNK_LEN), (5 + PUSH_CHUNK_LEN as u64, PUSH_CHUNK_LEN), (5 + 2 * PUSH_CHUNK_LEN as u64, 3)]);
    assert_eq!(split("m1", "f", 0, 0, b"", 1).len(), 1, "an empty file is one record");
}

#[test]
fn keys_name_their_file() {
    assert_eq!(parse_meta_key(&meta_key("m1", "a/b")), Some(("m1".into(), "a/b".into())));
    assert!(chunk_key("m1", "a", 1).starts_with(&chunk_prefix("m1", "a")));
    assert!(!chunk_key("m1", "a/b", 0).starts_with(&chunk_prefix("m1", "a")), "a file's pieces are not another's");
    assert!(meta_key("m1", "a").starts_with(&minion_prefix("m1")));
    assert_eq!(parse_meta_key(b"other"), None);
}
