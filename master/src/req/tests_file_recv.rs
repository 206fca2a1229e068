//! `_file_recv` driven with an in-memory view: what is kept, what is refused (and that
//! nothing is written for it), Salt's answers.

use rmpv::Value;

use halite_storage::file_recv::{PushedMeta, PushedRead, PUSH_CHUNK_LEN};
use halite_storage::format::Record;

use super::handle;
use super::tests::{aes_reply, signed_in, Minion};
use crate::wire::crypto::Crypticle;
use crate::view::memory::MemoryView;
use crate::wire::payload::bin;

fn load(path: &[&str], size: u64, loc: i64, data: &[u8]) -> Vec<(Value, Value)> {
    vec![
        (Value::from("path"), Value::Array(path.iter().map(|p| Value::from(*p)).collect())),
        (Value::from("size"), Value::from(size)),
        (Value::from("loc"), Value::from(loc)),
        (Value::from("data"), bin(data.to_vec())),
    ]
}

/// A view and m1 signed in to it.
fn view(file_recv: bool) -> (MemoryView, (Minion, Crypticle)) {
    let mut v = MemoryView::new();
    v.cfg.file_recv = file_recv;
    let m = signed_in(&mut v, "m1");
    (v, m)
}

/// The answer and the records of one `_file_recv` from m1.
fn push(v: &mut MemoryView, ms: &(Minion, Crypticle), inner: Vec<(Value, Value)>) -> (Value, Vec<Record>) {
    let (m, s) = ms;
    let o = handle(v, &m.aes(s, "_file_recv", inner));
    (aes_reply(s, &o), o.records)
}

#[test]
fn with_file_recv_a_piece_is_kept_as_records_and_answered_true() {
    let (mut v, m) = view(true);
    let (answer, records) = push(&mut v, &m, load(&["tmp", "a.txt"], 5, 0, b"hello"));
    assert_eq!(answer, Value::Boolean(true));
    let [Record::FileRecv(r)] = &records[..] else { panic!("{records:?}") };
    assert_eq!((r.id.as_str(), r.path.as_str(), r.size, r.loc, &r.data[..]), ("m1", "tmp/a.txt", 5, 0, &b"hello"[..]));
    // A piece larger than a record's bound is cut.
    let big = vec![3u8; PUSH_CHUNK_LEN + 10];
    let (answer, records) = push(&mut v, &m, load(&["big"], big.len() as u64, 0, &big));
    assert_eq!(answer, Value::Boolean(true));
    assert_eq!(records.len(), 2);
}

#[test]
fn without_file_recv_nothing_is_kept_and_the_minion_gets_false() {
    let (mut v, m) = view(false);
    assert_eq!(push(&mut v, &m, load(&["a"], 1, 0, b"x")), (Value::Boolean(false), vec![]));
}

#[test]
fn escaping_paths_are_refused() {
    let (mut v, m) = view(true);
    for path in [&[".."][..], &["..", "etc", "passwd"], &["/etc/passwd"], &["", "etc", "x"], &["a", "..", ".."], &["."], &[], &["a\0b"]] {
        assert_eq!(push(&mut v, &m, load(path, 1, 0, b"x")), (Value::Boolean(false), vec![]), "{path:?}");
    }
    // A `..` that stays inside is normalised away, as Salt does.
    let (answer, records) = push(&mut v, &m, load(&["a", "..", "b"], 1, 0, b"x"));
    assert_eq!(answer, Value::Boolean(true));
    assert!(matches!(&records[..], [Record::FileRecv(r)] if r.path == "b"));
}

#[test]
fn oversized_pushes_are_refused_at_the_first_piece() {
    let (mut v, m) = view(true);
    v.cfg.file_recv_max_size = 1;
    let mib = 1u64 << 20;
    assert_eq!(push(&mut v, &m, load(&["a"], mib + 1, 0, b"x")), (Value::Boolean(false), vec![]), "declared size over the limit");
    assert_eq!(push(&mut v, &m, load(&["a"], u64::MAX, 0, b"x")), (Value::Boolean(false), vec![]));
    assert_eq!(push(&mut v, &m, load(&["a"], mib, (mib - 1) as i64, b"xy")), (Value::Boolean(false), vec![]), "Salt's rule: loc + data");
    assert_eq!(push(&mut v, &m, load(&["a"], mib, 0, b"x")).0, Value::Boolean(true), "exactly the limit is allowed");
}

#[test]
fn malformed_loads_and_out_of_order_pieces_are_refused() {
    let (mut v, m) = view(true);
    let mut no_size = load(&["a"], 1, 0, b"x");
    no_size.retain(|(k, _)| k.as_str() != Some("size"));
    let mut path_text = load(&["a"], 1, 0, b"x");
    path_text[0].1 = Value::from("a");
    let mut path_ints = load(&["a"], 1, 0, b"x");
    path_ints[0].1 = Value::Array(vec![Value::from(1)]);
    for bad in [no_size, path_text, path_ints, load(&["a"], 1, -1, b"x"), load(&["a"], 1, 0, b"xy")] {
        assert_eq!(push(&mut v, &m, bad), (Value::Boolean(false), vec![]));
    }
    // A continuation of nothing, of the wrong offset or size, or of a complete file.
    assert_eq!(push(&mut v, &m, load(&["a"], 4, 2, b"cd")).1, vec![]);
    let held = |held, size| PushedRead { held: Some(PushedMeta { size, held, time_ns: 0 }), conflict: false };
    v.pushed.insert(("m1".into(), "a".into()), held(2, 4));
    assert_eq!(push(&mut v, &m, load(&["a"], 4, 2, b"cd")).0, Value::Boolean(true));
    assert_eq!(push(&mut v, &m, load(&["a"], 4, 1, b"cd")).1, vec![]);
    assert_eq!(push(&mut v, &m, load(&["a"], 5, 2, b"cd")).1, vec![]);
    v.pushed.insert(("m1".into(), "a".into()), held(4, 4));
    assert_eq!(push(&mut v, &m, load(&["a"], 4, 4, b"")).1, vec![]);
    assert_eq!(push(&mut v, &m, load(&["a"], 2, 0, b"ab")).0, Value::Boolean(true), "offset 0 starts it again");
    // Another pushed file in the way.
    v.pushed.insert(("m1".into(), "d/e".into()), PushedRead { held: None, conflict: true });
    assert_eq!(push(&mut v, &m, load(&["d", "e"], 1, 0, b"x")), (Value::Boolean(false), vec![]));
}
