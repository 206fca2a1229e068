//! Views on a shared filesystem (`views/shared.rs`): several members, each with its own
//! state machine fed the same entries, writing one key directory. Real RocksDB, real
//! files, real `flock`s (each member opens its own descriptors, as separate processes do).

use std::path::Path;

use crate::entry::LogEntry;
use crate::format::{KeySet, KeyState, Record};
use crate::keys::mmap::MmapKeys;
use crate::keys::{BankState, Geometry, KeyView};
use crate::roots::{RootsDirs, RootsMaterialiser};
use super::shared::SharedViews;
use crate::state::StateMachine;
use crate::views::{ViewKind, Views};

fn geo() -> Geometry {
    Geometry { size: 256, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 20 }
}

fn key(id: &str, state: KeyState, t: u64) -> Record {
    Record::KeySet(KeySet { id: id.into(), state, pub_key: format!("PUB {id}").into_bytes(), time_ns: t, expect: None, pending_below: None })
}

/// One member: its own state machine, and views over the shared `pki`.
struct Member {
    sm: StateMachine,
    views: Views,
}

impl Member {
    fn new(dir: &Path, name: &str, pki: &Path) -> Member {
        let sm = StateMachine::open(&dir.join(name)).unwrap();
        let views = Views::new(Box::new(MmapKeys::open(pki, geo()).unwrap()), RootsMaterialiser::new(RootsDirs::default())).shared_with(SharedViews::new(pki, "c1", "mmap_key"));
        Member { sm, views }
    }

    /// Applies `entries` as the node does: state machine, then views.
    fn apply(&mut self, entries: &[LogEntry]) {
        let applied = self.sm.apply_entries(entries).unwrap();
        let faults = self.views.apply_entries(&self.sm, None, entries, &applied.effects, &mut |_| false);
        assert!(faults.is_empty(), "{:?}", faults.iter().map(|f| f.error.to_string()).collect::<Vec<_>>());
    }
}

fn state_of(pki: &Path, id: &str) -> Option<BankState> {
    MmapKeys::open(pki, geo()).unwrap().get_key(id).unwrap().map(|k| k.state)
}

fn mark(pki: &Path) -> String {
    std::fs::read_to_string(pki.join(".halite-view-keys-mmap_key.index")).unwrap()
}

#[test]
fn the_first_member_writes_a_change_and_a_member_behind_never_puts_older_bytes_back() {
    let d = tempfile::tempdir().unwrap();
    let pki = d.path().join("pki");
    let mut a = Member::new(d.path(), "a", &pki);
    let mut b = Member::new(d.path(), "b", &pki);
    let e1 = LogEntry::plain(1, vec![key("m1", KeyState::Pending, 1)]);
    let e2 = LogEntry::plain(2, vec![key("m1", KeyState::Accepted, 2)]);
    a.apply(&[e1.clone()]);
    a.apply(&[e2.clone()]);
    assert_eq!(mark(&pki), "2 c1\n");
    assert_eq!(state_of(&pki, "m1"), Some(BankState::Accepted));
    let heap = std::fs::read(pki.join(".mmap_keys.idx.heap")).unwrap();
    // b is behind: applying entry 1 must not make m1 pending again, nor write anything.
    b.apply(&[e1]);
    assert_eq!(state_of(&pki, "m1"), Some(BankState::Accepted));
    b.apply(&[e2]);
    assert_eq!(std::fs::read(pki.join(".mmap_keys.idx.heap")).unwrap(), heap, "b wrote nothing a had written");
    assert_eq!(mark(&pki), "2 c1\n");
}

#[test]
fn a_member_taking_over_writes_what_nobody_wrote_since_the_mark() {
    let d = tempfile::tempdir().unwrap();
    let pki = d.path().join("pki");
    let mut a = Member::new(d.path(), "a", &pki);
    let mut b = Member::new(d.path(), "b", &pki);
    let es = [
        LogEntry::plain(1, vec![key("m1", KeyState::Accepted, 1)]),
        LogEntry::plain(2, vec![key("m2", KeyState::Pending, 2)]),
        LogEntry::plain(3, vec![key("m3", KeyState::Pending, 3)]),
    ];
    a.apply(&es[..1]);
    b.apply(&es[..1]);
    // Entry 2 is applied by b only after it stopped writing (its view was dirty, say),
    // and a is gone: nobody wrote m2. b's next batch takes over from the mark; without
    // the log it reconciles the whole view with its state machine.
    let applied = b.sm.apply_entries(&es[1..2]).unwrap();
    assert!(b.views.apply_entries(&b.sm, None, &es[1..2], &applied.effects, &mut |_| true).is_empty());
    assert_eq!(state_of(&pki, "m2"), None);
    b.apply(&es[2..]);
    assert_eq!(state_of(&pki, "m2"), Some(BankState::Pending));
    assert_eq!(state_of(&pki, "m3"), Some(BankState::Pending));
    assert_eq!(mark(&pki), "3 c1\n");
    drop(a);
}

