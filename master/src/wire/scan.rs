//! Reading a msgpack map in place, one entry at a time, without building it.
//!
//! A minion's `_return` is stored as the minion wrote it (`envelope::open_aes`,
//! `req::returns`): of its entries only `cmd`, `id`, `nonce`, `tok`, `ts` and `jid` are
//! read, and the rest (`return` above all, which for a `state.apply` is a map of
//! hundreds of nested maps) only needs to be found to be well formed and stepped over.
//! [`skip`] does that without allocating; [`MapScan`] walks a map's entries, giving each
//! key and where its entry lies, and the caller reads or skips the value.
//!
//! **The same bound as a decode.** What [`skip`] accepts is exactly what rmpv's
//! `read_value_ref_with_max_depth` with the same depth accepts, consuming the same bytes
//! (the proptest below holds it to that on arbitrary bytes). rmpv spends its depth units
//! thus: one for every value, one more for the items of an array or map (then one for
//! each item), two more for the body of a str, one more for a bin's body, two more for an
//! ext's. So a top-level map's entries are read with the depth a decode of the whole map
//! would give them: [`ENTRY_DEPTH`].

use rmpv::ValueRef;

use super::payload::MAX_DEPTH;

/// The depth a map's keys and values are read with, when [`MAX_DEPTH`] bounds the map
/// (see the module docs).
pub const ENTRY_DEPTH: u16 = MAX_DEPTH as u16 - 2;

/// Why a scan stopped: the bytes are not one well-formed msgpack object within the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// The header of a msgpack map at the start of `b`: (entries, header length); `None` if
/// `b` does not start with one.
pub fn map_header(b: &[u8]) -> Option<(usize, usize)> {
    let mut rd = b;
    let n = rmp::decode::read_map_len(&mut rd).ok()?;
    Some((n as usize, b.len() - rd.len()))
}

/// Whether the msgpack object at the start of `b` is an array or a map: the values a
/// decode builds a tree for.
pub fn is_container(b: &[u8]) -> bool {
    matches!(b.first(), Some(0x80..=0x9f | 0xdc..=0xdf))
}

fn take<'a>(rd: &mut &'a [u8], n: usize) -> Result<&'a [u8], Malformed> {
    if n > rd.len() {
        return Err(Malformed);
    }
    let (head, rest) = rd.split_at(n);
    *rd = rest;
    Ok(head)
}

fn len(rd: &mut &[u8], bytes: usize) -> Result<usize, Malformed> {
    let b = take(rd, bytes)?;
    Ok(b.iter().fold(0usize, |n, &x| (n << 8) | x as usize))
}

fn less(depth: u16) -> Result<u16, Malformed> {
    depth.checked_sub(1).ok_or(Malformed)
}

/// Steps over one msgpack object at the start of `rd` without building it; `depth` as
/// rmpv's `read_value_ref_with_max_depth` takes it (module docs).
pub fn skip(rd: &mut &[u8], depth: u16) -> Result<(), Malformed> {
    let mut unbounded = usize::MAX;
    step(rd, depth, &mut unbounded)
}

/// Whether the msgpack object `b` starts with holds at most `max` values (each scalar,
/// string, array, map and ext counts one; a map's keys and values each count): what a
/// decode of it would build is about 40 bytes a value. Counted without building it; a
/// malformed object is not refused here (its decoder says why).
pub fn holds_at_most(b: &[u8], depth: u16, max: usize) -> bool {
    let mut left = max;
    let mut rd = b;
    step(&mut rd, depth, &mut left).is_ok() || left > 0
}

