//! Pushed files from records to disk: applying pieces (decided at apply), and the roots
//! view writing complete files under `cachedir/minions/<id>/files`.

use std::os::unix::fs::PermissionsExt;

use crate::entry::LogEntry;
use crate::file_recv::{split, FileRecv, PUSH_CHUNK_LEN};
use crate::format::{KeySet, KeyState, Record};
use crate::roots::{RootsDirs, RootsMaterialiser};
use crate::state::{Effect, StateMachine};
use crate::views::{Touched, ViewKind};

fn piece(id: &str, path: &str, size: u64, loc: u64, data: &[u8]) -> Record {
    Record::FileRecv(FileRecv { id: id.into(), path: path.into(), size, loc, data: data.to_vec(), time_ns: 1 })
}

struct Fixture {
    _dir: tempfile::TempDir,
    sm: StateMachine,
    view: RootsMaterialiser,
    minions: std::path::PathBuf,
    next: u64,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let sm = StateMachine::open(&dir.path().join("state")).unwrap();
        let minions = dir.path().join("cache/minions");
        let view = RootsMaterialiser::new(RootsDirs { pushed: Some(minions.clone()), ..Default::default() });
        let mut f = Fixture { _dir: dir, sm, view, minions, next: 1 };
        f.key("m1", KeyState::Accepted);
        f.key("m2", KeyState::Accepted);
        f
    }

    /// Sets a key (pieces are kept only for a minion whose key is accepted).
    fn key(&mut self, id: &str, state: KeyState) -> Vec<Effect> {
        let out = self.sm.apply_entries(&[LogEntry::plain(self.next, vec![Record::KeySet(KeySet::new(id, state, b"pub".to_vec(), 1))])]).unwrap();
        self.next += 1;
        let mut views = crate::views::Views::new(Box::new(crate::keys::localfs::LocalfsKeys::open(&self._dir.path().join("pki")).unwrap()), RootsMaterialiser::new(self.view.dirs.clone()));
        views.apply(&self.sm, &out.effects).unwrap();
        out.effects
    }

    /// Applies one entry and mirrors its effects, as the node does.
    fn apply(&mut self, records: Vec<Record>) -> Vec<Effect> {
        let out = self.sm.apply_entries(&[LogEntry::plain(self.next, records)]).unwrap();
        self.next += 1;
        for fx in &out.effects {
            assert_eq!(ViewKind::of(fx), ViewKind::Roots);
        }
        let mut views = crate::views::Views::new(Box::new(crate::keys::localfs::LocalfsKeys::open(&self._dir.path().join("pki")).unwrap()), RootsMaterialiser::new(self.view.dirs.clone()));
        views.apply(&self.sm, &out.effects).unwrap();
        out.effects
    }

    fn disk(&self, id: &str, path: &str) -> Option<Vec<u8>> {
        std::fs::read(self.minions.join(id).join("files").join(path)).ok()
    }
}

