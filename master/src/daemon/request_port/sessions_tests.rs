use super::*;

fn journal_len(dir: &Path) -> u64 {
    std::fs::metadata(dir.join(JOURNAL)).unwrap().len()
}

fn append(dir: &Path, bytes: &[u8]) {
    std::fs::OpenOptions::new().append(true).open(dir.join(JOURNAL)).unwrap().write_all(bytes).unwrap();
}

#[test]
fn keys_are_kept_across_restarts_and_expire() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("sessions");
    let s = Sessions::new(dir.clone(), Duration::from_secs(60));
    assert!(s.fresh("m1").is_none(), "nothing is made on a lookup");
    let k = Crypticle::generate();
    s.install("m1", &k);
    assert_eq!(s.fresh("m1").unwrap().key_string(), k.key_string());
    let newer = Crypticle::generate();
    s.install("m1", &newer);
    drop(s);
    let again = Sessions::new(dir.clone(), Duration::from_secs(60));
    assert_eq!(again.fresh("m1").unwrap().key_string(), newer.key_string(), "the latest key is read back after a restart");
    assert_eq!(read_keys(&dir).len(), 1, "the start rewrote the journal with the live keys only");
    let expired = Sessions::new(dir, Duration::from_secs(0));
    assert!(expired.fresh("m1").is_none());
}

/// 10,000 ids that never signed in ask for their key: nothing is made for them, in
/// memory or on disk.
#[test]
fn lookups_for_ids_that_never_signed_in_make_nothing() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("sessions");
    let s = Sessions::new(dir.clone(), Duration::from_secs(60));
    for i in 0..10_000 {
        assert!(s.fresh(&format!("stranger-{i}")).is_none());
    }
    assert_eq!(s.in_memory(), 0);
    assert_eq!(journal_len(&dir), MAGIC.len() as u64, "the journal holds no record");
}

/// The keys in memory stay under the cap; an install at the cap drops the oldest key
/// (its minion signs in again); an expired key is dropped by the lookup that finds it.
#[test]
fn keys_in_memory_are_capped_and_expired_ones_dropped() {
    let d = tempfile::tempdir().unwrap();
    let s = Sessions::new(d.path().join("sessions"), Duration::from_secs(60)).with_cap(3);
    let keys: Vec<Crypticle> = (0..5).map(|_| Crypticle::generate()).collect();
    for (i, k) in keys.iter().enumerate() {
        s.install(&format!("m{i}"), k);
        assert!(s.in_memory() <= 3);
        // Each key installed at a later instant than the one before (the age orders them).
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(s.fresh("m0").is_none() && s.fresh("m1").is_none(), "the oldest were dropped");
    for (i, k) in keys.iter().enumerate().skip(2) {
        assert_eq!(s.fresh(&format!("m{i}")).unwrap().key_string(), k.key_string(), "m{i} is still served");
    }
    let short = Sessions::new(d.path().join("short"), Duration::from_millis(1));
    short.install("m1", &keys[0]);
    assert_eq!(short.in_memory(), 1);
    // Past the 1 ms lifetime: the passing time is the behaviour under test.
    std::thread::sleep(Duration::from_millis(5));
    assert!(short.fresh("m1").is_none());
    assert_eq!(short.in_memory(), 0, "the expired key is dropped");
}

/// A minion signing in again and again does not grow the journal without bound.
#[test]
fn the_journal_is_rewritten_when_superseded_records_pile_up() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("sessions");
    let s = Sessions::new(dir.clone(), Duration::from_secs(60));
    let k = Crypticle::generate();
    let one = record("m1", k.key_string(), SystemTime::now()).len() as u64;
    for _ in 0..3 * COMPACT_SLACK {
        s.install("m1", &k);
    }
    assert!(journal_len(&dir) <= MAGIC.len() as u64 + one * (COMPACT_SLACK as u64 + 3), "{} bytes", journal_len(&dir));
    drop(s);
    assert_eq!(Sessions::new(dir, Duration::from_secs(60)).fresh("m1").unwrap().key_string(), k.key_string());
}

/// A crash in the middle of an append leaves a torn record: the keys before it are read
/// back, and the start leaves a clean journal that later appends extend.
#[test]
fn a_torn_last_record_keeps_the_keys_before_it() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("sessions");
    let s = Sessions::new(dir.clone(), Duration::from_secs(60));
    let keys: Vec<Crypticle> = (0..3).map(|_| Crypticle::generate()).collect();
    for (i, k) in keys.iter().enumerate() {
        s.install(&format!("m{i}"), k);
    }
    drop(s);
    let whole = record("m3", Crypticle::generate().key_string(), SystemTime::now());
    append(&dir, &whole[..whole.len() / 2]);
    let s = Sessions::new(dir.clone(), Duration::from_secs(60));
    assert_eq!(s.in_memory(), 3);
    assert!(s.fresh("m3").is_none());
    s.install("m4", &keys[0]);
    drop(s);
    let keys_now = read_keys(&dir);
    assert_eq!(keys_now.len(), 4, "{keys_now:?}");
    assert!(keys_now.contains_key("m4"), "appends after the repair are read back");
}

