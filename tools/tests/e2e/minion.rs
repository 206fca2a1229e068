//! One master and unmodified salt-minion 3008.5 processes: signing in (pending, accepted,
//! autosign, rejected, denied), session keys, jobs and targeting, the event bus, the job
//! runners, a master restart and a key delete, and what the log holds afterwards.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::*;

/// Whether the master logged a `salt/auth` decision `act` (tracing writes `act="pend"`).
fn logged_auth(env: &Env, act: &str) -> bool {
    let log = env.master_log();
    log.contains(&format!("act=\"{act}\"")) || log.contains(&format!("act={act}"))
}

/// A master without auto_accept on an address of its own.
fn bare_master(extra: &str) -> Running {
    Running::start(Env::master(&one_ip(), "localfs_key", extra))
}

fn master_cfg(env: &Env) -> String {
    format!("master: {}\nmaster_port: {}\n", env.ip, env.ret)
}

// ---------------------------------------------------------------------------------------
// Signing in.

#[test]
fn a_new_minion_key_arrives_pending_with_its_exact_bytes() {
    let m = bare_master("");
    let env = &m.env;
    let _minion = start_minion(&env.root, "m1", &master_cfg(&env));
    wait_for("m1 to be pending", 90, || env.ids("minions_pre") == ["m1"]);
    let sent = std::fs::read_to_string(env.root.join("m1/pki/minion.pub")).expect("minion.pub");
    assert_eq!(std::fs::read(env.pki().join("minions_pre/m1")).expect("pending key"), sent.trim().as_bytes());
    assert!(logged_auth(&env, "pend"), "no salt/auth act pend in the master log");
}

#[test]
fn a_pending_minion_is_served_once_accepted() {
    let m = bare_master("");
    let env = &m.env;
    let _minion = start_minion(&env.root, "m1", &master_cfg(&env));
    wait_for("m1 to be pending", 90, || env.ids("minions_pre") == ["m1"]);
    let out = env.ok(SALT_KEY, &["-a", "m1", "-y"]);
    assert!(out.contains("Key for minion m1 accepted."), "{out}");
    wait_ping(&env, "m1", 90);
    assert!(logged_auth(&env, "accept"), "no salt/auth act accept in the master log");
}

