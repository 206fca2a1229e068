//! Parsing chunks: every client's fields checked before anything runs.

use serde_json::{json, Map, Value as J};

use super::batch::Opts;
use super::*;
use halite_tools::batch::BatchSpec;

fn chunk(v: J) -> Map<String, J> {
    v.as_object().unwrap().clone()
}

fn parse(v: J) -> Result<Command, ApiError> {
    Command::parse(&chunk(v), None)
}

fn status(v: J) -> (u16, String) {
    let e = parse(v).unwrap_err();
    (e.status, e.msg)
}

#[test]
fn every_client_parses() {
    for c in CLIENTS {
        let cmd = parse(json!({"client": c, "tgt": "*", "fun": "test.ping"})).unwrap_or_else(|e| panic!("{c}: {e:?}"));
        let name = match cmd {
            Command::Local(_) => "local",
            Command::LocalAsync(_) => "local_async",
            Command::LocalBatch(..) => "local_batch",
            Command::LocalSubset(..) => "local_subset",
            Command::Runner(_) => "runner",
            Command::RunnerAsync(_) => "runner_async",
            Command::Wheel(_) => "wheel",
            Command::WheelAsync(_) => "wheel_async",
        };
        assert_eq!(name, c);
    }
    assert_eq!(status(json!({"client": "ssh", "tgt": "*", "fun": "test.ping"})).0, 400);
    assert_eq!(status(json!({"client": 1, "fun": "test.ping"})).0, 400);
    assert_eq!(status(json!({"client": "local", "tgt": "*"})).1, "Missing fun");
    assert_eq!(status(json!({"client": "local", "tgt": "*", "fun": ["a"]})).0, 400);
    assert_eq!(status(json!({"client": "local", "fun": "test.ping"})).1, "Missing tgt");
    assert_eq!(status(json!({"client": "local", "tgt": "*", "fun": "test.ping", "tgt_type": 3})).0, 400);
    assert_eq!(status(json!({"client": "local", "tgt": "*", "fun": "test.ping", "kwarg": [1]})).0, 400);
    assert_eq!(status(json!({"client": "local", "tgt": "*", "fun": "test.ping", "timeout": "soon"})).0, 400);
    assert_eq!(status(json!({"client": "local", "tgt": "*", "fun": "test.ping", "timeout": -1})).0, 400);
    let Command::Local(c) = parse(json!({"client": "local", "tgt": "*", "fun": "test.ping", "timeout": "1e9"})).unwrap() else { panic!() };
    assert_eq!(c.timeout, Some(local::MAX_TIMEOUT_SECS), "bounded");
    // The endpoint's client wins over the chunk's.
    assert!(matches!(Command::parse(&chunk(json!({"client": "runner", "tgt": "*", "fun": "test.ping"})), Some("local_async")), Ok(Command::LocalAsync(_))));
}

#[test]
fn batch_values_as_salt_reads_them_and_bounded() {
    let opts = |v: J| match parse(json!({"client": "local_batch", "tgt": "*", "fun": "test.ping", "batch": v})) {
        Ok(Command::LocalBatch(_, o)) => Ok(o),
        Ok(other) => panic!("{other:?}"),
        Err(e) => Err(e),
    };
    assert_eq!(opts(json!(1)).unwrap().spec, BatchSpec::Count(1));
    assert_eq!(opts(json!("2")).unwrap().spec, BatchSpec::Count(2));
    assert_eq!(opts(json!("25%")).unwrap().spec, BatchSpec::Percent(25.0));
    assert_eq!(opts(json!("%10")).unwrap().spec, BatchSpec::Percent(10.0));
    assert_eq!(opts(J::Null).unwrap().spec, BatchSpec::Percent(10.0), "Salt's default");
    for bad in [json!(0), json!(-1), json!(1.5), json!(true), json!("x"), json!("0"), json!("-5%"), json!([1]), json!({"n": 1}), json!("9".repeat(100)), json!("")] {
        let e = opts(bad.clone()).unwrap_err();
        assert_eq!(e.status, 400, "{bad}");
        assert!(e.msg.starts_with("Invalid batch data sent"), "{e:?}");
        assert!(e.msg.len() < 200, "the value is cut short in the message");
    }
    let o = Opts::parse(&chunk(json!({"batch_wait": 2, "failhard": true}))).unwrap();
    assert_eq!((o.wait.as_secs(), o.failhard), (2, true));
    assert!(Opts::parse(&chunk(json!({"failhard": "True"}))).unwrap().failhard, "a form's string");
    for bad in [json!({"batch_wait": -1}), json!({"batch_wait": 1e12}), json!({"batch_wait": "x"}), json!({"failhard": 1}), json!({"failhard": "yes"})] {
        assert_eq!(Opts::parse(&chunk(bad.clone())).unwrap_err().status, 400, "{bad}");
    }
}

