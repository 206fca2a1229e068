//! The envelope's tests: the checks in order, the in-place reads held to decoding the
//! whole body (the old implementations kept here as oracles), the depth bounds.

use super::*;
use crate::wire::payload::{bin, get, get_text, map, take};

fn body(v: Value) -> Vec<u8> {
    encode(&v)
}

#[test]
fn envelope_checks() {
    let ok = body(map([("enc", Value::from("clear")), ("load", map([("cmd", Value::from("ping"))])), ("version", Value::from(3))]));
    assert_eq!(decode(&ok, 1 << 20).unwrap().enc, Enc::Clear);
    assert!(matches!(decode(&ok, 4), Err(EnvelopeError::TooLarge { max: 4, .. })));
    let old = body(map([("enc", Value::from("clear")), ("load", map([])), ("version", Value::from(2))]));
    assert_eq!(decode(&old, 1 << 20).unwrap_err(), EnvelopeError::OldVersion(2));
    let unversioned = body(map([("enc", Value::from("clear")), ("load", map([]))]));
    assert!(decode(&unversioned, 1 << 20).is_err());
    let odd = body(map([("enc", Value::from("rot13")), ("load", map([])), ("version", Value::from(3))]));
    assert_eq!(decode(&odd, 1 << 20).unwrap_err(), EnvelopeError::UnknownEnc("rot13".into()));
    assert_eq!(decode(&body(Value::from(1)), 1 << 20).unwrap_err(), EnvelopeError::NotAMap);
    assert!(decode(b"\xc1", 1 << 20).is_err());
}

/// What the borrowed decode reads: an AES load's bytes as the body holds them (bin,
/// or a str even when it is not UTF-8), nothing for a load that is not bytes, the
/// first entry of a repeated key; trailing bytes and deep nesting refused.
#[test]
fn the_envelope_is_read_in_place() {
    let aes = |load: Value| body(map([("enc", Value::from("aes")), ("load", load), ("id", Value::from("m1")), ("version", Value::from(3))]));
    let b = aes(bin(vec![1, 2, 3]));
    let env = decode(&b, 1 << 20).unwrap();
    assert_eq!((env.enc, env.ciphertext, env.id, &env.load), (Enc::Aes, Some(&[1u8, 2, 3][..]), "m1", &Value::Nil));
    // A str of bytes that are not UTF-8 (fixstr of 2: ff fe), as a Python 2 minion sent.
    let mut b = aes(Value::from("xy"));
    let at = b.windows(3).position(|w| w == [0xa2, b'x', b'y']).unwrap();
    b[at + 1..at + 3].copy_from_slice(&[0xff, 0xfe]);
    assert_eq!(decode(&b, 1 << 20).unwrap().ciphertext, Some(&[0xff, 0xfe][..]));
    assert_eq!(decode(&aes(Value::from(7)), 1 << 20).unwrap().ciphertext, None);
    let twice = body(Value::Map(vec![
        (Value::from("enc"), Value::from("clear")),
        (Value::from("load"), map([("cmd", Value::from("ping"))])),
        (Value::from("load"), map([("cmd", Value::from("_auth"))])),
        (Value::from("version"), Value::from(3)),
    ]));
    let env = decode(&twice, 1 << 20).unwrap();
    assert_eq!((env.ciphertext, get_text(&env.load, "cmd")), (None, Some("ping")));
    let mut trailing = aes(bin(vec![1]));
    trailing.push(0xc0);
    assert!(matches!(decode(&trailing, 1 << 20), Err(EnvelopeError::Undecodable(_))));
    let mut deep = vec![0x91; 100];
    deep.push(0xc0);
    assert!(matches!(decode(&deep, 1 << 20), Err(EnvelopeError::Undecodable(_))));
}

