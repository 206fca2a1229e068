//! Criterion benchmarks of the storage core. Run: `cargo bench -p halite-benches --bench storage`.
//!
//! * record encode / decode (a key-set record with a 450-byte SPKI key);
//! * mmap_key lookup, in-place state change and insert (bulk build) at 10k, 100k and 1M
//!   keys (table sized 2× the keys);
//! * `salt-key -L` listing with each driver at 10k keys.

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

use halite_benches::{fake_pub, fill_mmap};
use halite_storage::format::{KeySet, KeyState, Record};
use halite_storage::keys::localfs::LocalfsKeys;
use halite_storage::keys::mmap::MmapKeys;
use halite_storage::keys::{BankState, Geometry, KeyView};
use halite_storage::mmap_cache::{MmapReader, MmapWriter};

fn records(c: &mut Criterion) {
    let rec = Record::KeySet(KeySet { id: "web01.example.com".into(), state: KeyState::Accepted, pub_key: fake_pub(1).into_bytes(), time_ns: 1, expect: None, pending_below: None });
    let bytes = rec.encode().unwrap();
    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode_key_set", |b| b.iter(|| black_box(&rec).encode().unwrap()));
    g.bench_function("decode_key_set", |b| b.iter(|| Record::decode(black_box(&bytes)).unwrap()));
    g.finish();
}

fn mmap(c: &mut Criterion) {
    let mut g = c.benchmark_group("mmap_key");
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    let value = |state: BankState, i: u64| {
        let mut v = vec![state.mmap_byte()];
        v.extend_from_slice(fake_pub(i).as_bytes());
        v
    };
    for n in [10_000u64, 100_000, 1_000_000] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".mmap_keys.idx");
        let geo = Geometry { size: 2 * n + 1, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 30 };
        fill_mmap(&path, geo, n);
        // Keys are formatted outside the timed part.
        let keys: Vec<String> = (0..4096u64).map(|i| format!("minion-{:08}", (i * 7919) % n)).collect();
        let r = MmapReader::open(&path, geo).unwrap().unwrap();
        let mut i = 0usize;
        g.bench_with_input(BenchmarkId::new("lookup", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                black_box(r.get(keys[i].as_bytes()).unwrap().unwrap());
            })
        });
        drop(r);
        // What every key state change is: same length, overwritten in place.
        let mut w = MmapWriter::open(&path, geo, false).unwrap();
        let mut j = 0usize;
        let vals = [value(BankState::Accepted, 0), value(BankState::Rejected, 0)];
        g.bench_with_input(BenchmarkId::new("state_change", n), &n, |b, _| {
            b.iter(|| {
                j += 1;
                w.put(keys[j % keys.len()].as_bytes(), &vals[j % 2], 1).unwrap();
            })
        });
        drop(w);
    }
    g.finish();
    // Inserting fresh keys: building a table of n keys (what a migration or a rebuild does),
    // reported per key.
    let mut g = c.benchmark_group("mmap_key_insert");
    g.sample_size(10);
    for n in [10_000u64, 100_000, 1_000_000] {
        g.throughput(Throughput::Elements(n));
        let vals: Vec<Vec<u8>> = (0..1024).map(|i| value(BankState::Pending, i)).collect();
        let keys: Vec<String> = (0..n).map(|i| format!("minion-{i:08}")).collect();
        g.bench_with_input(BenchmarkId::new("build", n), &n, |b, &n| {
            b.iter_batched(
                || {
                    let dir = tempfile::tempdir().unwrap();
                    let geo = Geometry { size: 2 * n + 1, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 30 };
                    let w = MmapWriter::open(&dir.path().join(".mmap_keys.idx"), geo, false).unwrap();
                    (dir, w)
                },
                |(dir, mut w)| {
                    for (i, k) in keys.iter().enumerate() {
                        w.put(k.as_bytes(), &vals[i % vals.len()], 1).unwrap();
                    }
                    (dir, w)
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

fn listing(c: &mut Criterion) {
    let n = 10_000u64;
    let mut g = c.benchmark_group("salt_key_list");
    g.sample_size(10);
    let dir = tempfile::tempdir().unwrap();
    let geo = Geometry { size: 2 * n + 1, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 30 };
    fill_mmap(&dir.path().join(".mmap_keys.idx"), geo, n);
    let mm = MmapKeys::open(dir.path(), geo).unwrap();
    g.bench_function(BenchmarkId::new("mmap_key", n), |b| b.iter(|| black_box(mm.list().unwrap())));
    let ldir = tempfile::tempdir().unwrap();
    let acc = ldir.path().join("minions");
    std::fs::create_dir_all(&acc).unwrap();
    for i in 0..n {
        std::fs::write(acc.join(format!("minion-{i:08}")), fake_pub(i)).unwrap();
    }
    let lf = LocalfsKeys::open(ldir.path()).unwrap();
    g.bench_function(BenchmarkId::new("localfs_key", n), |b| b.iter(|| black_box(lf.list().unwrap())));
    g.finish();
}

criterion_group!(benches, records, mmap, listing);
criterion_main!(benches);
