//! Compatibility tests against files written by the real Salt 3008.5 (testdata/salt-3008.5).
//!
//! * Both drivers read the reference's files and give exactly the reference's listing,
//!   states and pub bytes.
//! * Halite's mmap writer, replaying the history that produced the vectors, writes the
//!   same bytes: heap segments and rosters identical, and the index identical once the
//!   same mtimes are used.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::keys::localfs::LocalfsKeys;
use crate::keys::mmap::MmapKeys;
use crate::keys::{BankState, KeyListing, KeyView};
use crate::mmap_cache::{Geometry, MmapReader, MmapWriter};

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/salt-3008.5")
}

fn geo() -> Geometry {
    Geometry { size: 32, slot_size: 96, key_size: 64, max_segment_bytes: 2048 }
}

fn json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn expected_listing() -> KeyListing {
    let v = json(&vectors().join("mmap_key/salt_key_list_keys.json"));
    let list = |k: &str| v[k].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect::<Vec<_>>();
    KeyListing { minions_pre: list("minions_pre"), minions_rejected: list("minions_rejected"), minions: list("minions"), minions_denied: list("minions_denied") }
}

fn check_view(view: &dyn KeyView, expected_file: &Path) {
    assert_eq!(view.list().unwrap(), expected_listing(), "{} listing", view.driver());
    let exp = json(expected_file);
    for (id, e) in exp["keys"].as_object().unwrap() {
        let got = view.get_key(id).unwrap().unwrap_or_else(|| panic!("{id} missing"));
        assert_eq!(got.state.as_str(), e["state"].as_str().unwrap(), "{id}");
        assert_eq!(got.pub_key, e["pub"].as_str().unwrap().as_bytes(), "{id} pub bytes");
    }
    for (id, list) in exp["denied_keys"].as_object().unwrap() {
        let got = view.get_denied(id).unwrap().unwrap();
        assert_eq!(got, list[0]["pub"].as_str().unwrap().as_bytes(), "denied {id}");
    }
    assert!(view.get_key("gone-09").unwrap().is_none(), "deleted id must not be reported");
    assert!(view.get_denied("acc-01").unwrap().is_none());
}

#[test]
fn mmap_key_vectors_read_like_the_reference() {
    let view = MmapKeys::open(&vectors().join("mmap_key/pki"), geo()).unwrap();
    check_view(&view, &vectors().join("mmap_key/expected.json"));
}

#[test]
fn localfs_key_vectors_read_like_the_reference() {
    let view = LocalfsKeys::open(&vectors().join("localfs_key/pki")).unwrap();
    check_view(&view, &vectors().join("localfs_key/expected.json"));
}

