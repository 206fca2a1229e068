//! What an attacker sends to a running master's minion-facing ports and admin socket,
//! byte by byte: ZMTP frames that declare more than any bound (the 9-byte header that
//! once made a master reserve a terabyte and abort), truncated frames, messages over the
//! request bound, a silent or trickling handshake, an admin line that never ends, another
//! user on the admin socket, a new id beyond the pending-key cap, a subscriber that never
//! reads (it holds at most `pub_hwm` publishes), a client that pipelines requests and
//! never reads the replies (it holds at most a few), a clear load that would decode into
//! a tree of gigabytes (refused unread), an event watcher that never reads (it holds
//! only its own buffer, not the bus). After each, the master
//! is still running, a real salt-minion is still served, nothing stored changed, and the
//! refusal is in the master's log with its reason. And a real salt-minion's scheduled job: it
//! runs as often as scheduled, never a second time because the master published it, and
//! its return is stored once.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::*;

/// A ZMTP 3.0 greeting with the NULL mechanism, as a client sends it.
pub(crate) fn greeting() -> Vec<u8> {
    let mut g = vec![0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0];
    g.extend_from_slice(b"NULL");
    g.resize(64, 0);
    g
}

/// A long frame's header: `flags` (with the long bit) and a declared length.
pub(crate) fn long_header(flags: u8, len: u64) -> Vec<u8> {
    let mut h = vec![flags | 0x02];
    h.extend_from_slice(&len.to_be_bytes());
    h
}

