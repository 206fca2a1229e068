//! Running an orchestration (`state.orchestrate`, `state.orch`, `state.sls`) to its end,
//! shared by `salt-run` and salt-api's `runner` and `runner_async` clients.
//!
//! Three admin requests' worth of work, over any [`Caller`] (a blocking
//! `AdminClient`):
//!
//! 1. [`render`]: the master renders the SLS into steps (the `runner` verb
//!    `state.orchestrate`), and records the run's own job (`runner.state.orchestrate`
//!    targeting `<id>_master`, `salt/run/<jid>/new` fired): that job is the run's, the
//!    only one it has (salt-api's `runner_async` answers its jid; no `run.start` job);
//! 2. [`Rendered::drive`]: each step run in order through the admin socket
//!    (`halite_master::orchestrate::run`), each `salt.function`/`salt.state` step an
//!    ordinary job of its own;
//! 3. the run's return stored (`orchestrate.return`: the job's return,
//!    `salt/run/<jid>/ret` fired).
//!
//! The return is what Salt 3008.5's `state.orchestrate` runner returns, and what its
//! runner client answers for it (salt-api's `runner` client, `salt-run --out json`):
//! `{"data": {"<id>_master": STATES}, "outputter": "highstate", "retcode": 0|1}`, where
//! `STATES` are the steps' results by tag (`salt_|-ID_|-NAME_|-function`), or the list
//! of errors when the SLS did not render; `retcode` is 1 when a step failed or the SLS
//! did not render.

use std::time::Duration;

use serde_json::{json, Map, Value as J};

use halite_master::orchestrate::run::{Caller, Run};
use halite_master::orchestrate::sls::Step;

/// How long a `salt.function` or `salt.state` step waits for its minions when neither
/// the step (`timeout`) nor the caller (`salt-run -t`, a salt-api chunk's `timeout`)
/// says.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether `fun` is one of the orchestrate runner's names.
pub fn is_orchestrate(fun: &str) -> bool {
    halite_master::orchestrate::NAMES.contains(&fun)
}

/// A run the master rendered: its job, and its steps or why the SLS did not render.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The run's own job (`None` only from a master that records none).
    pub jid: Option<String>,
    /// The name the run's return is under (`<id>_master`).
    pub master_id: String,
    sls: String,
    steps: Result<Vec<Step>, Vec<J>>,
}

/// Why a run's return was not kept as its job's.
#[derive(Debug, thiserror::Error)]
pub enum Unstored {
    #[error("the master recorded no job for the run")]
    NoJob,
    #[error(transparent)]
    Refused(#[from] halite_master::Error),
}

/// The end of a run.
#[derive(Debug)]
pub struct Outcome {
    /// `{"data": {master_id: STATES|ERRORS}, "outputter": "highstate", "retcode"}`.
    pub ret: J,
    /// 0 when every step succeeded, else 1.
    pub retcode: i32,
    /// Whether the master kept the return as the run job's (`Err`: why not; the run
    /// happened all the same).
    pub stored: Result<(), Unstored>,
}

impl Outcome {
    /// `{master_id: STATES|ERRORS}`, for the highstate outputter.
    pub fn data(&self) -> Map<String, J> {
        self.ret["data"].as_object().cloned().unwrap_or_default()
    }
}

/// Asks the master to render `fun` (`arg`, `kwarg`: `mods`, `saltenv`, `pillar`, bound
/// as Salt binds them) for `user` (`None`: the master records `root`). `Err`: the
/// master refused the call (bad arguments, not running); nothing was recorded.
pub fn render(c: &mut dyn Caller, fun: &str, arg: &[J], kwarg: &Map<String, J>, user: Option<&str>) -> halite_master::Result<Rendered> {
    let mut req = json!({ "cmd": "runner", "fun": fun, "arg": arg, "kwarg": kwarg });
    if let Some(u) = user {
        req["user"] = J::String(u.to_string());
    }
    let r = c.call(&req)?["return"].take();
    let steps = match r["errors"].as_array() {
        Some(errors) => Err(errors.clone()),
        None => Ok(r["steps"].as_array().into_iter().flatten().filter_map(Step::from_json).collect()),
    };
    Ok(Rendered {
        jid: r["jid"].as_str().map(str::to_string),
        master_id: r["master_id"].as_str().unwrap_or("master").to_string(),
        sls: r["sls"].as_str().unwrap_or_default().to_string(),
        steps,
    })
}

impl Rendered {
    /// The run's event tag, `salt/run/<jid>`.
    pub fn tag(&self) -> Option<String> {
        self.jid.as_ref().map(|j| format!("salt/run/{j}"))
    }