/// A clear load over [`CLEAR_LOAD_MAX`] is refused without being read into a tree; an
/// AES load that is a large array is not read either (it is not bytes); containers in
/// the string fields read as "not a string".
#[test]
fn large_containers_are_stepped_over_not_built() {
    let nils = |n: usize| Value::Array(vec![Value::Nil; n]);
    let clear = |pad: Value| body(map([("enc", Value::from("clear")), ("load", map([("cmd", Value::from("ping")), ("pad", pad)])), ("version", Value::from(3))]));
    let over = clear(nils(CLEAR_LOAD_MAX));
    assert!(matches!(decode(&over, 1 << 30), Err(EnvelopeError::ClearTooLarge { max: CLEAR_LOAD_MAX, len }) if len > CLEAR_LOAD_MAX));
    // At the bound: read as before.
    let under = clear(nils(CLEAR_LOAD_MAX - 64));
    let env = decode(&under, 1 << 30).unwrap();
    assert_eq!(get(&env.load, "pad"), Some(&nils(CLEAR_LOAD_MAX - 64)));
    // Whatever it holds: a map with one large string is refused as well.
    assert!(matches!(decode(&clear(Value::from("x".repeat(2 * CLEAR_LOAD_MAX))), 1 << 30), Err(EnvelopeError::ClearTooLarge { .. })));
    // A load that is itself a large string is one copy, not a tree: read (no command
    // takes it).
    let text = body(map([("enc", Value::from("clear")), ("load", Value::from("x".repeat(2 * CLEAR_LOAD_MAX))), ("version", Value::from(3))]));
    assert!(decode(&text, 1 << 30).is_ok());
    let aes = body(map([("enc", Value::from("aes")), ("load", nils(1 << 20)), ("id", Value::from("m1")), ("version", Value::from(3))]));
    let env = decode(&aes, 1 << 30).unwrap();
    assert_eq!((env.ciphertext, &env.load), (None, &Value::Nil));
    let enc = body(map([("enc", nils(1 << 20)), ("load", map([])), ("version", Value::from(3))]));
    assert_eq!(decode(&enc, 1 << 30).unwrap_err(), EnvelopeError::Incomplete);
    // The first `load` counts, also when it is the large one.
    let twice = body(Value::Map(vec![
        (Value::from("enc"), Value::from("clear")),
        (Value::from("load"), map([("pad", nils(CLEAR_LOAD_MAX))])),
        (Value::from("load"), map([("cmd", Value::from("ping"))])),
        (Value::from("version"), Value::from(3)),
    ]));
    assert!(matches!(decode(&twice, 1 << 30), Err(EnvelopeError::ClearTooLarge { .. })));
}

fn field_value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    prop_oneof![
        Just(Value::Nil),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec!["aes", "clear", "m1", "OAEP-SHA224", "PKCS1v15-SHA224", "x"]).prop_map(Value::from),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(bin),
        Just(map([("cmd", Value::from("ping"))])),
    ]
}

proptest::proptest! {
    /// The borrowed decode reads any map as a decoded tree read with
    /// `payload::get` would.
    #[test]
    fn reads_as_the_decoded_tree(pairs in proptest::collection::vec((proptest::sample::select(vec!["enc", "load", "id", "version", "enc_algo", "sig_algo", "other"]), field_value()), 0..9)) {
        let tree = Value::Map(pairs.into_iter().map(|(k, v)| (Value::from(k), v)).collect());
        let b = body(tree.clone());
        let got = decode(&b, 1 << 20);
        let enc = get_text(&tree, "enc");
        let version = get(&tree, "version").and_then(Value::as_i64).unwrap_or(0);
        match (enc, get(&tree, "load")) {
            (Some(_), Some(_)) if version < MIN_VERSION => proptest::prop_assert_eq!(got.unwrap_err(), EnvelopeError::OldVersion(version)),
            (Some("aes"), Some(load)) => {
                let env = got.unwrap();
                proptest::prop_assert_eq!(env.ciphertext, payload::bytes(load));
                proptest::prop_assert_eq!(env.id, get_text(&tree, "id").unwrap_or(""));
                proptest::prop_assert_eq!(env.enc_algo, EncAlgo::parse(get_text(&tree, "enc_algo").unwrap_or("OAEP-SHA1")).unwrap_or(EncAlgo::OaepSha1));
                proptest::prop_assert_eq!(env.sig_algo, SigAlgo::parse(get_text(&tree, "sig_algo").unwrap_or("PKCS1v15-SHA1")).unwrap_or(SigAlgo::Pkcs1v15Sha1));
            }
            (Some("clear"), Some(load)) => proptest::prop_assert_eq!(&got.unwrap().load, load),
            (Some(_), Some(_)) => proptest::prop_assert!(matches!(got, Err(EnvelopeError::UnknownEnc(_)))),
            _ => proptest::prop_assert_eq!(got.unwrap_err(), EnvelopeError::Incomplete),
        }
    }
}