/// Connects to `ip:port`, sends the greeting then `bytes`, and reads until the master
/// closes the connection. Panics if it keeps it open (the bound on the wait is only
/// there so that a broken master fails the test instead of hanging it).
fn send_and_expect_close(ip: &str, port: u16, bytes: &[u8], close_after: bool) {
    let mut s = TcpStream::connect((ip, port)).unwrap_or_else(|e| panic!("connect {ip}:{port}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    s.write_all(&greeting()).expect("greeting");
    s.write_all(bytes).expect("frame");
    if close_after {
        // A truncated frame: the peer goes away mid-frame.
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    read_until_closed(s, ip, port, bytes);
}

/// Reads from `s` until the master closes it (a reset counts); fails the test, naming
/// the first bytes sent, if it is still open when the read times out.
pub(crate) fn read_until_closed(mut s: TcpStream, ip: &str, port: u16, bytes: &[u8]) {
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{ip}:{port} kept a connection open after {:02x?}: {e}", &bytes[..bytes.len().min(16)]),
    }
}

/// The master is running, `m1` answers, and the keys are what they were.
fn still_served(s: &Served) {
    assert!(ping_via(&s.env, MINION, 30), "the minion is still served");
    assert_eq!(s.env.listing(), json!({"minions": ["m1"], "minions_pre": [], "minions_rejected": [], "minions_denied": []}), "nothing stored changed");
}

fn wait_refusal(env: &Env, reason: &str, n: usize) {
    wait_for(&format!("{n} refusal(s) for {reason} in the master's log"), 60, || env.master_log().matches(reason).count() >= n);
}

#[test]
fn a_huge_frame_header_after_the_greeting_is_refused_on_both_ports() {
    let s = Served::start(Accept::Auto, "", "");
    for port in [s.env.ret, s.env.publish] {
        // A message frame and a command frame, each declaring 1 TiB; then u64::MAX.
        for header in [long_header(0, 1 << 40), long_header(0x04, 1 << 40), long_header(0x01, u64::MAX)] {
            send_and_expect_close(&s.env.ip, port, &header, false);
        }
    }
    // Each one refused from its header and logged (each connection is a source of its
    // own: its address and port).
    wait_refusal(&s.env, "message_too_large", 6);
    let log = s.env.master_log();
    for port in ["request", "publish"] {
        assert_eq!(log.lines().filter(|l| l.contains("message_too_large") && l.contains(port)).count(), 3, "{port}:\n{log}");
    }
    still_served(&s);
}

#[test]
fn truncated_frames_and_garbage_after_the_greeting_leave_the_master_serving() {
    let s = Served::start(Accept::Auto, "", "");
    for port in [s.env.ret, s.env.publish] {
        // A frame that declares 1,000 bytes and brings 10, then the peer goes away.
        let mut t = long_header(0x04, 1000);
        t.extend_from_slice(&[0x41; 10]);
        send_and_expect_close(&s.env.ip, port, &t, true);
        // Half a header.
        send_and_expect_close(&s.env.ip, port, &[0x02, 0, 0, 0], true);
        // A command that is not one.
        send_and_expect_close(&s.env.ip, port, &[0x04, 3, 0xff, 0xff, 0xff], false);
    }
    still_served(&s);
}

#[test]
fn a_silent_or_trickling_peer_is_closed_after_the_handshake_timeout() {
    let s = Served::start(Accept::Auto, "", "");
    let mut held = Vec::new();
    for port in [s.env.ret, s.env.publish] {
        // One connects and says nothing; one sends half a greeting and stops.
        let silent = TcpStream::connect((s.env.ip.as_str(), port)).expect("connect");
        let mut half = TcpStream::connect((s.env.ip.as_str(), port)).expect("connect");
        half.write_all(&greeting()[..30]).expect("half a greeting");
        held.push(silent);
        held.push(half);
    }
    for mut c in held {
        c.set_read_timeout(Some(Duration::from_secs(120))).expect("timeout");
        let mut got = Vec::new();
        match c.read_to_end(&mut got) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("a connection that never completed its handshake was kept open: {e}"),
        }
    }
    wait_refusal(&s.env, "handshake_timeout", 4);
    still_served(&s);
}

#[test]
fn a_message_over_the_request_bound_is_refused_from_its_header() {
    // halite_max_request_bytes 64 KiB: the transport takes at most 64 KiB + 64 KiB.
    let s = Served::start(Accept::Auto, "halite_max_request_bytes: 65536\n", "");
    let script = format!(
        r#"
import zmq
ctx = zmq.Context()
s = ctx.socket(zmq.REQ); s.setsockopt(zmq.LINGER, 0); s.setsockopt(zmq.RCVTIMEO, 2000)
s.connect("tcp://{ip}:{ret}")
s.send(b"\x00" * (1 << 20))
try:
    print("answered", s.recv())
except zmq.Again:
    print("not answered")
"#,
        ip = s.env.ip,
        ret = s.env.ret
    );
    let o = run(Command::new(reference_venv().join("bin/python")).arg("-c").arg(script), TOOL_TIMEOUT);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("not answered"), "a 1 MiB message is never read as a request: {out}{}", String::from_utf8_lossy(&o.stderr));
    wait_refusal(&s.env, "message_too_large", 1);
    still_served(&s);
}

#[test]
fn a_subscriber_that_sends_more_than_a_subscription_is_disconnected() {
    let s = Served::start(Accept::Auto, "", "");
    // A subscription topic of 64 KiB, far over the publish port's 4 KiB.
    let mut frame = long_header(0, 64 << 10);
    frame.extend(std::iter::repeat_n(0x01, 64 << 10));
    send_and_expect_close(&s.env.ip, s.env.publish, &frame, false);
    wait_refusal(&s.env, "message_too_large", 1);
    still_served(&s);
}

#[test]
fn an_admin_line_past_the_bound_is_refused_before_it_is_buffered() {
    let s = Served::start(Accept::Auto, "", "");
    let path = s.env.root.join("sock/halite-admin.sock");
    let mut c = std::os::unix::net::UnixStream::connect(&path).expect("admin socket");
    c.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    // 64 MiB and one more byte, no newline: the master answers and closes once the bound
    // is passed (it never holds the whole line).
    let chunk = vec![b' '; 1 << 20];
    let mut sent = 0usize;
    while sent <= 64 << 20 {
        match c.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break, // closed by the master: the bound was passed
        }
    }
    let mut answer = String::new();
    let _ = c.read_to_string(&mut answer);
    assert!(answer.contains("request line longer than"), "the master answered: {answer:?}");
    wait_refusal(&s.env, "line_too_long", 1);
    still_served(&s);
}