#[test]
fn a_file_in_pieces_is_written_once_complete() {
    let mut f = Fixture::new();
    assert!(f.apply(vec![piece("m1", "tmp/a.txt", 10, 0, b"hello")]).is_empty(), "incomplete: nothing to write");
    assert_eq!(f.disk("m1", "tmp/a.txt"), None);
    assert_eq!(f.sm.pushed_read("m1", "tmp/a.txt").unwrap().held.map(|m| (m.held, m.size)), Some((5, 10)));
    f.apply(vec![piece("m1", "tmp/a.txt", 10, 5, b"world")]);
    assert_eq!(f.disk("m1", "tmp/a.txt").as_deref(), Some(&b"helloworld"[..]));
    let mode = std::fs::metadata(f.minions.join("m1/files/tmp/a.txt")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    assert_eq!(f.sm.pushed_files().unwrap(), vec![("m1".to_string(), "tmp/a.txt".to_string())]);
}

#[test]
fn pieces_that_do_not_continue_their_file_change_nothing() {
    let mut f = Fixture::new();
    f.apply(vec![piece("m1", "a", 6, 0, b"abc")]);
    let before = f.sm.digest().unwrap().sha256;
    // A gap, an overlap, another declared size, a continuation of nothing.
    f.apply(vec![piece("m1", "a", 6, 4, b"ef"), piece("m1", "a", 6, 2, b"cd"), piece("m1", "a", 7, 3, b"def"), piece("m1", "b", 6, 3, b"def")]);
    assert_eq!(f.sm.digest().unwrap().sha256, before);
    // A complete file takes no more pieces.
    f.apply(vec![piece("m1", "a", 6, 3, b"def")]);
    let done = f.sm.digest().unwrap().sha256;
    f.apply(vec![piece("m1", "a", 6, 6, b"")]);
    assert_eq!(f.sm.digest().unwrap().sha256, done);
    assert_eq!(f.disk("m1", "a").as_deref(), Some(&b"abcdef"[..]));
}

#[test]
fn offset_zero_starts_the_file_again_and_takes_it_off_the_disk() {
    let mut f = Fixture::new();
    f.apply(vec![piece("m1", "a", 3, 0, b"old")]);
    assert_eq!(f.disk("m1", "a").as_deref(), Some(&b"old"[..]));
    let fx = f.apply(vec![piece("m1", "a", 4, 0, b"ne")]);
    assert!(fx.contains(&Effect::PushedRemoved { id: "m1".into(), path: "a".into() }));
    assert_eq!(f.disk("m1", "a"), None, "an incomplete file is not on disk");
    f.apply(vec![piece("m1", "a", 4, 2, b"w!")]);
    assert_eq!(f.disk("m1", "a").as_deref(), Some(&b"new!"[..]));
}

#[test]
fn a_file_in_the_way_of_another_is_refused_at_apply() {
    let mut f = Fixture::new();
    f.apply(vec![piece("m1", "d", 1, 0, b"x"), piece("m1", "e/f", 1, 0, b"y")]);
    let before = f.sm.digest().unwrap().sha256;
    f.apply(vec![piece("m1", "d/g", 1, 0, b"z"), piece("m1", "e", 1, 0, b"z")]);
    assert_eq!(f.sm.digest().unwrap().sha256, before);
    assert!(f.sm.pushed_read("m1", "d/g").unwrap().conflict);
    assert!(f.sm.pushed_read("m1", "e").unwrap().conflict);
    assert!(!f.sm.pushed_read("m2", "e").unwrap().conflict, "another minion's folder is its own");
    // In one batch too: the first of two conflicting files wins.
    f.apply(vec![piece("m2", "p", 1, 0, b"1"), piece("m2", "p/q", 1, 0, b"2")]);
    assert_eq!(f.sm.pushed_files_of("m2").unwrap(), vec![("m2".to_string(), "p".to_string())]);
}

#[test]
fn a_large_file_in_bounded_records_and_an_empty_file() {
    let mut f = Fixture::new();
    let data: Vec<u8> = (0..(2 * PUSH_CHUNK_LEN + 17)).map(|i| (i % 251) as u8).collect();
    let records: Vec<Record> = split("m1", "big.bin", data.len() as u64, 0, &data, 1).into_iter().map(Record::FileRecv).collect();
    assert_eq!(records.len(), 3);
    f.apply(records);
    assert_eq!(f.disk("m1", "big.bin"), Some(data));
    f.apply(vec![piece("m1", "empty", 0, 0, b"")]);
    assert_eq!(f.disk("m1", "empty"), Some(vec![]));
}

#[test]
fn the_view_is_rebuilt_and_resynced_from_the_state() {
    let mut f = Fixture::new();
    f.apply(vec![piece("m1", "a/b", 2, 0, b"hi")]);
    std::fs::remove_dir_all(&f.minions).unwrap();
    assert!(f.view.missing_any(&f.sm).unwrap());
    assert_eq!(f.view.rebuild(&f.sm).unwrap(), 1);
    assert_eq!(f.disk("m1", "a/b").as_deref(), Some(&b"hi"[..]));
    std::fs::write(f.minions.join("m1/files/a/b"), b"tampered").unwrap();
    let mut touched = Touched::default();
    touched.add(&piece("m1", "a/b", 2, 0, b"hi"));
    let mut views = crate::views::Views::new(Box::new(crate::keys::localfs::LocalfsKeys::open(&f._dir.path().join("pki")).unwrap()), RootsMaterialiser::new(f.view.dirs.clone()));
    views.resync(&f.sm, &touched).unwrap();
    assert_eq!(f.disk("m1", "a/b").as_deref(), Some(&b"hi"[..]));
}

#[test]
fn no_write_goes_through_a_symlink_or_onto_a_folder() {
    let mut f = Fixture::new();
    let outside = f._dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(f.minions.join("m1")).unwrap();
    std::os::unix::fs::symlink(&outside, f.minions.join("m1/files")).unwrap();
    // The view logs and skips it; the state holds the file.
    f.apply(vec![piece("m1", "x", 1, 0, b"x")]);
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    assert!(f.view.write_pushed(&f.sm, "m1", "x").is_err());
    std::fs::create_dir_all(f.minions.join("m2/files/dir")).unwrap();
    f.apply(vec![piece("m2", "dir", 1, 0, b"y")]);
    assert!(f.minions.join("m2/files/dir").is_dir());
}

#[test]
fn a_deleted_key_takes_the_minions_pushed_files_with_it() {
    let mut f = Fixture::new();
    f.apply(vec![piece("m1", "a/b", 2, 0, b"hi"), piece("m1", "c", 1, 0, b"c"), piece("m1", "part", 4, 0, b"pa"), piece("m2", "a/b", 2, 0, b"m2")]);
    assert_eq!(f.disk("m1", "a/b").as_deref(), Some(&b"hi"[..]));
    let fx = f.key("m1", KeyState::Deleted);
    assert!(fx.contains(&Effect::PushedCleared { id: "m1".into() }));
    assert!(!f.minions.join("m1").exists(), "the minion's folder is gone");
    assert!(f.sm.pushed_files_of("m1").unwrap().is_empty());
    assert_eq!(f.sm.pushed_read("m1", "part").unwrap().held, None, "an incomplete file goes too");
    // Another minion's files stay.
    assert_eq!(f.disk("m2", "a/b").as_deref(), Some(&b"m2"[..]));
    assert_eq!(f.sm.pushed_files_of("m2").unwrap().len(), 1);
    // A piece of the deleted minion (read before the delete, applied after) is not kept,
    // nor one of a rejected minion.
    f.apply(vec![piece("m1", "late", 1, 0, b"l")]);
    assert!(f.sm.pushed_files_of("m1").unwrap().is_empty() && f.disk("m1", "late").is_none());
    f.key("m2", KeyState::Rejected);
    f.apply(vec![piece("m2", "late", 1, 0, b"l")]);
    assert!(f.disk("m2", "late").is_none());
    // Accepted again, it pushes afresh.
    f.key("m1", KeyState::Accepted);
    f.apply(vec![piece("m1", "again", 1, 0, b"a")]);
    assert_eq!(f.disk("m1", "again").as_deref(), Some(&b"a"[..]));
}

#[test]
fn a_delete_and_a_push_in_one_batch_are_decided_in_order() {
    let mut f = Fixture::new();
    let del = Record::KeySet(KeySet::new("m1", KeyState::Deleted, vec![], 2));
    let acc = Record::KeySet(KeySet::new("m1", KeyState::Accepted, b"pub".to_vec(), 3));
    let out = f.sm.apply_entries(&[LogEntry::plain(f.next, vec![piece("m1", "x", 1, 0, b"x"), del, acc, piece("m1", "y", 1, 0, b"y")])]).unwrap();
    f.next += 1;
    assert!(out.effects.contains(&Effect::PushedCleared { id: "m1".into() }));
    let files: Vec<String> = f.sm.pushed_files_of("m1").unwrap().into_iter().map(|(_, p)| p).collect();
    assert_eq!(files, ["y"], "the file pushed before the delete is gone, the one after it kept");
}

#[test]
fn a_view_behind_a_delete_is_cleared_by_resync() {
    let mut f = Fixture::new();
    f.apply(vec![piece("m1", "a/b", 2, 0, b"hi")]);
    // The delete applied while the view was not written (a crash, a dirty view).
    f.sm.apply_entries(&[LogEntry::plain(f.next, vec![Record::KeySet(KeySet::new("m1", KeyState::Deleted, vec![], 2))])]).unwrap();
    f.next += 1;
    assert!(f.disk("m1", "a/b").is_some());
    let mut touched = Touched::default();
    touched.add(&Record::KeySet(KeySet::new("m1", KeyState::Deleted, vec![], 2)));
    let mut views = crate::views::Views::new(Box::new(crate::keys::localfs::LocalfsKeys::open(&f._dir.path().join("pki")).unwrap()), RootsMaterialiser::new(f.view.dirs.clone()));
    views.resync(&f.sm, &touched).unwrap();
    assert!(!f.minions.join("m1").exists());
}

#[test]
fn clearing_never_follows_a_symlink() {
    let f = Fixture::new();
    let outside = f._dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("keep"), b"k").unwrap();
    std::fs::create_dir_all(f.minions.join("m1")).unwrap();
    std::os::unix::fs::symlink(&outside, f.minions.join("m1/files")).unwrap();
    f.view.clear_pushed("m1").unwrap();
    assert!(outside.join("keep").exists());
    std::fs::create_dir_all(&f.minions).unwrap();
    std::os::unix::fs::symlink(&outside, f.minions.join("m2")).unwrap();
    assert!(f.view.clear_pushed("m2").is_err());
    assert!(outside.join("keep").exists());
}

#[test]
fn a_rebuild_clears_the_folder_of_a_minion_without_a_key() {
    let mut f = Fixture::new();
    f.apply(vec![piece("m1", "a", 1, 0, b"a"), piece("m2", "b", 1, 0, b"b")]);
    // Deleted while the view was not written (a snapshot installed, say).
    f.sm.apply_entries(&[LogEntry::plain(f.next, vec![Record::KeySet(KeySet::new("m1", KeyState::Deleted, vec![], 2))])]).unwrap();
    f.next += 1;
    // A folder of a minion whose key the state holds (files pushed before Halite) stays.
    f.key("m3", KeyState::Accepted);
    std::fs::create_dir_all(f.minions.join("m3/files")).unwrap();
    std::fs::write(f.minions.join("m3/files/old"), b"o").unwrap();
    f.view.rebuild(&f.sm).unwrap();
    assert!(!f.minions.join("m1").exists(), "the deleted minion's folder is cleared");
    assert_eq!(f.disk("m2", "b").as_deref(), Some(&b"b"[..]));
    assert_eq!(f.disk("m3", "old").as_deref(), Some(&b"o"[..]));
}