/// The envelope's fields as they were found before the in-place scan: the whole body
/// decoded into a borrowed tree, each field the first entry of its name (the oracle of
/// `decodes_as_the_whole_body_did`; the checks after are `Fields::envelope` for both).
fn decode_tree(body: &[u8]) -> Result<Envelope<'_>, EnvelopeError> {
    let env = payload::decode_ref(body).map_err(|e| EnvelopeError::Undecodable(e.to_string()))?;
    let ValueRef::Map(pairs) = env else {
        return Err(EnvelopeError::NotAMap);
    };
    let field = |name: &str| pairs.iter().find(|(k, _)| ref_bytes(body, k) == Some(name.as_bytes())).map(|(_, v)| v.clone());
    let fields = Fields { enc: field("enc"), load: field("load"), version: field("version"), id: field("id"), enc_algo: field("enc_algo"), sig_algo: field("sig_algo"), oversized_load: None };
    fields.envelope(body)
}

/// An error with an undecodable body's words left out.
fn kind(e: &EnvelopeError) -> EnvelopeError {
    match e {
        EnvelopeError::Undecodable(_) => EnvelopeError::Undecodable(String::new()),
        other => other.clone(),
    }
}

/// Envelope-like bodies: maps of the fields (keys as str or bin, repeated, any
/// order, values nested up to past the depth bound), some cut short, changed at a
/// byte or followed by more bytes.
fn envelope_bytes() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let key = prop::sample::select(vec!["enc", "load", "id", "version", "enc_algo", "sig_algo", "other", "#bin-load", "#bin-enc", "#int"]).prop_map(|k| match k {
        "#bin-load" => bin(b"load".to_vec()),
        "#bin-enc" => bin(b"enc".to_vec()),
        "#int" => Value::from(3),
        k => Value::from(k),
    });
    let deep = (0..payload::MAX_DEPTH + 2).prop_map(|d| (0..d).fold(Value::Nil, |v, _| Value::Array(vec![v])));
    let value = prop_oneof![4 => field_value(), 1 => Just(Value::from(3)), 1 => deep];
    (proptest::collection::vec((key, value), 0..9), any::<usize>(), any::<u8>(), 0usize..5, proptest::collection::vec(any::<u8>(), 0..3)).prop_map(|(pairs, at, b, how, tail)| {
        let mut e = encode(&Value::Map(pairs));
        let at = at % e.len();
        match how {
            0 => e.truncate(at),
            1 => e[at] = b,
            2 => e.extend_from_slice(&tail),
            _ => {}
        }
        e
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    /// The in-place scan decodes any body as decoding the whole body did: the same
    /// error, or the same fields.
    #[test]
    fn decodes_as_the_whole_body_did(b in envelope_bytes()) {
        match (decode(&b, 1 << 20), decode_tree(&b)) {
            (Ok(got), Ok(want)) => {
                proptest::prop_assert_eq!((got.enc, &got.load, got.ciphertext, got.id), (want.enc, &want.load, want.ciphertext, want.id));
                proptest::prop_assert_eq!((got.enc_algo, got.sig_algo), (want.enc_algo, want.sig_algo));
            }
            // The same error; an undecodable body's words are the scan's, not rmpv's.
            (got, want) => proptest::prop_assert_eq!(got.map(|_| ()).map_err(|e| kind(&e)), want.map(|_| ()).map_err(|e| kind(&e)), "bytes {:02x?}", b),
        }
    }
}

#[test]
fn aes_load_checks_in_order() {
    let k = Crypticle::generate();
    let seal = |inner: Value| {
        let mut p = PICKLE.to_vec();
        p.extend_from_slice(&encode(&inner));
        bin(k.encrypt(&p).unwrap())
    };
    let nonce = "0123456789abcdef0123456789abcdef";
    let good = seal(map([("cmd", Value::from("_return")), ("id", Value::from("m1")), ("nonce", Value::from(nonce)), ("tok", bin(b"t".to_vec()))]));
    let good = payload::bytes(&good).map(<[u8]>::to_vec);
    let good = good.as_deref();
    let o = open_aes(good, "m1", &k).unwrap();
    assert_eq!((o.cmd.as_str(), o.nonce.as_str()), ("_return", nonce));
    let inner = o.inner_value().unwrap();
    assert!(get(&inner, "nonce").is_none() && get(&inner, "tok").is_none(), "nonce and tok are taken out");
    assert_eq!(open_aes(good, "m2", &k).unwrap_err(), EnvelopeError::IdMismatch);
    assert_eq!(open_aes(good, "m1", &Crypticle::generate()).unwrap_err(), EnvelopeError::DoesNotDecrypt);
    let short_nonce = seal(map([("cmd", Value::from("x")), ("id", Value::from("m1")), ("nonce", Value::from("abc")), ("tok", bin(b"t".to_vec()))]));
    assert_eq!(open_aes(payload::bytes(&short_nonce), "m1", &k).unwrap_err(), EnvelopeError::BadNonce);
    let no_tok = seal(map([("cmd", Value::from("x")), ("id", Value::from("m1")), ("nonce", Value::from(nonce))]));
    assert_eq!(open_aes(payload::bytes(&no_tok), "m1", &k).unwrap_err(), EnvelopeError::NoTok);
    // A load of more values than MAX_VALUES opens (a return would be stored as it came)
    // but is not decoded for any other command.
    let many = seal(map([("cmd", Value::from("_minion_event")), ("id", Value::from("m1")), ("nonce", Value::from(nonce)), ("tok", bin(b"t".to_vec())), ("data", Value::Array(vec![Value::Nil; MAX_VALUES]))]));
    let o = open_aes(payload::bytes(&many), "m1", &k).unwrap();
    assert_eq!(o.inner_value().unwrap_err(), EnvelopeError::TooManyValues { max: MAX_VALUES });
    let fits = seal(map([("cmd", Value::from("_minion_event")), ("id", Value::from("m1")), ("nonce", Value::from(nonce)), ("tok", bin(b"t".to_vec())), ("data", Value::Array(vec![Value::Nil; MAX_VALUES - 8]))]));
    assert!(open_aes(payload::bytes(&fits), "m1", &k).unwrap().inner_value().is_ok(), "the map, cmd, id and data with their keys: within the bound");
    let raw = bin(k.encrypt(b"no prefix").unwrap());
    assert_eq!(open_aes(payload::bytes(&raw), "m1", &k).unwrap_err(), EnvelopeError::NoPickle);
    assert_eq!(open_aes(None, "m1", &k).unwrap_err(), EnvelopeError::LoadNotBytes);
}

/// What `open_aes` did before it read in place: the whole map decoded into a tree,
/// then looked up and taken from. The oracle of the proptest below.
fn open_tree(msg: &[u8], id: &str) -> Result<(String, String, Value, Option<i64>, Value), EnvelopeError> {
    let mut inner = match payload::decode(msg) {
        Ok(v @ Value::Map(_)) => v,
        _ => return Err(EnvelopeError::InnerNotAMap),
    };
    let cmd = get_text(&inner, "cmd").unwrap_or("").to_string();
    let nonce = take(&mut inner, "nonce").and_then(|n| payload::text(&n).map(String::from)).unwrap_or_default();
    if !well_formed_nonce(&nonce) {
        return Err(EnvelopeError::BadNonce);
    }
    if get_text(&inner, "id") != Some(id) {
        return Err(EnvelopeError::IdMismatch);
    }
    let tok = take(&mut inner, "tok").ok_or(EnvelopeError::NoTok)?;
    // An array or a map is read as nil (`MapScan::scalar`): never bytes, so the same
    // refusal at the tok check.
    let tok = if matches!(tok, Value::Array(_) | Value::Map(_)) { Value::Nil } else { tok };
    let ts = get(&inner, "ts").and_then(Value::as_i64);
    Ok((cmd, nonce, tok, ts, inner))
}

fn inner_value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    prop_oneof![
        4 => field_value(),
        1 => Just(Value::from("0123456789abcdef0123456789abcdef")),
        1 => Just(Value::from("_return")),
        1 => any::<u64>().prop_map(Value::from),
        1 => Just(Value::Array(vec![Value::Nil; 3])),
    ]
}