    /// Runs the steps (each waiting `timeout` for its minions unless it says), then
    /// hands the master the run's return.
    pub fn drive(self, c: &mut dyn Caller, timeout: Duration) -> Outcome {
        let (host, ok) = match self.steps {
            Err(errors) => (J::Array(errors), false),
            Ok(steps) => {
                let (results, ok) = Run { sls: self.sls, steps, timeout, caller: &mut *c }.run();
                (J::Object(results), ok)
            }
        };
        let retcode = if ok { 0 } else { 1 };
        let mut data = Map::new();
        data.insert(self.master_id, host);
        let ret = json!({ "data": data, "outputter": "highstate", "retcode": retcode });
        let stored = match &self.jid {
            Some(jid) => c.call(&json!({ "cmd": "orchestrate.return", "jid": jid, "return": ret })).map(drop).map_err(Unstored::from),
            None => Err(Unstored::NoJob),
        };
        Outcome { ret, retcode, stored }
    }
}

/// [`render`] then [`Rendered::drive`]: the whole run.
pub fn run(c: &mut dyn Caller, fun: &str, arg: &[J], kwarg: &Map<String, J>, user: Option<&str>, timeout: Duration) -> halite_master::Result<Outcome> {
    Ok(render(c, fun, arg, kwarg, user)?.drive(c, timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A master stand-in: answers the render with `render`, every step's publish with a
    /// job whose minion m1 returns `ok`, and records what it was asked.
    struct Fake {
        render: J,
        asked: Vec<J>,
        ok: bool,
    }

    impl Caller for Fake {
        fn call(&mut self, req: &J) -> halite_master::Result<J> {
            self.asked.push(req.clone());
            match req["cmd"].as_str() {
                Some("runner") => Ok(json!({ "return": self.render })),
                Some("publish") => Ok(json!({ "jid": "20260101000000000001", "minions": ["m1"] })),
                Some("job.returns") => Ok(json!({ "returns": { "m1": { "return": self.ok, "retcode": if self.ok { 0 } else { 1 } } } })),
                Some("orchestrate.return") => Ok(json!({ "return": true })),
                other => Err(halite_master::Error::refused(format!("unexpected {other:?}"))),
            }
        }
        fn pause(&mut self) {}
    }

    fn fake(render: J, ok: bool) -> Fake {
        Fake { render, asked: vec![], ok }
    }

    #[test]
    fn a_run_answers_salts_shape_and_stores_it_under_its_jid() {
        let step = json!({ "id": "ping", "name": "test.ping", "kind": "function", "args": { "tgt": "m1" } });
        let plan = json!({ "master_id": "mm_master", "jid": "J1", "sls": "orch.x", "steps": [step] });
        let mut c = fake(plan.clone(), true);
        let r = render(&mut c, "state.orch", &[json!("orch.x")], &Map::new(), Some("fred")).unwrap();
        assert_eq!((r.tag().as_deref(), c.asked[0]["user"].as_str()), (Some("salt/run/J1"), Some("fred")));
        let steps = r.steps.as_ref().map(Vec::len);
        assert!(matches!(steps, Ok(1)), "{steps:?} from {plan}");
        let out = r.drive(&mut c, Duration::from_secs(1));
        assert_eq!((out.retcode, &out.ret["outputter"], &out.ret["retcode"]), (0, &json!("highstate"), &json!(0)), "{}", out.ret);
        assert_eq!(out.data().keys().collect::<Vec<_>>(), ["mm_master"]);
        let end = c.asked.last().unwrap();
        assert_eq!((&end["cmd"], &end["jid"], &end["return"]), (&json!("orchestrate.return"), &json!("J1"), &out.ret));
        assert!(out.stored.is_ok());

        let mut c = fake(plan, false);
        let out = run(&mut c, "state.orch", &[json!("orch.x")], &Map::new(), None, Duration::from_secs(1)).unwrap();
        assert_eq!((out.retcode, &out.ret["retcode"]), (1, &json!(1)), "{}", out.ret);
        assert!(c.asked[0].get("user").is_none());
    }

    #[test]
    fn an_sls_that_did_not_render_is_a_failed_run_with_its_errors() {
        let mut c = fake(json!({ "master_id": "mm_master", "jid": "J2", "sls": "orch.none", "errors": ["No matching sls found"] }), true);
        let out = run(&mut c, "state.orchestrate", &[json!("orch.none")], &Map::new(), None, STEP_TIMEOUT).unwrap();
        assert_eq!(out.ret, json!({ "data": { "mm_master": ["No matching sls found"] }, "outputter": "highstate", "retcode": 1 }));
        assert_eq!(c.asked.iter().map(|r| r["cmd"].as_str().unwrap()).collect::<Vec<_>>(), ["runner", "orchestrate.return"], "no step ran");
        // A refused render: nothing recorded, nothing driven.
        struct Refuses;
        impl Caller for Refuses {
            fn call(&mut self, _: &J) -> halite_master::Result<J> {
                Err(halite_master::Error::refused("state.orchestrate needs an SLS name"))
            }
        }
        assert_eq!(run(&mut Refuses, "state.orchestrate", &[], &Map::new(), None, STEP_TIMEOUT).unwrap_err().to_string(), "state.orchestrate needs an SLS name");
    }
}
