//! The file server and pillar: `state.apply` of a Jinja sls with a `salt://` source,
//! `cp.list_master`, `cp.get_file` and `pillar.items` on a real salt-minion 3008.5, and
//! the file server asked by hand for paths that leave the roots.

use serde_json::json;

use crate::support::*;

/// [`Served`] with `srv/salt/web.sls` (Jinja, a `file.managed` from `salt://`) and
/// `srv/salt/files/motd.txt` in the file roots. Returns it and the managed file's path.
fn with_web_state() -> (Served, std::path::PathBuf) {
    let s = Served::start(Accept::Auto, "", "");
    let srv = s.env.root.join("srv/salt");
    std::fs::create_dir_all(srv.join("files")).expect("roots");
    let target = s.env.root.join("managed.txt");
    std::fs::write(
        srv.join("web.sls"),
        format!(
            "{{% set who = grains['id'] %}}\n{t}:\n  file.managed:\n    - source: salt://files/motd.txt\n    - template: jinja\n    - context:\n        greeting: hello from {{{{ who }}}}\n",
            t = target.display()
        ),
    )
    .expect("web.sls");
    std::fs::write(srv.join("files/motd.txt"), "{{ greeting }}\n").expect("motd.txt");
    (s, target)
}

#[test]
fn state_apply_renders_a_jinja_sls_with_a_managed_file_from_the_file_server() {
    let (s, target) = with_web_state();
    let o = s.env.salt(&["m1", "state.apply", "web", "--out", "json"], 60);
    assert!(o.status.success(), "state.apply failed: {}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&target).expect("the managed file"), "hello from m1\n");
}

/// What Salt 3008.5's own highstate outputter prints for `data` with `state_output`
/// and `state_verbose` (no colours), in the reference venv's Python.
fn reference_highstate(data: &serde_json::Value, state_output: &str, state_verbose: bool, state_output_diff: bool) -> String {
    let py = |b: bool| if b { "True" } else { "False" };
    let body = format!(
        "import json, sys, salt.config, salt.output\nopts = dict(salt.config.DEFAULT_MASTER_OPTS)\nopts.update(color=False, state_output={state_output:?}, state_verbose={v}, state_output_diff={d})\nprint(salt.output.out_format(json.load(open(sys.argv[1])), 'highstate', opts))\n",
        v = py(state_verbose),
        d = py(state_output_diff)
    );
    let input = tempfile::NamedTempFile::new().expect("a temp file");
    std::fs::write(input.path(), data.to_string()).expect("write the data");
    run_ok(std::process::Command::new(reference_venv().join("bin/python")).arg("-c").arg(body).arg(input.path()), std::time::Duration::from_secs(120))
}

/// `salt` prints a state run as Salt does: the minion names the highstate outputter in
/// its return, and Salt 3008.5's outputter, given the same job's returns
/// (`jobs.lookup_jid`), prints the same bytes, in full, with `--state-output terse` and
/// with `--state-verbose False` and with `--output-diff`; `salt-run jobs.lookup_jid`
/// prints it the same. A failed state makes the exit code 1.
#[test]
fn state_apply_prints_salts_highstate_as_the_reference_does() {
    let s = Served::start(Accept::Auto, "", "");
    let srv = s.env.root.join("srv/salt");
    std::fs::create_dir_all(&srv).expect("roots");
    std::fs::write(srv.join("demo.sls"), "changed:\n  test.succeed_with_changes: []\nclean:\n  test.succeed_without_changes: []\nbroken:\n  test.fail_without_changes: []\n").expect("demo.sls");
    for (flags, form, verbose, diff) in [(vec![], "full", true, false), (vec!["--state-output", "terse"], "terse", true, false), (vec!["--state-verbose", "False"], "full", false, false), (vec!["--output-diff"], "full", true, true)] {
        let mut args = vec!["m1", "state.apply", "demo"];
        args.extend(flags.iter().copied());
        let o = s.env.salt(&args, 60);
        let printed = String::from_utf8_lossy(&o.stdout).to_string();
        assert_eq!(o.status.code(), Some(1), "a failed state: exit code 1\n{printed}");
        let (jid, _) = s.env.newest_job("state.apply").expect("the state.apply job");
        let data = s.env.runner(&["jobs.lookup_jid", &jid]);
        assert_eq!(data["m1"].as_object().map(|m| m.len()), Some(3), "{data}");
        assert!(printed.contains("Summary for m1\n") && printed.contains("Failed:    1"), "{printed}");
        assert_eq!(printed.contains("Name: clean - Function: test.succeed_without_changes - Result: Clean"), form == "terse", "{printed}");
        assert_eq!(printed.contains("ID: clean"), form == "full" && verbose && !diff, "{printed}");
        assert_eq!(printed, reference_highstate(&data, form, verbose, diff), "{flags:?}");
        if flags.is_empty() {
            // salt-run jobs.lookup_jid prints the same job as a highstate too (the
            // returns name their outputter), as Salt's runner does.
            assert_eq!(s.env.ok(SALT_RUN, &["jobs.lookup_jid", &jid]), printed);
        }
    }
}

/// `--out json --out-indent -1` prints each minion on one line; `--out-file` writes the
/// output there instead of standard output (emptied first), `--out-file-append` adds.
#[test]
fn out_indent_and_out_file_shape_the_output_as_salts() {
    let s = Served::start(Accept::Auto, "", "");
    let file = s.env.root.join("out.json");
    std::fs::write(&file, "stale\n").expect("a stale file");
    let f = file.display().to_string();
    let o = s.env.salt(&["m1", "test.ping", "--out", "json", "--out-indent", "-1", "--out-file", &f], 30);
    assert!(o.status.success() && o.stdout.is_empty(), "{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(std::fs::read_to_string(&file).expect("the out file"), "{\"m1\": true}\n");
    let o = s.env.salt(&["m1", "test.echo", "hi", "--out", "json", "--out-indent", "-1", "--out-file", &f, "--out-file-append"], 30);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&file).expect("the out file"), "{\"m1\": true}\n{\"m1\": \"hi\"}\n");
}