proptest::proptest! {
    /// Read in place, an AES load opens as the decoded tree did: the same error, or
    /// the same cmd, nonce, tok and ts and the same inner map without nonce and tok,
    /// for any map of the keys it looks at (repeated, not text, in any order).
    #[test]
    fn opens_as_the_decoded_tree(pairs in proptest::collection::vec((proptest::sample::select(vec!["cmd", "id", "nonce", "tok", "ts", "jid", "return", "x", "#bin-id", "#int"]), inner_value()), 0..10), raw_tail in proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3))) {
        let key = |k: &str| match k {
            "#bin-id" => bin(b"id".to_vec()),
            "#int" => Value::from(7),
            k => Value::from(k),
        };
        let tree = Value::Map(pairs.into_iter().map(|(k, v)| (key(k), v)).collect());
        let mut msg = encode(&tree);
        if let Some(t) = raw_tail {
            msg.extend_from_slice(&t);
        }
        let k = Crypticle::generate();
        let mut plain = PICKLE.to_vec();
        plain.extend_from_slice(&msg);
        let ct = k.encrypt(&plain).unwrap();
        let got = open_aes(Some(&ct), "m1", &k);
        match open_tree(&msg, "m1") {
            Err(e) => proptest::prop_assert_eq!(got.unwrap_err(), e),
            Ok((cmd, nonce, tok, ts, inner)) => {
                let o = got.unwrap();
                proptest::prop_assert_eq!((o.cmd.as_str(), o.nonce.as_str(), &o.tok, o.ts), (cmd.as_str(), nonce.as_str(), &tok, ts));
                proptest::prop_assert_eq!(o.inner_value().unwrap(), inner.clone());
                proptest::prop_assert_eq!(o.inner, encode(&inner), "the minion's bytes, which rmpv writes as it reads them");
            }
        }
    }
}

