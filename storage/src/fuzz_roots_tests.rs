//! Fuzzing of the roots path (part of `fuzz_tests.rs`'s family, same long-run command):
//! roots blob records as a log could carry them, honest or hostile field by field, go
//! through the record codec (which validates), the state machine's apply and the roots
//! materialiser. What must hold: no panic, no allocation from a declared size, and every
//! file the state machine calls complete reads back whole and matches its sha256, on
//! disk too.

use proptest::prelude::*;
use sha2::{Digest, Sha256};

use crate::format::{Record, RootsBlob, RootsTombstone, RootsTree, ROOTS_CHUNK_LEN};
use crate::roots::{RootsDirs, RootsMaterialiser};
use crate::state::{Effect, StateMachine};

const PATHS: [&str; 5] = ["a.sls", "b/c.txt", "a.sls/x", "../x", "b"];

fn setup() -> (tempfile::TempDir, StateMachine, RootsMaterialiser) {
    let d = tempfile::tempdir().unwrap();
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let mut dirs = RootsDirs::default();
    dirs.file.insert("base".into(), d.path().join("file"));
    (d, sm, RootsMaterialiser::new(dirs))
}

/// Applies a record as the log would: only what encodes and decodes (both validate)
/// reaches the state machine; effects are materialised.
fn apply(sm: &StateMachine, mat: &RootsMaterialiser, index: u64, rec: Record) {
    let Ok(bytes) = rec.encode() else { return };
    let Ok(rec) = Record::decode(&bytes) else { return };
    if let Ok(fx) = sm.apply(&[(index, rec)]) {
        for f in fx {
            match f {
                Effect::RootsWritten { tree, saltenv, path } => {
                    let _ = mat.materialise(sm, tree, &saltenv, &path);
                }
                Effect::RootsRemoved { tree, saltenv, path } => {
                    let _ = mat.remove(tree, &saltenv, &path);
                }
                _ => {}
            }
        }
    }
}

/// Every complete file reads back whole, matches its sha256, and is on disk as held.
fn check_complete(sm: &StateMachine, root: &std::path::Path) -> Result<(), TestCaseError> {
    for (tree, env, path, meta) in sm.roots_files().unwrap() {
        let (m, data) = sm.roots_file(tree, &env, &path).unwrap().unwrap();
        prop_assert_eq!(Sha256::digest(&data).to_vec(), m.sha256.clone());
        prop_assert_eq!(data.len() as u64, meta.size);
        if let Ok(on_disk) = std::fs::read(root.join(&path)) {
            prop_assert_eq!(on_disk, data);
        }
    }
    Ok(())
}

/// Each case opens a RocksDB: 32 cases by default (a few seconds), `PROPTEST_CASES` for
/// the long run.
fn config() -> ProptestConfig {
    ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(32), ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]
    #[test]
    fn fuzz_roots_blobs(steps in proptest::collection::vec(
        (0usize..PATHS.len(), proptest::collection::vec(any::<u8>(), 0..64), any::<u32>(), any::<u64>(), any::<u32>(), any::<u32>(), 0u8..4),
        1..10,
    )) {
        let (d, sm, mat) = setup();
        for (i, (p, content, mode, size, chunk, chunks, how)) in steps.into_iter().enumerate() {
            let path = PATHS[p].to_string();
            let honest = Sha256::digest(&content).to_vec();
            let rec = match how {
                // The honest one-chunk file.
                0 => Record::RootsBlob(RootsBlob { tree: RootsTree::File, saltenv: "base".into(), path, mode: mode & 0o777, sha256: honest, size: content.len() as u64, chunk: 0, chunks: 1, data: content }),
                // A sha256 that does not match what arrives.
                1 => Record::RootsBlob(RootsBlob { tree: RootsTree::File, saltenv: "base".into(), path, mode: mode & 0o777, sha256: Sha256::digest(b"other").to_vec(), size: content.len() as u64, chunk: 0, chunks: 1, data: content }),
                // Every field as an attacker likes it.
                2 => Record::RootsBlob(RootsBlob { tree: RootsTree::File, saltenv: "base".into(), path, mode, sha256: content.clone(), size, chunk, chunks, data: content }),
                _ => Record::RootsTombstone(RootsTombstone { tree: RootsTree::File, saltenv: "base".into(), path }),
            };
            apply(&sm, &mat, i as u64 + 1, rec);
        }
        let _ = mat.rebuild(&sm);
        check_complete(&sm, &d.path().join("file"))?;
    }
}

/// A version of a file that declared the most chunks a record can (u32::MAX: a file of
/// about 4 PiB, of which only chunk 0 arrived), replaced by a small version: the old
/// chunks go in one range delete. (It was one delete per declared chunk, four billion
/// of them in one write batch.)
#[test]
fn a_version_declaring_u32_max_chunks_is_replaced_in_one_step() {
    let (d, sm, mat) = setup();
    let big = RootsBlob {
        tree: RootsTree::File,
        saltenv: "base".into(),
        path: "huge.bin".into(),
        mode: 0o644,
        sha256: vec![7; 32],
        size: u32::MAX as u64 * ROOTS_CHUNK_LEN as u64,
        chunk: 0,
        chunks: u32::MAX,
        data: vec![1; ROOTS_CHUNK_LEN],
    };
    let rec = Record::RootsBlob(big);
    assert!(rec.encode().is_ok(), "the record layer lets such a declaration through");
    apply(&sm, &mat, 1, rec);
    let small = b"small\n".to_vec();
    let rec = Record::RootsBlob(RootsBlob { tree: RootsTree::File, saltenv: "base".into(), path: "huge.bin".into(), mode: 0o644, sha256: Sha256::digest(&small).to_vec(), size: 6, chunk: 0, chunks: 1, data: small.clone() });
    apply(&sm, &mat, 2, rec);
    assert_eq!(std::fs::read(d.path().join("file/huge.bin")).unwrap(), small);
    assert_eq!(sm.roots_file(RootsTree::File, "base", "huge.bin").unwrap().unwrap().1, small);
}
