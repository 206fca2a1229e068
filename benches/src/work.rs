//! `halite-bench work`: the work a job return needs beyond framing bytes, done inline on
//! one thread with no sockets, no tasks and no hand-offs — the second half of the
//! floor under the master's CPU a return (the first is `halite-bench floor`: the
//! connections and messages alone).
//!
//! For `N` returns of `minions` minions' `test.ping` jobs, each body as salt-minion
//! 3008.5 sends it (an AES load with a 256-byte `tok`), the steps the master takes for
//! each, each step over every return before the next, each timed by the process's CPU
//! (`CLOCK_PROCESS_CPUTIME_ID`: RocksDB's and raft-engine's own threads included):
//!
//! - **open**: the request envelope decoded and the AES load opened (HMAC-SHA256,
//!   AES-192-CBC, the inner map read and the bytes to store cut out): `envelope::decode`,
//!   `envelope::open_aes`;
//! - **encode**: the return's record, encoded as a proposal is, and `group` proposals to
//!   a log entry with their contexts (`entry::encode_group`), as the node groups them;
//! - **log**: the entries appended to a raft-engine log (`RaftLog::append`), synced once
//!   every `entries_per_sync` entries (a ready's worth);
//! - **apply**: the entries read back as the node hands them to the state machine
//!   (`LogEntry::from_raft`) and applied to RocksDB (`StateMachine::apply_entries`), 64
//!   entries a batch;
//! - **seal**: the reply sealed with the minion's session key (`envelope::seal_reply`).
//!
//! What it leaves out is what a design may choose: tasks, queues between threads, raft's
//! own bookkeeping, the reply's routing. One JSON line on stdout: CPU microseconds a
//! return for each step and their sum.

use raft::eraftpb::{Entry, EntryType};
use rmpv::Value;

use halite_master::wire::crypto::Crypticle;
use halite_master::wire::envelope;
use halite_storage::context::{self, EntryContext, ProposalId};
use halite_storage::entry::{self, LogEntry};
use halite_storage::format::{JobReturn, Record};
use halite_storage::log::RaftLog;
use halite_storage::state::StateMachine;

/// The options of a run.
pub struct Opts {
    pub returns: usize,
    pub minions: usize,
    pub group: usize,
    pub entries_per_sync: usize,
}

/// The process's CPU time so far, in seconds (every thread's).
fn cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// A minion's id, as the swarm names them.
fn minion(i: usize) -> String {
    format!("swarm-{i:05}")
}

/// Log entry `index` holding `proposals` (each encoded as [`Record::encode_batch`] makes
/// it) of proposer 1, numbered from `first_seq`, as the node's group commit makes one:
/// a group of them (`entry::encode_group`), or the one alone, with its proposal context.
pub fn log_entry(index: u64, first_seq: u64, proposals: &[Vec<u8>]) -> Entry {
    let mut e = Entry::default();
    e.set_entry_type(EntryType::EntryNormal);
    e.index = index;
    e.term = 1;
    e.data = match proposals {
        [one] => one.clone().into(),
        many => {
            let items: Vec<(u64, &[u8])> = many.iter().enumerate().map(|(i, d)| (first_seq + i as u64, d.as_slice())).collect();
            entry::encode_group(&items).expect("a group within the bounds").into()
        }
    };
    e.context = context::encode(&EntryContext::proposal(ProposalId { proposer: 1, incarnation: 1, seq: first_seq }, first_seq, None)).into();
    e
}

/// Runs the steps and prints their CPU a return.
pub fn run(o: &Opts) {
    let n = o.returns;
    let group = o.group.max(2);
    let sessions: Vec<Crypticle> = (0..o.minions).map(|_| Crypticle::generate()).collect();
    let ids: Vec<String> = (0..o.minions).map(minion).collect();
    let jid = |i: usize| format!("2026112900000000{:04}", i / o.minions);
    let bodies: Vec<Vec<u8>> = (0..n).map(|i| crate::return_body(&sessions[i % o.minions], &minion(i % o.minions), &jid(i), &format!("{i:032x}"), "test.ping", Value::Boolean(true))).collect();
    let request_bytes = bodies.iter().map(Vec::len).sum::<usize>() / n.max(1);
    let dir = tempfile::tempdir().expect("tmp");
    let log = RaftLog::open(&dir.path().join("log")).expect("log");
    let sm = StateMachine::open(&dir.path().join("state")).expect("state");
    let mut steps: Vec<(&str, f64)> = Vec::new();
    let mut time = |name: &'static str, f: &mut dyn FnMut()| {
        let t = cpu_s();
        f();
        steps.push((name, cpu_s() - t));
    };

    let mut opened = Vec::with_capacity(n);
    time("open", &mut || {
        for (i, body) in bodies.iter().enumerate() {
            let env = envelope::decode(body, 1 << 20).expect("decode");
            let o = envelope::open_aes(env.ciphertext, &ids[i % ids.len()], &sessions[i % sessions.len()]).expect("open");
            opened.push(o);
        }
    });

    let mut entries: Vec<Entry> = Vec::with_capacity(n / group + 1);
    time("encode", &mut || {
        let mut seq = 1u64;
        for (k, chunk) in opened.chunks(group).enumerate() {
            let first = seq;
            let data: Vec<Vec<u8>> = chunk
                .iter()
                .enumerate()
                .map(|(j, op)| {
                    let i = k * group + j;
                    let rec = Record::JobReturn(JobReturn { jid: jid(i), id: ids[i % ids.len()].clone(), load: op.inner.clone(), time_ns: i as u64, first_only: false });
                    Record::encode_batch(&[rec]).expect("encode")
                })
                .collect();
            entries.push(log_entry(k as u64 + 1, first, &data));
            seq += chunk.len() as u64;
        }
    });

    time("log", &mut || {
        for batch in entries.chunks(o.entries_per_sync.max(1)) {
            log.append(batch, None, None, true).expect("append");
        }
    });

    time("apply", &mut || {
        for batch in entries.chunks(64) {
            let mut read = Vec::with_capacity(batch.len() * 2);
            for e in batch {
                read.extend(LogEntry::from_raft(e).expect("read back"));
            }
            sm.apply_entries(&read).expect("apply");
        }
    });

    let mut sealed = 0usize;
    time("seal", &mut || {
        for i in 0..n {
            let nonce = &opened[i].nonce;
            sealed += envelope::seal_reply(&sessions[i % sessions.len()], nonce, &Value::Nil).expect("seal").len();
        }
    });

    let per = |s: f64| (1e6 * s / n as f64 * 100.0).round() / 100.0;
    let total: f64 = steps.iter().map(|(_, s)| s).sum();
    let fields: Vec<String> = steps.iter().map(|(name, s)| format!("\"{name}_us\": {}", per(*s))).collect();
    println!(
        "{{\"shape\": \"work\", \"returns\": {n}, \"minions\": {}, \"group\": {group}, \"entries_per_sync\": {}, \"request_bytes\": {request_bytes}, \"reply_bytes\": {}, {}, \"total_us\": {}}}",
        o.minions,
        o.entries_per_sync,
        sealed / n.max(1),
        fields.join(", "),
        per(total)
    );
}
