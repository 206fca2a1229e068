//! The follow loop on a real (in-memory) job cache, a real broadcast channel and a real
//! socket pair: bursts of returns committed at once, their events queued at once (twice
//! each, and more than the channel holds), a return named before it is applied; every
//! return is sent exactly once, then the done line.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value as J};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::broadcast;

use halite_storage::format::{JobPublished, JobReturn, Record};

use super::*;

const JID: &str = "20261124000000000001";

fn id(i: usize) -> String {
    format!("m{i:05}")
}

fn encode(v: J) -> Vec<u8> {
    payload::encode(&payload::from_json(&v))
}

/// A job published to `n` minions, in a fresh job cache.
fn job(name: &str, n: usize) -> (Arc<StateMachine>, std::cell::Cell<u64>) {
    // These tests free blocks of more than 128 KiB (the output buffer, large returns):
    // with glibc's threshold left to move, the first such free would raise it for the
    // whole test process, and `daemon::trim`'s tests, running alongside, would then find
    // their large blocks served from a heap. The daemon fixes it at start; so do these.
    crate::daemon::trim::fix_mmap_threshold();
    let sm = Arc::new(StateMachine::open_in_memory(name).unwrap());
    let load = encode(json!({"fun": "test.ping", "arg": [], "tgt": "*", "tgt_type": "glob", "user": "root"}));
    sm.apply(&[(1, Record::JobPublished(JobPublished { jid: JID.into(), load, minions: (0..n).map(id).collect(), time_ns: 1, started_by: None, joins: false }))]).unwrap();
    (sm, std::cell::Cell::new(1))
}

/// Commits the returns of minions `range` in one apply (one burst).
fn commit(sm: &StateMachine, index: &std::cell::Cell<u64>, range: std::ops::Range<usize>) {
    let entries: Vec<(u64, Record)> = range
        .map(|i| {
            index.set(index.get() + 1);
            let load = encode(json!({"return": i, "retcode": 0, "success": true}));
            (index.get(), Record::JobReturn(JobReturn { jid: JID.into(), id: id(i), load, time_ns: 2, first_only: false }))
        })
        .collect();
    sm.apply(&entries).unwrap();
}

fn ret_event(i: usize) -> Event {
    crate::events::event(format!("salt/job/{JID}/ret/{}", id(i)), json!({}))
}

/// Starts a follow of the job; the client's end of the socket, as lines.
fn start(sm: &Arc<StateMachine>, rx: Receiver<Arc<Event>>, timeout: Duration) -> tokio::io::Lines<BufReader<tokio::net::UnixStream>> {
    let (client, server) = tokio::net::UnixStream::pair().unwrap();
    let (rd, wr) = server.into_split();
    tokio::spawn(stream(sm.clone(), rx, FollowCmd { jid: JID.into(), timeout, only: None }, rd, wr));
    BufReader::new(client).lines()
}

/// Reads the follow to its end: how often each minion was sent, with its return, and
/// the done line.
async fn read_all(mut lines: tokio::io::Lines<BufReader<tokio::net::UnixStream>>) -> (BTreeMap<String, Vec<J>>, J) {
    let mut sent: BTreeMap<String, Vec<J>> = BTreeMap::new();
    while let Some(l) = lines.next_line().await.unwrap() {
        let v: J = serde_json::from_str(&l).unwrap();
        if v.get("done").is_some() {
            assert!(lines.next_line().await.unwrap().is_none(), "nothing after the done line");
            return (sent, v);
        }
        sent.entry(v["id"].as_str().unwrap().to_string()).or_default().push(v["return"]["return"].clone());
    }
    panic!("the follow ended without its done line; sent {} returns", sent.len());
}