#[test]
fn catching_up_a_shared_view_never_empties_it_and_skips_when_the_mark_is_ahead() {
    let d = tempfile::tempdir().unwrap();
    let pki = d.path().join("pki");
    let mut a = Member::new(d.path(), "a", &pki);
    let es: Vec<LogEntry> = (1..=20).map(|i| LogEntry::plain(i, vec![key(&format!("m{i:02}"), KeyState::Accepted, i)])).collect();
    a.apply(&es);
    // b starts with a state machine behind the mark: nothing is written.
    let mut b = Member::new(d.path(), "b", &pki);
    b.sm.apply_entries(&es[..5]).unwrap();
    let before = std::fs::read(pki.join(".mmap_keys.idx")).unwrap();
    b.views.catch_up_shared(&b.sm, None, ViewKind::Keys, 5).unwrap();
    assert_eq!(std::fs::read(pki.join(".mmap_keys.idx")).unwrap(), before);
    // A mark of another cluster: the view is reconciled (only differences written),
    // never cleared, and then marked with this cluster's id.
    std::fs::write(pki.join(".halite-view-keys-mmap_key.index"), "99 other\n").unwrap();
    let mut c = Member::new(d.path(), "c", &pki);
    c.sm.apply_entries(&es).unwrap();
    c.sm.apply_entries(&[LogEntry::plain(21, vec![key("m01", KeyState::Deleted, 21)])]).unwrap();
    c.views.catch_up_shared(&c.sm, None, ViewKind::Keys, 21).unwrap();
    assert_eq!(state_of(&pki, "m01"), None);
    assert_eq!(state_of(&pki, "m20"), Some(BankState::Accepted));
    assert_eq!(MmapKeys::open(&pki, geo()).unwrap().entries().unwrap().0.len(), 19);
    assert_eq!(mark(&pki), "21 c1\n");
}

#[test]
fn a_member_that_cannot_get_the_lock_in_time_fails_instead_of_waiting_for_ever() {
    let d = tempfile::tempdir().unwrap();
    let pki = d.path().join("pki");
    let mut a = Member::new(d.path(), "a", &pki);
    std::fs::create_dir_all(&pki).unwrap();
    // Another writer (Salt's salt-key, say) holds the MmapCache's lock.
    let held = crate::flock::Flock::acquire(&pki.join(".mmap_keys.idx.lock"), crate::flock::LOCK_WAIT).unwrap();
    let es = [LogEntry::plain(1, vec![key("m1", KeyState::Accepted, 1)])];
    let applied = a.sm.apply_entries(&es).unwrap();
    let faults = a.views.apply_entries(&a.sm, None, &es, &applied.effects, &mut |_| false);
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].view, ViewKind::Keys);
    assert!(faults[0].error.to_string().contains("held by another writer"), "{}", faults[0].error);
    assert!(!pki.join(".halite-view-keys-mmap_key.index").exists(), "no mark for what was not written");
    drop(held);
    // Recovered later, from the (absent) mark.
    a.views.catch_up_shared(&a.sm, None, ViewKind::Keys, 1).unwrap();
    assert_eq!(state_of(&pki, "m1"), Some(BankState::Accepted));
}

#[test]
fn an_mmap_key_view_releases_its_lock_when_made_durable() {
    let d = tempfile::tempdir().unwrap();
    let pki = d.path().join("pki");
    // Not shared: batches share the lock until the views are made durable.
    let sm = StateMachine::open(&d.path().join("s")).unwrap();
    let mut views = Views::new(Box::new(MmapKeys::open(&pki, geo()).unwrap()), RootsMaterialiser::new(RootsDirs::default()));
    let es = [LogEntry::plain(1, vec![key("m1", KeyState::Accepted, 1)])];
    let applied = sm.apply_entries(&es).unwrap();
    assert!(views.apply_entries(&sm, None, &es, &applied.effects, &mut |_| false).is_empty());
    let lock = pki.join(".mmap_keys.idx.lock");
    assert!(crate::flock::Flock::acquire(&lock, std::time::Duration::from_millis(1)).is_err(), "held between batches");
    views.sync().unwrap();
    // Another writer gets the lock at once while the view is still open.
    crate::flock::Flock::acquire(&lock, std::time::Duration::from_millis(1)).expect("released once durable");
    // And a second view over the same files (another member) writes next.
    let mut other = MmapKeys::open(&pki, geo()).unwrap();
    other.set_key("m2", BankState::Pending, b"PUB m2", 2).unwrap();
    other.release().unwrap();
    let es = [LogEntry::plain(2, vec![key("m3", KeyState::Accepted, 3)])];
    let applied = sm.apply_entries(&es).unwrap();
    assert!(views.apply_entries(&sm, None, &es, &applied.effects, &mut |_| false).is_empty());
    views.sync().unwrap();
    let (keys, _) = MmapKeys::open(&pki, geo()).unwrap().entries().unwrap();
    let ids: Vec<_> = keys.iter().map(|k| k.id.as_str()).collect();
    assert_eq!(ids, ["m1", "m2", "m3"], "each writer saw the other's changes");
}

#[test]
fn a_tree_no_member_has_marked_keeps_the_keys_salt_left_there() {
    let d = tempfile::tempdir().unwrap();
    let pki = d.path().join("pki");
    // Keys Salt wrote, not (yet) imported into any member's log.
    let mut salt = MmapKeys::open(&pki, geo()).unwrap();
    salt.set_key("from-salt", BankState::Accepted, b"PUB from-salt", 1).unwrap();
    salt.release().unwrap();
    let mut a = Member::new(d.path(), "a", &pki);
    a.views.catch_up_shared(&a.sm, None, ViewKind::Keys, 0).unwrap();
    a.apply(&[LogEntry::plain(1, vec![key("m1", KeyState::Accepted, 1)])]);
    assert_eq!(state_of(&pki, "from-salt"), Some(BankState::Accepted), "not removed by a member that never marked the tree");
    assert_eq!(state_of(&pki, "m1"), Some(BankState::Accepted));
}
