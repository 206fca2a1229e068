//! `file_recv` with a real salt-minion 3008.5: `cp.push` and `cp.push_dir` store files
//! where Salt does (`cachedir/minions/<id>/files/<path>`), an oversized push and an
//! escaping path are refused (the minion gets False, the refusal is counted, nothing is
//! written), nothing is kept with `file_recv` off, and on a three-member cluster a file
//! pushed through one member is on every member's disk, and gone from every member's
//! once the minion's key is deleted.

use std::path::{Path, PathBuf};

use rmpv::Value;
use serde_json::json;

use crate::health::{metric, metrics_of};
use crate::support::*;

/// A master with `master_extra` (and a health port, returned) serving m1.
fn served(master_extra: &str) -> (Served, u16) {
    let ip = one_ip();
    let health = port_free_on(&[&ip]);
    (Served::start_on(&ip, Accept::Auto, &format!("halite_health_port: {health}\n{master_extra}"), ""), health)
}

/// Where the master keeps what `id` pushed from `minion_path` (an absolute path).
fn stored(env: &Env, id: &str, minion_path: &Path) -> PathBuf {
    env.root.join("cache/minions").join(id).join("files").join(minion_path.strip_prefix("/").expect("absolute"))
}

/// Bytes that are not all alike, `n` of them.
fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

fn push(s: &Served, args: &[&str]) -> serde_json::Value {
    let mut all = vec![MINION];
    all.extend_from_slice(args);
    s.env.salt_json(&all, 60)
}

fn refused(s: &Served, health: u16, reason: &str) -> f64 {
    metric(&metrics_of(&s.env, health), &format!("halite_refused_total{{port=\"request\",reason=\"{reason}\"}}")).unwrap_or(0.0)
}

#[test]
fn a_pushed_file_is_stored_as_salt_stores_it() {
    let (s, _) = served("file_recv: True\n");
    // Three of the minion's 256 KiB pieces.
    let src = s.minion_root().join("push/hello.bin");
    std::fs::create_dir_all(src.parent().unwrap()).unwrap();
    let data = bytes(600 << 10);
    std::fs::write(&src, &data).unwrap();
    assert_eq!(push(&s, &["cp.push", src.to_str().unwrap()]), json!({MINION: true}));
    let at = stored(&s.env, MINION, &src);
    assert_eq!(std::fs::read(&at).expect("the pushed file on the master"), data);
    // upload_path puts it elsewhere in the minion's folder.
    assert_eq!(push(&s, &["cp.push", src.to_str().unwrap(), "upload_path=/elsewhere/copy.bin"]), json!({MINION: true}));
    assert_eq!(std::fs::read(s.env.root.join("cache/minions/m1/files/elsewhere/copy.bin")).unwrap(), data);
    // Pushed again with other bytes, it is replaced.
    std::fs::write(&src, b"shorter").unwrap();
    assert_eq!(push(&s, &["cp.push", src.to_str().unwrap()]), json!({MINION: true}));
    assert_eq!(std::fs::read(&at).unwrap(), b"shorter");
}

#[test]
fn push_dir_stores_every_file_below_the_folder() {
    let (s, _) = served("file_recv: True\n");
    let dir = s.minion_root().join("tree");
    for (rel, body) in [("a.txt", &b"a"[..]), ("sub/b.log", b"bb"), ("sub/deeper/c.txt", b""), ("sub/deeper/d.txt", b"dddd")] {
        std::fs::create_dir_all(dir.join(rel).parent().unwrap()).unwrap();
        std::fs::write(dir.join(rel), body).unwrap();
    }
    assert_eq!(push(&s, &["cp.push_dir", dir.to_str().unwrap()]), json!({MINION: true}));
    for (rel, body) in [("a.txt", &b"a"[..]), ("sub/b.log", b"bb"), ("sub/deeper/c.txt", b""), ("sub/deeper/d.txt", b"dddd")] {
        assert_eq!(std::fs::read(stored(&s.env, MINION, &dir.join(rel))).unwrap_or_else(|e| panic!("{rel}: {e}")), body, "{rel}");
    }
    // With a glob and an upload path.
    assert_eq!(push(&s, &["cp.push_dir", dir.to_str().unwrap(), "glob=*.txt", "upload_path=/only-txt"]), json!({MINION: true}));
    let up = s.env.root.join("cache/minions/m1/files/only-txt");
    assert_eq!(std::fs::read(up.join("a.txt")).unwrap(), b"a");
    assert_eq!(std::fs::read(up.join("sub/deeper/d.txt")).unwrap(), b"dddd");
    assert!(!up.join("sub/b.log").exists());
}