async fn burst(name: &str, capacity: usize) {
    const N: usize = 3000;
    let (sm, index) = job(name, N);
    // Committed before the follow starts: found by its first read.
    commit(&sm, &index, 0..100);
    let (tx, rx) = broadcast::channel(capacity);
    let lines = start(&sm, rx, Duration::from_secs(120));
    // Named before its return is applied: not sent then, looked up again later.
    tx.send(Arc::new(ret_event(100))).unwrap();
    // A chance for the follow to look before the commit; the counts below hold either way.
    tokio::time::sleep(Duration::from_millis(20)).await;
    // The rest committed at once, their events queued at once, each twice (a minion's
    // own event and the master's), plus events of another job and of a stranger.
    commit(&sm, &index, 100..N);
    for i in 100..N {
        let _ = tx.send(Arc::new(ret_event(i)));
        let _ = tx.send(Arc::new(ret_event(i)));
        let _ = tx.send(Arc::new(crate::events::event(format!("salt/job/20261124000000000002/ret/{}", id(i)), json!({}))));
    }
    let _ = tx.send(Arc::new(crate::events::event(format!("salt/job/{JID}/ret/stranger"), json!({}))));
    let (sent, done) = read_all(lines).await;
    assert_eq!(done, json!({"done": true, "missing": []}));
    assert_eq!(sent.len(), N, "every minion's return sent");
    for (i, (m, loads)) in sent.iter().enumerate() {
        assert_eq!((m.as_str(), loads.as_slice()), (id(i).as_str(), &[json!(i)][..]), "sent exactly once, with its own return");
    }
    drop(tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_sent_once_each_then_done() {
    burst("follow-burst", 16384).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_larger_than_the_bus_is_found_by_the_sweep() {
    // 9,000 events into a channel of 256: most are dropped (`Lagged`), and the sweep
    // that follows finds their returns in the job cache.
    burst("follow-lagged", 256).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_did_not_return_is_missing_at_the_timeout() {
    let (sm, index) = job("follow-missing", 5);
    let (tx, rx) = broadcast::channel(64);
    let lines = start(&sm, rx, Duration::from_millis(600));
    commit(&sm, &index, 0..3);
    for i in 0..3 {
        tx.send(Arc::new(ret_event(i))).unwrap();
    }
    // Named, never applied: a hint retried until the end, never sent.
    tx.send(Arc::new(ret_event(4))).unwrap();
    let (sent, done) = read_all(lines).await;
    assert_eq!(sent.keys().cloned().collect::<Vec<_>>(), [id(0), id(1), id(2)]);
    assert_eq!(done, json!({"done": true, "missing": [id(3), id(4)]}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_returns_are_written_in_bounded_pieces() {
    // 40 returns of 100 KiB: 4 MB of lines, more than one write may carry.
    let (sm, index) = job("follow-large", 40);
    let (tx, rx) = broadcast::channel(64);
    let lines = start(&sm, rx, Duration::from_secs(120));
    let big = "x".repeat(100 << 10);
    let entries: Vec<(u64, Record)> = (0..40)
        .map(|i| {
            index.set(index.get() + 1);
            (index.get(), Record::JobReturn(JobReturn { jid: JID.into(), id: id(i), load: encode(json!({"return": big, "retcode": 0})), time_ns: 2, first_only: false }))
        })
        .collect();
    sm.apply(&entries).unwrap();
    for i in 0..40 {
        tx.send(Arc::new(ret_event(i))).unwrap();
    }
    let (sent, done) = read_all(lines).await;
    assert_eq!(done["missing"], json!([]));
    assert_eq!(sent.len(), 40);
    assert!(sent.values().all(|v| v.len() == 1 && v[0] == json!(big)));
}

/// A return's own event carries the load it stored: sent as carried, without a read
/// (minion 0's carried load differs from the job cache's here to tell them apart). An
/// event a minion fired naming another minion carries nothing: that minion's return
/// is looked for in the job cache, and, never committed, it is missing at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returns_own_event_is_sent_as_it_carries_it_and_other_events_are_only_hints() {
    const N: usize = 200;
    let (sm, index) = job("follow-carried", N + 2);
    // Minion N+1 returned before the follow starts: its line, sent from the follow's
    // first read of the job cache, says that read (which would find them all) is done.
    commit(&sm, &index, N + 1..N + 2);
    let (tx, rx) = broadcast::channel(4096);
    let mut lines = start(&sm, rx, Duration::from_millis(1500));
    let first: J = serde_json::from_str(&lines.next_line().await.unwrap().expect("the first read's line")).unwrap();
    assert_eq!((&first["id"], &first["return"]["return"]), (&json!(id(N + 1)), &json!(N + 1)), "{first}");
    commit(&sm, &index, 0..N);
    for i in 0..N {
        let ret = if i == 0 { json!("carried") } else { json!(i) };
        let load = payload::from_json(&json!({"return": ret, "retcode": 0, "success": true}));
        tx.send(Arc::new(crate::events::return_event(JID, &id(i), payload::encode(&load).as_slice().into()))).unwrap();
    }
    // A minion's own event, forged to name minion N with a made-up return.
    tx.send(Arc::new(crate::events::event(format!("salt/job/{JID}/ret/{}", id(N)), json!({"return": "forged"})))).unwrap();
    let (sent, done) = read_all(lines).await;
    assert_eq!(done, json!({"done": true, "missing": [id(N)]}), "the forged one is not a return");
    assert_eq!(sent.len(), N);
    assert_eq!(sent[&id(0)], [json!("carried")], "the carried load, not read back");
    for i in 1..N {
        assert_eq!(sent[&id(i)], [json!(i)]);
    }
}