#[test]
fn mmap_index_dump_matches_the_reference() {
    let exp = json(&vectors().join("mmap_key/expected.json"));
    for (bank, file) in [("keys", ".mmap_keys.idx"), ("denied_keys", ".mmap_denied.idx")] {
        let d = &exp["index_dump"][bank];
        let r = MmapReader::open(&vectors().join("mmap_key/pki").join(file), geo()).unwrap().unwrap();
        let h = r.header();
        assert_eq!(h.magic as u64, d["header"]["magic"].as_u64().unwrap());
        assert_eq!(h.occupied, d["header"]["occupied"].as_u64().unwrap());
        assert_eq!(h.deleted, d["header"]["deleted"].as_u64().unwrap());
        assert_eq!(h.high_water_mark, d["header"]["high_water_mark"].as_u64().unwrap());
        let roster: Vec<u64> = r.roster().unwrap().into_iter().map(u64::from).collect();
        let exp_roster: Vec<u64> = d["roster"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(roster, exp_roster);
        let slots = r.all_slots();
        let exp_slots = d["slots"].as_array().unwrap();
        assert_eq!(slots.len(), exp_slots.len());
        for (s, e) in slots.iter().zip(exp_slots) {
            assert_eq!(s.slot, e["slot"].as_u64().unwrap());
            assert_eq!(String::from_utf8_lossy(&s.key), e["key"].as_str().unwrap());
            assert_eq!(s.segment as u64, e["segment"].as_u64().unwrap());
            assert_eq!(s.offset, e["seg_offset"].as_u64().unwrap());
            assert_eq!(s.length as u64, e["length"].as_u64().unwrap());
            assert_eq!(s.mtime_ns, e["mtime_ns"].as_u64().unwrap());
            let status = match s.status {
                1 => "OCCUPIED",
                2 => "DELETED",
                _ => "EMPTY",
            };
            assert_eq!(status, e["status"].as_str().unwrap());
            if s.status == 1 {
                r.read_value(s).unwrap();
            }
        }
    }
}

/// Replays the generator's history (vectors README) with Halite's writer.
#[test]
fn halite_writes_the_reference_bytes() {
    let exp = json(&vectors().join("mmap_key/expected.json"));
    let mut mtimes: BTreeMap<(String, String), u64> = BTreeMap::new();
    for bank in ["keys", "denied_keys"] {
        for s in exp["index_dump"][bank]["slots"].as_array().unwrap() {
            mtimes.insert((bank.to_string(), s["key"].as_str().unwrap().to_string()), s["mtime_ns"].as_u64().unwrap());
        }
    }
    let pubs = vectors().join("pubs");
    let pub_of = |name: &str| -> Vec<u8> {
        let raw = std::fs::read(pubs.join(format!("{name}.pub"))).unwrap();
        String::from_utf8(raw).unwrap().trim().as_bytes().to_vec()
    };
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join(".mmap_keys.idx");
    let denied = dir.path().join(".mmap_denied.idx");
    let mt = |bank: &str, id: &str| mtimes[&(bank.to_string(), id.to_string())];
    let val = |state: BankState, p: &[u8]| {
        let mut v = vec![state.mmap_byte()];
        v.extend_from_slice(p);
        v
    };
    // Each step is a fresh writer, like the generator's fresh Cache objects.
    let order = ["acc-03", "gone-09", "Mixed_Case-01", "pend-01", "acc-01", "pend-02", "acc-02", "web01.example.com", "rej-01", "rej-02"];
    let mut w = MmapWriter::open(&keys, geo(), true).unwrap();
    for id in order {
        assert!(w.put(id.as_bytes(), &val(BankState::Pending, &pub_of(id)), mt("keys", id)).unwrap());
    }
    w.finish().unwrap();
    let mut w = MmapWriter::open(&keys, geo(), true).unwrap();
    for id in ["acc-01", "acc-02", "acc-03", "web01.example.com", "Mixed_Case-01"] {
        w.put(id.as_bytes(), &val(BankState::Accepted, &pub_of(id)), mt("keys", id)).unwrap();
    }
    for id in ["rej-01", "rej-02"] {
        w.put(id.as_bytes(), &val(BankState::Rejected, &pub_of(id)), mt("keys", id)).unwrap();
    }
    assert!(w.delete(b"gone-09").unwrap());
    w.finish().unwrap();
    let mut w = MmapWriter::open(&denied, geo(), true).unwrap();
    w.put(b"acc-02", &pub_of("acc-02-new"), mt("denied_keys", "acc-02")).unwrap();
    w.put(b"acc-02", &pub_of("acc-02-new"), mt("denied_keys", "acc-02")).unwrap();
    w.put(b"den-only-01", &pub_of("den-only-01"), mt("denied_keys", "den-only-01")).unwrap();
    w.finish().unwrap();
    let big = std::fs::read(pubs.join("acc-03-4096.pub")).unwrap();
    let mut w = MmapWriter::open(&keys, geo(), true).unwrap();
    w.put(b"acc-03", &val(BankState::Accepted, &big), mt("keys", "acc-03")).unwrap();
    w.finish().unwrap();

    let refdir = vectors().join("mmap_key/pki");
    for f in [
        ".mmap_keys.idx",
        ".mmap_keys.idx.heap",
        ".mmap_keys.idx.heap.1",
        ".mmap_keys.idx.heap.2",
        ".mmap_keys.idx.roster",
        ".mmap_denied.idx",
        ".mmap_denied.idx.heap",
        ".mmap_denied.idx.roster",
    ] {
        let ours = std::fs::read(dir.path().join(f)).unwrap();
        let theirs = std::fs::read(refdir.join(f)).unwrap();
        assert!(ours == theirs, "{f} differs from the reference's bytes");
    }
}