/// [`skip`], taking one from `left` a value ([`Malformed`] once it is spent).
fn step(rd: &mut &[u8], depth: u16, left: &mut usize) -> Result<(), Malformed> {
    *left = left.checked_sub(1).ok_or(Malformed)?;
    let d = less(depth)?;
    let marker = take(rd, 1)?[0];
    // (items: array 1, map 2; count) or (body length, depth units the body spends).
    let (items, count) = match marker {
        0x00..=0x7f | 0xc0..=0xc3 | 0xe0..=0xff => return Ok(()),
        0xcc | 0xd0 => return take(rd, 1).map(drop),
        0xcd | 0xd1 => return take(rd, 2).map(drop),
        0xce | 0xd2 | 0xca => return take(rd, 4).map(drop),
        0xcf | 0xd3 | 0xcb => return take(rd, 8).map(drop),
        0xa0..=0xbf => return body(rd, (marker & 0x1f) as usize, d, 2),
        0xd9 => return body_of(rd, 1, d, 2),
        0xda => return body_of(rd, 2, d, 2),
        0xdb => return body_of(rd, 4, d, 2),
        0xc4 => return body_of(rd, 1, d, 1),
        0xc5 => return body_of(rd, 2, d, 1),
        0xc6 => return body_of(rd, 4, d, 1),
        0xd4 => return ext(rd, 1, d),
        0xd5 => return ext(rd, 2, d),
        0xd6 => return ext(rd, 4, d),
        0xd7 => return ext(rd, 8, d),
        0xd8 => return ext(rd, 16, d),
        0xc7 => return len(rd, 1).and_then(|n| ext(rd, n, d)),
        0xc8 => return len(rd, 2).and_then(|n| ext(rd, n, d)),
        0xc9 => return len(rd, 4).and_then(|n| ext(rd, n, d)),
        0x90..=0x9f => (1, (marker & 0x0f) as usize),
        0xdc => (1, len(rd, 2)?),
        0xdd => (1, len(rd, 4)?),
        0x80..=0x8f => (2, (marker & 0x0f) as usize),
        0xde => (2, len(rd, 2)?),
        0xdf => (2, len(rd, 4)?),
    };
    let d = less(d)?;
    for _ in 0..count {
        for _ in 0..items {
            step(rd, d, left)?;
        }
    }
    Ok(())
}

/// A str or bin body of `n` bytes, which costs `units` depth units after `d`.
fn body(rd: &mut &[u8], n: usize, d: u16, units: u16) -> Result<(), Malformed> {
    d.checked_sub(units).ok_or(Malformed)?;
    take(rd, n).map(drop)
}

/// [`body`], its length first in `len_bytes` bytes.
fn body_of(rd: &mut &[u8], len_bytes: usize, d: u16, units: u16) -> Result<(), Malformed> {
    let n = len(rd, len_bytes)?;
    body(rd, n, d, units)
}

/// An ext's type byte and body of `n` bytes.
fn ext(rd: &mut &[u8], n: usize, d: u16) -> Result<(), Malformed> {
    let d = less(d)?;
    take(rd, 1)?;
    body(rd, n, d, 1)
}

/// Reads one key or value in place, within [`ENTRY_DEPTH`].
fn read<'a>(rd: &mut &'a [u8]) -> Result<ValueRef<'a>, Malformed> {
    rmpv::decode::read_value_ref_with_max_depth(rd, ENTRY_DEPTH as usize).map_err(|_| Malformed)
}

/// The entries of a map, walked in place: [`MapScan::key`] reads the next key, then the
/// caller takes its value with [`MapScan::value`] or steps over it with
/// [`MapScan::skip_value`]; [`MapScan::finish`] checks that nothing follows the map.
pub struct MapScan<'a> {
    msg: &'a [u8],
    rd: &'a [u8],
    left: usize,
    /// The map header's length.
    pub header: usize,
}

impl<'a> MapScan<'a> {
    /// A scan of the map `msg` holds (one map and nothing else, or [`Malformed`] by
    /// [`MapScan::finish`]). A header that counts more entries than the bytes could hold
    /// (two bytes at least each) is refused before anything is read.
    pub fn new(msg: &'a [u8]) -> Result<Self, Malformed> {
        let (n, header) = map_header(msg).ok_or(Malformed)?;
        if n > (msg.len() - header) / 2 {
            return Err(Malformed);
        }
        Ok(MapScan { msg, rd: &msg[header..], left: n, header })
    }

    /// Where the scan is, in bytes from the start of the map.
    pub fn offset(&self) -> usize {
        self.msg.len() - self.rd.len()
    }

    /// The next entry's key and where the entry starts; `None` after the last.
    pub fn key(&mut self) -> Option<Result<(ValueRef<'a>, usize), Malformed>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let start = self.offset();
        Some(read(&mut self.rd).map(|k| (k, start)))
    }

