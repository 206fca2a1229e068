//! salt-api driven by salt-pepper 0.7.6 (the PyPI client, installed in the reference
//! venv by `scripts/setup-reference.sh`) and curl, in front of a master with unmodified
//! salt-minion 3008.5 processes: pepper's login, `local` (`test.ping`), `local_async`
//! then `jobs.lookup_jid` of its jid, `runner` (`manage.status`), `wheel`
//! (`key.list_all`), `-r` (a token from `/token`, the call through `/run`); chunks of
//! the runner and wheel clients as pepper sends them with and without `X-Salt-Version`;
//! `/token`'s answer; `POST /keys` giving a key pair a real minion then signs in with
//! (the master accepts no key by itself); a hook (`POST /hook/...`) whose event a
//! reactor reacts to with a job on a real minion, `webhook_disable_auth` and
//! `webhook_url`; hostile input (bad JSON, oversized bodies, no credentials) refused
//! with a 4xx naming the fault.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use sha2::Digest;

use crate::saltapi::{api_conf, served, Api};
use crate::support::*;

/// Runs pepper against `api` as `fred` (eauth `file`), with `--out json`; the exit
/// code and the JSON documents it printed. Its home (`~/.pepperrc`, `~/.peppercache`)
/// is `home`.
fn pepper(api: &Api, home: &Path, args: &[&str]) -> (i32, Vec<Value>) {
    let url = format!("{}/", api.base);
    let bin = reference_venv().join("bin/pepper");
    assert!(bin.exists(), "{} is missing: run scripts/setup-reference.sh (it installs salt-pepper into the reference venv)", bin.display());
    let mut cmd = Command::new(bin);
    cmd.env("HOME", home).env_remove("SALTAPI_URL").env_remove("PEPPERRC").args(["-u", &url, "-a", "file", "--username", "fred", "--password", "s3cret", "--non-interactive", "--out", "json"]).args(args);
    let o = run(&mut cmd, Duration::from_secs(120));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    let docs: Vec<Value> = serde_json::Deserializer::from_str(&out).into_iter::<Value>().collect::<Result<_, _>>().unwrap_or_else(|e| panic!("pepper {args:?} printed no JSON ({e}): {out}\nstderr: {err}"));
    let code = o.status.code().unwrap_or(-1);
    if code != 0 {
        eprintln!("pepper {args:?} exited {code}; stderr: {err}");
    }
    (code, docs)
}

/// A home directory for pepper.
fn pepper_home(root: &Path) -> PathBuf {
    let h = root.join("pepper-home");
    std::fs::create_dir_all(&h).expect("pepper home");
    h
}