/// Damage in the middle (a flipped bit), a declared length of 4 GiB, a foreign file:
/// what precedes the damage is kept, nothing is allocated for the length, nothing panics.
#[test]
fn damaged_journals_are_refused_record_by_record() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("sessions");
    let s = Sessions::new(dir.clone(), Duration::from_secs(60));
    for i in 0..4 {
        s.install(&format!("m{i}"), &Crypticle::generate());
    }
    drop(s);
    let mut bytes = std::fs::read(dir.join(JOURNAL)).unwrap();
    let rec = (bytes.len() - MAGIC.len()) / 4;
    bytes[MAGIC.len() + 2 * rec + HEADER + 3] ^= 0x10;
    std::fs::write(dir.join(JOURNAL), &bytes).unwrap();
    assert_eq!(read_keys(&dir).len(), 2, "the two records before the flipped bit");

    let mut huge = MAGIC.to_vec();
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    huge.extend_from_slice(&[0; 4]);
    std::fs::write(dir.join(JOURNAL), &huge).unwrap();
    let (keys, damage) = read_records(&mut &huge[MAGIC.len()..]);
    assert!(keys.is_empty());
    assert_eq!(damage, Some((MAGIC.len() as u64, Damage::TooLong(u32::MAX as usize))));

    std::fs::write(dir.join(JOURNAL), b"id: m1\nkey: not a journal\n").unwrap();
    let s = Sessions::new(dir.clone(), Duration::from_secs(60));
    assert_eq!(s.in_memory(), 0);
    s.install("m1", &Crypticle::generate());
    drop(s);
    assert_eq!(read_keys(&dir).len(), 1, "the foreign file was replaced by a journal");
}

/// A record whose id is not a minion id (a path) or whose key is not a key is refused.
#[test]
fn records_are_checked_as_a_minion_would_be() {
    let k = Crypticle::generate();
    assert!(parse_body(&record("m1", k.key_string(), SystemTime::now())[HEADER..]).is_ok());
    assert_eq!(parse_body(&record("../etc", k.key_string(), SystemTime::now())[HEADER..]).err(), Some(Damage::Malformed("invalid minion id")));
    assert_eq!(parse_body(&record("m1", "c2hvcnQ=", SystemTime::now())[HEADER..]).err(), Some(Damage::Malformed("invalid key")));
    assert_eq!(parse_body(&[1, 2, 3]).err(), Some(Damage::Malformed("short body")));
}

/// The per-id files of an older Halite are taken in once, then removed.
#[test]
fn per_id_files_of_an_older_master_are_taken_in() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let k = Crypticle::generate();
    std::fs::write(dir.join("m1"), k.key_string()).unwrap();
    std::fs::write(dir.join("m2"), "not a key").unwrap();
    std::fs::write(dir.join(".m3.tmp"), k.key_string()).unwrap();
    let s = Sessions::new(dir.clone(), Duration::from_secs(60));
    assert_eq!(s.fresh("m1").unwrap().key_string(), k.key_string());
    assert!(s.fresh("m2").is_none());
    assert!(!dir.join("m1").exists(), "taken in, then removed");
    assert!(dir.join("m2").exists(), "a file that is not a key is left alone");
    drop(s);
    assert_eq!(Sessions::new(dir, Duration::from_secs(60)).fresh("m1").unwrap().key_string(), k.key_string());
}

proptest::proptest! {
    /// Any bytes after the header read back without a panic, as at most as many keys as
    /// they could hold.
    #[test]
    fn any_journal_bytes_are_read_without_panicking(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
        let (keys, _) = read_records(&mut bytes.as_slice());
        proptest::prop_assert!(keys.len() <= bytes.len() / (HEADER + 9));
    }
}

/// A cluster member's sessions touch no file, even if a key were installed.
#[test]
fn a_cluster_members_sessions_write_nothing() {
    let cwd = std::env::current_dir().unwrap();
    let s = Sessions::none();
    s.install("m1", &Crypticle::generate());
    assert_eq!(s.in_memory(), 1);
    assert!(!cwd.join(format!(".{JOURNAL}.tmp")).exists() && !cwd.join(JOURNAL).exists());
}
