use super::*;

fn id(proposer: u64, incarnation: u64, seq: u64) -> ProposalId {
    ProposalId { proposer, incarnation, seq }
}

/// The v0 layout, as builds before v1 wrote it (kept here to prove old logs still read).
fn encode_v0(proposer: u64, seq: u64, addr: Option<&str>) -> Vec<u8> {
    let mut out = proposer.to_be_bytes().to_vec();
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(addr.unwrap_or("").as_bytes());
    out
}

#[test]
fn round_trips() {
    let cases = [
        EntryContext::proposal(id(7, 1, 1), 1, None),
        EntryContext::proposal(id(u64::MAX, u64::MAX, u64::MAX), u64::MAX, None),
        EntryContext::proposal(id(3, 1_700_000_000_000_000_000, 42), 40, Some("127.0.0.3:4520".parse().unwrap())),
        EntryContext::proposal(id(9, 5, 2), 2, Some("[::1]:4520".parse().unwrap())),
        EntryContext::proposal(id(9, 5, 2), 2, Some("[fe80::1234:5678:9abc:def0%4294967295]:65535".parse().unwrap())),
        EntryContext::founding(Some("10.0.0.1:4520".parse().unwrap())),
        EntryContext::founding(None),
        EntryContext::proposal(id(4, 8, 15), 15, Some("127.0.0.4:4520".parse().unwrap())).with_key(Some([0xAB; 32])),
        EntryContext::proposal(id(4, 8, 16), 16, None).with_key(Some([0; 32])),
    ];
    for c in cases {
        assert_eq!(decode(&encode(&c)), Ok(Some(c)), "{c:?}");
    }
}

#[test]
fn bytes_are_the_documented_ones() {
    let c = EntryContext::proposal(id(0x0102030405060708, 0x2122232425262728, 0x1112131415161718), 0x3132333435363738, Some("127.0.0.2:4520".parse().unwrap()));
    let mut want = vec![0xC1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28];
    want.extend_from_slice(&[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38]);
    want.push(0x80 | 14);
    want.extend_from_slice(b"127.0.0.2:4520");
    assert_eq!(encode(&c), want);
    // A founding entry without an address: marker, version, 32 zero bytes, 0x80.
    let mut founding = vec![0xC1, 1];
    founding.extend_from_slice(&[0; 32]);
    founding.push(0x80);
    assert_eq!(encode(&EntryContext::founding(None)), founding);
}

#[test]
fn a_keyed_membership_change_is_v2_with_the_key_after_the_address() {
    let key = [0x5A; 32];
    let c = EntryContext::proposal(id(1, 2, 3), 3, Some("127.0.0.9:1".parse().unwrap())).with_key(Some(key));
    let b = encode(&c);
    assert_eq!(b[1], VERSION_KEYED);
    assert_eq!(b.len(), V1_FIXED_LEN + 11 + 1 + 32);
    assert_eq!(&b[V1_FIXED_LEN..V1_FIXED_LEN + 11], b"127.0.0.9:1");
    assert_eq!(b[V1_FIXED_LEN + 11], 32);
    assert_eq!(&b[V1_FIXED_LEN + 12..], &key);
    let d = decode(&b).unwrap().unwrap();
    assert_eq!((d.key, d.version, d.id()), (Some(key), VERSION_KEYED, Some(id(1, 2, 3))));
    // Without a key nothing changes: v1, byte for byte.
    assert_eq!(encode(&c.with_key(None))[1], VERSION);
}