/// `curl` with a JSON body (no token); the status and the parsed body.
fn post_json(api: &Api, path: &str, body: &str) -> (u16, Value) {
    let (status, text) = api.curl(path, &["-H", "Content-Type: application/json", "-H", "Accept: application/json", "--data-binary", body]);
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[test]
fn pepper_login_local_async_lookup_runner_wheel_and_the_run_uri() {
    let s = served(&["m1"], |_| {});
    let home = pepper_home(&s.m.env.root);
    // Every answer carries the version pepper reads.
    let (_, head) = s.api.curl("/", &["-sS", "-o", "/dev/null", "-D", "-"]);
    assert!(head.lines().any(|l| l.eq_ignore_ascii_case("x-salt-version: 3008.5\r") || l.eq_ignore_ascii_case("x-salt-version: 3008.5")), "{head}");

    // Login and `local`.
    let (code, docs) = pepper(&s.api, &home, &["*", "test.ping"]);
    assert_eq!((code, docs.clone()), (0, vec![json!({"m1": true})]));

    // `local_async`, then the jid looked up with the runner client (`jid=` as an `arg`).
    let (code, docs) = pepper(&s.api, &home, &["--client", "local_async", "m1", "test.echo", "peppered"]);
    assert_eq!(code, 0, "{docs:?}");
    let jid = docs.iter().find_map(|d| d["jid"].as_str()).unwrap_or_else(|| panic!("a jid: {docs:?}")).to_string();
    assert!(docs.contains(&json!({"minions": ["m1"]})), "{docs:?}");
    wait_for("the job's return through pepper's jobs.lookup_jid", 60, || {
        let (code, docs) = pepper(&s.api, &home, &["--client", "runner", "jobs.lookup_jid", &format!("jid={jid}")]);
        code == 0 && docs.first().map(|d| d["runner"]["return"].clone()) == Some(json!({"m1": "peppered"}))
    });

    // The runner client: `manage.status` (pepper asks for the full return).
    let (code, docs) = pepper(&s.api, &home, &["--client", "runner", "manage.status"]);
    assert_eq!(code, 0);
    let run = &docs[0]["runner"];
    assert_eq!((&run["return"], &run["fun"], &run["success"], &run["user"]), (&json!({"up": ["m1"], "down": []}), &json!("runner.manage.status"), &json!(true), &json!("fred")), "{docs:?}");

    // The wheel client.
    let (code, docs) = pepper(&s.api, &home, &["--client", "wheel", "key.list_all"]);
    assert_eq!(code, 0);
    assert_eq!(docs[0]["minions"], json!(["m1"]), "{docs:?}");
    assert_eq!(docs[0]["minions_pre"], json!([]), "{docs:?}");

    // `-r`: a token from /token, each chunk carrying it through /run.
    let (code, docs) = pepper(&s.api, &home, &["-r", "m1", "test.echo", "through-run"]);
    assert_eq!((code, docs), (0, vec![json!({"m1": "through-run"})]));
    let log = std::fs::read_to_string(s.m.env.root.join("salt-api.log")).unwrap_or_default();
    assert!(log.contains("token made"), "the -r login went through /token");

    // The runner and wheel chunks pepper sends without X-Salt-Version (keywords at the
    // chunk's top level) and with it (`name=value` in `arg`, a `timeout`) read the same.
    let token = s.api.token("fred", "s3cret");
    let old = s.api.call("POST", "/", &token, Some(json!([{ "client": "runner", "fun": "jobs.lookup_jid", "jid": jid, "full_return": true }])));
    let new = s.api.call("POST", "/", &token, Some(json!([{ "client": "runner", "fun": "jobs.lookup_jid", "arg": [format!("jid={jid}")], "full_return": true, "timeout": 60 }])));
    assert_eq!((old.0, &old.1["return"][0]["return"]), (200, &json!({"m1": "peppered"})), "{old:?}");
    assert_eq!((new.0, &new.1["return"][0]["return"]), (200, &json!({"m1": "peppered"})), "{new:?}");
    assert_eq!(old.1["return"][0]["fun_args"], json!([{ "jid": jid }]));
    assert_eq!(new.1["return"][0]["fun_args"], json!([{ "jid": jid }]));
    let w_old = s.api.call("POST", "/", &token, Some(json!([{ "client": "wheel", "fun": "key.finger", "match": "m1" }])));
    let w_new = s.api.call("POST", "/", &token, Some(json!([{ "client": "wheel", "fun": "key.finger", "arg": ["match=m1"] }])));
    assert_eq!(w_old.0, 200, "{w_old:?}");
    assert_eq!(w_old.1["return"][0]["data"]["return"], w_new.1["return"][0]["data"]["return"]);
    assert!(w_old.1["return"][0]["data"]["return"]["minions"]["m1"].as_str().is_some_and(|f| f.len() == 95), "{w_old:?}");

    // /token's own answer: a list, not wrapped in `return`; its token works on /run.
    let (status, t) = post_json(&s.api, "/token", r#"{"username": "fred", "password": "s3cret", "eauth": "file"}"#);
    assert_eq!(status, 200, "{t}");
    assert_eq!((t[0]["name"].as_str(), t[0]["eauth"].as_str()), (Some("fred"), Some("file")), "{t}");
    assert!(t[0]["expire"].as_f64() > t[0]["start"].as_f64(), "{t}");
    let tok = t[0]["token"].as_str().expect("a token");
    let (status, r) = post_json(&s.api, "/run", &json!([{ "client": "local", "tgt": "m1", "fun": "test.ping", "token": tok }]).to_string());
    assert_eq!((status, &r["return"]), (200, &json!([{"m1": true}])));
    // Credentials in the chunk itself.
    let (status, r) = post_json(&s.api, "/run", &json!([{ "client": "local", "tgt": "m1", "fun": "test.ping", "username": "fred", "password": "s3cret", "eauth": "file" }]).to_string());
    assert_eq!((status, &r["return"]), (200, &json!([{"m1": true}])));
    // A `limited` user's rules hold on /run too.
    let (status, _) = post_json(&s.api, "/run", &json!([{ "client": "runner", "fun": "manage.status", "username": "limited", "password": "pw", "eauth": "file" }]).to_string());
    assert_eq!(status, 401);
}

#[test]
fn hostile_input_on_the_other_doors_gets_a_clear_4xx() {
    let s = served(&["m1"], |_| {});
    let api = &s.api;
    // No credentials at all, a wrong password, a token that is not hex.
    let (status, r) = post_json(api, "/run", r#"[{"client": "local", "tgt": "m1", "fun": "test.ping"}]"#);
    assert_eq!((status, r["return"].as_str()), (401, Some("No authentication credentials given")), "{r}");
    let (status, _) = post_json(api, "/run", r#"[{"client": "local", "tgt": "m1", "fun": "test.ping", "username": "fred", "password": "nope", "eauth": "file"}]"#);
    assert_eq!(status, 401);
    let (status, _) = post_json(api, "/run", r#"[{"client": "local", "tgt": "m1", "fun": "test.ping", "token": "not-hex"}]"#);
    assert_eq!(status, 401);
    // /token without a password names what it needs.
    let (status, r) = post_json(api, "/token", r#"{"username": "fred", "eauth": "file"}"#);
    assert_eq!(status, 400, "{r}");
    assert!(r["return"].as_str().is_some_and(|m| m.contains("password")), "{r}");
    // A user whose rules allow no runner gets no token (Salt's /token is the runner
    // auth.mk_token).
    let (status, _) = post_json(api, "/token", r#"{"username": "limited", "password": "pw", "eauth": "file"}"#);
    assert_eq!(status, 401);
    // Bad JSON, and a body past max_request_body_size (65536 here), on each door.
    for path in ["/run", "/token", "/login", "/keys", "/hook/x"] {
        let (status, r) = post_json(api, path, "[{\"client\": ");
        assert_eq!(status, if path == "/hook/x" { 401 } else { 400 }, "{path}: {r}");
        // Refused before it is read: each of several tries gets its answer, none a reset.
        let big = format!("[\"{}\"]", "x".repeat(70_000));
        for _ in 0..8 {
            let (status, r) = post_json(api, path, &big);
            assert_eq!(status, if path == "/hook/x" { 401 } else { 413 }, "{path}: {r}");
        }
    }
    let token = api.token("fred", "s3cret");
    let hdr = format!("X-Auth-Token: {token}");
    let (status, text) = api.curl("/hook/x", &["-H", &hdr, "-H", "Content-Type: application/json", "--data-binary", "{\"a\": "]);
    assert_eq!(status, 400, "{text}");
    let big = "x".repeat(70_000);
    let (status, _) = api.curl("/hook/x", &["-H", &hdr, "-H", "Content-Type: text/plain", "--data-binary", &big]);
    assert_eq!(status, 413);
    // /keys without credentials, and without a minion id.
    let (status, _) = api.curl("/keys", &["-d", "mid=x1"]);
    assert_eq!(status, 401);
    let (status, r) = api.curl("/keys", &["-d", "username=fred", "-d", "password=s3cret", "-d", "eauth=file"]);
    assert_eq!(status, 400, "{r}");
    let (status, r) = api.curl("/keys", &["-d", "mid=../etc", "-d", "username=fred", "-d", "password=s3cret", "-d", "eauth=file"]);
    assert_eq!(status, 400, "{r}");
    // The master is untouched by all this: m1 still answers.
    assert_eq!(api.call("POST", "/", &token, Some(json!({"client": "local", "tgt": "m1", "fun": "test.ping"}))).1["return"], json!([{"m1": true}]));
}

#[test]
fn post_keys_makes_a_key_pair_a_real_minion_signs_in_with() {
    let ip = one_ip();
    let port = port_free_on(&[&ip]);
    // No auto_accept: the minion is served only if its key is the one /keys accepted.
    let env = Env::master(&ip, "localfs_key", "");
    env.append_conf(&api_conf(&env.root, &ip, port, 43200));
    let m = Running::start(env);
    let env = &m.env;
    let api = Api::start(&env.root.join("conf"), &env.root.join("salt-api.log"), &ip, port);
    let tar = env.root.join("kicked.tar");
    let (status, _) = api.curl("/keys", &["-d", "mid=kicked", "-d", "username=fred", "-d", "password=s3cret", "-d", "eauth=file", "-o", &tar.display().to_string()]);
    assert_eq!(status, 200);
    let pki = env.root.join("kicked/pki");
    std::fs::create_dir_all(&pki).expect("pki dir");
    let o = run(Command::new("tar").arg("-xf").arg(&tar).arg("-C").arg(&pki), Duration::from_secs(30));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let public = std::fs::read(pki.join("minion.pub")).expect("minion.pub");
    assert!(public.starts_with(b"-----BEGIN PUBLIC KEY-----"));
    assert!(std::fs::read(pki.join("minion.pem")).expect("minion.pem").starts_with(b"-----BEGIN RSA PRIVATE KEY-----"));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(pki.join("minion.pem"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
    // Accepted, with that key's fingerprint.
    let token = api.token("fred", "s3cret");
    let (status, keys) = api.call("GET", "/keys", &token, None);
    assert_eq!((status, &keys["return"]["minions"]), (200, &json!(["kicked"])), "{keys}");
    let finger = hex_pairs(&sha2::Sha256::digest(&public));
    assert_eq!(api.call("GET", "/keys/kicked", &token, None).1, json!({ "return": { "minions": { "kicked": finger } } }));
    // A real minion with that key pair is served at once.
    let _kicked = start_minion(&env.root, "kicked", &format!("master: {}\nmaster_port: {}\n", env.ip, env.ret));
    wait_ping(env, "kicked", 90);
    // Asked again without `force`: Salt's empty answer, the key unchanged.
    let again = env.root.join("again.tar");
    let (status, _) = api.curl("/keys", &["-d", "mid=kicked", "-d", "username=fred", "-d", "password=s3cret", "-d", "eauth=file", "-o", &again.display().to_string()]);
    assert_eq!(status, 200);
    let out = env.root.join("again");
    std::fs::create_dir_all(&out).expect("dir");
    assert!(run(Command::new("tar").arg("-xf").arg(&again).arg("-C").arg(&out), Duration::from_secs(30)).status.success());
    assert_eq!(std::fs::read(out.join("minion.pub")).expect("minion.pub").len(), 0);
    assert_eq!(api.call("GET", "/keys/kicked", &token, None).1["return"]["minions"]["kicked"], json!(finger));
    // `limited` has no @wheel rule.
    let (status, _) = api.curl("/keys", &["-d", "mid=other", "-d", "username=limited", "-d", "password=pw", "-d", "eauth=file"]);
    assert_eq!(status, 401);
}

/// `aa:bb:...` of bytes.
fn hex_pairs(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(":")
}

#[test]
fn a_hook_fires_an_event_a_reactor_runs_a_job_for() {
    let s = served(&["m1"], |env| {
        std::fs::create_dir_all(env.root.join("reactor")).expect("reactor dir");
        std::fs::write(env.root.join("reactor/hook.sls"), "hooked:\n  local.test.echo:\n    - tgt: m1\n    - arg:\n      - hooked-{{ data['post']['build'] }}\n").expect("sls");
        env.append_conf("reactor:\n  - 'salt/netapi/hook/deploy/*':\n    - @ROOT@/reactor/hook.sls\n");
    });
    let env = &s.m.env;
    let token = s.api.token("fred", "s3cret");
    let mut events = s.api.events(&token, &env.root.join("events.log"));
    // Without a token: refused, nothing fired.
    let (status, _) = s.api.curl("/hook/deploy/web", &["-H", "Content-Type: application/json", "--data-binary", r#"{"build": "0"}"#]);
    assert_eq!(status, 401);
    let hdr = format!("X-Auth-Token: {token}");
    let (status, text) = s.api.curl("/hook/deploy/web", &["-H", &hdr, "-H", "Content-Type: application/json", "-H", "X-Build-Secret: s", "--data-binary", r#"{"build": "42"}"#]);
    assert_eq!((status, serde_json::from_str::<Value>(&text).ok()), (200, Some(json!({"success": true}))), "{text}");
    let data = events.data("salt/netapi/hook/deploy/web", 30);
    assert_eq!((&data["post"], &data["body"]), (&json!({"build": "42"}), &json!(r#"{"build": "42"}"#)), "{data}");
    assert_eq!((&data["headers"]["Content-Type"], &data["headers"]["X-Build-Secret"]), (&json!("application/json"), &json!("s")), "{data}");
    assert!(data["headers"].get("X-Auth-Token").is_none(), "the caller's token is not put on the bus: {data}");
    // The reactor reacted: one job on m1, its return in the job cache.
    let args = json!(["hooked-42"]);
    let jobs = || -> Vec<String> {
        let all = env.runner(&["jobs.list_jobs"]);
        all.as_object().map(|m| m.iter().filter(|(_, j)| j["Function"] == "test.echo" && j["Arguments"] == args).map(|(jid, _)| jid.clone()).collect()).unwrap_or_default()
    };
    wait_for("the reaction's job", 60, || !jobs().is_empty());
    let jids = jobs();
    assert_eq!(jids.len(), 1, "{jids:?}");
    wait_for("m1's return of the reaction's job", 60, || env.runner(&["jobs.lookup_jid", &jids[0]]) == json!({"m1": "hooked-42"}));

    // A second salt-api on the same master: `webhook_disable_auth` and another `webhook_url`.
    let conf2 = env.root.join("conf2");
    std::fs::create_dir_all(&conf2).expect("conf2");
    let port2 = port_free_on(&[&env.ip]);
    let master = std::fs::read_to_string(env.root.join("conf/master")).expect("config");
    let master = master.replace(&format!("  port: {}\n", s.api.base.rsplit(':').next().unwrap_or("")), &format!("  port: {port2}\n  webhook_disable_auth: True\n  webhook_url: /api/hooks\n"));
    std::fs::write(conf2.join("master"), master).expect("conf2/master");
    let api2 = Api::start(&conf2, &env.root.join("salt-api2.log"), &env.ip, port2);
    let (status, text) = api2.curl("/api/hooks/deploy/db", &["-d", "build=43"]);
    assert_eq!(status, 200, "{text}");
    let data = events.data("salt/netapi/hook/deploy/db", 30);
    assert_eq!(data["post"], json!({"build": "43"}), "a form body: {data}");
    let args43 = json!(["hooked-43"]);
    wait_for("the second reaction's job", 60, || env.runner(&["jobs.list_jobs"]).as_object().is_some_and(|m| m.values().any(|j| j["Function"] == "test.echo" && j["Arguments"] == args43)));
    assert_eq!(api2.curl("/hook/deploy/db", &["-d", "build=44"]).0, 404, "only webhook_url serves hooks");
}