/// Asks for `key.list` on the admin socket at `path` as `uid` (system Python: the
/// reference venv lives under root's home); prints what came back.
fn admin_ask_as(path: &std::path::Path, uid: u32) -> String {
    use std::os::unix::process::CommandExt;
    let script = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({:?})\ntry:\n    s.sendall(b'{{\"cmd\": \"key.list\"}}\\n')\nexcept BrokenPipeError:\n    pass\ndata = b''\nwhile not data.endswith(b'\\n'):\n    try:\n        c = s.recv(65536)\n    except ConnectionResetError:\n        c = b''\n    if not c: break\n    data += c\nprint('got', len(data), data[:40])",
        path.display().to_string()
    );
    let o = run(Command::new("/usr/bin/python3").arg("-c").arg(script).uid(uid).gid(uid), TOOL_TIMEOUT);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn only_root_and_the_masters_user_are_served_on_the_admin_socket() {
    use std::os::unix::fs::PermissionsExt;
    let s = Served::start(Accept::Auto, "", "");
    let path = s.env.root.join("sock/halite-admin.sock");
    // Open the way to the socket for everyone: what is left is the credentials check.
    for (p, mode) in [(s.env.root.clone(), 0o711), (s.env.root.join("sock"), 0o711), (path.clone(), 0o666)] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let as_root = admin_ask_as(&path, 0);
    assert!(as_root.contains("listing"), "root is answered: {as_root}");
    let as_nobody = admin_ask_as(&path, 65534);
    assert!(as_nobody.starts_with("got 0 "), "another user is not answered: {as_nobody}");
    wait_refusal(&s.env, "peer_credentials", 1);
    still_served(&s);
}

/// The scheduled job: appends a line to `runs` each time it runs, every 2 seconds.
fn schedule(runs: &std::path::Path) -> String {
    format!(
        "schedule:\n  hostile_job:\n    function: cmd.run\n    args:\n      - \"sh -c 'echo run >> {}'\"\n    seconds: 2\n    return_job: True\n",
        runs.display()
    )
}

#[test]
fn a_scheduled_job_runs_as_scheduled_and_its_return_is_stored_once() {
    let env_root = tempfile::tempdir().expect("tempdir");
    let runs = env_root.path().join("runs");
    let mut s = Served::start(Accept::Auto, "", &schedule(&runs));
    // Let the schedule run a few times; its returns (jid "req") are stored as jobs.
    wait_for("three scheduled returns stored", 120, || {
        s.env.runner(&["jobs.list_jobs"]).as_object().is_some_and(|j| j.values().filter(|v| v["Function"] == "cmd.run").count() >= 3)
    });
    s.minion.kill9();
    s.master.stop();
    let ran = std::fs::read_to_string(&runs).unwrap_or_default().lines().count();
    let records = |kind: &str| -> Vec<serde_json::Value> { s.env.ok(CTL, &["dump", "--json", "--kind", kind]).lines().map(|l| json(l)["record"].clone()).collect() };
    let (jobs, returns) = (records("job_published"), records("job_return"));
    let scheduled: Vec<&serde_json::Value> = jobs.iter().filter(|j| j["load"]["fun"] == "cmd.run").collect();
    assert!(scheduled.len() >= 3, "{jobs:?}");
    for j in &scheduled {
        assert_eq!(j["started_by"], "m1", "a job the minion started names it: {j}");
        let n = returns.iter().filter(|r| r["jid"] == j["jid"]).count();
        assert_eq!(n, 1, "one return stored for {}", j["jid"]);
    }
    // The minion never got the job back as a publish: it only ran on its schedule.
    let log = s.minion_log();
    assert!(!log.contains("Executing command cmd.run"), "the master published a minion's own job:\n{log}");
    // Each run was returned and stored once; at most the run under way when the minion
    // was killed was not.
    assert!(ran >= scheduled.len() && ran <= scheduled.len() + 1, "{ran} runs, {} stored jobs", scheduled.len());
}

