//! salt-api (rest_cherrypy's shape) with a real HTTP client (curl) in front of masters
//! with unmodified salt-minion 3008.5 processes: login with the `file` eauth, lowstate
//! `local`, `local_async`, `runner`, `wheel` (JSON, YAML and form bodies), `/minions`,
//! `/jobs`, `/keys`, `/events` as server-sent events, `external_auth` refusals, logout,
//! token expiry, bounded bodies; and on a three-member cluster a token made through one
//! member used and revoked through another.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::cluster::founding;
use crate::support::*;


/// The `external_auth` and `rest_cherrypy` options of one salt-api, the users file in
/// `root/users.txt`: `fred` may do anything, `limited` only `test.*` on minions, `web`
/// `test.*` on m1 and `test.echo` with a first argument starting with "ok" on the minions
/// whose `id` grain is m2.
pub(crate) fn api_conf(root: &Path, host: &str, port: u16, token_expire: u64) -> String {
    std::fs::write(root.join("users.txt"), "fred:s3cret\nlimited:pw\nweb:pw\n").expect("users file");
    format!(
        "timeout: 30\ntoken_expire: {token_expire}\nnetapi_enable_clients: [local, local_async, local_batch, local_subset, runner, runner_async, wheel, wheel_async]\nexternal_auth:\n  file:\n    ^filename: {}/users.txt\n    fred:\n      - '.*'\n      - '@runner'\n      - '@wheel'\n    limited:\n      - 'test.*'\n    web:\n      - m1:\n        - 'test.*'\n      - 'G@id:m2':\n        - test.echo:\n            args: ['^ok']\n\
         rest_cherrypy:\n  host: {host}\n  port: {port}\n  disable_ssl: True\n  max_request_body_size: 65536\n",
        root.display()
    )
}

/// A master with [`api_conf`]'s options (`prepare` runs on its environment before it
/// starts), real minions `ids` answering it, and salt-api in front of it. Fields drop
/// in order: salt-api, the minions, the master.
pub(crate) struct Served {
    pub(crate) api: Api,
    pub(crate) _minions: Vec<Proc>,
    pub(crate) m: Running,
}

pub(crate) fn served(ids: &[&str], prepare: impl FnOnce(&Env)) -> Served {
    let ip = one_ip();
    let port = port_free_on(&[&ip]);
    let env = Env::master(&ip, "localfs_key", "auto_accept: True\n");
    env.append_conf(&api_conf(&env.root, &ip, port, 43200));
    prepare(&env);
    let m = Running::start(env);
    let conf = format!("master: {}\nmaster_port: {}\n", m.env.ip, m.env.ret);
    let minions = ids.iter().map(|id| start_minion(&m.env.root, id, &conf)).collect();
    for id in ids {
        wait_ping(&m.env, id, 90);
    }
    let api = Api::start(&m.env.root.join("conf"), &m.env.root.join("salt-api.log"), &ip, port);
    Served { api, _minions: minions, m }
}

/// A `GET /events` stream being read.
pub(crate) struct EventStream {
    _proc: Proc,
    lines: Lines,
}

impl EventStream {
    /// The `data` of the event tagged `tag`, once it came (within `secs`).
    pub(crate) fn data(&mut self, tag: &str, secs: u64) -> Value {
        let want = format!("tag: {tag}");
        let lines = self.lines.wait(tag, secs, |l| l.iter().position(|x| *x == want).is_some_and(|i| i + 1 < l.len())).to_vec();
        let at = lines.iter().position(|x| *x == want).expect("the tag");
        let data: Value = serde_json::from_str(lines[at + 1].strip_prefix("data: ").expect("a data line")).expect("JSON data");
        data["data"].clone()
    }
}

/// A running salt-api and where it listens.
pub(crate) struct Api {
    _proc: Proc,
    pub(crate) base: String,
}

impl Api {
    /// Starts salt-api with the config in `conf_dir` and waits until it answers.
    pub(crate) fn start(conf_dir: &Path, log: &Path, host: &str, port: u16) -> Api {
        let proc = Proc::spawn_logged("salt-api", Command::new(salt_api()).args(["-c", &conf_dir.display().to_string(), "-l", "info"]), log);
        let api = Api { _proc: proc, base: format!("http://{host}:{port}") };
        wait_for("salt-api to answer", 60, || api.curl("/", &[]).0 == 200);
        api
    }