#[test]
fn runner_and_wheel_keywords() {
    let Ok(Command::RunnerAsync(c)) = parse(json!({"client": "runner_async", "fun": "jobs.lookup_jid", "jid": "1", "token": "x", "__x": 1, "arg": "a"})) else { panic!() };
    assert_eq!(c.kwarg, chunk(json!({"jid": "1"})), "the client's own keys are not keyword arguments");
    assert_eq!(c.fun_args(), json!(["a", {"jid": "1"}]));
    let Ok(Command::WheelAsync(c)) = parse(json!({"client": "wheel_async", "fun": "key.list_all"})) else { panic!() };
    assert_eq!((c.fun_args(), c.timeout), (json!([]), None));
    // A runner chunk's `timeout` (an orchestration's steps' wait) is checked as local's is.
    let Ok(Command::Runner(c)) = parse(json!({"client": "runner", "fun": "state.orch", "mods": "orch.x", "timeout": "15"})) else { panic!() };
    assert_eq!((c.timeout, c.kwarg), (Some(15.0), chunk(json!({"mods": "orch.x"}))));
    let Ok(Command::RunnerAsync(c)) = parse(json!({"client": "runner_async", "fun": "state.orch", "timeout": 1e9})) else { panic!() };
    assert_eq!(c.timeout, Some(local::MAX_TIMEOUT_SECS), "bounded");
    for bad in [json!(0), json!(-3), json!("soon"), json!(true)] {
        assert_eq!(status(json!({"client": "runner", "fun": "state.orch", "timeout": bad})).0, 400, "{bad}");
    }
}

/// `netapi_enable_clients`: a known client it does not list is refused with Salt's 400
/// before anything runs; the endpoints' fixed client counts, not the chunk's.
#[test]
fn clients_not_enabled_are_refused_as_salt_refuses_them() {
    let on = vec!["local".to_string(), "runner".to_string()];
    let c = chunk(json!({ "client": "wheel", "fun": "key.list_all" }));
    let e = enabled(&on, &c, None).unwrap_err();
    assert_eq!((e.status, e.msg.as_str()), (400, "Client disabled: 'wheel'. Add to 'netapi_enable_clients' master config option to enable."));
    assert!(enabled(&on, &chunk(json!({ "client": "local", "fun": "test.ping" })), None).is_ok());
    assert!(enabled(&on, &c, Some("runner")).is_ok(), "the endpoint's client decides");
    assert_eq!(enabled(&on, &chunk(json!({ "client": "local" })), Some("wheel")).unwrap_err().status, 400);
    assert!(enabled(&[], &chunk(json!({ "fun": "x" })), None).is_ok(), "no client: parse's own error");
    assert!(enabled(&[], &chunk(json!({ "client": "ssh", "fun": "x" })), None).is_ok(), "unknown client: parse's own error");
    assert_eq!(enabled(&[], &chunk(json!({ "client": "local", "fun": "test.ping" })), None).unwrap_err().status, 400, "none is served by default");
}

/// Runner and wheel chunks as pepper sends them: with `X-Salt-Version` seen, keywords as
/// `name=value` texts in `arg` (read as Salt's `parse_input` reads them); without it, at
/// the chunk's top level. Both give the same call.
#[test]
fn runner_arguments_with_and_without_the_version_header() {
    let Ok(Command::Runner(new)) = parse(json!({"client": "runner", "fun": "jobs.lookup_jid", "arg": ["jid=20261129000000000001", "x", "show_ip=True", "n=[1, 2]"], "full_return": true, "timeout": 60})) else { panic!() };
    assert_eq!(new.arg, vec![json!("x")]);
    assert_eq!(J::Object(new.kwarg.clone()), json!({"jid": "20261129000000000001", "show_ip": true, "n": [1, 2]}));
    assert_eq!((new.full_return, new.timeout), (true, Some(60.0)));
    let Ok(Command::Runner(old)) = parse(json!({"client": "runner", "fun": "jobs.lookup_jid", "jid": "20261129000000000001", "full_return": true})) else { panic!() };
    assert_eq!(old.fun_args(), json!([{"jid": "20261129000000000001"}]));
    let Ok(Command::Wheel(w)) = parse(json!({"client": "wheel", "fun": "key.accept", "arg": ["match=m1", {"__kwarg__": true, "include_rejected": true}]})) else { panic!() };
    assert_eq!(J::Object(w.kwarg), json!({"match": "m1", "include_rejected": true}));
    assert!(w.arg.is_empty());
}
