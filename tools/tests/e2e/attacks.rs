//! The black-box attack suite: what an attacker sends to a running lone master and to a
//! running three-member cluster, on every port, as bytes (and, for the cluster port, as
//! a holder of `cluster_secret` without any member's key). After the attacks every
//! member's state digest (`salt-run cluster.digest`, `StateMachine::digest`) is what it
//! was before, every refusal is counted in the member's `/metrics`, and a real
//! salt-minion 3008.5 is still served (`test.ping`).
//!
//! The lone master: the huge-frame header on the request, publish and health ports,
//! truncated frames, slowloris connections on all three, the clear commands of
//! CVE-2020-11651 (`_prep_auth_info`, `_send_pub`, `wheel`, `runner`, `publish`), the
//! path traversals of CVE-2020-11652 (`../` in `path` and in `saltenv`, from a minion
//! that signed in), and `_auth` from 10,000 new ids (bounded by
//! `halite_max_pending_keys`: only that many pending keys are stored, memory stays
//! bounded).
//!
//! The cluster: garbage and silence on the cluster port, slowloris past the
//! unauthenticated-connection cap, a peer that holds the secret and speaks under another
//! member's id (a vote for a far higher term, a heartbeat, a join), and a real member's
//! bytes captured through a recording proxy and replayed later on a new connection.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use halite_replication::transport::identity::MemberKey;
use halite_replication::{member_id, ClusterKey, Credentials, TcpTransport};
use raft::eraftpb::{Message, MessageType};
use serde_json::json;

use crate::hostile::{greeting, long_header, read_until_closed};
use crate::support::*;