    /// `curl ARGS BASE+PATH`: the status and the body.
    pub(crate) fn curl(&self, path: &str, args: &[&str]) -> (u16, String) {
        let url = format!("{}{path}", self.base);
        let o = run(Command::new("curl").args(["-sS", "--max-time", "60", "-w", "\n%{http_code}"]).args(args).arg(&url), Duration::from_secs(90));
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    /// A JSON request with a token; the status and the parsed body (`null` if not JSON).
    pub(crate) fn call(&self, method: &str, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
        let hdr = format!("X-Auth-Token: {token}");
        let data = body.map(|b| b.to_string());
        let mut args = vec!["-X", method, "-H", &hdr, "-H", "Accept: application/json"];
        if let Some(d) = &data {
            args.extend(["-H", "Content-Type: application/json", "--data-binary", d]);
        }
        let (status, text) = self.curl(path, &args);
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Logs in; the status and `return[0]`.
    pub(crate) fn login(&self, user: &str, password: &str) -> (u16, Value) {
        let body = json!({ "username": user, "password": password, "eauth": "file" }).to_string();
        let (status, text) = self.curl("/login", &["-H", "Content-Type: application/json", "-H", "Accept: application/json", "--data-binary", &body]);
        (status, serde_json::from_str::<Value>(&text).map(|v| v["return"][0].clone()).unwrap_or(Value::Null))
    }

    /// `GET /events` with `token`, streamed by curl (its output logged to `log`), once
    /// the stream's first line came.
    pub(crate) fn events(&self, token: &str, log: &Path) -> EventStream {
        let hdr = format!("X-Auth-Token: {token}");
        let (proc, mut lines) = Proc::spawn_lines("curl /events", Command::new("curl").args(["-sS", "-N", "-H", &hdr, &format!("{}/events", self.base)]), log);
        lines.wait("the stream's retry line", 30, |l| l.iter().any(|x| x == "retry: 400"));
        EventStream { _proc: proc, lines }
    }

    pub(crate) fn token(&self, user: &str, password: &str) -> String {
        let (status, r) = self.login(user, password);
        assert_eq!(status, 200, "login as {user}: {r}");
        r["token"].as_str().expect("a token").to_string()
    }
}

#[test]
fn login_lowstate_minions_jobs_events_acls_logout_and_bounds_with_real_minions() {
    let ip = one_ip();
    let port = port_free_on(&[&ip]);
    let env = Env::master(&ip, "localfs_key", "auto_accept: True\n");
    env.append_conf(&api_conf(&env.root, &ip, port, 43200));
    let m = Running::start(env);
    let env = &m.env;
    let conf = format!("master: {}\nmaster_port: {}\n", env.ip, env.ret);
    let _m1 = start_minion(&env.root, "m1", &conf);
    let _m2 = start_minion(&env.root, "m2", &conf);
    wait_ping(env, "m1", 90);
    wait_ping(env, "m2", 90);
    let api = Api::start(&env.root.join("conf"), &env.root.join("salt-api.log"), &ip, port);

    let (status, welcome) = api.call("GET", "/", "", None);
    assert_eq!((status, &welcome["return"]), (200, &json!("Welcome")), "{welcome}");
    assert_eq!(welcome["clients"], json!(["local", "local_async", "local_batch", "local_subset", "runner", "runner_async", "wheel", "wheel_async"]));

    // Logins: wrong password, unknown user, unknown backend refused; fred's rules come back.
    assert_eq!(api.login("fred", "wrong").0, 401);
    assert_eq!(api.login("wilma", "s3cret").0, 401);
    let (status, _) = api.curl("/login", &["-H", "Content-Type: application/json", "--data-binary", r#"{"username":"fred","password":"s3cret","eauth":"pam"}"#]);
    assert_eq!(status, 401);
    let (status, me) = api.login("fred", "s3cret");
    assert_eq!(status, 200, "{me}");
    assert_eq!((&me["user"], &me["eauth"], &me["perms"]), (&json!("fred"), &json!("file"), &json!([".*", "@runner", "@wheel"])), "{me}");
    let (start, expire) = (me["start"].as_f64().expect("start"), me["expire"].as_f64().expect("expire"));
    assert!((expire - start - 43200.0).abs() < 1.0, "{me}");
    let token = me["token"].as_str().expect("token").to_string();
    assert!(token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");

    // The event stream, opened before the jobs it should show.
    let hdr = format!("X-Auth-Token: {token}");
    let (mut sse, mut events) = Proc::spawn_lines("curl /events", Command::new("curl").args(["-sS", "-N", "-H", &hdr, &format!("{}/events", api.base)]), &env.root.join("sse.log"));
    events.wait("the stream's retry line", 30, |l| l.iter().any(|x| x == "retry: 400"));

    // local: test.ping on both minions.
    let (status, r) = api.call("POST", "/", &token, Some(json!([{ "client": "local", "tgt": "*", "fun": "test.ping" }])));
    assert_eq!((status, &r["return"]), (200, &json!([{ "m1": true, "m2": true }])), "{r}");
    // full_return: each minion's ret with its retcode and jid, as Salt's cmd gives them.
    let (status, r) = api.call("POST", "/", &token, Some(json!([{ "client": "local", "tgt": "m1", "fun": "test.ping", "full_return": true }])));
    let m1 = &r["return"][0]["m1"];
    assert_eq!((status, &m1["ret"], &m1["retcode"]), (200, &json!(true), &json!(0)), "{r}");
    assert!(m1["jid"].as_str().is_some_and(|j| j.len() == 20), "{r}");
    assert_eq!(api.call("POST", "/", &token, Some(json!([{ "client": "local", "tgt": "m1", "fun": "test.ping", "full_return": "yes" }]))).0, 400);

    // local_async through /minions: 202, a jid and a link; its returns reach /jobs/<jid>.
    let (status, r) = api.call("POST", "/minions", &token, Some(json!({ "tgt": "*", "fun": "test.echo", "arg": ["hi"] })));
    assert_eq!(status, 202, "{r}");
    let jid = r["return"][0]["jid"].as_str().expect("a jid").to_string();
    assert_eq!(r["return"][0]["minions"], json!(["m1", "m2"]), "{r}");
    assert_eq!(r["_links"]["jobs"], json!([{ "href": format!("/jobs/{jid}") }]));
    wait_for("both returns at /jobs/<jid>", 60, || api.call("GET", &format!("/jobs/{jid}"), &token, None).1["return"] == json!([{ "m1": "hi", "m2": "hi" }]));
    let (_, job) = api.call("GET", &format!("/jobs/{jid}"), &token, None);
    assert_eq!((&job["info"][0]["Function"], &job["info"][0]["jid"]), (&json!("test.echo"), &json!(jid)), "{job}");

    // The stream showed the job's publication and both returns, one SSE record each.
    // (Each tag line followed by its data line.)
    let seen = |l: &[String], t: &str| l.iter().position(|x| *x == format!("tag: salt/job/{jid}/{t}")).is_some_and(|i| i + 1 < l.len());
    let lines: Vec<String> = events.wait("the job's events on /events", 60, |l| ["new", "ret/m1", "ret/m2"].iter().all(|t| seen(l, t))).to_vec();
    let at = lines.iter().position(|x| *x == format!("tag: salt/job/{jid}/ret/m1")).expect("the return's tag");
    let data: Value = serde_json::from_str(lines[at + 1].strip_prefix("data: ").expect("a data line")).expect("JSON data");
    assert_eq!((&data["tag"], &data["data"]["return"], &data["data"]["id"]), (&json!(format!("salt/job/{jid}/ret/m1")), &json!("hi"), &json!("m1")), "{data}");

    // runner jobs.list_jobs lists the job; /jobs too.
    let (status, r) = api.call("POST", "/", &token, Some(json!([{ "client": "runner", "fun": "jobs.list_jobs" }])));
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["return"][0][&jid]["Function"], "test.echo", "{r}");
    assert_eq!(api.call("GET", "/jobs", &token, None).1["return"][0][&jid]["Function"], "test.echo");

    // /minions/<id>: grains; a form-encoded lowstate; YAML out; wheel key.list_all and /keys.
    let (_, r) = api.call("GET", "/minions/m1", &token, None);
    assert_eq!(r["return"][0]["m1"]["id"], "m1", "{r}");
    let (status, text) = api.curl("/", &["-H", &hdr, "-H", "Accept: application/json", "-d", "client=local", "-d", "tgt=m1", "-d", "fun=test.echo", "-d", "arg=formed body"]);
    assert_eq!((status, serde_json::from_str::<Value>(&text).expect("json")["return"].clone()), (200, json!([{ "m1": "formed body" }])), "{text}");
    let (status, text) = api.curl("/jobs", &["-H", &hdr, "-H", "Accept: application/x-yaml"]);
    assert!(status == 200 && text.starts_with("return:") && text.contains(&jid), "{status} {text}");
    let (_, r) = api.call("POST", "/", &token, Some(json!([{ "client": "wheel", "fun": "key.list_all" }])));
    assert_eq!((&r["return"][0]["data"]["return"]["minions"], &r["return"][0]["data"]["success"]), (&json!(["m1", "m2"]), &json!(true)), "{r}");
    assert_eq!(api.call("GET", "/keys", &token, None).1["return"]["minions"], json!(["m1", "m2"]));

    // limited: test.* only, on minions; cmd.run, runners and wheel refused (401).
    let lim = api.token("limited", "pw");
    let (status, r) = api.call("POST", "/", &lim, Some(json!([{ "client": "local", "tgt": "m1", "fun": "test.ping" }])));
    assert_eq!((status, &r["return"]), (200, &json!([{ "m1": true }])), "{r}");
    for chunk in [json!({ "client": "local", "tgt": "*", "fun": "cmd.run", "arg": ["id"] }), json!({ "client": "runner", "fun": "jobs.list_jobs" }), json!({ "client": "wheel", "fun": "key.delete", "match": "m1" })] {
        let (status, r) = api.call("POST", "/", &lim, Some(json!([chunk])));
        assert_eq!(status, 401, "{chunk} was allowed: {r}");
    }
    assert_eq!(api.call("GET", "/jobs", &lim, None).0, 401);
    assert_eq!(env.ids("minions"), ["m1", "m2"], "the refused key.delete deleted nothing");

    // web: target rules, resolved by the master (a glob and a grain), with argument rules.
    let web = api.token("web", "pw");
    let local = |tgt: Value, tgt_type: &str, fun: &str, arg: Value| api.call("POST", "/", &web, Some(json!([{ "client": "local", "tgt": tgt, "tgt_type": tgt_type, "fun": fun, "arg": arg }])));
    assert_eq!(local(json!("m1"), "glob", "test.ping", json!([])).1["return"], json!([{ "m1": true }]));
    assert_eq!(local(json!("m2"), "glob", "test.echo", json!(["ok go"])).1["return"], json!([{ "m2": "ok go" }]));
    assert_eq!(local(json!("*"), "glob", "test.ping", json!([])).0, 401, "m2 is not among m1's minions");
    assert_eq!(local(json!("m2"), "glob", "test.echo", json!(["bad"])).0, 401, "the argument rule");
    assert_eq!(local(json!(["m1", "m2"]), "list", "test.echo", json!(["ok"])).0, 401, "neither rule covers both minions");
    assert_eq!(local(json!("m1"), "glob", "cmd.run", json!(["id"])).0, 401);

    // Tokens: none, not hex, unknown; a token in the URL of /events is refused.
    assert_eq!(api.call("POST", "/", "", Some(json!([{ "client": "local", "tgt": "*", "fun": "test.ping" }]))).0, 401);
    assert_eq!(api.call("GET", "/jobs", "not-a-token", None).0, 401);
    assert_eq!(api.call("GET", "/jobs", &"ab".repeat(32), None).0, 401);
    assert_eq!(api.curl(&format!("/events?token={token}"), &[]).0, 400);
    // The session cookie is a token too.
    assert_eq!(api.curl("/jobs", &["-H", &format!("Cookie: session_id={token}")]).0, 200);

    // Bodies: larger than max_request_body_size (413, also without a length), bad JSON (400).
    let big = env.root.join("big.json");
    std::fs::write(&big, format!("[{{\"client\": \"local\", \"tgt\": \"*\", \"fun\": \"test.echo\", \"arg\": [\"{}\"]}}]", "x".repeat(200_000))).expect("big body");
    let at_big = format!("@{}", big.display());
    assert_eq!(api.curl("/", &["-H", &hdr, "-H", "Content-Type: application/json", "--data-binary", &at_big]).0, 413);
    assert_eq!(api.curl("/", &["-H", &hdr, "-H", "Content-Type: application/json", "-H", "Transfer-Encoding: chunked", "--data-binary", &at_big]).0, 413);
    assert_eq!(api.curl("/", &["-H", &hdr, "-H", "Content-Type: application/json", "--data-binary", "[{"]).0, 400);
    assert_eq!(api.curl("/nowhere", &[]).0, 404);
    // Heads: more than 100 headers, or more than 64 KiB of them, are refused (431).
    let many: Vec<String> = (0..150).map(|i| format!("X-Filler-{i}: x")).collect();
    let mut args: Vec<&str> = Vec::new();
    many.iter().for_each(|h| args.extend(["-H", h.as_str()]));
    assert_eq!(api.curl("/", &args).0, 431);
    let huge = format!("X-Huge: {}", "y".repeat(100_000));
    assert_eq!(api.curl("/", &["-H", &huge]).0, 431);
    // The server is still there.
    assert_eq!(api.curl("/", &[]).0, 200);

    // local: a minion the job went to that does not return in time is `false`, as
    // Salt's LocalClient.cmd lists it.
    let mut m2 = _m2;
    m2.stop();
    let (status, r) = api.call("POST", "/", &token, Some(json!([{ "client": "local", "tgt": "*", "fun": "test.ping", "timeout": 5 }])));
    assert_eq!((status, &r["return"]), (200, &json!([{ "m1": true, "m2": false }])), "{r}");

    // Logout revokes: the token is refused afterwards, limited's still works.
    let (status, r) = api.call("POST", "/logout", &token, None);
    assert_eq!((status, &r["return"]), (200, &json!("Your token has been cleared")), "{r}");
    assert_eq!(api.call("GET", "/jobs", &token, None).0, 401);
    sse.wait_exit("the event stream to end after the logout", 60);
    assert_eq!(api.call("POST", "/", &lim, Some(json!([{ "client": "local", "tgt": "m1", "fun": "test.ping" }]))).0, 200);
    let log = std::fs::read_to_string(env.root.join("salt-api.log")).unwrap_or_default();
    assert!(log.contains("call refused by external_auth"), "{log}");

    // Only hashes are in the log: the tokens appear nowhere in it (read offline).
    drop(api);
    let mut m = m;
    m.proc.stop();
    let dump = m.env.ok(CTL, &["dump", "--json", "--kind", "eauth_token"]);
    let users: Vec<String> = dump.lines().map(|l| json(l)["record"]["user"].as_str().unwrap_or("").to_string()).collect();
    assert_eq!(users, ["fred", "limited", "web", ""], "three creates and a revoke: {dump}");
    assert!(!dump.contains(&token) && !dump.contains(&lim) && !dump.contains(&web), "a token itself reached the log: {dump}");
}

/// A second salt-api on the same master with `token_expire: 3`: its token is refused once
/// it has expired, with no logout.
#[test]
fn an_expired_token_is_refused() {
    let ip = one_ip();
    let port = port_free_on(&[&ip]);
    let env = Env::master(&ip, "localfs_key", "");
    env.append_conf(&api_conf(&env.root, &ip, port, 3));
    let m = Running::start(env);
    let api = Api::start(&m.env.root.join("conf"), &m.env.root.join("salt-api.log"), &ip, port);
    let (status, me) = api.login("fred", "s3cret");
    assert_eq!(status, 200, "{me}");
    let (start, expire) = (me["start"].as_f64().expect("start"), me["expire"].as_f64().expect("expire"));
    assert!((expire - start - 3.0).abs() < 0.01, "{me}");
    let token = me["token"].as_str().expect("token").to_string();
    wait_for("the token to expire", 60, || api.call("GET", "/jobs", &token, None).0 == 401);
    // And a new login works again.
    let fresh = api.token("fred", "s3cret");
    assert_ne!(fresh, token);
}

/// `token_expire_user_override` as Salt reads it: a `token_expire` in a `/login` or
/// `/token` body is honoured for the users the option names under their eauth backend,
/// dropped for the others (the master's `token_expire` applies), and a token made to
/// last 3 s is refused once it has expired.
#[test]
fn a_login_sets_its_own_token_expire_only_where_the_override_allows() {
    let ip = one_ip();
    let port = port_free_on(&[&ip]);
    let env = Env::master(&ip, "localfs_key", "");
    env.append_conf(&api_conf(&env.root, &ip, port, 600));
    env.append_conf("token_expire_user_override:\n  file:\n    - fred\n");
    let m = Running::start(env);
    let api = Api::start(&m.env.root.join("conf"), &m.env.root.join("salt-api.log"), &ip, port);
    let login = |user: &str, password: &str, expire: Value| {
        let body = json!({ "username": user, "password": password, "eauth": "file", "token_expire": expire }).to_string();
        let (status, text) = api.curl("/login", &["-i", "-H", "Content-Type: application/json", "-H", "Accept: application/json", "--data-binary", &body]);
        let json_at = text.find("{").unwrap_or(text.len());
        (status, text[..json_at].to_string(), serde_json::from_str::<Value>(&text[json_at..]).map(|v| v["return"][0].clone()).unwrap_or(Value::Null))
    };
    let lasts = |r: &Value| r["expire"].as_f64().expect("expire") - r["start"].as_f64().expect("start");
    // fred is named: his own lifetime, also in the cookie.
    let (status, head, fred) = login("fred", "s3cret", json!(3));
    assert_eq!(status, 200, "{fred}");
    assert!((lasts(&fred) - 3.0).abs() < 0.01, "{fred}");
    assert!(head.to_ascii_lowercase().contains("max-age=3;"), "{head}");
    // limited is not: the master's token_expire.
    let (status, _, lim) = login("limited", "pw", json!(3));
    assert_eq!(status, 200, "{lim}");
    assert!((lasts(&lim) - 600.0).abs() < 0.01, "{lim}");
    // A lifetime that is no number of seconds is refused for a named user.
    for bad in [json!("soon"), json!(-5), json!(0), json!(1e12)] {
        assert_eq!(login("fred", "s3cret", bad.clone()).0, 400, "{bad}");
    }
    // /token (the runner auth.mk_token) takes it too.
    let body = json!({ "username": "fred", "password": "s3cret", "eauth": "file", "token_expire": 7 }).to_string();
    let (status, text) = api.curl("/token", &["-H", "Content-Type: application/json", "-H", "Accept: application/json", "--data-binary", &body]);
    assert_eq!(status, 200, "{text}");
    let made: Value = serde_json::from_str(&text).expect("JSON");
    assert!((lasts(&made[0]) - 7.0).abs() < 0.01, "{made}");
    // Without token_expire, fred's token lasts the master's; his 3-second one expires.
    let (status, _, long) = login("fred", "s3cret", Value::Null);
    assert_eq!(status, 200, "{long}");
    assert!((lasts(&long) - 600.0).abs() < 0.01, "{long}");
    let (fred_tok, long_tok) = (fred["token"].as_str().unwrap().to_string(), long["token"].as_str().unwrap().to_string());
    wait_for("fred's short token to expire", 60, || api.call("GET", "/jobs", &fred_tok, None).0 == 401);
    assert_eq!(api.call("GET", "/jobs", &long_tok, None).0, 200);
}

/// A token made through member 0 of a three-member cluster works through member 1, and
/// a logout through member 1 revokes it on member 0.
#[test]
fn a_token_made_through_one_member_works_and_is_revoked_through_another() {
    let mut c = founding(3, "saltapi", "");
    let mut apis = Vec::new();
    for i in 0..2 {
        let env = &c.envs[i];
        let port = port_free_on(&[&env.ip]);
        env.append_conf(&api_conf(&env.root, &env.ip, port, 43200));
        apis.push(Api::start(&env.root.join("conf"), &env.root.join("salt-api.log"), &env.ip, port));
    }
    let token = apis[0].token("fred", "s3cret");
    let runner = json!([{ "client": "runner", "fun": "jobs.list_jobs" }]);
    assert_eq!(apis[0].call("POST", "/", &token, Some(runner.clone())).0, 200);
    wait_for("the token to work through member 1", 30, || apis[1].call("POST", "/", &token, Some(runner.clone())).0 == 200);
    let (status, r) = apis[1].call("POST", "/logout", &token, None);
    assert_eq!(status, 200, "{r}");
    wait_for("the revocation to reach member 0", 30, || apis[0].call("POST", "/", &token, Some(runner.clone())).0 == 401);
    assert_eq!(apis[1].call("POST", "/", &token, Some(runner)).0, 401);
    drop(apis);
    c.stop(0);
}