#[test]
fn an_inner_map_is_bounded_as_a_tree_is() {
    let k = Crypticle::generate();
    let open = |msg: &[u8]| {
        let mut plain = PICKLE.to_vec();
        plain.extend_from_slice(msg);
        open_aes(Some(&k.encrypt(&plain).unwrap()), "m1", &k)
    };
    let nonce = "0123456789abcdef0123456789abcdef";
    // At every depth up to the limit, a value opens exactly when its tree would
    // decode (and both happen: the limit is among these depths).
    let mut seen = std::collections::HashSet::new();
    for depth in 1..=payload::MAX_DEPTH {
        let mut deep = Value::Nil;
        for _ in 0..depth - 1 {
            deep = Value::Array(vec![deep]);
        }
        let m = map([("id", Value::from("m1")), ("nonce", Value::from(nonce)), ("tok", bin(b"t".to_vec())), ("deep", deep)]);
        let msg = encode(&m);
        assert_eq!(open(&msg).is_ok(), open_tree(&msg, "m1").is_ok(), "depth {depth}");
        seen.insert(open(&msg).is_ok());
    }
    assert_eq!(seen.len(), 2, "the limit lies among the depths tried");
    // A map header that claims more entries than the bytes could hold.
    assert_eq!(open(&[0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0]).unwrap_err(), EnvelopeError::InnerNotAMap);
    // A 16-bit header, shortened when nonce and tok are left out: 17 entries, 15 kept.
    let mut pairs: Vec<(Value, Value)> = (0..14).map(|i| (Value::from(format!("k{i}").as_str()), Value::from(i))).collect();
    pairs.extend([(Value::from("id"), Value::from("m1")), (Value::from("nonce"), Value::from(nonce)), (Value::from("tok"), bin(b"t".to_vec()))]);
    let o = open(&encode(&Value::Map(pairs))).unwrap();
    assert_eq!(o.inner[0], 0x8f, "a fixmap of 15");
    assert_eq!(payload::decode(&o.inner).unwrap().as_map().map(Vec::len), Some(15));
}

