//! A state machine ahead of its log (`boot::state_not_ahead`): the log directory
//! restored from an older backup than the state machine, or lost. Start-up must refuse,
//! naming both indexes and the recovery, and change nothing on disk.

use std::path::Path;

use halite_storage::format::{KeySet, KeyState};
use halite_storage::keys::{mmap::MmapKeys, Geometry};
use halite_storage::log::RaftLog;
use halite_storage::roots::{RootsDirs, RootsMaterialiser};
use halite_storage::state::StateMachine;
use halite_storage::views::Views;
use halite_storage::Record;

use super::{DataDir, Node, NodeConfig};

fn views(pki: &Path) -> Views {
    let geo = Geometry { size: 4096, slot_size: 96, key_size: 64, max_segment_bytes: 1 << 20 };
    Views::new(Box::new(MmapKeys::open(pki, geo).unwrap()), RootsMaterialiser::new(RootsDirs::default()))
}

fn pending(id: &str) -> Record {
    Record::KeySet(KeySet { id: id.into(), state: KeyState::Pending, pub_key: format!("PUB-{id}").into_bytes(), time_ns: 1, expect: None, pending_below: None })
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Starts a node on `data`, proposes `n` keys named `{tag}{i}`, stops it; returns the
/// applied index.
fn write(data: &DataDir, pki: &Path, tag: &str, n: usize) -> u64 {
    let node = Node::start(data, views(pki), NodeConfig::default()).unwrap();
    let mut idx = 0;
    for i in 0..n {
        idx = node.propose(&[pending(&format!("{tag}{i}"))]).unwrap();
    }
    drop(node);
    idx
}

fn refusal(data: &DataDir, pki: &Path) -> String {
    match Node::start(data, views(pki), NodeConfig::default()) {
        Ok(_) => panic!("a node started over a log older than its state machine"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_log_restored_from_an_older_backup_is_refused_naming_both_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataDir::new(&dir.path().join("data"));
    let pki = dir.path().join("pki");
    let old = write(&data, &pki, "a", 3);
    let backup = dir.path().join("log-backup");
    copy_dir(&data.log(), &backup);
    let applied = write(&data, &pki, "b", 5);
    assert!(applied > old);
    // The log directory comes back from the older backup; the state machine does not.
    std::fs::remove_dir_all(data.log()).unwrap();
    copy_dir(&backup, &data.log());
    let old_last = RaftLog::open(&data.log()).unwrap().last_entry_index().unwrap();
    assert!(old_last < applied);

    let e = refusal(&data, &pki);
    assert!(e.contains(&format!("applied log index {applied}")) && e.contains(&format!("ends at index {old_last}")), "{e}");
    assert!(e.contains("halite-ctl verify") && e.contains("halite-ctl replay") && e.contains("rejoin"), "the recovery is named: {e}");
    // Nothing was served or changed: the same refusal again, the same indexes.
    assert_eq!(RaftLog::open(&data.log()).unwrap().last_entry_index(), Some(old_last));
    assert_eq!(StateMachine::open(&data.state()).unwrap().applied_index().unwrap(), applied);
    assert_eq!(refusal(&data, &pki), e);
}

#[test]
fn a_lost_log_under_an_applied_state_is_refused_and_nothing_is_founded() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataDir::new(&dir.path().join("data"));
    let pki = dir.path().join("pki");
    let applied = write(&data, &pki, "a", 2);
    std::fs::remove_dir_all(data.log()).unwrap();

    let e = refusal(&data, &pki);
    assert!(e.contains(&format!("applied log index {applied}")) && e.contains("ends at index 0"), "{e}");
    // A founding membership written into the empty log would make it look like a new
    // cluster's: the refusal comes before it.
    assert!(RaftLog::open(&data.log()).unwrap().is_new().unwrap(), "nothing written into the empty log");
    assert_eq!(StateMachine::open(&data.state()).unwrap().applied_index().unwrap(), applied);
}
