//! salt-api's logins and transport beyond the `file` backend's text files, with a real
//! HTTP client (curl) and real salt-minion 3008.5 processes: eauth `pam` through a real
//! Linux-PAM stack (its service file in a directory of the test's own, read through
//! `halite_pam_confdir`, so the host's /etc/pam.d is never touched), with `GROUP%`
//! entries from the user's system groups; eauth `file` with an htpasswd file written by
//! Apache's `htpasswd` (bcrypt, MD5-crypt and {SHA} lines, baked in).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::*;


/// A running salt-api.
struct Api {
    _proc: Proc,
    base: String,
    /// curl's options for the transport (`--cacert FILE` for TLS).
    tls: Vec<String>,
}

impl Api {
    fn start(conf_dir: &Path, log: &Path, base: String, tls: Vec<String>) -> Api {
        let proc = Proc::spawn_logged("salt-api", Command::new(salt_api()).args(["-c", &conf_dir.display().to_string(), "-l", "info"]), log);
        let api = Api { _proc: proc, base, tls };
        wait_for("salt-api to answer", 60, || api.curl("/", &[]).0 == 200);
        api
    }

    fn curl(&self, path: &str, args: &[&str]) -> (u16, String) {
        curl(&format!("{}{path}", self.base), &self.tls, args)
    }

