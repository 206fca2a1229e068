//! MmapCache engine tests.

use super::*;

fn geo() -> Geometry {
    Geometry { size: 32, slot_size: 96, key_size: 64, max_segment_bytes: 2048 }
}

#[test]
fn put_get_update_delete_reinsert() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join(".mmap_keys.idx");
    let mut w = MmapWriter::open(&p, geo(), true).unwrap();
    assert!(w.put(b"a", b"\x02pubA", 1).unwrap());
    assert!(w.put(b"b", b"\x02pubB", 2).unwrap());
    assert_eq!(w.get(b"a").unwrap().unwrap(), b"\x02pubA");
    // In place (same length).
    assert!(w.put(b"a", b"\x01pubA", 3).unwrap());
    // Growth appends.
    assert!(w.put(b"b", b"\x01pubB-longer", 4).unwrap());
    assert!(w.delete(b"a").unwrap());
    assert!(!w.delete(b"a").unwrap());
    assert!(w.put(b"a", b"\x02again", 5).unwrap());
    w.finish().unwrap();
    let r = MmapReader::open(&p, geo()).unwrap().unwrap();
    let h = r.header();
    assert_eq!((h.magic, h.occupied, h.deleted), (HEADER_MAGIC, 2, 0));
    let live: Vec<_> = r.live_slots().unwrap().into_iter().map(|s| s.key).collect();
    // The reference lists "a" twice here (tombstone appended); we do not.
    assert_eq!(live.len(), 2);
    assert_eq!(r.get(b"b").unwrap().unwrap(), b"\x01pubB-longer");
    assert_eq!(r.get(b"a").unwrap().unwrap(), b"\x02again");
    assert!(r.get(b"zz").unwrap().is_none());
    assert!(r.roster().unwrap().contains(&ROSTER_TOMBSTONE));
}

#[test]
fn long_keys_are_refused_not_truncated() {
    let d = tempfile::tempdir().unwrap();
    let mut w = MmapWriter::open(&d.path().join("x.idx"), geo(), false).unwrap();
    let long = vec![b'a'; 65];
    assert!(w.put(&long, b"v", 0).is_err());
    assert!(w.put(&long[..64], b"v", 0).unwrap());
}

#[test]
fn full_table_and_roll_over() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("t.idx");
    let g = Geometry { size: 4, slot_size: 96, key_size: 64, max_segment_bytes: 40 };
    let mut w = MmapWriter::open(&p, g, false).unwrap();
    for k in [b"k1", b"k2", b"k3"] {
        assert!(w.put(k, &[7u8; 30], 0).unwrap());
    }
    assert!(!w.put(b"k4", b"x", 0).unwrap());
    w.finish().unwrap();
    let r = MmapReader::open(&p, g).unwrap().unwrap();
    assert_eq!(r.segment_sizes().unwrap().len(), 3);
    for k in [b"k1", b"k2", b"k3"] {
        assert_eq!(r.get(k).unwrap().unwrap(), vec![7u8; 30]);
    }
}

#[test]
fn checksum_flip_is_reported_and_size_mismatch_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("c.idx");
    let mut w = MmapWriter::open(&p, geo(), true).unwrap();
    w.put(b"k", b"value", 0).unwrap();
    w.finish().unwrap();
    let heap = segment_path(&p, 0);
    let mut b = std::fs::read(&heap).unwrap();
    b[10] ^= 1;
    std::fs::write(&heap, &b).unwrap();
    let r = MmapReader::open(&p, geo()).unwrap().unwrap();
    let e = r.get(b"k").unwrap_err().to_string();
    assert!(e.contains("checksum mismatch"), "{e}");
    let other = Geometry { size: 33, ..geo() };
    assert!(MmapReader::open(&p, other).is_err());
    assert!(MmapWriter::open(&p, other, false).is_err());
}

#[test]
fn roster_recovery() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("r.idx");
    let mut w = MmapWriter::open(&p, geo(), false).unwrap();
    for i in 0..6 {
        w.put(format!("k{i}").as_bytes(), b"v", 0).unwrap();
    }
    w.finish().unwrap();
    std::fs::write(suffixed(&p, ".roster"), [1u8, 0, 0, 0]).unwrap();
    let r = MmapReader::open(&p, geo()).unwrap().unwrap();
    assert_eq!(r.live_slots().unwrap().len(), 6, "readers fall back to a scan");
    drop(r);
    let w = MmapWriter::open(&p, geo(), false).unwrap();
    w.finish().unwrap();
    assert_eq!(read_roster(&suffixed(&p, ".roster")).unwrap().len(), 6);
}

#[test]
fn a_slot_claiming_more_than_its_segment_holds_is_refused_before_reading() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("l.idx");
    let mut w = MmapWriter::open(&p, geo(), true).unwrap();
    w.put(b"k", b"value", 0).unwrap();
    w.finish().unwrap();
    let r = MmapReader::open(&p, geo()).unwrap().unwrap();
    let mut s = r.find(b"k").unwrap();
    for (offset, length) in [(s.offset, u32::MAX), (u64::MAX - 4, 16), (1 << 40, 5)] {
        s.offset = offset;
        s.length = length;
        let e = r.read_value(&s).unwrap_err().to_string();
        assert!(e.contains("extends past the segment's end"), "{e}");
    }
}
