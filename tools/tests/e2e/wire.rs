//! Every byte from outside is hostile: malformed and forbidden requests on the request
//! port (sent with pyzmq and msgpack, as any Python peer would), a flood of them while a
//! real minion is served, replayed and stale requests, and the limits a master puts on
//! minions (`max_minions`, `keep_jobs_seconds`), driven by `halite-swarm`.

use std::process::Command;

use serde_json::json;

use crate::support::*;

/// Runs `body` in the reference venv's Python after a prelude that defines
/// `ask(frame)`: one request to `env`'s request port, its reply unpacked.
fn python_asking(env: &Env, body: &str) -> std::process::Output {
    let script = format!(
        r#"
import zmq, msgpack
ctx = zmq.Context()
def ask(frame):
    s = ctx.socket(zmq.REQ); s.setsockopt(zmq.LINGER, 0); s.setsockopt(zmq.RCVTIMEO, 5000)
    s.connect("tcp://{ip}:{ret}"); s.send(frame)
    r = msgpack.unpackb(s.recv(), raw=False, strict_map_key=False); s.close(); return r
{body}
print("ok")
"#,
        ip = env.ip,
        ret = env.ret
    );
    run(Command::new(reference_venv().join("bin/python")).arg("-c").arg(script), TOOL_TIMEOUT)
}

fn assert_script_ok(o: &std::process::Output) {
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("ok"), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
}

/// Frames that are not requests: not msgpack, an unknown `enc`, the wrong version, AES
/// loads that do not decrypt (for a traversal id, an accepted id, an unknown id), not a
/// map, and a ping over the 64 KiB request limit. Each must get "bad load".
const MALFORMED: &str = r#"
bad = [
    b"\xc1\xc1 not msgpack",
    msgpack.packb({"enc": "rot13", "load": {}, "version": 3}),
    msgpack.packb({"enc": "clear", "load": {"cmd": "_auth", "id": "m1"}, "version": 2}),
    msgpack.packb({"enc": "aes", "load": b"x" * 64, "version": 3, "id": "../../etc"}),
    msgpack.packb({"enc": "aes", "load": b"x" * 64, "version": 3, "id": "m1"}),
    msgpack.packb({"enc": "aes", "load": b"x" * 64, "version": 3, "id": "nobody"}),
    msgpack.packb([1, 2, 3]),
    msgpack.packb({"enc": "clear", "load": {"cmd": "ping", "pad": "x" * 100000}, "version": 3}),
]
for b in bad:
    assert ask(b) == "bad load", b
"#;

/// The clear commands CVE-2020-11651 went through: each must get an empty answer.
const FORBIDDEN: &str = r#"
for cmd in ["_send_pub", "_prep_auth_info", "wheel", "runner", "publish"]:
    r = ask(msgpack.packb({"enc": "clear", "load": {"cmd": cmd, "fun": "key.delete", "match": "*"}, "version": 3}))
    assert r == {}, (cmd, r)
"#;

/// An `_auth` whose id is a path: a signed refusal.
const PATH_ID: &str = r#"
r = ask(msgpack.packb({"enc": "clear", "load": {"cmd": "_auth", "id": "../evil", "pub": "x", "nonce": "0" * 32}, "version": 3}))
assert isinstance(r, dict) and "sig" in r, r
"#;

/// A master with a 64 KiB request limit and one accepted key, k1.
fn limited_master() -> Running {
    let env = Env::master(&one_ip(), "localfs_key", "halite_max_request_bytes: 65536\n");
    seed_pending(&env, &["k1"]);
    let m = Running::start(env);
    m.env.ok(SALT_KEY, &["-a", "k1", "-y"]);
    m
}

#[test]
fn malformed_requests_are_answered_bad_load_and_write_nothing() {
    let m = limited_master();
    assert_script_ok(&python_asking(&m.env, MALFORMED));
    assert_eq!(m.env.listing(), json!({"minions": ["k1"], "minions_pre": [], "minions_rejected": [], "minions_denied": []}));
}

#[test]
fn clear_commands_other_than_auth_and_ping_are_refused() {
    let m = limited_master();
    assert_script_ok(&python_asking(&m.env, FORBIDDEN));
    assert_eq!(m.env.listing()["minions"], json!(["k1"]), "a refused key.delete deleted nothing");
}

#[test]
fn an_auth_with_a_path_for_an_id_is_refused_and_writes_nothing() {
    let m = limited_master();
    assert_script_ok(&python_asking(&m.env, PATH_ID));
    assert_eq!(m.env.listing(), json!({"minions": ["k1"], "minions_pre": [], "minions_rejected": [], "minions_denied": []}));
}