    /// The value of the entry whose key was just read.
    pub fn value(&mut self) -> Result<ValueRef<'a>, Malformed> {
        read(&mut self.rd)
    }

    /// Steps over the value of the entry whose key was just read.
    pub fn skip_value(&mut self) -> Result<(), Malformed> {
        skip(&mut self.rd, ENTRY_DEPTH)
    }

    /// The value of the entry whose key was just read if it is not an array or a map;
    /// an array or a map is stepped over instead (`None`). For a field that must be a
    /// string, a number or bytes: a container there would otherwise be built into a
    /// tree of 32 bytes a value, however small its values are on the wire (a byte a
    /// nil), only to be found the wrong type.
    pub fn scalar(&mut self) -> Result<Option<ValueRef<'a>>, Malformed> {
        if is_container(self.rd) {
            self.skip_value().map(|()| None)
        } else {
            self.value().map(Some)
        }
    }

    /// The bytes of the value of the entry whose key was just read, stepped over (so
    /// found well formed within the bound), to be read only if they are worth it.
    pub fn value_bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let before = self.rd;
        self.skip_value()?;
        Ok(&before[..before.len() - self.rd.len()])
    }

    /// After the last entry: [`Malformed`] if bytes follow the map.
    pub fn finish(&self) -> Result<(), Malformed> {
        if self.left == 0 && self.rd.is_empty() {
            Ok(())
        } else {
            Err(Malformed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rmpv::Value;

    /// Values with every marker: str8 and bin16 (long ones), array16 and map16 (16
    /// items or more), ext.
    fn value() -> impl Strategy<Value = Value> {
        crate::wire::test_values::values(crate::wire::test_values::Shape { text: "[a-z]{0,40}", max_bin: 300, ext: true, depth: 6, size: 64, items: 18, text_keys: false })
    }

    /// Encoded values, some cut short or with a byte changed, some followed by more.
    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        (value(), any::<usize>(), any::<u8>(), 0usize..4, proptest::collection::vec(any::<u8>(), 0..3)).prop_map(|(v, at, b, how, tail)| {
            let mut e = Vec::new();
            rmpv::encode::write_value(&mut e, &v).unwrap();
            let at = if e.is_empty() { 0 } else { at % e.len() };
            match how {
                0 => {}
                1 => e.truncate(at),
                2 => e[at] = b,
                _ => e.extend_from_slice(&tail),
            }
            e
        })
    }

    fn agree(b: &[u8], depth: u16) -> Result<(), TestCaseError> {
        let (mut a, mut r) = (b, b);
        let skipped = skip(&mut a, depth);
        let read = rmpv::decode::read_value_ref_with_max_depth(&mut r, depth as usize);
        prop_assert_eq!(skipped.is_ok(), read.is_ok(), "bytes {:02x?} depth {}", b, depth);
        if skipped.is_ok() {
            prop_assert_eq!(a.len(), r.len(), "the same bytes consumed");
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// `skip` accepts what rmpv reads, at any depth bound, and consumes the same bytes.
        #[test]
        fn skip_reads_as_rmpv_does(b in bytes(), depth in 0u16..24) {
            agree(&b, depth)?;
            agree(&b, ENTRY_DEPTH)?;
        }

        #[test]
        fn skip_agrees_on_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..12), depth in 0u16..8) {
            agree(&b, depth)?;
        }
    }

    #[test]
    fn every_marker_agrees_with_rmpv() {
        // Each first byte, followed by enough bytes for any fixed-size body.
        for m in 0..=255u8 {
            for tail in [vec![], vec![0u8; 3], vec![1u8; 40], vec![0x91u8; 40]] {
                let mut b = vec![m];
                b.extend_from_slice(&tail);
                for depth in [0u16, 1, 2, 3, 4, 8, ENTRY_DEPTH] {
                    agree(&b, depth).unwrap();
                }
            }
        }
    }

    #[test]
    fn containers_are_stepped_over_by_scalar_and_values_lent_as_bytes() {
        let m = Value::Map(vec![
            (Value::from("a"), Value::Array(vec![Value::Nil; 20])),
            (Value::from("b"), Value::Map(vec![(Value::from("k"), Value::from(1))])),
            (Value::from("c"), Value::from("x")),
            (Value::from("d"), Value::Array(vec![Value::from(2)])),
        ]);
        let mut e = Vec::new();
        rmpv::encode::write_value(&mut e, &m).unwrap();
        let mut s = MapScan::new(&e).unwrap();
        s.key().unwrap().unwrap();
        assert_eq!(s.scalar(), Ok(None), "an array is stepped over");
        s.key().unwrap().unwrap();
        assert_eq!(s.scalar(), Ok(None), "a map too");
        s.key().unwrap().unwrap();
        assert_eq!(s.scalar(), Ok(Some(ValueRef::from("x"))));
        s.key().unwrap().unwrap();
        assert_eq!(s.value_bytes(), Ok(&[0x91, 0x02][..]));
        assert!(s.key().is_none() && s.finish().is_ok());
        // Malformed containers are refused, not stepped over.
        let mut s = MapScan::new(&[0x81, 0xa1, b'a', 0x92, 0xc0]).unwrap();
        s.key().unwrap().unwrap();
        assert_eq!(s.scalar(), Err(Malformed));
    }

    #[test]
    fn values_are_counted_without_building_them() {
        let mut e = Vec::new();
        // A map of 2 entries: "a" -> [nil, nil, nil], "b" -> {"k": 1}: 1 + (1 + 1 + 3) + (1 + 1 + 1 + 1) = 10 values.
        let m = Value::Map(vec![(Value::from("a"), Value::Array(vec![Value::Nil; 3])), (Value::from("b"), Value::Map(vec![(Value::from("k"), Value::from(1))]))]);
        rmpv::encode::write_value(&mut e, &m).unwrap();
        assert!(holds_at_most(&e, ENTRY_DEPTH, 10));
        assert!(!holds_at_most(&e, ENTRY_DEPTH, 9));
        assert!(holds_at_most(&[0x92, 0xc0], ENTRY_DEPTH, 5), "malformed within the bound: left to the decoder");
        // A count of values over the bound is refused once the bound is reached, before
        // the bytes run out.
        assert!(!holds_at_most(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0], ENTRY_DEPTH, 2));
        let mut rd = &e[..];
        assert_eq!(skip(&mut rd, ENTRY_DEPTH), Ok(()), "skip is not bounded");
    }

    #[test]
    fn a_map_is_walked_entry_by_entry() {
        let m = Value::Map(vec![(Value::from("a"), Value::Array(vec![Value::from(1); 3])), (Value::from("b"), Value::from("x"))]);
        let mut e = Vec::new();
        rmpv::encode::write_value(&mut e, &m).unwrap();
        let mut s = MapScan::new(&e).unwrap();
        let (k, start) = s.key().unwrap().unwrap();
        assert_eq!((k, start), (ValueRef::from("a"), 1));
        s.skip_value().unwrap();
        let (k, _) = s.key().unwrap().unwrap();
        assert_eq!(k, ValueRef::from("b"));
        assert_eq!(s.value().unwrap(), ValueRef::from("x"));
        assert!(s.key().is_none());
        assert!(s.finish().is_ok());
        e.push(0xc0);
        let mut s = MapScan::new(&e).unwrap();
        while let Some(k) = s.key() {
            k.unwrap();
            s.skip_value().unwrap();
        }
        assert_eq!(s.finish(), Err(Malformed), "a byte after the map");
        assert!(MapScan::new(&[0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0]).is_err(), "a count the bytes cannot hold");
        assert!(MapScan::new(&[0x91, 0xc0]).is_err(), "not a map");
        let mut h = Vec::new();
        for n in [0usize, 15, 16, 65_535, 65_536] {
            h.clear();
            rmp::encode::write_map_len(&mut h, n as u32).unwrap();
            assert_eq!(map_header(&h), Some((n, h.len())));
            // The header and n nil pairs decode as a map of n entries.
            h.resize(h.len() + 2 * n, 0xc0);
            assert_eq!(crate::wire::payload::decode(&h).unwrap().as_map().map(Vec::len), Some(n));
        }
    }
}