/// Sends `bytes` on a new connection to `ip:port` (optionally half-closing after) and
/// reads until the master closes it; fails the test if it stays open.
fn expect_closed(ip: &str, port: u16, bytes: &[u8], half_close: bool) {
    let mut s = TcpStream::connect((ip, port)).unwrap_or_else(|e| panic!("connect {ip}:{port}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let _ = s.write_all(bytes);
    if half_close {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    read_until_closed(s, ip, port, bytes);
}

/// The huge-frame header and truncated frames on a ZMTP port.
fn zmtp_attacks(ip: &str, port: u16) {
    for header in [long_header(0, 1 << 40), long_header(0x04, 1 << 40), long_header(0x01, u64::MAX)] {
        expect_closed(ip, port, &[greeting(), header].concat(), false);
    }
    let mut truncated = long_header(0x04, 1000);
    truncated.extend_from_slice(&[0x41; 10]);
    expect_closed(ip, port, &[greeting(), truncated].concat(), true);
    expect_closed(ip, port, &[greeting(), vec![0x02, 0, 0, 0]].concat(), true);
}

/// The health port's equivalent: a request head that never ends (1 MiB, no blank line)
/// and one that is not HTTP.
fn health_attacks(ip: &str, port: u16) {
    expect_closed(ip, port, &vec![b'A'; 1 << 20], false);
    expect_closed(ip, port, &[0xff; 64], true);
}

/// Opens `n` connections to each of `ports` and sends one byte a second on each until
/// the other side closes it (on the ports in `http`, the bytes of a request head that
/// never ends). Returns how many were closed by the master (all of them, or the thread
/// never ends; the test then fails on its own bound).
fn slowloris(ip: &str, ports: &[u16], http: &[u16], n: usize) -> std::thread::JoinHandle<usize> {
    let conns: Vec<(TcpStream, &'static [u8])> = ports
        .iter()
        .flat_map(|p| {
            let bytes: &'static [u8] = if http.contains(p) { b"GET /alive HTTP/1.1\r\nX-Slow: a" } else { b"\x01" };
            (0..n).filter_map(move |_| TcpStream::connect((ip, *p)).ok().map(|c| (c, bytes)))
        })
        .collect();
    std::thread::spawn(move || {
        let mut open = conns;
        let mut closed = 0;
        for _ in 0..120 {
            if open.is_empty() {
                break;
            }
            open.retain_mut(|(c, bytes)| {
                // The last byte is sent again and again.
                let b = bytes[0];
                if bytes.len() > 1 {
                    *bytes = &bytes[1..];
                }
                if c.write_all(&[b]).is_err() {
                    closed += 1;
                    return false;
                }
                true
            });
            // The pace of a slow client (one byte a second) is the attack, not a wait.
            std::thread::sleep(Duration::from_secs(1));
        }
        assert!(open.is_empty(), "{} slow connections were kept open for two minutes", open.len());
        closed
    })
}

/// One HTTP/1.0 GET; the body.
fn http_get(ip: &str, port: u16, path: &str) -> String {
    let mut s = TcpStream::connect((ip, port)).expect("connect to the health port");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()
}

/// `halite_refused_total{port,reason}` on a member's `/metrics` (0 if absent).
pub(crate) fn refused(env: &Env, health: u16, port: &str, reason: &str) -> f64 {
    let line = format!("halite_refused_total{{port=\"{port}\",reason=\"{reason}\"}} ");
    http_get(&env.ip, health, "/metrics").lines().find_map(|l| l.strip_prefix(&line).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

fn wait_counted(env: &Env, health: u16, port: &str, reason: &str, at_least: f64) {
    wait_for(&format!("{at_least} refusal(s) {port}/{reason} counted on {}", env.ip), 90, || refused(env, health, port, reason) >= at_least);
}

/// This member's state digest and applied index (`salt-run cluster.digest`).
fn digest(env: &Env) -> String {
    let d = env.runner(&["cluster.digest"]);
    d["digest"].as_str().unwrap_or_else(|| panic!("no digest from {}: {d}", env.ip)).to_string()
}

/// Runs `body` in the reference venv's Python (zmq, msgpack) and returns its stdout.
fn python(body: &str) -> String {
    let o = run(Command::new(reference_venv().join("bin/python")).arg("-c").arg(body), Duration::from_secs(300));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// `per_endpoint` new ids (`ghost-M-NNNNN`, one public key for all) sign in at once on
/// each endpoint (one pipelined stream of `_auth` per endpoint, all sent before any
/// answer is read); returns the answers counted (`answers {'True': n, 'full': m}`).
fn ghost_flood(dir: &std::path::Path, endpoints: &[(String, u16)], per_endpoint: usize) -> String {
    let pub_path = dir.join("ghost.pub");
    std::fs::write(&pub_path, halite_master::wire::crypto::PrivateKey::generate(2048).expect("key").public_pem().expect("pem")).expect("ghost.pub");
    let eps: Vec<String> = endpoints.iter().map(|(ip, port)| format!("\"tcp://{ip}:{port}\"")).collect();
    python(&format!(
        r#"
import zmq, msgpack, collections
pub = open("{pub_path}").read()
ctx = zmq.Context()
socks = []
for m, ep in enumerate([{eps}]):
    s = ctx.socket(zmq.DEALER); s.setsockopt(zmq.LINGER, 0); s.setsockopt(zmq.RCVTIMEO, 120000)
    s.setsockopt(zmq.SNDHWM, 0); s.setsockopt(zmq.RCVHWM, 0)
    s.connect(ep)
    for i in range({n}):
        s.send_multipart([b"", msgpack.packb({{"enc": "clear", "load": {{"cmd": "_auth", "id": "ghost-%d-%05d" % (m, i), "pub": pub, "nonce": "%032d" % i,
            "enc_algo": "OAEP-SHA1", "sig_algo": "PKCS1v15-SHA1"}}, "version": 3}})])
    socks.append(s)
seen = collections.Counter()
for s in socks:
    for i in range({n}):
        r = msgpack.unpackb(s.recv_multipart()[-1], raw=False, strict_map_key=False)
        ret = msgpack.unpackb(r["load"], raw=False)["ret"] if isinstance(r, dict) and "load" in r else r
        seen[str(ret)] += 1
print("answers", dict(seen))
"#,
        pub_path = pub_path.display(),
        eps = eps.join(", "),
        n = per_endpoint
    ))
}

/// The clear commands behind CVE-2020-11651, each with a load that would delete every
/// key, sent to `ip:ret`: each must be answered with an empty map.
fn cve_2020_11651(ip: &str, ret: u16) {
    let out = python(&format!(
        r#"
import zmq, msgpack
ctx = zmq.Context()
for cmd in ["_prep_auth_info", "_send_pub", "wheel", "runner", "publish"]:
    s = ctx.socket(zmq.REQ); s.setsockopt(zmq.LINGER, 0); s.setsockopt(zmq.RCVTIMEO, 10000)
    s.connect("tcp://{ip}:{ret}")
    s.send(msgpack.packb({{"enc": "clear", "load": {{"cmd": cmd, "fun": "key.delete", "match": "*", "tgt": "*", "arg": ["id"]}}, "version": 3}}))
    r = msgpack.unpackb(s.recv(), raw=False, strict_map_key=False)
    assert r == {{}}, (cmd, r)
print("answered empty")
"#
    ));
    assert!(out.contains("answered empty"), "{out}");
}

/// Member `i`'s raft id (founding members: the id of their address).
fn id_of(c: &Cluster, i: usize) -> u64 {
    member_id(&c.envs[i].ip)
}

#[test]
fn attacks_on_a_lone_master_change_nothing_and_are_counted() {
    let health = port_free_on(&loopback(1).iter().map(String::as_str).collect::<Vec<_>>());
    let cap = 50;
    let s = Served::start(Accept::Operator, &format!("halite_health_port: {health}\nhalite_max_pending_keys: {cap}\n"), "");
    let env = &s.env;
    // A minion of the attacker's, signed in and accepted: it may ask for files.
    let key_pem = halite_master::wire::crypto::PrivateKey::generate(2048).expect("key").to_pem().expect("pem");
    let me = || Identity::new("intruder".into(), halite_master::wire::crypto::PrivateKey::from_pem(&key_pem).expect("key")).expect("identity");
    assert!(WireMinion::try_sign_in_with(&env.ip, env.ret, me(), None).is_err(), "pending first");
    env.ok(SALT_KEY, &["-a", "intruder", "-y"]);
    let intruder = WireMinion::sign_in_with(&env.ip, env.ret, me());
    let before = digest(env);

    let slow = slowloris(&env.ip, &[env.ret, env.publish, health], &[health], 20);
    for port in [env.ret, env.publish] {
        zmtp_attacks(&env.ip, port);
    }
    health_attacks(&env.ip, health);
    cve_2020_11651(&env.ip, env.ret);
    // CVE-2020-11652: out of the roots through `path` and through `saltenv`.
    use rmpv::Value as V;
    for (cmd, path, saltenv) in [
        ("_serve_file", "../../../../../etc/passwd", "base"),
        ("_serve_file", "salt://../../etc/shadow", "base"),
        ("_file_find", "/etc/passwd", "base"),
        ("_file_hash", "passwd", "../../../../etc"),
        ("_file_hash_and_stat", "etc/passwd", "../.."),
    ] {
        let r = intruder.ask(load(&[("cmd", V::from(cmd)), ("path", V::from(path)), ("saltenv", V::from(saltenv)), ("loc", V::from(0))]));
        let text = match r {
            AesReply::Value(v) => v.to_string(),
            AesReply::BadLoad => "bad load".to_string(),
        };
        assert!(!text.contains("root:") && !text.contains("hsum"), "{cmd} {path} {saltenv}: {text}");
    }
    // A signed-in minion's sealed request whose inner id is another minion's: "bad load",
    // counted, nothing stored.
    let r = intruder.ask(load(&[("cmd", V::from("_return")), ("id", V::from(MINION)), ("jid", V::from("20261124000000000001")), ("fun", V::from("test.ping")), ("return", V::from(true))]));
    assert!(matches!(r, AesReply::BadLoad), "a request claiming another id is refused");
    assert_eq!(slow.join().expect("slowloris"), 60, "every slow connection was closed by the master");
    wait_counted(env, health, "request", "message_too_large", 3.0);
    wait_counted(env, health, "publish", "message_too_large", 3.0);
    wait_counted(env, health, "request", "handshake_timeout", 20.0);
    wait_counted(env, health, "health", "timeout", 20.0);
    wait_counted(env, health, "request", "clear_command", 5.0);
    wait_counted(env, health, "request", "unsafe_path", 5.0);
    wait_counted(env, health, "request", "bad_load", 1.0);
    assert_eq!(digest(env), before, "the attacks changed nothing stored");

    // 10,000 new ids sign in at once (one pipelined stream of `_auth`): the first `cap`
    // are pending, the rest answered "full"; nothing else is stored.
    let rss = || std::fs::read_to_string(format!("/proc/{}/status", s.master.pid())).ok().and_then(|t| t.lines().find_map(|l| l.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok()))).unwrap_or(0);
    let rss_before = rss();
    let out = ghost_flood(&env.root, &[(env.ip.clone(), env.ret)], 10_000);
    let seen = check_flood_answers(&out, 10_000, cap, &[env.master_log()]);
    // A commit of unknown outcome may still be applying: the count settles at `cap`.
    wait_for("the pending keys to settle", 60, || env.ids("minions_pre").len() >= cap);
    let pending = env.ids("minions_pre");
    assert_eq!(pending.len(), cap, "exactly halite_max_pending_keys ids are pending: {seen}");
    assert!(pending.iter().all(|p| p.starts_with("ghost-")), "{pending:?}");
    assert_eq!(env.ids("minions"), ["intruder", MINION]);
    wait_counted(env, health, "request", "pending_keys_cap", 1.0);
    let grown_mb = rss().saturating_sub(rss_before) / 1024;
    eprintln!("10k _auth: {out} master RSS {} MiB -> {} MiB", rss_before / 1024, rss() / 1024);
    assert!(grown_mb < 256, "the master grew by {grown_mb} MiB for 10,000 unauthenticated ids");
    assert_eq!(env.salt_json(&[MINION, "test.ping"], 30), json!({ MINION: true }), "the real minion is still served");
}

/// Checks what a `ghost_flood` of `total` new ids heard with `cap` pending places, and
/// returns the answers and what the masters' `logs` said of them, for later messages.
/// Each ghost is answered pending (`True`), `full`, or, on a heavily loaded host when a
/// pending sign-in's commit outlasts the proposal bound, `"bad load"`: its outcome
/// unknown (the record may still apply, once), said in the log, and the sender signs in
/// again. Any other `"bad load"` is a defect. The cap is decided where the records apply,
/// so at most `cap` are answered pending and the places are all taken by ids answered
/// pending or unknown.
fn check_flood_answers(out: &str, total: usize, cap: usize, logs: &[String]) -> String {
    let answered = |what: &str| out.split(&format!("'{what}': ")).nth(1).and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next()).and_then(|n| n.parse::<usize>().ok()).unwrap_or(0);
    let (yes, full, bad) = (answered("True"), answered("full"), answered("bad load"));
    let lines = || logs.iter().flat_map(|l| l.lines());
    let unknown = lines().filter(|l| l.contains("not applied within") && l.contains("id=ghost-")).count();
    let said: Vec<&str> = lines().filter(|l| l.contains("bad load") || l.contains("bad_load") || l.contains("no place left") || l.contains("minion will retry")).take(20).collect();
    let seen = format!("{out}\n{unknown} commit(s) of unknown outcome; the logs said:\n{}", said.join("\n"));
    assert_eq!(yes + full + bad, total, "every ghost was answered pending, full or bad load: {seen}");
    assert!(bad <= unknown, "a ghost was answered bad load without an unknown commit outcome: {seen}");
    assert!(yes <= cap && cap <= yes + bad, "{cap} places, each answered pending or unknown, the others full: {seen}");
    seen
}

/// A gauge or counter without labels on a master's `/metrics` (0 if absent).
fn gauge(env: &Env, health: u16, name: &str) -> f64 {
    http_get(&env.ip, health, "/metrics").lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

/// Requests of 1 MiB pipelined on one connection, with `halite_max_inflight_bytes` room
/// for one at a time: the master stops reading the request socket while the budget is
/// spent (counted), answers every one, and goes on serving a real minion; nothing is
/// stored for them.
///
/// Each is a clear request whose load is a map of about 100,000 entries: stepping over
/// it (a clear load over 64 KiB is refused unread, `"bad load"`) takes the master longer
/// than reading the next one off the socket, so the next one finds the budget spent.
/// (An AES request that cannot decrypt would not: its ciphertext is read in place, so
/// it is answered before the next megabyte has arrived.)
#[test]
fn large_requests_wait_for_the_in_flight_budget_and_are_all_answered() {
    let health = port_free_on(&loopback(1).iter().map(String::as_str).collect::<Vec<_>>());
    let request = 1 << 20;
    let budget = request + (64 << 10);
    let s = Served::start(Accept::Auto, &format!("halite_health_port: {health}\nhalite_max_request_bytes: {request}\nhalite_max_inflight_bytes: {budget}\n"), "");
    let env = &s.env;
    assert_eq!(gauge(env, health, "halite_inflight_budget_bytes"), budget as f64);
    let before = digest(env);
    // Each is read, charged, answered "bad load", and its charge given back.
    let out = python(&format!(
        r#"
import zmq, msgpack, collections
s = zmq.Context().socket(zmq.DEALER); s.setsockopt(zmq.LINGER, 0); s.setsockopt(zmq.RCVTIMEO, 120000)
s.setsockopt(zmq.SNDHWM, 0); s.setsockopt(zmq.RCVHWM, 0)
s.connect("tcp://{ip}:{ret}")
n = 40
entries = ({request} - 1024) // 10
body = msgpack.packb({{"enc": "clear", "load": {{"k%07d" % i: 0 for i in range(entries)}}, "version": 3}})
assert {request} - 1024 < len(body) <= {request}, len(body)
for i in range(n):
    s.send_multipart([b"", body])
seen = collections.Counter()
for i in range(n):
    seen[repr(msgpack.unpackb(s.recv_multipart()[-1], raw=False))] += 1
print("answers", dict(seen))
"#,
        ip = env.ip,
        ret = env.ret
    ));
    assert!(out.contains("{\"'bad load'\": 40}"), "every request answered (a clear load over 64 KiB: \"bad load\"): {out}");
    assert!(gauge(env, health, "halite_inflight_waits_total") >= 1.0, "the budget made the socket wait: {}", http_get(&env.ip, health, "/metrics"));
    assert_eq!(gauge(env, health, "halite_inflight_bytes"), 0.0, "every charge given back");
    assert_eq!(digest(env), before, "nothing stored for them");
    assert_eq!(env.salt_json(&[MINION, "test.ping"], 30), json!({ MINION: true }));
}

fn recording_proxy(ip: &str, to: SocketAddr) -> (SocketAddr, mpsc::Receiver<Vec<u8>>) {
    let l = TcpListener::bind((ip, 0)).expect("proxy");
    let at = l.local_addr().expect("addr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut client, _)) = l.accept() else { return };
        let Ok(mut server) = TcpStream::connect(to) else { return };
        let (Ok(mut c2), Ok(mut s2)) = (client.try_clone(), server.try_clone()) else { return };
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut s2, &mut c2);
            let _ = c2.shutdown(std::net::Shutdown::Both);
        });
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        let _ = client.set_read_timeout(Some(Duration::from_secs(5)));
        while let Ok(n) = client.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
            let _ = server.write_all(&buf[..n]);
        }
        let _ = tx.send(seen);
    });
    (at, rx)
}

/// A raft message from `from` to `to`.
/// What a holder of `secret` has: the secret, a member key of its own, nothing pinned (so
/// it talks to any member, whatever key that member has).
pub(crate) fn secret_holder(secret: &str) -> Credentials {
    Credentials::new(ClusterKey::from_secret(secret), MemberKey::generate().expect("member key"), Arc::default())
}

pub(crate) fn raft(kind: MessageType, from: u64, to: u64, term: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(kind);
    m.from = from;
    m.to = to;
    m.term = term;
    m
}

#[test]
fn attacks_on_a_three_member_cluster_change_nothing_and_are_counted() {
    let health = port_free_on(&loopback(1).iter().map(String::as_str).collect::<Vec<_>>());
    let cap = 30;
    let c = crate::cluster::founding(3, "attack-test", &format!("halite_health_port: {health}\nhalite_max_pending_keys: {cap}\n"));
    let pool: u16 = std::fs::read_to_string(c.envs[0].root.join("conf/master")).expect("conf").lines().find_map(|l| l.strip_prefix("cluster_pool_port: ")?.trim().parse().ok()).expect("pool port");
    // A real minion signed in to member 0, accepted through member 1.
    let env0 = &c.envs[0];
    let mut minion = start_minion(&env0.root, MINION, &format!("master: {}\nmaster_port: {}\n", env0.ip, env0.ret));
    wait_for("the minion's key pending", 90, || c.envs[1].ids("minions_pre") == [MINION]);
    c.envs[1].ok(SALT_KEY, &["-a", MINION, "-y"]);
    wait_minion_ready(&env0.root, MINION, 1, 90);
    wait_ping(env0, MINION, 90);
    let settled = || {
        let mut d = Vec::new();
        wait_for("every member at the same digest", 60, || {
            d = c.envs.iter().map(digest).collect();
            d.iter().all(|x| x == &d[0])
        });
        d
    };
    let before = settled();
    let term = members(env0)["term"].clone();

    // Garbage and a truncated hello on every member's cluster port; then slowloris past
    // the cap of 64 connections in their handshake on member 2 (while it lasts, member 2
    // takes no new connection, from members either: 5 s, the handshake timeout).
    for env in &c.envs {
        expect_closed(&env.ip, pool, &[0xff; 76], false);
        expect_closed(&env.ip, pool, b"HLP3\0\0\0\0\0\0\0\x07", true);
    }
    let slow = slowloris(&c.envs[2].ip, &[pool], &[], 70);
    for port in [env0.ret, env0.publish] {
        zmtp_attacks(&env0.ip, port);
    }
    health_attacks(&env0.ip, health);
    cve_2020_11651(&env0.ip, env0.ret);
    assert_eq!(slow.join().expect("slowloris"), 70, "every slow connection was closed");
    wait_counted(&c.envs[2], health, "cluster", "too_many_unauthenticated", 6.0);
    wait_counted(&c.envs[2], health, "cluster", "handshake_timeout", 64.0);

    // A holder of the secret speaks as member 1 to member 0 (its own key, not member 1's):
    // a vote request for a far higher term, a heartbeat, a join.
    let id1 = id_of(&c, 1);
    let addr = |i: usize| -> SocketAddr { format!("{}:{pool}", c.envs[i].ip).parse().expect("addr") };
    // Member 1's key is in every member's applied key book, so every other member refuses.
    for target in [0, 2] {
        let id_t = id_of(&c, target);
        let impostor = TcpTransport::start(id1, format!("{}:0", env0.ip).parse().expect("addr"), [(id_t, addr(target))].into(), secret_holder("s3cret"), Arc::new(|_| {})).expect("impostor");
        wait_for("the member refuses the impostor", 60, || {
            impostor.send(vec![raft(MessageType::MsgRequestVote, id1, id_t, 1_000_000), raft(MessageType::MsgHeartbeat, id1, id_t, 1_000_000)]);
            impostor.send_control(id_t, addr(target), &serde_json::to_vec(&json!({"t": "join", "id": id1, "name": c.envs[1].ip, "addr": addr(1).to_string(), "incarnation": 0})).expect("json"));
            // Paces the impostor's resends inside the bounded wait; the counter is the signal.
            std::thread::sleep(Duration::from_millis(200));
            refused(&c.envs[target], health, "cluster", "peer_key_mismatch") >= 2.0
        });
        impostor.shutdown();
    }

    // A real member's bytes, captured: ask member 1 for a welcome at an address that is a
    // recording proxy in front of a transport of ours (id 4242). Member 1 connects there,
    // does its handshake, sends its welcome; the proxy keeps what member 1 sent.
    let (tx, welcomed) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let ours = TcpTransport::start(4242, format!("{}:0", env0.ip).parse().expect("addr"), Default::default(), secret_holder("s3cret"), Arc::new(|_| {})).expect("listener");
    ours.on_control_keyed(Arc::new(move |from, _: &[u8; 32], body| {
        let _ = tx.lock().unwrap_or_else(|p| p.into_inner()).send((from, body));
    }));
    let (proxy, captured) = recording_proxy(&env0.ip, ours.local_addr());
    ours.send_control(id1, addr(1), &serde_json::to_vec(&json!({"t": "hello", "id": 4242, "addr": proxy.to_string()})).expect("json"));
    let (from, body) = welcomed.recv_timeout(Duration::from_secs(30)).expect("member 1's welcome through the proxy");
    assert_eq!(from, id1);
    assert!(String::from_utf8_lossy(&body).contains("welcome"));
    let bytes = captured.recv_timeout(Duration::from_secs(30)).expect("the capture");
    ours.shutdown();
    // Replayed later, on new connections, to every member: member 1's hello, proof and
    // signature were for another connection's nonces.
    for i in 0..3 {
        let mut s = TcpStream::connect(addr(i)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        let _ = s.write_all(&bytes);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    for env in &c.envs {
        wait_counted(env, health, "cluster", "bad_hello", 1.0);
        wait_counted(env, health, "cluster", "bad_proof", 1.0);
    }
    wait_counted(env0, health, "request", "clear_command", 5.0);
    wait_counted(env0, health, "request", "message_too_large", 3.0);

    // Nothing stored changed on any member, the term is the one before, and the minion
    // is served through every member.
    assert_eq!(settled(), before, "the attacks changed what the members store");
    assert_eq!(members(env0)["term"], term, "no impostor moved the term");
    for env in &c.envs {
        assert_eq!(env.salt_json(&[MINION, "test.ping"], 30), json!({ MINION: true }), "served through {}", env.ip);
    }

    // 600 new ids sign in at once, 200 through each member: the cap on pending keys is
    // decided where the records apply, so exactly `cap` are pending on every member,
    // whichever member each one reached, and the rest are answered "full".
    let eps: Vec<(String, u16)> = c.envs.iter().map(|e| (e.ip.clone(), e.ret)).collect();
    let out = ghost_flood(&env0.root, &eps, 200);
    let seen = check_flood_answers(&out, 600, cap, &c.envs.iter().map(|e| e.master_log()).collect::<Vec<_>>());
    wait_for("every member to list the same pending keys", 60, || {
        let lists: Vec<Vec<String>> = c.envs.iter().map(|e| e.ids("minions_pre")).collect();
        lists.iter().all(|l| l == &lists[0] && l.len() >= cap)
    });
    for env in &c.envs {
        let pending = env.ids("minions_pre");
        assert_eq!(pending.len(), cap, "exactly halite_max_pending_keys ids are pending on {}: {seen}", env.ip);
        assert!(pending.iter().all(|p| p.starts_with("ghost-")), "{pending:?}");
    }
    minion.stop();
}

/// A flood of connections cannot take the descriptors the master needs for its own
/// files: under a 400-file limit, 450 idle connections to the request port are met by
/// closing the ones past the limit (counted), and meanwhile the admin socket answers, a
/// job is written and the real minion answers it (were the connections to take every
/// descriptor, accept would fail in a spin and a RocksDB flush failing with `EMFILE`
/// would stop the raft node).
#[test]
fn a_connection_flood_leaves_the_master_its_own_descriptors() {
    let ip = one_ip();
    let health = port_free_on(&[&ip]);
    let env = Env::master(&ip, "localfs_key", &format!("auto_accept: True\nhalite_health_port: {health}\n"));
    let mut cmd = Command::new("prlimit");
    cmd.args(["--nofile=400:400", "--"]).arg(sibling_bin("salt-master")).args(["-c", &env.conf(), "-l", "info"]);
    let _master = Proc::spawn_logged("salt-master", &mut cmd, &env.root.join("master.out"));
    wait_master(&env);
    let _minion = start_minion(&env.root, MINION, &format!("master: {}\nmaster_port: {}\n", env.ip, env.ret));
    wait_minion_ready(&env.root, MINION, 1, 90);
    wait_ping(&env, MINION, 90);

    // Idle connections (no greeting): each holds a descriptor until the handshake
    // timeout (20 s) unless the master closes it first.
    let flood: Vec<TcpStream> = (0..450).filter_map(|_| TcpStream::connect((ip.as_str(), env.ret)).ok()).collect();
    assert!(flood.len() > 300, "the flood connected ({} connections)", flood.len());
    wait_counted(&env, health, "request", "too_many_connections", 1.0);
    assert_eq!(env.salt_json(&["*", "test.ping"], 15), json!({MINION: true}), "served while the flood holds its connections");
    drop(flood);
    assert_eq!(env.salt_json(&["*", "test.echo", "after"], 15), json!({MINION: "after"}));
    assert!(env.master_log().contains("open-file limit"), "the limit is logged at start");
}
