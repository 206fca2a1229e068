//! `halite-bench floor --work`: the floor server's request path carrying a return's
//! whole work, as a design for the master's request port: each connection's own task
//! reads a return, opens it, hands its record to one log thread, waits for it to be
//! applied, seals the reply and writes it; nothing else between the socket and the log.
//!
//! The log thread is the master's node driver reduced to its work: it takes every
//! record waiting (a group commit), makes one log entry of them (`entry::encode_group`,
//! a proposal context), appends it to a raft-engine log and syncs, reads it back as
//! the node does (`LogEntry::from_raft`), applies it to RocksDB
//! (`StateMachine::apply_entries`) and answers each waiting task. What it leaves out of
//! the master: raft's own bookkeeping, the request classes' shares, claims and replay
//! checks, events, ZMTP. Against the plain floor (the same connections and shapes) it
//! says what a master built this way would spend a return over the machine's floor.
//!
//! A work connection starts with a [`HELLO`] frame (the minion's id and session key,
//! this benchmark's stand-in for a sign-in); its requests are then return bodies as
//! salt-minion 3008.5 sends them (`crate::return_body`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use tokio::sync::oneshot;

use halite_master::wire::crypto::Crypticle;
use halite_master::wire::envelope;
use halite_storage::entry::LogEntry;
use halite_storage::format::{JobReturn, Record};
use halite_storage::log::RaftLog;
use halite_storage::state::StateMachine;

/// The first frame of a work connection: `HELLO`, then `id` and the session key's
/// text, separated by a newline.
pub const HELLO: u8 = 2;

/// Most records in one log entry.
const MAX_GROUP: usize = 4096;

/// A record waiting for the log thread, and who to tell once it applied.
struct Job {
    record: Vec<u8>,
    applied: oneshot::Sender<()>,
}

/// What the log thread is handed: a record, or the word to close the log and the state
/// machine and end.
enum Msg {
    Job(Job),
    Stop,
}

/// The server's side of the work: the log thread's queue. [`Log::stop`] ends the thread
/// (before the process exits: RocksDB must be closed before its statics are torn down).
#[derive(Clone)]
pub struct Log {
    tx: mpsc::Sender<Msg>,
    applied: Arc<AtomicU64>,
    thread: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl Log {
    /// Opens a log and a state machine under `dir` and starts the log thread.
    pub fn start(dir: &std::path::Path) -> std::io::Result<Log> {
        let log = RaftLog::open(&dir.join("log")).map_err(std::io::Error::other)?;
        let sm = StateMachine::open(&dir.join("state")).map_err(std::io::Error::other)?;
        let (tx, rx) = mpsc::channel::<Msg>();
        let applied = Arc::new(AtomicU64::new(0));
        let count = applied.clone();
        let thread = std::thread::Builder::new().name("log".into()).spawn(move || commit_loop(&log, &sm, &rx, &count))?;
        Ok(Log { tx, applied, thread: Arc::new(std::sync::Mutex::new(Some(thread))) })
    }

    /// Ends the log thread once it has applied what it was handed, and waits for it
    /// (the log and the state machine closed); later commits fail.
    pub fn stop(&self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }

    /// Records applied so far.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    /// Hands `record` (encoded as a proposal is) to the log thread and waits until it
    /// is applied.
    async fn commit(&self, record: Vec<u8>) -> std::io::Result<()> {
        let (applied, rx) = oneshot::channel();
        self.tx.send(Msg::Job(Job { record, applied })).map_err(|_| std::io::Error::other("the log thread stopped"))?;
        rx.await.map_err(|_| std::io::Error::other("the log thread stopped"))
    }
}

/// Group commit: every job waiting becomes one entry, appended, synced, applied.
fn commit_loop(log: &RaftLog, sm: &StateMachine, rx: &mpsc::Receiver<Msg>, applied: &AtomicU64) {
    let (mut index, mut seq) = (0u64, 1u64);
    let mut stop = false;
    while let Ok(Msg::Job(first)) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(Msg::Job(j)) => jobs.push(j),
                Ok(Msg::Stop) => {
                    stop = true;
                    break;
                }
                Err(_) => break,
            }
        }
        index += 1;
        let first_seq = seq;
        let records: Vec<Vec<u8>> = jobs.iter_mut().map(|j| std::mem::take(&mut j.record)).collect();
        let e = crate::work::log_entry(index, first_seq, &records);
        seq += jobs.len() as u64;
        log.append(std::slice::from_ref(&e), None, None, true).expect("append");
        let read: Vec<LogEntry> = LogEntry::from_raft(&e).expect("read back");
        let done = sm.apply_entries(&read).expect("apply");
        let all = done.outcomes.len() == jobs.len() && done.outcomes.iter().all(|o| *o == halite_storage::state::Outcome::Applied);
        assert!(all, "every proposal of the entry applied: {:?}", done.outcomes);
        applied.fetch_add(jobs.len() as u64, Ordering::AcqRel);
        for j in jobs {
            let _ = j.applied.send(());
        }
        if stop {
            return;
        }
    }
}

/// A work connection's minion: its id and session key, from its [`HELLO`].
pub struct Minion {
    id: String,
    session: Crypticle,
}

impl Minion {
    /// Reads a [`HELLO`] frame's payload (after its first byte).
    pub fn hello(payload: &[u8]) -> std::io::Result<Minion> {
        let text = std::str::from_utf8(payload).map_err(|_| std::io::Error::other("hello: not UTF-8"))?;
        let (id, key) = text.split_once('\n').ok_or_else(|| std::io::Error::other("hello: no key"))?;
        let session = Crypticle::from_key_string(key).map_err(std::io::Error::other)?;
        Ok(Minion { id: id.to_string(), session })
    }

    /// The [`HELLO`] payload for `id` and `session`.
    pub fn hello_payload(id: &str, session: &Crypticle) -> Vec<u8> {
        format!("{id}\n{}", session.key_string()).into_bytes()
    }

    /// A return body's whole work: open, commit, seal. The reply's frame payload.
    pub async fn answer(&self, body: &[u8], log: &Log) -> std::io::Result<Vec<u8>> {
        let bad = |e: envelope::EnvelopeError| std::io::Error::other(e.to_string());
        let env = envelope::decode(body, 1 << 20).map_err(bad)?;
        let opened = envelope::open_aes(env.ciphertext, &self.id, &self.session).map_err(bad)?;
        let jid = "20261129000000000001".to_string();
        let rec = Record::JobReturn(JobReturn { jid, id: self.id.clone(), load: opened.inner, time_ns: 0, first_only: false });
        log.commit(Record::encode_batch(&[rec]).map_err(std::io::Error::other)?).await?;
        envelope::seal_reply(&self.session, &opened.nonce, &rmpv::Value::Nil).map_err(std::io::Error::other)
    }
}
