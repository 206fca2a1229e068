//! A node restarted after a crash whose state machine (no WAL) is behind what its log had
//! committed, while its key view already shows that commit: replaying the tail must not
//! take the view back through older states (a key accepted shown pending again, a key
//! deleted shown again). Every write the node makes to the view is recorded.

use std::path::Path;
use std::sync::{Arc, Mutex};

use halite_storage::format::{KeySet, KeyState};
use halite_storage::keys::localfs::LocalfsKeys;
use halite_storage::keys::{BankState, DeniedEntry, KeyEntry, KeyView};
use halite_storage::roots::{RootsDirs, RootsMaterialiser};
use halite_storage::views::Views;
use halite_storage::{Record, Result};

use super::{DataDir, Node, NodeConfig};

/// What the node wrote to a key view: `(id, Some(state))` set, `(id, None)` removed.
type Writes = Arc<Mutex<Vec<(String, Option<BankState>)>>>;

/// The real `localfs_key` view, with every key write the node makes recorded.
struct Recorded {
    inner: LocalfsKeys,
    writes: Writes,
}

impl KeyView for Recorded {
    fn driver(&self) -> &'static str {
        self.inner.driver()
    }
    fn set_key(&mut self, id: &str, state: BankState, pub_key: &[u8], mtime_ns: u64) -> Result<()> {
        self.writes.lock().unwrap().push((id.to_string(), Some(state)));
        self.inner.set_key(id, state, pub_key, mtime_ns)
    }
    fn remove_key(&mut self, id: &str) -> Result<bool> {
        self.writes.lock().unwrap().push((id.to_string(), None));
        self.inner.remove_key(id)
    }
    fn set_denied(&mut self, id: &str, pub_key: &[u8], mtime_ns: u64) -> Result<()> {
        self.inner.set_denied(id, pub_key, mtime_ns)
    }
    fn remove_denied(&mut self, id: &str) -> Result<bool> {
        self.inner.remove_denied(id)
    }
    fn set_master_key(&mut self, name: &str, data: &[u8]) -> Result<()> {
        self.inner.set_master_key(name, data)
    }
    fn set_master_pair(&mut self, name: &str, private_pem: &[u8], public_pem: &[u8]) -> Result<()> {
        self.inner.set_master_pair(name, private_pem, public_pem)
    }
    fn get_key(&self, id: &str) -> Result<Option<KeyEntry>> {
        self.inner.get_key(id)
    }
    fn get_denied(&self, id: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get_denied(id)
    }
    fn get_master_key(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get_master_key(name)
    }
    fn entries(&self) -> Result<(Vec<KeyEntry>, Vec<DeniedEntry>)> {
        self.inner.entries()
    }
    fn clear(&mut self) -> Result<()> {
        self.writes.lock().unwrap().push(("*".to_string(), None));
        self.inner.clear()
    }
    fn sync(&mut self) -> Result<()> {
        self.inner.sync()
    }
    fn release(&mut self) -> Result<()> {
        self.inner.release()
    }
}

fn views(pki: &Path, writes: &Writes) -> Views {
    let inner = LocalfsKeys::open(pki).unwrap();
    Views::new(Box::new(Recorded { inner, writes: writes.clone() }), RootsMaterialiser::new(RootsDirs::default()))
}

