//! Targeting that depends on more than the master's own state, with two real
//! salt-minion 3008.5 processes: range targets (`-R`, `R@`) expanded by a range server
//! (a small Python HTTP server the test starts: it stands in for an external SECO range
//! service, answering `/range/list?EXPR` as one does), and `minion_data_cache: False`
//! (no grains or pillar kept: grain and pillar targets go to every minion, which match
//! themselves).

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::support::*;

/// A range server: `%web` is m1, `%all` both minions, `%nobody` nobody, `%broken` a
/// `RangeException`, `%huge` an endless list (more than the master reads); every query
/// it receives (as sent, still encoded) is appended to `queries.log`.
const RANGE_SERVER: &str = r#"
import http.server, sys
PORT, IP, LOG = int(sys.argv[1]), sys.argv[2], sys.argv[3]
NAMES = {"%web": ["m1"], "%all": ["m2", "m1"], "%nobody": []}
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path, _, query = self.path.partition("?")
        with open(LOG, "a") as f:
            f.write(self.path + "\n")
        from urllib.parse import unquote
        expr = unquote(query)
        if path != "/range/list":
            self.send_response(404); self.end_headers(); return
        if expr == "%huge":
            self.send_response(200); self.end_headers()
            try:
                for i in range(10_000_000):
                    self.wfile.write(b"host%d\n" % i)
            except Exception:
                pass
            return
        if expr not in NAMES:
            self.send_response(200)
            self.send_header("RangeException", "NO_CLUSTER " + expr)
            self.end_headers(); return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write("".join(n + "\n" for n in NAMES[expr]).encode())
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((IP, PORT), H).serve_forever()
"#;

/// A master and two minions `m1` (grain and pillar role web) and `m2` (role db).
struct Two {
    _m1: Proc,
    _m2: Proc,
    _extra: Option<Proc>,
    master: Proc,
    env: Env,
}

fn two(ip: &str, master_extra: &str) -> (Env, Proc, Proc, Proc) {
    let env = Env::master(ip, "localfs_key", &format!("auto_accept: True\n{master_extra}"));
    let pil = env.root.join("srv/pillar");
    std::fs::create_dir_all(&pil).expect("pillar roots");
    std::fs::write(pil.join("top.sls"), "base:\n  m1:\n    - web\n  m2:\n    - db\n").expect("top.sls");
    std::fs::write(pil.join("web.sls"), "tier: web\n").expect("web.sls");
    std::fs::write(pil.join("db.sls"), "tier: db\n").expect("db.sls");
    let master = start_master(&env);
    let conf = |role: &str| format!("master: {}\nmaster_port: {}\ngrains:\n  role: {role}\n", env.ip, env.ret);
    let m1 = start_minion(&env.root, "m1", &conf("web"));
    let m2 = start_minion(&env.root, "m2", &conf("db"));
    for id in ["m1", "m2"] {
        wait_minion_ready(&env.root, id, 1, 90);
        wait_ping(&env, id, 90);
    }
    (env, master, m1, m2)
}

fn start_range_server(root: &Path, ip: &str, port: u16) -> Proc {
    let script = root.join("range_server.py");
    std::fs::write(&script, RANGE_SERVER).expect("range server script");
    let log = root.join("queries.log");
    let p = Proc::spawn_logged(
        "range server",
        Command::new(reference_venv().join("bin/python")).args([script.display().to_string(), port.to_string(), ip.to_string(), log.display().to_string()]),
        &root.join("range_server.out"),
    );
    wait_for("the range server to listen", 30, || std::net::TcpStream::connect((ip, port)).is_ok());
    p
}

fn ping(env: &Env, args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.push("test.ping");
    env.salt_json(&full, 30)
}