#[test]
fn a_new_id_beyond_the_pending_cap_is_answered_full_and_stores_nothing() {
    let env = Env::master(&one_ip(), "localfs_key", "halite_max_pending_keys: 2\n");
    seed_pending(&env, &["p1", "p2"]);
    let m = Running::start(env);
    let ghost = m.env.root.join("ghost.pub");
    std::fs::write(&ghost, halite_master::wire::crypto::PrivateKey::generate(2048).expect("key").public_pem().expect("pem")).expect("ghost.pub");
    let script = format!(
        r#"
import zmq, msgpack
s = zmq.Context().socket(zmq.REQ); s.setsockopt(zmq.LINGER, 0); s.setsockopt(zmq.RCVTIMEO, 30000)
s.connect("tcp://{ip}:{ret}")
s.send(msgpack.packb({{"enc": "clear", "load": {{"cmd": "_auth", "id": "ghost", "pub": open("{pub_path}").read(), "nonce": "1" * 32,
    "enc_algo": "OAEP-SHA1", "sig_algo": "PKCS1v15-SHA1"}}, "version": 3}}))
r = msgpack.unpackb(s.recv(), raw=False)
print("ret", msgpack.unpackb(r["load"], raw=False)["ret"])
"#,
        ip = m.env.ip,
        ret = m.env.ret,
        pub_path = ghost.display()
    );
    let o = run(Command::new(reference_venv().join("bin/python")).arg("-c").arg(script), TOOL_TIMEOUT);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("ret full"), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(m.env.listing()["minions_pre"], json!(["p1", "p2"]), "nothing stored for the new id");
    wait_refusal(&m.env, "pending_keys_cap", 1);
}

/// A ZMTP 3.0 READY command of a socket of `kind` (`SUB`, ...).
fn ready(kind: &str) -> Vec<u8> {
    let mut body = vec![5];
    body.extend_from_slice(b"READY");
    body.push(11);
    body.extend_from_slice(b"Socket-Type");
    body.extend_from_slice(&(kind.len() as u32).to_be_bytes());
    body.extend_from_slice(kind.as_bytes());
    let mut frame = vec![0x04, body.len() as u8];
    frame.extend(body);
    frame
}