fn key(id: &str, state: KeyState) -> Record {
    Record::KeySet(KeySet { id: id.into(), state, pub_key: format!("PUB-{id}").into_bytes(), time_ns: 1, expect: None, pending_below: None })
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn a_restarted_nodes_key_view_never_shows_an_older_state_while_it_replays_its_tail() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataDir::new(&dir.path().join("data"));
    let pki = dir.path().join("pki");
    let writes = Writes::default();
    let node = Node::start(&data, views(&pki, &writes), NodeConfig::default()).unwrap();
    node.propose(&[key("other", KeyState::Pending)]).unwrap();
    drop(node);
    // The state machine as a crash leaves it: what RocksDB had flushed before the tail.
    let flushed = dir.path().join("state-flushed");
    copy_dir(&data.state(), &flushed);
    let node = Node::start(&data, views(&pki, &writes), NodeConfig::default()).unwrap();
    node.propose(&[key("acc", KeyState::Pending)]).unwrap();
    node.propose(&[key("acc", KeyState::Accepted)]).unwrap();
    node.propose(&[key("gone", KeyState::Pending)]).unwrap();
    let last = node.propose(&[key("gone", KeyState::Deleted)]).unwrap();
    drop(node);
    let shown = LocalfsKeys::open(&pki).unwrap().list().unwrap();
    assert_eq!((shown.minions.clone(), shown.minions_pre.clone()), (vec!["acc".to_string()], vec!["other".to_string()]));
    std::fs::remove_dir_all(data.state()).unwrap();
    copy_dir(&flushed, &data.state());

    writes.lock().unwrap().clear();
    let node = Node::start(&data, views(&pki, &writes), NodeConfig::default()).unwrap();
    crate::testutil::wait_until("the tail applied again", 20, || node.state().applied_index().unwrap() >= last);
    // Dropped: its driver thread has finished every apply and the views' recovery.
    drop(node);
    let w = writes.lock().unwrap().clone();
    let back: Vec<_> = w.iter().filter(|(id, s)| id == "*" || (id == "acc" && *s != Some(BankState::Accepted)) || (id == "gone" && s.is_some())).collect();
    assert!(back.is_empty(), "the view was taken back to older states while the tail was replayed: {back:?} (every write: {w:?})");
    assert_eq!(LocalfsKeys::open(&pki).unwrap().list().unwrap(), shown, "the view ends as it was");
}

/// What the master's publisher relies on (`daemon/publishing/publish.rs`): after a
/// crash, every entry the node applies again from its own log is at or below
/// [`Node::last_index_at_start`], and every entry proposed after the start is above it.
#[test]
fn entries_replayed_after_a_crash_are_at_or_below_where_the_log_ended_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = DataDir::new(&dir.path().join("data"));
    let pki = dir.path().join("pki");
    let writes = Writes::default();
    let node = Node::start(&data, views(&pki, &writes), NodeConfig::default()).unwrap();
    node.propose(&[key("before", KeyState::Pending)]).unwrap();
    drop(node);
    let flushed = dir.path().join("state-flushed");
    copy_dir(&data.state(), &flushed);
    let node = Node::start(&data, views(&pki, &writes), NodeConfig::default()).unwrap();
    let first = node.propose(&[key("t1", KeyState::Pending)]).unwrap();
    let last = node.propose(&[key("t2", KeyState::Pending)]).unwrap();
    drop(node);
    std::fs::remove_dir_all(data.state()).unwrap();
    copy_dir(&flushed, &data.state());

    let tapped = Arc::new(Mutex::new(Vec::<(u64, String)>::new()));
    let t = tapped.clone();
    let tap = super::Tap(Arc::new(move |index, r: &Record| {
        if let Record::KeySet(k) = r {
            t.lock().unwrap().push((index, k.id.clone()));
        }
    }));
    let node = Node::start(&data, views(&pki, &writes), NodeConfig { tap: Some(tap), ..Default::default() }).unwrap();
    let at_start = node.last_index_at_start();
    assert!(at_start >= last, "the log held {last} at start, the node says {at_start}");
    let after = node.propose(&[key("after", KeyState::Pending)]).unwrap();
    assert!(after > at_start);
    drop(node);
    let t = tapped.lock().unwrap().clone();
    let replayed: Vec<u64> = t.iter().filter(|(_, id)| id.starts_with('t')).map(|(i, _)| *i).collect();
    assert_eq!(replayed, [first, last], "the tail is applied again: {t:?}");
    assert!(replayed.iter().all(|i| *i <= at_start));
    assert_eq!(t.last(), Some(&(after, "after".to_string())));
}
