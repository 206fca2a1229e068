//! Fuzzing of the decoders that read bytes a peer or a disk controls, as property tests
//! on stable Rust (records and entries have theirs beside them, `format_tests.rs` and
//! `entry_tests.rs`): entry contexts, snapshot manifests and chunks, and the `mmap_key`
//! files. What must hold for every input: no panic, no allocation beyond the declared
//! bounds (a panic or an abort fails the run), and a clear error for what is refused.
//!
//! The default run is short (proptest's 256 cases per property). The long run is a
//! documented command (`docs/benchmarks.md`, "Hostile-input bounds"):
//! `PROPTEST_CASES=200000 cargo test --release -p halite-storage fuzz_`.

use proptest::prelude::*;

use crate::context::{self, EntryContext, ProposalId};
use crate::mmap_cache::{Geometry, MmapReader, MmapWriter};
use crate::snapshot::{Chunk, Manifest, CHUNK_MAX};

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

/// Changes byte `pos` (mod the length) to `val`, then keeps a prefix of `cut` bytes.
fn mutate(mut b: Vec<u8>, pos: usize, val: u8, cut: usize) -> (Vec<u8>, Vec<u8>) {
    if !b.is_empty() {
        let p = pos % b.len();
        b[p] = val;
    }
    let c = cut % (b.len() + 1);
    let prefix = b[..c].to_vec();
    (b, prefix)
}

fn geo() -> Geometry {
    Geometry { size: 32, slot_size: 96, key_size: 64, max_segment_bytes: 2048 }
}

/// Asks an mmap_key reader over the files at `p` every question it answers: none may
/// panic, and no value may be larger than its segment.
fn ask_everything(p: &std::path::Path) -> Result<(), TestCaseError> {
    if let Ok(Some(r)) = MmapReader::open(p, geo()) {
        let _ = r.roster();
        let _ = r.segment_sizes();
        for s in r.all_slots() {
            if let Ok(v) = r.read_value(&s) {
                prop_assert!(v.len() as u64 <= geo().max_segment_bytes);
            }
        }
        let _ = r.live_slots();
        let _ = r.get(b"minion3");
    }
    Ok(())
}

proptest! {
    #[test]
    fn fuzz_entry_contexts(raw in bytes(128), pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>(), seq in any::<u64>()) {
        let _ = context::decode(&raw);
        let good = context::encode(&EntryContext::proposal(ProposalId { proposer: 2, incarnation: 7, seq }, seq / 2, Some("127.0.0.2:4520".parse().unwrap())));
        prop_assert!(context::decode(&good).is_ok());
        let (m, p) = mutate(good, pos, val, cut);
        let _ = context::decode(&m);
        let _ = context::decode(&p);
    }

    #[test]
    fn fuzz_snapshot_chunks(raw in bytes(256), pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>(), data in bytes(256)) {
        let _ = Chunk::decode(&raw);
        let good = Chunk::encode_parts(1, 4096, &data);
        if !data.is_empty() {
            let c = Chunk::decode(&good).unwrap();
            prop_assert_eq!((c.file, c.offset, &c.data), (1, 4096, &data));
        }
        let (m, p) = mutate(good, pos, val, cut);
        if let Ok(c) = Chunk::decode(&m) {
            prop_assert!(c.data.len() <= CHUNK_MAX);
        }
        let _ = Chunk::decode(&p);
    }

    #[test]
    fn fuzz_snapshot_manifests(raw in bytes(512), pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>()) {
        let _ = Manifest::decode(&raw, 1 << 30);
        let cs = raft::eraftpb::ConfState { voters: vec![1, 2, 3], ..Default::default() };
        let files = vec![crate::snapshot::FileEntry { path: "state/000001.sst".into(), size: 10, sha256: "00".repeat(32) }];
        let good = Manifest::new(9, 2, &cs, &[], files).encode();
        prop_assert!(Manifest::decode(&good, 1 << 30).is_ok());
        let (m, p) = mutate(good, pos, val, cut);
        if let Ok(man) = Manifest::decode(&m, 1 << 30) {
            prop_assert!(man.total_bytes() <= 1 << 30, "a manifest past the bound was accepted");
        }
        let _ = Manifest::decode(&p, 1 << 30);
    }

    /// Arbitrary bytes as the index (of the length the geometry needs, so the reader
    /// looks inside) and as the heap: every slot the reader finds is read without a
    /// panic, and no value is larger than its segment bound.
    #[test]
    fn fuzz_mmap_key_arbitrary_files(seed in bytes(512), heap in bytes(1024), dense in any::<bool>()) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(".mmap_keys.idx");
        let len = geo().index_len() as usize;
        // The seed repeated over the index (dense), or scattered over zeros (most slots
        // empty, as in a real index).
        let mut idx = vec![0u8; len];
        if !seed.is_empty() {
            for (i, b) in idx.iter_mut().enumerate() {
                if dense || i % 97 < 8 {
                    *b = seed[i % seed.len()];
                }
            }
        }
        std::fs::write(&p, &idx).unwrap();
        std::fs::write(d.path().join(".mmap_keys.idx.heap"), &heap).unwrap();
        ask_everything(&p)?;
    }

    /// A cache written by our writer, then one byte of its index or heap changed: the
    /// reader answers every question without a panic and never returns a value larger
    /// than its segment.
    #[test]
    fn fuzz_mmap_key_files(which in 0usize..2, pos in any::<usize>(), val in any::<u8>()) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(".mmap_keys.idx");
        let mut w = MmapWriter::open(&p, geo(), true).unwrap();
        for i in 0..6u8 {
            w.put(format!("minion{i}").as_bytes(), &[b'\x01', b'k', i], u64::from(i)).unwrap();
        }
        w.finish().unwrap();
        let mut files: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        let f = &files[which % files.len()];
        let mut b = std::fs::read(f).unwrap();
        if !b.is_empty() {
            let at = pos % b.len();
            b[at] = val;
            std::fs::write(f, &b).unwrap();
        }
        ask_everything(&p)?;
    }
}