#[test]
fn an_autosign_file_match_is_accepted_without_an_operator() {
    let m = bare_master("autosign_file: @ROOT@/autosign.conf\n");
    let env = &m.env;
    let autosign = env.root.join("autosign.conf");
    std::fs::write(&autosign, "# minions named auto-* sign in without salt-key\nauto-*\n").expect("autosign file");
    std::fs::set_permissions(&autosign, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let _minion = start_minion(&env.root, "auto-1", &master_cfg(&env));
    wait_ping(&env, "auto-1", 90);
    assert_eq!(env.listing()["minions"], json!(["auto-1"]));
    assert!(logged_auth(env, "accept"), "no salt/auth act accept in the master log");
}

#[test]
fn a_rejected_key_stops_the_minion() {
    let m = bare_master("");
    let env = &m.env;
    let _minion = start_minion(&env.root, "rej-1", &master_cfg(&env));
    wait_for("rej-1 to be pending", 90, || env.ids("minions_pre") == ["rej-1"]);
    let out = env.ok(SALT_KEY, &["-r", "rej-1", "-y"]);
    assert!(out.contains("Key for minion rej-1 rejected."), "{out}");
    assert_eq!(env.listing()["minions_rejected"], json!(["rej-1"]));
    wait_for("rej-1 to log its rejection", 60, || minion_log(&env.root, "rej-1").contains("has rejected this minion's public key"));
    assert!(minion_log(&env.root, "rej-1").contains("The Salt Minion will now exit."), "rej-1 gives up:\n{}", minion_log(&env.root, "rej-1"));
    assert!(logged_auth(&env, "reject"), "no salt/auth act reject in the master log");
}

/// [`Served`] m1, then a second salt-minion claiming the id m1 with its own key pair,
/// denied. Returns the impostor (its files under `env.root/impostor/m1`).
fn with_impostor(s: &Served) -> Proc {
    let p = start_minion(&s.env.root.join("impostor"), MINION, &master_cfg(&s.env));
    wait_for("the impostor's key to be denied", 90, || s.env.ids("minions_denied") == [MINION]);
    p
}

#[test]
fn another_key_for_an_accepted_id_is_denied() {
    let s = Served::start(Accept::Auto, "", "");
    let _impostor = with_impostor(&s);
    let denied = std::fs::read_to_string(s.env.pki().join("minions_denied/m1")).expect("denied key");
    let impostor_pub = std::fs::read_to_string(s.env.root.join("impostor/m1/pki/minion.pub")).expect("impostor's minion.pub");
    assert_eq!(denied.trim(), impostor_pub.trim());
    assert!(logged_auth(&s.env, "denied"), "no salt/auth act denied in the master log");
}

#[test]
fn only_the_first_denied_key_is_kept() {
    let s = Served::start(Accept::Auto, "", "");
    let _impostor = with_impostor(&s);
    let first = std::fs::read(s.env.pki().join("minions_denied/m1")).expect("denied key");
    // A third key pair for the same id. Its refusal is the signal: the master commits a
    // sign-in's records before it replies.
    let me = Identity::new(MINION.into(), halite_master::wire::crypto::PrivateKey::generate(2048).expect("key pair")).expect("identity");
    assert!(WireMinion::try_sign_in_with(&s.env.ip, s.env.ret, me, None).is_err(), "a third key for m1 was let in");
    assert_eq!(std::fs::read(s.env.pki().join("minions_denied/m1")).expect("denied key"), first, "the first denied key is kept");
}

#[test]
fn an_impostor_does_not_disturb_the_accepted_minion() {
    let s = Served::start(Accept::Auto, "", "");
    let mut impostor = with_impostor(&s);
    impostor.stop();
    assert!(ping_via(&s.env, MINION, 10), "the accepted minion still answers");
    assert_eq!(s.env.listing()["minions"], json!(["m1"]));
}

#[test]
fn a_rotated_session_key_is_picked_up_by_the_minion() {
    // publish_session: the session key is replaced after 4 s; the minion's next request
    // with the old one gets "bad load", it signs in again and its job still returns.
    let s = Served::start(Accept::Auto, "publish_session: 4\n", "");
    let sessions = s.env.root.join("cache/sessions");
    let key = || halite_master::daemon::sessions::read_keys(&sessions).remove("m1");
    let first = key().expect("m1's session key in the journal");
    wait_for("a job answered with a new session key", 60, || ping_via(&s.env, MINION, 5) && key().is_some_and(|k| k != first));
}

// ---------------------------------------------------------------------------------------
// Jobs and targeting.

#[test]
fn cmd_run_returns_the_commands_output() {
    let s = Served::start(Accept::Auto, "", "");
    assert_eq!(s.env.salt_json(&["*", "cmd.run", "echo hi"], 30), json!({"m1": "hi"}));
}

#[test]
fn job_arguments_reach_the_minion_with_their_types() {
    let s = Served::start(Accept::Auto, "", "");
    let v = s.env.salt_json(&["m1", "test.arg", "1", "two", "kw=True"], 30);
    assert_eq!(v["m1"]["args"], json!([1, "two"]), "{v}");
    assert_eq!(v["m1"]["kwargs"]["kw"], json!(true), "{v}");
}

#[test]
fn grain_pcre_and_compound_targets_match_from_the_reported_grains() {
    let s = Served::start(Accept::Auto, "", "");
    for (flag, tgt) in [("-G", "kernel:Linux"), ("-E", "m[0-9]"), ("-C", "G@kernel:Linux and m*")] {
        let o = s.env.salt(&[flag, tgt, "test.ping", "--out", "json"], 30);
        assert_eq!(serde_json::from_slice::<Value>(&o.stdout).ok(), Some(json!({"m1": true})), "{flag} {tgt}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

#[test]
fn a_listed_id_without_a_key_is_reported_as_not_returning_unless_timeouts_are_hidden() {
    let s = Served::start(Accept::Auto, "", "");
    let o = s.env.salt(&["-L", "m1,nosuch", "test.ping", "--static", "--out", "json"], 10);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_eq!(v["m1"], true, "{v}");
    assert!(v["nosuch"].as_str().unwrap_or("").starts_with("Minion did not return. [No response]"), "{v}");
    assert!(!o.status.success(), "the run fails");
    // --hide-timeout: neither printed nor counted; --show-jid and -v name the job first.
    let o = s.env.salt(&["-L", "m1,nosuch", "test.ping", "--out", "json", "--out-indent", "-1", "--hide-timeout", "--show-jid"], 10);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert!(o.status.success(), "{text}");
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("jid: 20") && lines[0].len() == "jid: ".len() + 20, "{text}");
    assert_eq!(lines[1], r#"{"m1": true}"#);
    let o = s.env.salt(&["m1", "test.ping", "-v"], 10);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("Executing job with jid 20") && lines[1] == "-".repeat(lines[0].len()) && lines[2].is_empty(), "{text}");
    assert_eq!(&lines[3..], ["m1:", "    True"], "{text}");
}

#[test]
fn a_target_matching_no_minion_fails_with_no_minions_matched() {
    let s = Served::start(Accept::Auto, "", "");
    let o = s.env.salt(&["-G", "kernel:Windows", "test.ping"], 10);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("No minions matched"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn state_event_streams_job_and_custom_events() {
    let s = Served::start(Accept::Auto, "", "");
    let (_watcher, mut lines) = Proc::spawn_lines("salt-run state.event", Command::new(SALT_RUN).args(["-c", &s.env.conf(), "state.event", "tagmatch=*"]), &s.env.root.join("state-event.log"));
    let tags = |lines: &[String]| -> Vec<String> { lines.iter().map(|l| l.split('\t').next().unwrap_or("").to_string()).collect() };
    let want = |lines: &[String]| {
        let t = tags(lines);
        t.iter().any(|t| t.starts_with("salt/job/") && t.ends_with("/new")) && t.iter().any(|t| t.starts_with("salt/job/") && t.ends_with("/ret/m1")) && t.iter().any(|t| t == "my/custom/tag")
    };
    // The watcher says nothing when it has subscribed: the event is sent again until
    // the watcher has seen one round of it.
    let mut seen = false;
    for _ in 0..10 {
        assert_eq!(s.env.salt_json(&["m1", "event.send", "my/custom/tag", "{\"x\": 1}"], 20), json!({"m1": true}));
        if lines.poll(Duration::from_secs(3), want) {
            seen = true;
            break;
        }
    }
    assert!(seen, "events seen:\n{}", lines.seen().join("\n"));
    let custom = lines.seen().iter().find(|l| l.starts_with("my/custom/tag\t")).expect("the custom event");
    let data = json(custom.split_once('\t').expect("tab").1);
    assert_eq!(data["data"]["x"], 1, "{data}");
}

/// `salt --metadata` and `--start-event` reach a real minion in the publish load: it
/// fires `salt/job/<jid>/start/<id>` (with the metadata) before it runs the job, the job
/// cache keeps the metadata, and `jobs.list_jobs search_metadata=` and `jobs.last_run
/// metadata=` find the job by it. `salt -d` prints the function's docstring.
#[test]
fn metadata_and_the_start_event_travel_with_the_job() {
    let s = Served::start(Accept::Auto, "", "");
    let (_watcher, mut lines) = Proc::spawn_lines("salt-run state.event", Command::new(SALT_RUN).args(["-c", &s.env.conf(), "state.event", "tagmatch=salt/job/*/start/*"]), &s.env.root.join("state-event.log"));
    // The watcher says nothing when it has subscribed: the job is sent again until its
    // start event is seen.
    let mut jid = None;
    for _ in 0..10 {
        assert_eq!(s.env.salt_json(&["m1", "test.ping", "--metadata", "{ticket: OPS-1}", "--start-event"], 20), json!({"m1": true}));
        let (j, _) = s.env.newest_job("test.ping").expect("the job");
        let tag = format!("salt/job/{j}/start/m1\t");
        if lines.poll(Duration::from_secs(3), |l| l.iter().any(|x| x.starts_with(&tag))) {
            jid = Some(j);
            break;
        }
    }
    let jid = jid.unwrap_or_else(|| panic!("no start event seen:\n{}", lines.seen().join("\n")));
    let line = lines.seen().iter().find(|l| l.starts_with(&format!("salt/job/{jid}/start/m1\t"))).cloned().expect("the start event");
    let data = json(line.split_once('\t').expect("tab").1);
    assert_eq!((&data["data"]["jid"], &data["data"]["fun"], &data["data"]["metadata"]), (&json!(jid), &json!("test.ping"), &json!({"ticket": "OPS-1"})), "{data}");
    // A job without --start-event fires none.
    let v = s.env.salt_json(&["m1", "test.echo", "quiet"], 20);
    assert_eq!(v, json!({"m1": "quiet"}));
    let (quiet, _) = s.env.newest_job("test.echo").expect("the echo job");
    // The minion fires a start event before it runs the job, on the channel it returns
    // on: once a later job's start event is seen, the quiet job's would have been.
    assert_eq!(s.env.salt_json(&["m1", "test.ping", "--start-event"], 20), json!({"m1": true}));
    let (later, _) = s.env.newest_job("test.ping").expect("the later job");
    let tag = format!("salt/job/{later}/start/m1\t");
    lines.wait("the later job's start event", 30, |l| l.iter().any(|x| x.starts_with(&tag)));
    assert!(!lines.seen().iter().any(|x| x.contains(&quiet)), "{:?}", lines.seen());
    // The job cache: Metadata shown and searched.
    let found = s.env.runner(&["jobs.list_jobs", "search_metadata={ticket: OPS-1}"]);
    assert!(found.get(&jid).is_some_and(|j| j["Metadata"] == json!({"ticket": "OPS-1"})), "{found}");
    assert!(found.get(&quiet).is_none(), "{found}");
    let last = s.env.runner(&["jobs.last_run", "metadata={ticket: OPS-1}", "function=test.ping"]);
    assert_eq!(last[&jid]["Result"]["m1"]["return"], json!(true), "{last}");
    assert_eq!(s.env.runner(&["jobs.list_jobs", "search_function=test.echo"]).as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()), Some(vec![quiet.clone()]));
    // salt -d: the docstring, as Salt prints sys.doc.
    let o = s.env.salt(&["m1", "-d", "test.ping"], 30);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.starts_with("test.ping:\n") && text.contains("salt '*' test.ping"), "{text}");
}

#[test]
fn the_job_runners_list_and_look_up_a_finished_job() {
    let s = Served::start(Accept::Auto, "", "");
    let (jid, job) = s.env.newest_job("test.ping").expect("a test.ping job");
    assert_eq!(job["User"], "root");
    assert!(job["StartTime"].as_str().unwrap_or("").starts_with("20"), "{job}");
    assert_eq!(s.env.runner(&["jobs.lookup_jid", &jid]), json!({"m1": true}));
}

#[test]
fn a_scheduled_jobs_return_gets_a_jid_and_a_load() {
    // The minion runs a scheduled job that returns to the master (Salt's jid "req").
    let schedule = "schedule:\n  heartbeat:\n    function: test.echo\n    args: [beat]\n    seconds: 3\n    return_job: True\n";
    let s = Served::start(Accept::Auto, "", schedule);
    let mut scheduled = None;
    wait_for("the scheduled job in the job cache", 60, || {
        scheduled = s.env.newest_job("test.echo");
        scheduled.is_some()
    });
    let (jid, job) = scheduled.expect("found");
    assert_eq!((job["Target"].as_str(), job["Target-type"].as_str()), (Some("m1"), Some("glob")), "{job}");
    assert!(jid.len() == 20 && jid.bytes().all(|b| b.is_ascii_digit()), "{jid}");
    assert_eq!(s.env.runner(&["jobs.lookup_jid", &jid]), json!({"m1": "beat"}));
}

#[test]
fn manage_runners_tell_answering_minions_from_silent_ones() {
    let s = Served::start(Accept::Auto, "", "");
    // A second accepted key, signed in once, that no minion answers for.
    WireMinion::sign_in(&s.env, "ghost");
    assert_eq!(s.env.listing()["minions"], json!(["ghost", "m1"]));
    assert_eq!(s.env.runner(&["manage.status", "-t", "5"]), json!({"up": ["m1"], "down": ["ghost"]}));
    assert_eq!(s.env.ok(SALT_RUN, &["manage.down", "-t", "5", "--out", "json"]).trim(), "[\n    \"ghost\"\n]");
}

// ---------------------------------------------------------------------------------------
// Restarts, deletes, and what stays in the log.

#[test]
fn a_minion_is_served_again_after_a_master_restart_without_signing_in_again() {
    // A lone master keeps its publish key in its log: the minion only reconnects.
    let mut s = Served::start(Accept::Auto, "", "");
    let sign_ins = |s: &Served| s.env.master_log().lines().filter(|l| l.contains("salt/auth") && l.contains(MINION)).count();
    let before = sign_ins(&s);
    assert!(before >= 1, "the master logs a minion's sign-in:\n{}", s.env.master_log());
    s.master.stop();
    s.master = start_master(&s.env);
    wait_for("test.ping after a master restart", 120, || ping_via(&s.env, MINION, 3));
    assert_eq!(sign_ins(&s), before, "the minion signed in again after the restart:\n{}", s.env.master_log());
    s.master.stop();
    let generations = s.env.record_kinds().iter().filter(|k| *k == "aes_key_rotation").count();
    assert_eq!(generations, 1, "one publish key generation, kept across the restart");
}

#[test]
fn a_job_published_after_its_key_is_deleted_never_runs_on_the_minion() {
    // Deleting the key rotates the publish key: the next publish does not decrypt for the
    // minion, which signs in again, is pending, and waits to be accepted.
    let mut s = Served::start(Accept::Operator, "", "");
    // Another accepted key, so that '*' still matches something after the delete.
    register_key(&s.env, "ghost");
    s.env.ok(SALT_KEY, &["-a", "ghost", "-y"]);
    let waits = |s: &Served| s.minion_log().matches("has cached the public key for this node").count();
    let waits_before = waits(&s);
    let out = s.env.ok(SALT_KEY, &["-d", "m1", "-y"]);
    assert!(out.contains("Key for minion m1 deleted."), "{out}");
    let o = s.env.salt(&["*", "test.ping", "--async"], 10);
    let jid = String::from_utf8_lossy(&o.stdout).trim().rsplit(' ').next().unwrap_or("").to_string();
    assert_eq!(jid.len(), 20, "{}", String::from_utf8_lossy(&o.stdout));
    wait_for("the deleted minion to sign in again as pending", 60, || s.env.ids("minions_pre") == ["m1"]);
    // The signal that the minion is past the publish: it has been told twice more that
    // its key waits for acceptance (the retry loop the undecryptable publish started).
    wait_for("the minion to wait for acceptance", 60, || waits(&s) >= waits_before + 2);
    s.master.stop();
    let log = s.minion_log();
    assert!(log.contains("Executing command 'test.ping' with jid") || log.contains("Executing command test.ping with jid"), "the minion logs the jobs it runs:\n{log}");
    assert!(!log.contains(&jid), "the minion ran a job published after its key was deleted:\n{log}");
    let returns = s.env.ok(CTL, &["dump", "--json", "--kind", "job_return"]);
    assert!(!returns.contains(&jid), "a return for the job published after the delete");
}

#[test]
fn a_served_minion_leaves_key_grains_job_and_return_records() {
    let mut s = Served::start(Accept::Auto, "", "");
    s.master.stop();
    let kinds = s.env.record_kinds();
    for k in ["key_set", "grains_report", "job_published", "job_return"] {
        assert!(kinds.iter().any(|x| x == k), "no {k} record in the log: {kinds:?}");
    }
}

#[test]
fn offline_runners_read_a_stopped_masters_job_cache() {
    let mut s = Served::start(Accept::Auto, "", "");
    let (jid, _) = s.env.newest_job("test.ping").expect("a test.ping job");
    s.master.stop();
    assert_eq!(s.env.runner(&["--offline", "jobs.lookup_jid", &jid]), json!({"m1": true}));
}

// ---------------------------------------------------------------------------------------
// A running master's own runners (no minion needed).

#[test]
fn a_single_master_is_its_own_one_voter_cluster() {
    let m = bare_master("");
    let env = &m.env;
    let m = members(&env);
    assert_eq!(m["voter_count"], 1, "{m}");
    assert_eq!(m["voters"], json!([m["node_id"].clone()]), "{m}");
}

#[test]
fn ring_info_of_a_single_master_is_not_clustered() {
    let m = bare_master("");
    let env = &m.env;
    assert_eq!(env.runner(&["cluster.ring_info"]), json!({"is_clustered": false, "node_count": 0, "nodes": [], "vnodes": 0}));
}

#[test]
fn cluster_members_reads_a_stopped_masters_log() {
    let mut m = bare_master("");
    let env = &m.env;
    m.proc.stop();
    assert_eq!(env.runner(&["--offline", "cluster.members"])["voter_count"], 1);
}

#[test]
fn pki_migrate_to_mmap_runs_online_through_the_running_master() {
    let env = Env::master(&one_ip(), "localfs_key", "");
    seed_pending(&env, &["k1"]);
    let m = Running::start(env);
    let env = &m.env;
    env.ok(SALT_KEY, &["-a", "k1", "-y"]);
    let out = env.ok(SALT_RUN, &["pki.migrate_to_mmap"]);
    assert!(out.starts_with("PKI keys migrated to mmap_key backend successfully.\n  Accepted: 1\n"), "{out}");
    let geo = halite_storage::keys::Geometry { size: 32, slot_size: 96, key_size: 64, max_segment_bytes: 2048 };
    let mm = halite_storage::keys::mmap::MmapKeys::open(&env.pki(), geo).expect("mmap view");
    use halite_storage::keys::KeyView;
    assert_eq!(mm.list().expect("list").minions, vec!["k1".to_string()]);
    // The master key pair (`<id>.pem`, which master.pem links to) is in the view too.
    let mid = std::fs::read_dir(env.pki()).expect("pki").filter_map(|e| e.ok()?.file_name().into_string().ok()).find(|n| n.ends_with(".pem") && n != "master.pem").expect("the master's key file");
    assert_eq!(mm.get_master_key(&mid).expect("read").expect("master key in the view"), std::fs::read(env.pki().join(&mid)).expect("key file"));
}

/// The JSON lines a `rawfile_json` returner wrote to `path` (none yet: empty).
fn returned_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// `salt --return rawfile_json` makes the real minion run that returner after the job
/// (its line in the file the minion config names), `--return_config alt` the returner
/// under its `alt` profile (another file); an unknown-shaped returner name is refused
/// before anything is published.
#[test]
fn a_job_names_returners_the_minion_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (plain, alt) = (dir.path().join("plain.json"), dir.path().join("alt.json"));
    let minion = format!("rawfile_json.filename: {}\nalt.rawfile_json.filename: {}\n", plain.display(), alt.display());
    let s = Served::start(Accept::Auto, "", &minion);
    let o = s.env.salt(&["m1", "test.echo", "first", "--return", "rawfile_json", "--out", "json"], 30);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    wait_for("the returner's line", 30, || returned_lines(&plain).len() == 1);
    let line = &returned_lines(&plain)[0];
    assert_eq!((line["id"].as_str(), line["return"].as_str(), line["fun"].as_str()), (Some("m1"), Some("first"), Some("test.echo")), "{line}");
    let o = s.env.salt(&["m1", "test.echo", "second", "--return", "rawfile_json", "--return_config", "alt", "--out", "json"], 30);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    wait_for("the alt profile's line", 30, || returned_lines(&alt).len() == 1);
    assert_eq!(returned_lines(&alt)[0]["return"], "second");
    // A job without --return runs no returner. The minion runs a job's returners right
    // after sending its return, so once a later job's returner has written its line, the
    // third job's would have too.
    assert_eq!(s.env.salt_json(&["m1", "test.echo", "third"], 30), json!({"m1": "third"}));
    let o = s.env.salt(&["m1", "test.echo", "last", "--return", "rawfile_json", "--out", "json"], 30);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    wait_for("the last job's returner line", 30, || returned_lines(&plain).len() >= 2);
    let returned = |p: &std::path::Path| returned_lines(p).iter().map(|l| l["return"].clone()).collect::<Vec<_>>();
    assert_eq!((returned(&plain), returned(&alt)), (vec![json!("first"), json!("last")], vec![json!("second")]));
    let o = s.env.salt(&["m1", "test.ping", "--return", "../../etc/x"], 10);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a returner name"), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The master's `ext_job_cache` is a returner of every job, as Salt's client adds it.
#[test]
fn ext_job_cache_is_every_jobs_returner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = dir.path().join("plain.json");
    let s = Served::start(Accept::Auto, "ext_job_cache: rawfile_json\n", &format!("rawfile_json.filename: {}\n", plain.display()));
    assert_eq!(s.env.salt_json(&["m1", "test.echo", "cached"], 30), json!({"m1": "cached"}));
    wait_for("the ext_job_cache line", 30, || returned_lines(&plain).iter().any(|l| l["return"] == "cached"));
}

/// `salt '*' sys.doc FUN...` prints each function's docstring once, as Salt's `salt`
/// does: `fun:`, the text, an empty line, functions sorted.
#[test]
fn sys_doc_prints_each_functions_docstring_once() {
    let s = Served::start(Accept::Auto, "", "");
    let o = s.env.salt(&["m1", "sys.doc", "test.ping", "test.echo"], 30);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{text}{}", String::from_utf8_lossy(&o.stderr));
    let (echo, ping) = (text.find("test.echo:\n").expect("test.echo's entry"), text.find("test.ping:\n").expect("test.ping's entry"));
    assert!(echo < ping && text.ends_with("\n\n"), "{text}");
    assert!(text[ping..].contains("Used to make sure the minion is up and responding"), "{text}");
    assert!(!text.contains("m1:"), "the docs, not the minion's return: {text}");
}