#[test]
fn a_clear_ping_is_echoed() {
    let m = limited_master();
    assert_script_ok(&python_asking(&m.env, r#"r = ask(msgpack.packb({"enc": "clear", "load": {"cmd": "ping"}, "version": 3}))
assert r == {"cmd": "ping"}, r"#));
}

#[test]
fn an_auth_from_a_new_key_registers_it_pending() {
    let m = limited_master();
    let ghost = m.env.root.join("ghost.pub");
    std::fs::write(&ghost, halite_master::wire::crypto::PrivateKey::generate(2048).expect("key").public_pem().expect("pem")).expect("ghost.pub");
    let body = format!(
        r#"ghost = open("{}").read()
r = ask(msgpack.packb({{"enc": "clear", "load": {{"cmd": "_auth", "id": "ghost", "pub": ghost, "nonce": "1" * 32,
    "enc_algo": "OAEP-SHA1", "sig_algo": "PKCS1v15-SHA1"}}, "version": 3}}))
assert msgpack.unpackb(r["load"], raw=False)["ret"] is True, r"#,
        ghost.display()
    );
    assert_script_ok(&python_asking(&m.env, &body));
    assert_eq!(m.env.listing()["minions_pre"], json!(["ghost"]));
}

#[test]
fn bad_input_on_ret_port_is_refused_and_the_master_keeps_serving() {
    let s = Served::start(Accept::Auto, "halite_max_request_bytes: 65536\n", "");
    assert_script_ok(&python_asking(&s.env, &format!("{MALFORMED}\n{FORBIDDEN}\n{PATH_ID}")));
    assert!(ping_via(&s.env, MINION, 10), "the minion is still served");
    assert_eq!(s.env.listing()["minions"], json!(["m1"]), "bad input changed no key");
}

#[test]
fn a_flood_of_bad_requests_is_refused_while_a_minion_is_served() {
    let s = Served::start(Accept::Auto, "", "");
    // A thousand bad requests from ten clients at once.
    let flood = format!(
        r#"
import zmq, threading
def worker():
    ctx = zmq.Context.instance()
    for i in range(100):
        s = ctx.socket(zmq.REQ); s.setsockopt(zmq.LINGER, 0); s.setsockopt(zmq.RCVTIMEO, 10000)
        s.connect("tcp://{ip}:{ret}"); s.send(b"\x92" * 3 if i % 2 else b"\xda\xff\xff")
        assert s.recv() == b"\xa8bad load"; s.close()
ts = [threading.Thread(target=worker) for _ in range(10)]
[t.start() for t in ts]
print("started", flush=True)
[t.join() for t in ts]
print("flood done")
"#,
        ip = s.env.ip,
        ret = s.env.ret
    );
    let (mut flooder, mut lines) = Proc::spawn_lines("the flooder", Command::new(reference_venv().join("bin/python")).arg("-c").arg(flood), &s.env.root.join("flood.log"));
    lines.wait("the flood to start", 30, |l| l.iter().any(|l| l == "started"));
    assert!(ping_via(&s.env, MINION, 10), "the minion is served during the flood");
    let end = lines.to_end(120).to_vec();
    let status = flooder.wait_exit("the flooder to exit", 30);
    let errors = std::fs::read_to_string(s.env.root.join("flood.log")).unwrap_or_default();
    assert!(status.success() && end.iter().any(|l| l == "flood done"), "every bad request answered \"bad load\": {end:?}\n{errors}");
    assert!(ping_via(&s.env, MINION, 10), "the minion is still served after the flood");
}

// ---------------------------------------------------------------------------------------
// Replays and stale requests (by hand, as a signed-in minion).

/// A master that remembers request nonces for 10 minutes and refuses older requests, and
/// a minion signed in by hand.
fn replay_master() -> (Running, WireMinion) {
    let m = Running::start(Env::master(&one_ip(), "localfs_key", "auto_accept: True\nrequest_server_ttl: 600\n"));
    let hand = WireMinion::sign_in(&m.env, "hand-1");
    (m, hand)
}

fn ping_return(jid: &str) -> Vec<(rmpv::Value, rmpv::Value)> {
    halite_tools::swarm::minion::return_load(&halite_tools::swarm::minion::Job { jid: jid.into(), fun: "test.ping".into(), arg: vec![], user: None, matched: true })
}

#[test]
fn a_replayed_request_is_answered_but_written_once() {
    let (mut m, hand) = replay_master();
    let (body, nonce) = halite_tools::swarm::minion::aes_request(&hand.me, &hand.creds.session, ping_return("20260101000000000001")).expect("request");
    for i in 0..3 {
        let reply = halite_tools::swarm::minion::aes_reply(&hand.creds.session, &nonce, &hand.send(body.clone())).expect("reply");
        assert!(matches!(reply, AesReply::Value(_)), "send {i} of the same request is answered");
    }
    m.proc.stop();
    let returns = m.env.ok(CTL, &["dump", "--json", "--kind", "job_return"]);
    assert_eq!(returns.lines().filter(|l| l.contains("20260101000000000001")).count(), 1, "the replays wrote nothing:\n{returns}");
}

/// Copies of one request handled while the first is still being committed (a minion's
/// resend while the master is slow, or a captured request sent on other connections at
/// once): one is written, every copy is answered.
#[test]
fn copies_in_flight_at_once_are_written_once() {
    let (mut m, hand) = replay_master();
    let (body, nonce) = halite_tools::swarm::minion::aes_request(&hand.me, &hand.creds.session, ping_return("20260101000000000003")).expect("request");
    for (i, reply) in hand.send_at_once(body, 32).iter().enumerate() {
        let reply = halite_tools::swarm::minion::aes_reply(&hand.creds.session, &nonce, reply).expect("reply");
        assert!(matches!(reply, AesReply::Value(_)), "copy {i} is answered");
    }
    m.proc.stop();
    let returns = m.env.ok(CTL, &["dump", "--json", "--kind", "job_return"]);
    assert_eq!(returns.lines().filter(|l| l.contains("20260101000000000003")).count(), 1, "one copy was written:\n{returns}");
}

#[test]
fn a_stale_request_is_refused_and_writes_nothing() {
    let (mut m, hand) = replay_master();
    let hour_ago = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64 - 3600;
    let (body, nonce) = halite_tools::swarm::minion::aes_request_at(&hand.me, &hand.creds.session, ping_return("20260101000000000002"), hour_ago).expect("request");
    let reply = halite_tools::swarm::minion::aes_reply(&hand.creds.session, &nonce, &hand.send(body)).expect("reply");
    assert!(matches!(reply, AesReply::BadLoad), "a request an hour old is refused");
    m.proc.stop();
    let returns = m.env.ok(CTL, &["dump", "--json", "--kind", "job_return"]);
    assert!(!returns.contains("20260101000000000002"), "the stale request wrote a return:\n{returns}");
}

// ---------------------------------------------------------------------------------------
// max_minions and keep_jobs_seconds.

/// A master that lets four minions in, with six simulated ones signed in (the swarm keeps
/// running and answering).
/// (Bindings of a tuple drop last to first: the master stops after the swarm.)
fn full_master(extra: &str) -> (Running, Proc, Lines) {
    let m = Running::start(Env::master(&one_ip(), "localfs_key", &format!("auto_accept: True\nmax_minions: 4\n{extra}")));
    let (swarm, lines) = start_swarm(&m.env, 6, &["--auth-timeout", "10"]);
    (m, swarm, lines)
}

#[test]
fn max_minions_refuses_sign_ins_beyond_the_limit() {
    let (_m, _swarm, lines) = full_master("");
    let auth = swarm_event(&lines, "authenticated");
    assert_eq!(auth["count"], 4, "{auth}");
    assert_eq!(auth["failed"], json!({"the master is full (max_minions)": 2}), "{auth}");
}

#[test]
fn a_sign_in_refused_by_max_minions_leaves_no_key() {
    let (m, _swarm, _lines) = full_master("");
    let l = m.env.listing();
    let total: usize = ["minions", "minions_pre", "minions_rejected", "minions_denied"].iter().map(|k| l[k].as_array().map_or(0, Vec::len)).sum();
    assert_eq!((l["minions"].as_array().map(Vec::len), total), (Some(4), 4), "{l}");
}

#[test]
fn the_admitted_minions_answer_jobs() {
    let (m, _swarm, _lines) = full_master("");
    let accepted = m.env.ids("minions");
    let v = m.env.salt_json(&["*", "test.echo", "hello"], 20);
    let answers = v.as_object().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(answers.len(), 4, "{v}");
    assert!(answers.iter().all(|(id, r)| accepted.contains(id) && r == "hello"), "{v}");
}

#[test]
fn deleting_a_key_frees_a_place_under_max_minions() {
    let (m, mut swarm, _lines) = full_master("");
    swarm.stop();
    let accepted = m.env.ids("minions");
    m.env.ok(SALT_KEY, &["-d", &accepted[0], "-y"]);
    // The same six try again: four get in, the three still accepted among them.
    let (_again, lines) = start_swarm(&m.env, 6, &["--auth-timeout", "10", "--jobs", "0"]);
    let auth = swarm_event(&lines, "authenticated");
    assert_eq!((auth["count"].as_u64(), auth["failed"].as_object().map(|f| f.len())), (Some(4), Some(1)), "{auth}");
    let now = m.env.ids("minions");
    assert!(accepted[1..].iter().all(|id| now.contains(id)), "{now:?}");
}

#[test]
fn keep_jobs_seconds_expires_the_job_cache() {
    let (mut m, _swarm, _lines) = full_master("keep_jobs_seconds: 6\nloop_interval: 1\n");
    assert!(m.env.salt(&["*", "test.echo", "hello"], 20).status.success());
    assert!(m.env.salt(&["*", "test.ping"], 20).status.success());
    let jobs = m.env.runner(&["jobs.list_jobs"]);
    assert_eq!(jobs.as_object().map(|j| j.len()), Some(2), "{jobs}");
    // The maintenance loop expires them (a jobs_expired record).
    wait_for("the job cache to expire", 60, || m.env.runner(&["jobs.list_jobs"]).as_object().is_some_and(|j| j.is_empty()));
    m.proc.stop();
    let expired = m.env.ok(CTL, &["dump", "--json", "--kind", "jobs_expired"]);
    assert!(!expired.trim().is_empty(), "no jobs_expired record in the log");
}