#[test]
fn an_oversized_push_is_refused_counted_and_leaves_nothing() {
    let (s, health) = served("file_recv: True\nfile_recv_max_size: 1\n");
    let src = s.minion_root().join("big.bin");
    std::fs::write(&src, bytes(2 << 20)).unwrap();
    assert_eq!(push(&s, &["cp.push", src.to_str().unwrap()]), json!({MINION: false}));
    assert!(refused(&s, health, "file_recv_size") >= 1.0);
    assert!(!s.env.root.join("cache/minions/m1/files").exists(), "nothing is written for a refused push");
    assert!(s.env.master_log().contains("file_recv_max_size"), "the refusal is logged");
    // A file within the limit still goes through.
    let small = s.minion_root().join("small.bin");
    std::fs::write(&small, bytes(1 << 20)).unwrap();
    assert_eq!(push(&s, &["cp.push", small.to_str().unwrap()]), json!({MINION: true}));
    assert_eq!(std::fs::read(stored(&s.env, MINION, &small)).unwrap().len(), 1 << 20);
}

#[test]
fn an_escaping_path_is_refused_and_counted() {
    let (s, health) = served("file_recv: True\n");
    let src = s.minion_root().join("x.txt");
    std::fs::write(&src, b"x").unwrap();
    // The one escape a stock minion sends: its upload path `/..` becomes [".."].
    assert_eq!(push(&s, &["cp.push", src.to_str().unwrap(), "upload_path=/.."]), json!({MINION: false}));
    assert!(refused(&s, health, "file_recv_path") >= 1.0);
    // What a hostile client sends by hand.
    let hand = WireMinion::sign_in(&s.env, "hand-1");
    for path in [vec!["..", "..", "escaped"], vec!["/tmp/escaped"], vec!["a", "..", "..", "escaped"], vec!["."], vec![]] {
        let parts = Value::Array(path.iter().map(|p| Value::from(*p)).collect());
        let l = load(&[("cmd", Value::from("_file_recv")), ("path", parts), ("size", Value::from(1)), ("loc", Value::from(0)), ("data", Value::Binary(b"x".to_vec()))]);
        assert!(matches!(hand.ask(l), AesReply::Value(Value::Boolean(false))), "{path:?}");
    }
    assert!(refused(&s, health, "file_recv_path") >= 6.0);
    let minions = s.env.root.join("cache/minions");
    assert!(!minions.exists() || std::fs::read_dir(&minions).unwrap().count() == 0, "nothing is written for a refused path");
    assert!(!s.env.root.join("cache/escaped").exists() && !Path::new("/tmp/escaped").exists());
}

#[test]
fn without_file_recv_nothing_is_stored() {
    let (s, health) = served("");
    let src = s.minion_root().join("x.txt");
    std::fs::write(&src, b"x").unwrap();
    assert_eq!(push(&s, &["cp.push", src.to_str().unwrap()]), json!({MINION: false}));
    assert!(!s.env.root.join("cache/minions/m1/files").exists());
    assert!(refused(&s, health, "file_recv_off") >= 1.0);
}

#[test]
fn a_file_pushed_through_one_member_is_on_every_member_and_goes_with_the_key() {
    let c = crate::cluster::founding(3, "halite-push", "file_recv: True\nauto_accept: True\n");
    let first = &c.envs[0];
    let conf = format!("master: {}\nmaster_port: {}\n", first.ip, first.ret);
    let pm1 = start_minion(&first.root, "pm1", &conf);
    let _pm2 = start_minion(&first.root, "pm2", &conf);
    let data = bytes(300 << 10);
    let mut pushed = Vec::new();
    for id in ["pm1", "pm2"] {
        wait_minion_ready(&first.root, id, 1, 90);
        wait_ping(first, id, 90);
        let src = first.root.join(format!("{id}/push/report.bin"));
        std::fs::create_dir_all(src.parent().unwrap()).unwrap();
        std::fs::write(&src, &data).unwrap();
        assert_eq!(first.salt_json(&[id, "cp.push", src.to_str().unwrap()], 60), json!({id: true}));
        pushed.push(src);
    }
    for env in &c.envs {
        for (id, src) in ["pm1", "pm2"].iter().zip(&pushed) {
            let at = stored(env, id, src);
            wait_for(&format!("{id}'s pushed file on {}", env.ip), 30, || std::fs::read(&at).is_ok_and(|b| b == data));
        }
    }
    // pm1 stops and its key is deleted through another member: its folder goes on every
    // member (decided where the delete applies), pm2's files stay.
    drop(pm1);
    c.envs[1].ok(SALT_KEY, &["-d", "pm1", "-y"]);
    for env in &c.envs {
        let folder = env.root.join("cache/minions/pm1");
        wait_for(&format!("pm1's pushed files gone on {}", env.ip), 30, || !folder.exists());
        assert_eq!(std::fs::read(stored(env, "pm2", &pushed[1])).expect("pm2's file stays"), data, "{}", env.ip);
    }
}