    fn call(&self, token: &str, body: Value) -> (u16, Value) {
        let (hdr, data) = (format!("X-Auth-Token: {token}"), body.to_string());
        let (status, text) = self.curl("/", &["-H", &hdr, "-H", "Accept: application/json", "-H", "Content-Type: application/json", "--data-binary", &data]);
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn login(&self, eauth: &str, user: &str, password: &str) -> (u16, Value) {
        let body = json!({ "username": user, "password": password, "eauth": eauth }).to_string();
        let (status, text) = self.curl("/login", &["-H", "Content-Type: application/json", "-H", "Accept: application/json", "--data-binary", &body]);
        (status, serde_json::from_str::<Value>(&text).map(|v| v["return"][0].clone()).unwrap_or(Value::Null))
    }
}

/// `curl TLS ARGS URL`: the status (0: no HTTP answer) and the body.
fn curl(url: &str, tls: &[String], args: &[&str]) -> (u16, String) {
    let o = run(Command::new("curl").args(["-sS", "--max-time", "60", "-w", "\n%{http_code}"]).args(tls).args(args).arg(url), Duration::from_secs(90));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A PAM service `halite-api` in `root/pam.d` whose only auth module is pam_exec running
/// `root/check-pw.sh`, which reads the password PAM hands it on stdin: `alice` and
/// `root` log in with "open sesame", nobody else.
fn pam_service(root: &Path) -> std::path::PathBuf {
    let dir = root.join("pam.d");
    std::fs::create_dir_all(&dir).expect("pam.d");
    let script = root.join("check-pw.sh");
    std::fs::write(&script, "#!/bin/sh\npw=$(tr -d '\\000')\ncase \"$PAM_USER\" in alice|root) [ \"$pw\" = 'open sesame' ] ;; *) exit 1 ;; esac\n").expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    std::fs::write(dir.join("halite-api"), format!("auth required pam_exec.so expose_authtok quiet {}\naccount required pam_permit.so\n", script.display())).expect("service file");
    dir
}

#[test]
fn pam_logins_through_a_real_pam_stack_with_group_rules() {
    let ip = one_ip();
    let port = port_free_on(&[&ip]);
    let env = Env::master(&ip, "localfs_key", "auto_accept: True\n");
    let pam_dir = pam_service(&env.root);
    // Written by `htpasswd -B -C 5` (bob: "hunter2 b"), `-m` (amy: "apr pass"), `-s` (sam: "sha pass").
    let htpasswd = env.root.join("api.htpasswd");
    std::fs::write(&htpasswd, "bob:$2y$05$UwAcFQIFjkqFkqPws3aKJ.GLALqbm/l8MSc8xXLioP74dMw4CrDzu\namy:$apr1$LpC92ioe$6A/mlTIk2NCqv4gd1aBmA.\nsam:{SHA}KvPXpIScDQubdcQXyPXUdUCmoqA=\n").expect("htpasswd");
    env.append_conf(&format!(
        "timeout: 30\nnetapi_enable_clients: [local, runner]\nauth.pam.service: halite-api\nhalite_pam_confdir: {}\nexternal_auth:\n  pam:\n    alice:\n      - 'test.ping'\n    'root%':\n      - '@runner'\n      - 'test.*'\n  file:\n    ^filename: {}\n    ^filetype: htpasswd\n    '*':\n      - 'test.*'\n\
         rest_cherrypy:\n  host: {ip}\n  port: {port}\n  disable_ssl: True\n",
        pam_dir.display(),
        htpasswd.display()
    ));
    let m = Running::start(env);
    let env = &m.env;
    let _m1 = start_minion(&env.root, "m1", &format!("master: {}\nmaster_port: {}\n", env.ip, env.ret));
    wait_ping(env, "m1", 90);
    let api = Api::start(&env.root.join("conf"), &env.root.join("salt-api.log"), format!("http://{ip}:{port}"), vec![]);

    // The PAM stack decides: wrong passwords and users it refuses get 401.
    assert_eq!(api.login("pam", "alice", "open sesame!").0, 401);
    assert_eq!(api.login("pam", "mallory", "open sesame").0, 401);
    let (status, alice) = api.login("pam", "alice", "open sesame");
    assert_eq!(status, 200, "{alice}");
    assert_eq!((&alice["eauth"], &alice["perms"]), (&json!("pam"), &json!(["test.ping"])), "alice is in no system group the rules name: {alice}");
    let alice = alice["token"].as_str().expect("token").to_string();
    let (status, r) = api.call(&alice, json!({ "client": "local", "tgt": "m1", "fun": "test.ping" }));
    assert_eq!((status, &r["return"]), (200, &json!([{ "m1": true }])), "{r}");
    assert_eq!(api.call(&alice, json!({ "client": "local", "tgt": "m1", "fun": "test.echo", "arg": ["x"] })).0, 401);
    assert_eq!(api.call(&alice, json!({ "client": "runner", "fun": "jobs.list_jobs" })).0, 401);

    // root is in the system group root: the `root%` entry's rules are its own.
    let (status, root) = api.login("pam", "root", "open sesame");
    assert_eq!(status, 200, "{root}");
    assert_eq!(root["perms"], json!(["@runner", "test.*"]), "{root}");
    let root = root["token"].as_str().expect("token").to_string();
    // Jobs record the eauth user who published them (alice's test.ping above).
    let (status, jobs) = api.call(&root, json!({ "client": "runner", "fun": "jobs.list_jobs" }));
    assert_eq!(status, 200, "{jobs}");
    let users: Vec<&Value> = jobs["return"][0].as_object().expect("jobs").values().filter(|j| j["Function"] == "test.ping").map(|j| &j["User"]).collect();
    // (wait_ping's, earlier, are root's.)
    assert_eq!(users.last(), Some(&&json!("alice")), "{jobs}");
    assert_eq!(users.iter().filter(|u| ***u == json!("alice")).count(), 1, "{jobs}");
    let (status, r) = api.call(&root, json!({ "client": "local", "tgt": "m1", "fun": "test.echo", "arg": ["through pam"] }));
    assert_eq!((status, &r["return"]), (200, &json!([{ "m1": "through pam" }])), "{r}");

    // The htpasswd file: each scheme's user logs in with their password only.
    for (user, pw) in [("bob", "hunter2 b"), ("amy", "apr pass"), ("sam", "sha pass")] {
        assert_eq!(api.login("file", user, &format!("{pw}x")).0, 401, "{user} with a wrong password");
        let (status, me) = api.login("file", user, pw);
        assert_eq!((status, &me["perms"]), (200, &json!(["test.*"])), "{user}: {me}");
    }
    let bob = api.login("file", "bob", "hunter2 b").1["token"].as_str().expect("token").to_string();
    let (status, r) = api.call(&bob, json!({ "client": "local", "tgt": "m1", "fun": "test.echo", "arg": ["bcrypt"] }));
    assert_eq!((status, &r["return"]), (200, &json!([{ "m1": "bcrypt" }])), "{r}");
    // PAM's users are not the file's.
    assert_eq!(api.login("file", "alice", "open sesame").0, 401);

    // netapi_enable_clients lists local and runner only: wheel (also behind GET /keys)
    // is refused as Salt refuses it, whoever asks.
    let (status, r) = api.call(&root, json!({ "client": "wheel", "fun": "key.list_all" }));
    assert_eq!(status, 400, "{r}");
    assert!(r.to_string().contains("Client disabled: 'wheel'"), "{r}");
    assert_eq!(api.call(&root, json!({ "client": "local_async", "tgt": "m1", "fun": "test.ping" })).0, 400);
}


/// HTTPS with `ssl_crt`/`ssl_key` (a certificate the openssl CLI makes for the test's
/// address): curl trusting that certificate logs in and runs test.ping on a real minion;
/// plain HTTP to the port gets no answer; without `disable_ssl` and without the files
/// salt-api refuses to start.
#[test]
fn https_with_ssl_crt_and_ssl_key() {
    let ip = one_ip();
    let port = port_free_on(&[&ip]);
    let env = Env::master(&ip, "localfs_key", "auto_accept: True\n");
    let (crt, key) = (env.root.join("api.crt"), env.root.join("api.key"));
    run_ok(
        Command::new("openssl")
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=halite-api", "-addext", &format!("subjectAltName=IP:{ip}")])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&crt),
        Duration::from_secs(60),
    );
    std::fs::write(env.root.join("users.txt"), "fred:s3cret\n").expect("users");
    let users = env.root.join("users.txt");
    let auth = format!("timeout: 30\nnetapi_enable_clients: [local]\nexternal_auth:\n  file:\n    ^filename: {}\n    fred:\n      - 'test.*'\n", users.display());

    // Neither disable_ssl nor the files: salt-api says what is missing and stops.
    let bad = env.root.join("bad-conf");
    std::fs::create_dir_all(&bad).expect("dir");
    std::fs::write(bad.join("master"), format!("{}rest_cherrypy:\n  host: {ip}\n  port: {port}\n", std::fs::read_to_string(env.root.join("conf/master")).expect("conf"))).expect("bad conf");
    let o = run(Command::new(salt_api()).args(["-c", &bad.display().to_string()]), Duration::from_secs(60));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("ssl_crt and ssl_key are required"), "{err}");

    env.append_conf(&format!("{auth}rest_cherrypy:\n  host: {ip}\n  port: {port}\n  ssl_crt: {}\n  ssl_key: {}\n", crt.display(), key.display()));
    let m = Running::start(env);
    let env = &m.env;
    let _m1 = start_minion(&env.root, "m1", &format!("master: {}\nmaster_port: {}\n", env.ip, env.ret));
    wait_ping(env, "m1", 90);
    let cacert = crt.display().to_string();
    let api = Api::start(&env.root.join("conf"), &env.root.join("salt-api.log"), format!("https://{ip}:{port}"), vec!["--cacert".into(), cacert]);

    let (status, me) = api.login("file", "fred", "s3cret");
    assert_eq!(status, 200, "{me}");
    let token = me["token"].as_str().expect("token").to_string();
    let (status, r) = api.call(&token, json!({ "client": "local", "tgt": "m1", "fun": "test.ping" }));
    assert_eq!((status, &r["return"]), (200, &json!([{ "m1": true }])), "{r}");

    // Plain HTTP on the TLS port: no HTTP answer (curl's code 000), counted.
    assert_eq!(curl(&format!("http://{ip}:{port}/"), &[], &[]).0, 0);
    // A client that does not trust the certificate does not get through either.
    assert_eq!(curl(&format!("https://{ip}:{port}/"), &[], &[]).0, 0);
    let log = std::fs::read_to_string(env.root.join("salt-api.log")).unwrap_or_default();
    assert!(log.contains("tls_handshake"), "the refused handshakes are logged: {log}");
    // Still serving.
    assert_eq!(api.curl("/", &[]).0, 200);
}
