//! Criterion benchmarks of the storage core. Run: `cargo bench -p halite-benches --bench storage`.
//!
//! * record encode / decode (a key-set record with a 450-byte SPKI key);
//! * mmap_key lookup and insert at 10k, 100k and 1M keys (table sized 2× the keys);
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
    let rec = Record::KeySet(KeySet { id: "web01.example.com".into(), state: KeyState::Accepted, pub_key: fake_pub(1).into_bytes(), time_ns: 1 });
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
    for n in [10_000u64, 100_000, 1_000_000] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".mmap_keys.idx");
        let geo = Geometry { size: 2 * n + 1, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 30 };
        fill_mmap(&path, geo, n);
        let r = MmapReader::open(&path, geo).unwrap().unwrap();
        let mut i = 0u64;
        g.bench_with_input(BenchmarkId::new("lookup", n), &n, |b, &n| {
            b.iter(|| {
                i = (i + 7919) % n;
                let k = format!("minion-{i:08}");
                black_box(r.get(k.as_bytes()).unwrap().unwrap());
            })
        });
        let mut w = MmapWriter::open(&path, geo, false).unwrap();
        let v = {
            let mut v = vec![BankState::Pending.mmap_byte()];
            v.extend_from_slice(fake_pub(0).as_bytes());
            v
        };
        let mut j = 0u64;
        g.bench_with_input(BenchmarkId::new("insert", n), &n, |b, _| {
            b.iter_batched(
                || {
                    j += 1;
                    format!("new-{j:010}")
                },
                |k| {
                    w.put(k.as_bytes(), &v, 1).unwrap();
                    w.delete(k.as_bytes()).unwrap();
                },
                BatchSize::SmallInput,
            )
        });
        drop(w);
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