#[test]
fn ttl_and_reply() {
    assert!(check_ttl(Some(1000), 1010, 0).is_ok(), "0 is off");
    assert!(check_ttl(Some(1000), 1010, 60).is_ok());
    assert_eq!(check_ttl(Some(1000), 1100, 60).unwrap_err(), EnvelopeError::Stale { ts: 1000, age: 100, ttl: 60 });
    assert_eq!(check_ttl(None, 1100, 60).unwrap_err(), EnvelopeError::Stale { ts: 0, age: 1100, ttl: 60 });
    let k = Crypticle::generate();
    let r = seal_reply(&k, "0123456789abcdef0123456789abcdef", &Value::from(true)).unwrap();
    let ct = payload::decode(&r).unwrap();
    let plain = k.decrypt(payload::bytes(&ct).unwrap()).unwrap();
    assert!(plain.starts_with(b"pickle::0123456789abcdef0123456789abcdef"));
    assert_eq!(payload::decode(&plain[8 + 32..]).unwrap(), Value::from(true));
}

/// A reply is one msgpack bin holding the sealed `pickle::` + nonce + value, whatever
/// its size (bin8, bin16 and bin32 headers), in two allocations: the output never grew,
/// and it is exactly as large as it needs to be (the socket frames it without a copy).
#[test]
fn a_reply_is_one_bin_of_the_sealed_value() {
    let k = Crypticle::generate();
    let nonce = "0123456789abcdef0123456789abcdef";
    for n in [0usize, 150, 200, 70_000] {
        let value = bin(vec![7; n]);
        let r = seal_reply(&k, nonce, &value).unwrap();
        assert_eq!(r.capacity(), r.len(), "sized up front, exactly ({n} bytes)");
        let mut rd = &r[..];
        let ct = rmpv::decode::read_value(&mut rd).unwrap();
        assert!(rd.is_empty());
        let Value::Binary(ct) = ct else { panic!("not a bin") };
        let plain = k.decrypt(&ct).unwrap();
        assert_eq!(&plain[..8 + 32], format!("pickle::{nonce}").as_bytes());
        assert_eq!(payload::decode(&plain[8 + 32..]).unwrap(), value);
    }
    // Headers as rmpv writes them.
    for n in [0u32, 255, 256, 65_535, 65_536] {
        let mut ours = Vec::new();
        rmp::encode::write_bin_len(&mut ours, n).unwrap();
        let mut theirs = encode(&bin(vec![0; n as usize]));
        theirs.truncate(ours.len());
        assert_eq!(ours, theirs, "{n}");
        assert_eq!(bin_header_len(n as usize), ours.len(), "{n}");
    }
}