#[test]
fn cp_list_master_lists_the_file_roots() {
    let (s, _) = with_web_state();
    let v = s.env.salt_json(&["m1", "cp.list_master"], 30);
    assert_eq!(v["m1"], json!(["files/motd.txt", "web.sls"]), "{v}");
}

#[test]
fn cp_get_file_copies_the_exact_bytes() {
    let (s, _) = with_web_state();
    let copy = s.env.root.join("copy.sls");
    let o = s.env.salt(&["m1", "cp.get_file", "salt://web.sls", &copy.display().to_string(), "--out", "json"], 30);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(std::fs::read(&copy).expect("the copy"), std::fs::read(s.env.root.join("srv/salt/web.sls")).expect("web.sls"));
}

#[test]
fn pillar_is_compiled_from_top_matching_jinja_and_a_recursive_merge() {
    let s = Served::start(Accept::Auto, "", "");
    let pil = s.env.root.join("srv/pillar");
    std::fs::create_dir_all(&pil).expect("pillar roots");
    // A glob match, a grain match, and a match that does not apply to m1.
    std::fs::write(pil.join("top.sls"), "base:\n  '*':\n    - common\n  'kernel:Linux':\n    - match: grain\n    - linux\n  'nomatch*':\n    - secret\n").expect("top.sls");
    std::fs::write(pil.join("common.sls"), "greeting: hello {{ grains['id'] }}\nsettings:\n  a: 1\n").expect("common.sls");
    std::fs::write(pil.join("linux.sls"), "settings:\n  kernel: {{ salt['grains.get']('kernel') }}\n").expect("linux.sls");
    std::fs::write(pil.join("secret.sls"), "password: not-for-m1\n").expect("secret.sls");
    let v = s.env.salt_json(&["m1", "pillar.items", "unmask=True"], 30);
    assert_eq!(v["m1"], json!({"greeting": "hello m1", "settings": {"a": 1, "kernel": "Linux"}}), "{v}");
}

// ---------------------------------------------------------------------------------------
// The file server asked by hand, as an authenticated minion.

/// A master serving `srv/` (ok.txt, a subdirectory, a symlink to `outside.txt` next to
/// `srv/`) and a minion signed in by hand.
fn file_server() -> (Running, WireMinion) {
    let env = Env::master(&one_ip(), "localfs_key", "auto_accept: True\nfile_roots:\n  base:\n    - @ROOT@/srv\n");
    let srv = env.root.join("srv");
    std::fs::create_dir_all(srv.join("sub")).expect("roots");
    std::fs::write(srv.join("ok.txt"), "inside\n").expect("ok.txt");
    std::fs::write(env.root.join("outside.txt"), "secret\n").expect("outside.txt");
    std::os::unix::fs::symlink(env.root.join("outside.txt"), srv.join("escape.txt")).expect("symlink");
    let m = Running::start(env);
    let hand = WireMinion::sign_in(&m.env, "hand-1");
    (m, hand)
}

fn ask(hand: &WireMinion, cmd: &str, path: &str, saltenv: &str) -> rmpv::Value {
    match hand.ask(load(&[("cmd", cmd.into()), ("path", path.into()), ("saltenv", saltenv.into()), ("loc", 0.into())])) {
        AesReply::Value(v) => v,
        AesReply::BadLoad => panic!("{cmd} {path}: bad load"),
    }
}

fn data(v: &rmpv::Value) -> Option<String> {
    halite_master::wire::payload::get_bytes(v, "data").map(|b| String::from_utf8_lossy(b).into_owned())
}

#[test]
fn the_file_server_serves_and_hashes_a_file_inside_the_roots() {
    let (_m, hand) = file_server();
    assert_eq!(data(&ask(&hand, "_serve_file", "ok.txt", "base")).as_deref(), Some("inside\n"));
    assert!(halite_master::wire::payload::get_text(&ask(&hand, "_file_hash", "ok.txt", "base"), "hsum").is_some());
}

#[test]
fn the_file_server_serves_nothing_outside_the_roots() {
    let (m, hand) = file_server();
    // `..`, an absolute path, a saltenv of `..`, a symlink pointing out.
    let outside = m.env.root.join("outside.txt").display().to_string();
    for (path, saltenv) in [("../outside.txt", "base"), ("sub/../../outside.txt", "base"), (outside.as_str(), "base"), ("ok.txt", ".."), ("escape.txt", "base")] {
        assert_eq!(data(&ask(&hand, "_serve_file", path, saltenv)).as_deref(), Some(""), "{path} in {saltenv} was served");
        assert_eq!(ask(&hand, "_file_hash", path, saltenv), rmpv::Value::from(""), "{path} in {saltenv} was hashed");
    }
}