#[test]
fn v0_contexts_still_read_and_name_no_trackable_id() {
    let c = decode(&encode_v0(5, 6, None)).unwrap().unwrap();
    assert_eq!((c.proposer, c.seq, c.version, c.incarnation, c.addr), (5, 6, 0, 0, None));
    assert_eq!(c.id(), None);
    let c = decode(&encode_v0(0, 0, Some("10.0.0.9:4520"))).unwrap().unwrap();
    assert_eq!(c.addr, Some("10.0.0.9:4520".parse().unwrap()));
    // A v0 proposer id that begins with the v1 marker, and addresses long enough to reach
    // byte 34: still read as v0 (address text is ASCII, the v1 length byte is not).
    for addr in ["255.255.255.255:65535", "[fe80::1234:5678:9abc:def0%4294967295]:65535", "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:1"] {
        let b = encode_v0(0xC101_0000_0000_0001, 77, Some(addr));
        let c = decode(&b).unwrap().unwrap();
        assert_eq!((c.version, c.proposer, c.seq, c.addr), (0, 0xC101_0000_0000_0001, 77, Some(addr.parse().unwrap())), "{addr}");
    }
    // And a v1 context is never read as v0.
    let v1 = encode(&EntryContext::proposal(id(1, 2, 3), 3, None));
    assert_eq!(decode(&v1).unwrap().unwrap().version, VERSION);
}

#[test]
fn empty_is_no_context() {
    assert_eq!(decode(&[]), Ok(None));
}

#[test]
fn garbage_is_refused_without_panicking() {
    for n in 1..V0_FIXED_LEN {
        assert_eq!(decode(&vec![0xAB; n]), Err(ContextError::TooShort(n)));
    }
    let mut bad = vec![0u8; 16];
    bad.extend_from_slice(&[0xFF, 0xFE, 0x00]);
    assert_eq!(decode(&bad), Err(ContextError::AddrNotUtf8));
    for text in ["not an address", "127.0.0.1", "127.0.0.1:99999", "host.example:4520", " 127.0.0.1:1", "\0"] {
        let mut b = vec![0u8; 16];
        b.extend_from_slice(text.as_bytes());
        assert!(matches!(decode(&b), Err(ContextError::AddrInvalid(_))), "{text:?}");
        // The same in a v1 context.
        let mut b = encode(&EntryContext::proposal(id(1, 1, 1), 1, None));
        b[V1_FIXED_LEN - 1] = 0x80 | text.len() as u8;
        b.extend_from_slice(text.as_bytes());
        assert!(matches!(decode(&b), Err(ContextError::AddrInvalid(_))), "{text:?}");
    }
    // A future version is refused, not guessed at.
    let mut future = encode(&EntryContext::proposal(id(1, 1, 1), 1, None));
    future[1] = 3;
    assert_eq!(decode(&future), Err(ContextError::UnknownVersion(3)));
    // A version whose layout the bytes do not have is refused too.
    future[1] = VERSION_KEYED;
    assert_eq!(decode(&future), Err(ContextError::Malformed(VERSION_KEYED)));
    let mut keyed = encode(&EntryContext::proposal(id(1, 1, 1), 1, Some("127.0.0.1:1".parse().unwrap())).with_key(Some([7; 32])));
    keyed[1] = VERSION;
    assert_eq!(decode(&keyed), Err(ContextError::Malformed(VERSION)));
    // A key of another length is refused.
    let mut short = encode(&EntryContext::proposal(id(1, 1, 1), 1, None));
    short[1] = VERSION_KEYED;
    short.push(3);
    short.extend_from_slice(&[1, 2, 3]);
    assert_eq!(decode(&short), Err(ContextError::KeyLength(3)));
    // A long run of garbage is refused, and the error does not carry all of it.
    let mut long = vec![1u8; 16];
    long.extend(std::iter::repeat_n(b'x', 1 << 20));
    match decode(&long) {
        Err(ContextError::AddrInvalid(t)) => assert_eq!(t.len(), 64),
        other => panic!("{other:?}"),
    }
    // Every prefix and every single-byte change of a valid context decodes or is
    // refused; none panics.
    let good = encode(&EntryContext::proposal(id(5, 9, 6), 4, Some("127.0.0.5:1".parse().unwrap())).with_key(Some([0xC1; 32])));
    for n in 0..=good.len() {
        let _ = decode(&good[..n]);
    }
    for i in 0..good.len() {
        for v in [0u8, 0x7F, 0x80, 0xFF, 0xC1, b':', b'['] {
            let mut m = good.clone();
            m[i] = v;
            let _ = decode(&m);
        }
    }
}