fn refused(env: &Env, args: &[&str]) -> String {
    let mut full = args.to_vec();
    full.push("test.ping");
    let o = env.salt(&full, 10);
    assert!(!o.status.success(), "{args:?} ran: {}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout)
}

#[test]
fn range_targets_are_expanded_by_the_range_server() {
    let ip = one_ip();
    let port = port_free_on(&[&ip]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = start_range_server(tmp.path(), &ip, port);
    let reactor = tmp.path().join("ranged.sls");
    std::fs::write(&reactor, "ranged:\n  local.test.echo:\n    - tgt: '%web'\n    - tgt_type: range\n    - arg: ['ranged-reaction']\n").expect("reactor sls");
    let (env, master, m1, m2) = two(&ip, &format!("range_server: {ip}:{port}\nnodegroups:\n  ranged: 'R@%all and not m2'\nreactor:\n  - 'halite/test/range':\n    - {}\n", reactor.display()));
    let t = Two { _m1: m1, _m2: m2, _extra: Some(server), master, env };
    let env = &t.env;
    assert_eq!(ping(env, &["-R", "%web"]), json!({"m1": true}));
    assert_eq!(ping(env, &["-R", "%all"]), json!({"m1": true, "m2": true}));
    assert_eq!(ping(env, &["-C", "R@%all and not G@role:web"]), json!({"m2": true}), "R@ in a compound");
    assert_eq!(ping(env, &["-C", "R@%nobody or L@m2"]), json!({"m2": true}), "an empty expansion matches nobody");
    assert_eq!(ping(env, &["-N", "ranged"]), json!({"m1": true}), "R@ inside a nodegroup");
    // The minions received lists, not range expressions (they have no range server).
    let published = t.env.runner(&["jobs.list_jobs"]);
    let types: Vec<&str> = published.as_object().expect("jobs").values().filter_map(|j| j["Target-type"].as_str()).collect();
    assert!(types.iter().all(|ty| ["list", "compound", "glob"].contains(ty)), "{published}");
    // Runners that target (`cache.*`, `mine.get`) expand range targets the same way.
    let grains = t.env.runner(&["cache.grains", "tgt=%web", "tgt_type=range"]);
    assert_eq!(grains.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()), Some(vec!["m1".to_string()]), "{grains}");
    let grains = t.env.runner(&["cache.grains", "tgt=R@%all and not m1", "tgt_type=compound"]);
    assert_eq!(grains.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()), Some(vec!["m2".to_string()]), "{grains}");
    assert_eq!(t.env.runner(&["mine.get", "%all", "test.ping", "tgt_type=range"]), json!({}), "no mine data, but the range target is taken");
    // A reaction whose `local` target is a range: published to the expansion (m1).
    assert_eq!(t.env.salt_json(&["m2", "event.send", "halite/test/range"], 20), json!({"m2": true}));
    let echoed = || {
        let jobs = t.env.runner(&["jobs.list_jobs"]);
        jobs.as_object().and_then(|o| o.iter().find(|(_, j)| j["Function"] == json!("test.echo")).map(|(jid, j)| (jid.clone(), j.clone())))
    };
    wait_for("the range reaction's job", 60, || echoed().is_some());
    let (jid, job) = echoed().expect("reaction job");
    assert_eq!((&job["Target"], &job["Target-type"]), (&json!(["m1"]), &json!("list")), "{job}");
    wait_for("m1's echo", 60, || t.env.runner(&["jobs.lookup_jid", &jid]) == json!({"m1": "ranged-reaction"}));
    // The query is Salt's: GET /range/list?<quoted expression>.
    let queries = std::fs::read_to_string(tmp.path().join("queries.log")).expect("queries");
    assert!(queries.lines().any(|q| q == "/range/list?%25web"), "{queries}");
    // A server error, an unknown cluster or an answer past the bound fail the publish
    // with the reason, and nothing is published.
    let jobs = || t.env.runner(&["jobs.list_jobs"]).as_object().map(|o| o.len());
    let before = jobs();
    assert!(refused(env, &["-R", "%broken"]).contains("NO_CLUSTER"));
    assert!(refused(env, &["-C", "m1 or R@%huge"]).contains("longer than"));
    assert_eq!(jobs(), before, "the refused publishes made no job");
    assert!(t.env.master_log().contains("reason=\"range_server\""), "the refusal is logged with its reason");
}

#[test]
fn range_server_unreachable_is_a_clear_error() {
    let ip = one_ip();
    let port = port_free_on(&[&ip]);
    let (env, master, m1, m2) = two(&ip, &format!("range_server: {ip}:{port}\n"));
    let t = Two { _m1: m1, _m2: m2, _extra: None, master, env };
    let err = refused(&t.env, &["-R", "%web"]);
    assert!(err.contains("Range server") && err.contains("cannot connect"), "{err}");
}

#[test]
fn without_the_minion_data_cache_minions_match_grains_and_pillar_themselves() {
    let ip = one_ip();
    let (env, master, m1, m2) = two(&ip, "minion_data_cache: False\nnodegroups:\n  webs: 'G@role:web'\n");
    let mut t = Two { _m1: m1, _m2: m2, _extra: None, master, env };
    let env = &t.env;
    // Published to both; only the matching minion answers, and the other is not
    // reported as missing (Salt's output for a target the master cannot resolve).
    let o = env.salt(&["-G", "role:web", "test.ping", "--out", "json", "--static"], 5);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(json(&String::from_utf8_lossy(&o.stdout)), json!({"m1": true}));
    assert_eq!(ping(env, &["-I", "tier:db"]), json!({"m2": true}), "the minion matches its own pillar");
    assert_eq!(ping(env, &["-C", "G@role:db or L@m1"]), json!({"m1": true, "m2": true}));
    assert_eq!(ping(env, &["-N", "webs"]), json!({"m1": true}));
    // The job expected both minions.
    let jobs = env.runner(&["jobs.list_jobs"]);
    let jid = jobs.as_object().expect("jobs").iter().find(|(_, j)| j["Target"] == json!("role:web")).map(|(k, _)| k.clone()).expect("the grain job");
    let job = env.runner(&["jobs.list_job", &jid]);
    let mut expected: Vec<&str> = job["Minions"].as_array().expect("Minions").iter().filter_map(Value::as_str).collect();
    expected.sort();
    assert_eq!(expected, ["m1", "m2"], "{job}");
    // Nothing of the minions' grains or pillar was kept.
    assert_eq!(env.runner(&["cache.grains", "*"]), json!({"m1": {}, "m2": {}}));
    t.master.stop();
    let kinds = t.env.record_kinds();
    assert!(!kinds.iter().any(|k| k == "grains_report" || k == "pillar_cache"), "{kinds:?}");
}