/// A raw ZMTP peer of socket type `kind` on `ip:port`, past its greeting and `READY`,
/// with a 256 KiB `SO_RCVBUF` so that a peer that does not read takes little off the
/// wire (not much smaller: the window it opens when it reads at last must hold two of
/// loopback's 64 KiB segments, or the master sends only on its zero-window probes).
fn raw_peer(ip: &str, port: u16, kind: &str) -> TcpStream {
    let mut s = TcpStream::connect((ip, port)).unwrap_or_else(|e| panic!("connect {ip}:{port}: {e}"));
    let small: libc::c_int = 256 * 1024;
    // SAFETY: setsockopt on the descriptor this stream owns, with a c_int it reads.
    let set = unsafe { libc::setsockopt(std::os::fd::AsRawFd::as_raw_fd(&s), libc::SOL_SOCKET, libc::SO_RCVBUF, (&small as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t) };
    assert_eq!(set, 0, "SO_RCVBUF");
    s.write_all(&greeting()).expect("greeting");
    s.write_all(&ready(kind)).expect("READY");
    s
}

/// Counts the messages in a ZMTP byte stream from the master's publish port, after its
/// greeting: commands are skipped, a message ends at a frame without the MORE bit.
fn count_messages(stream: &[u8]) -> usize {
    let mut at = 64;
    let mut messages = 0;
    while at < stream.len() {
        let flags = stream[at];
        let (len, header) = if flags & 0x02 != 0 {
            match stream.get(at + 1..at + 9) {
                Some(b) => (u64::from_be_bytes(b.try_into().expect("8 bytes")) as usize, 9),
                None => break,
            }
        } else {
            match stream.get(at + 1) {
                Some(&b) => (b as usize, 2),
                None => break,
            }
        };
        // A declared length is the master's bytes: checked against what was read,
        // without overflowing.
        let end = match (at + header).checked_add(len) {
            Some(end) if end <= stream.len() => end,
            _ => break,
        };
        if flags & 0x04 == 0 && flags & 0x01 == 0 {
            messages += 1;
        }
        at = end;
    }
    messages
}

/// A subscriber that signs up on the publish port and then never reads holds at most
/// `pub_hwm` publishes in the master, however many are published: the rest are dropped
/// for it alone (ZeroMQ's high-water mark, as Salt's master has it). Published here:
/// 100 jobs of 360 KB, about 36 MB. Read at last, the connection ([`raw_peer`]) brings
/// what the kernel's buffers took and the queued `pub_hwm`: 26 to 27 of the 100 in the runs that added this test,
/// about 10 MB; all 100 when the queue was not bounded. The real minion, a subscriber
/// under the same bound and busy with the jobs it got, is served again afterwards.
#[test]
fn a_subscriber_that_never_reads_gets_only_what_pub_hwm_and_the_kernel_hold() {
    const JOBS: usize = 100;
    let s = Served::start(Accept::Auto, "pub_hwm: 2\n", "");
    let env = &s.env;
    let mut sub = raw_peer(&env.ip, env.publish, "SUB");
    sub.write_all(&[0x00, 0x01, 0x01]).expect("subscribe to everything");
    // The subscription is in place once a publish reaches it: small jobs are published
    // until one has (each read for a second), and counted apart.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    sub.set_read_timeout(Some(Duration::from_secs(1))).expect("timeout");
    wait_for("a first publish to reach the subscriber", 60, || {
        let o = env.run(SALT, &["*", "test.ping", "--async"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        match sub.read(&mut buf) {
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading the subscriber's stream: {e}"),
        }
        count_messages(&got) >= 1
    });
    let probes = count_messages(&got);

    // Three arguments of 120 KiB: one argument may hold at most 128 KiB.
    let big = "x".repeat(120 * 1024);
    for i in 0..JOBS {
        // `test.arg_type` answers with the arguments' types: the publish is big, the
        // return small.
        let o = env.run(SALT, &["*", "test.arg_type", &big, &big, &big, "--async"]);
        assert!(o.status.success(), "job {i}: {}", String::from_utf8_lossy(&o.stderr));
    }
    // The publish socket takes publishes in order: once the real minion has answered a
    // later one, it has queued (or dropped) the 100 for the subscriber. Its own
    // publishes beyond the bound were dropped too while it worked: ask until it answers.
    wait_ping(env, MINION, 180);

    sub.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    loop {
        match sub.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
            Err(e) => panic!("reading the subscriber's stream: {e}"),
        }
    }
    let received = count_messages(&got) - probes;
    eprintln!("{received} of {JOBS} publishes reached the subscriber that did not read ({} bytes)", got.len());
    assert!(received >= 1, "the subscriber got its first publishes ({} bytes)", got.len());
    assert!(received <= JOBS / 2, "{received} of {JOBS} publishes reached a subscriber that never read: its queue is not bounded by pub_hwm");
    assert_eq!(env.listing(), json!({"minions": ["m1"], "minions_pre": [], "minions_rejected": [], "minions_denied": []}), "nothing stored changed");
}

/// A client on the request port that pipelines requests (a DEALER, not a REQ) and never
/// reads the replies holds at most 1,000 replies and 4 MiB of them in the master (ZeroMQ's
/// default high-water mark, and a bound by bytes): the rest are dropped and counted (`halite_refused_total{port="request",reason="reply_queue_full"}`), as
/// ZeroMQ's high-water mark drops them for Salt. Were every reply queued, eight such
/// clients would grow a master by 43 MiB every half second without end.
///
/// 8,000 clear `ping`s of 8 KiB (a ping's reply echoes its load, so each reply is as
/// large) are sent on a connection ([`raw_peer`]) that does not read. Read at last, it
/// brings the
/// replies the queue and the kernel held; with the dropped ones they make exactly the
/// requests sent (every request answered or counted), and most were dropped: about
/// 1,600 arrived in the runs that added this test (512 queued, the rest in the
/// kernel's buffers). Without the bound none is dropped and all 8,000 arrive.
#[test]
fn a_client_that_never_reads_its_replies_holds_only_a_few() {
    const REQUESTS: usize = 8_000;
    let ip = one_ip();
    let health = port_free_on(&[&ip]);
    let s = Served::start_on(&ip, Accept::Auto, &format!("halite_health_port: {health}\n"), "");
    let env = &s.env;
    let mut c = raw_peer(&env.ip, env.ret, "DEALER");
    let text = |t: &str| rmpv::Value::from(t);
    let ping = rmpv::Value::Map(vec![
        (text("enc"), text("clear")),
        (text("load"), rmpv::Value::Map(vec![(text("cmd"), text("ping")), (text("pad"), text(&"x".repeat(8192)))])),
        (text("version"), rmpv::Value::from(3)),
    ]);
    let mut body = Vec::new();
    rmpv::encode::write_value(&mut body, &ping).expect("msgpack");
    // An empty delimiter frame (MORE), then the body in a long frame: what a REQ
    // socket sends.
    let mut request = vec![0x01, 0x00];
    request.extend(long_header(0, body.len() as u64));
    request.extend_from_slice(&body);
    let all: Vec<u8> = request.iter().copied().cycle().take(request.len() * REQUESTS).collect();
    c.write_all(&all).expect("the requests");

    let dropped = || crate::attacks::refused(env, health, "request", "reply_queue_full") as usize;
    wait_for("replies dropped for the client that does not read", 120, || dropped() > 0);
    // Read only once the master is done with the requests (the count has stopped
    // moving): reading makes room for more replies.
    let mut last = (dropped(), std::time::Instant::now());
    wait_for("the master to finish with the requests", 120, || {
        let now = dropped();
        if now != last.0 {
            last = (now, std::time::Instant::now());
        }
        last.1.elapsed() >= Duration::from_secs(3)
    });
    c.set_read_timeout(Some(Duration::from_secs(1))).expect("timeout");
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut received = 0;
    while std::time::Instant::now() < deadline {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading the replies: {e}"),
        }
        received = count_messages(&got);
        if received + dropped() >= REQUESTS {
            break;
        }
    }
    let dropped = dropped();
    eprintln!("{received} replies received and {dropped} dropped of {REQUESTS} requests");
    assert_eq!(received + dropped, REQUESTS, "every request answered or its reply counted as dropped");
    assert!(received < REQUESTS / 2, "{received} of {REQUESTS} replies reached a client that never read: its queue is not bounded");
    drop(c);
    still_served(&s);
}

/// A memory figure of the master's (`VmHWM`: its peak resident memory, `VmRSS`: now),
/// in bytes.
fn memory(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the master's status");
    let kb = status.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    kb.unwrap_or_else(|| panic!("{field} in the master's status")) * 1024
}

/// A clear request is decoded before anyone is known, and a decoded value takes about 40
/// bytes whatever it takes on the wire (a nil: one byte). A `ping` whose load holds 16
/// million nils (16 MB), decoded, would make the master hold about 1.1 GB while it
/// answered (4.2 GB at 60 MB, docs/benchmarks.md "Hostile-input bounds"). A clear load
/// over 64 KiB is answered `"bad load"` without being read into a tree.
#[test]
fn a_clear_load_that_would_decode_into_a_gigabyte_is_refused_unread() {
    const NILS: usize = 16_000_000;
    let s = Served::start(Accept::Auto, "", "");
    let env = &s.env;
    let text = |t: &str| rmpv::Value::from(t);
    let ping = rmpv::Value::Map(vec![
        (text("enc"), text("clear")),
        (text("load"), rmpv::Value::Map(vec![(text("cmd"), text("ping")), (text("pad"), rmpv::Value::Nil)])),
        (text("version"), rmpv::Value::from(3)),
    ]);
    let mut small = Vec::new();
    rmpv::encode::write_value(&mut small, &ping).expect("msgpack");
    // The pad's nil becomes an array32 of NILS nils.
    let at = small.windows(4).position(|w| w == [0xa3, b'p', b'a', b'd']).expect("the pad") + 4;
    let mut body = small[..at].to_vec();
    body.push(0xdd);
    body.extend_from_slice(&(NILS as u32).to_be_bytes());
    body.resize(body.len() + NILS, 0xc0);
    body.extend_from_slice(&small[at + 1..]);
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let ep = format!("tcp://{}:{}", env.ip, env.ret);
    let reply = rt.block_on(halite_tools::swarm::minion::request_once(&ep, body, Duration::from_secs(120), "request")).expect("a reply");
    assert_eq!(reply, halite_master::wire::envelope::bad_load(), "refused");
    wait_refusal(env, "exceeds the 65536-byte limit", 1);
    let peak = memory(s.master.pid(), "VmHWM");
    assert!(peak < 400 << 20, "the master's peak RSS was {} MiB: the load was decoded", peak >> 20);
    still_served(&s);
}

/// A watcher of the bus (`salt-run state.event`, salt-api's event stream) that stops
/// reading: the bus keeps an event until every watcher has read it, so before, such a
/// watcher held the bus's last 4,096 events, whatever their size, until its write timed
/// out a minute later. Here 6,000 events of 24 KiB (six `_minion_event` requests of
/// 1,000) pass while it does not read: the master grew by 24 MiB (its 16 MiB buffer),
/// and by 101 MiB before (4,096 × 24 KiB and their JSON).
#[test]
fn an_event_watcher_that_never_reads_holds_only_its_buffer() {
    let s = Served::start(Accept::Auto, "", "");
    let env = &s.env;
    let hand = WireMinion::sign_in(env, "hand-1");
    let mut watcher = std::os::unix::net::UnixStream::connect(env.root.join("sock/halite-admin.sock")).expect("the admin socket");
    watcher.write_all(b"{\"cmd\":\"events.watch\"}\n").expect("events.watch");
    // The watcher is on the bus once an event reaches it: small events are sent until
    // one has (each read for a second); from then on it reads nothing.
    watcher.set_read_timeout(Some(Duration::from_secs(1))).expect("timeout");
    let mut seen = Vec::new();
    wait_for("a first event to reach the watcher", 60, || {
        let probe = rmpv::Value::Map(vec![(rmpv::Value::from("tag"), rmpv::Value::from("halite/test/probe")), (rmpv::Value::from("data"), rmpv::Value::from("probe"))]);
        let reply = hand.ask(load(&[("cmd", rmpv::Value::from("_minion_event")), ("events", rmpv::Value::Array(vec![probe]))]));
        assert!(matches!(reply, AesReply::Value(_)), "the probe answered");
        let mut buf = [0u8; 4096];
        match watcher.read(&mut buf) {
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading the watcher: {e}"),
        }
        String::from_utf8_lossy(&seen).contains("halite/test/probe")
    });
    let before = memory(s.master.pid(), "VmRSS");
    let data = "x".repeat(24 << 10);
    for r in 0..6 {
        let events: Vec<rmpv::Value> = (0..1000).map(|i| rmpv::Value::Map(vec![(rmpv::Value::from("tag"), rmpv::Value::from(format!("halite/test/{r}/{i}"))), (rmpv::Value::from("data"), rmpv::Value::from(data.as_str()))])).collect();
        let reply = hand.ask(load(&[("cmd", rmpv::Value::from("_minion_event")), ("events", rmpv::Value::Array(events))]));
        assert!(matches!(reply, AesReply::Value(_)), "request {r} answered");
    }
    wait_refusal(env, "watcher_behind", 1);
    // The bus hands its events to the watcher's task after the requests are answered:
    // the growth, held while the watcher is connected, must come under the bound.
    let mut grew = 0;
    wait_for("the master's growth to stay under 64 MiB while a watcher did not read", 30, || {
        grew = memory(s.master.pid(), "VmRSS").saturating_sub(before);
        grew < 64 << 20
    });
    eprintln!("the master grew by {} MiB while the watcher did not read", grew >> 20);
    drop(watcher);
    assert!(ping_via(env, MINION, 30), "the minion is still served");
}
