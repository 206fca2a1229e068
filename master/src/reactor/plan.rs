//! From reactions to what one log entry carries and what follows once it applied.
//!
//! A reaction is turned into the admin verb the matching Salt client would call, and
//! answered from the same read-only view (`crate::admin`):
//!
//! | reaction | verb | records in the entry |
//! |---|---|---|
//! | `local.FUN` (`tgt`, `tgt_type`, `arg`, `kwarg` or `args`) | `publish` (what `salt` sends) | the `job_published` |
//! | `wheel.key.accept` / `key.reject` / `key.delete` (`match`, `include_*`) | `key.apply` (what `salt-key` sends) | the `key_set`s, each expecting the state it was decided from |
//! | `runner.FUN` (its keyword arguments, `arg`, `kwarg` or `args`) | `runner` | none: run once the entry applied |
//!
//! The records go into the entry after the `reaction` record, so they apply only if this
//! entry is the first reaction to its event; the plans' events, after-commit answers and
//! effects, and the runners, are carried out by the member whose entry applied.

use serde_json::{json, Map, Value as J};

use halite_storage::format::Record;

use super::render::{Kind, Reaction};
use crate::admin::jobs::JobCmd;
use crate::admin::keys::{self, Cmd, Include, KeyCmd};
use crate::admin::{AdminView, Command, Plan};

/// What one event's reactions do.
#[derive(Default)]
pub struct Prepared {
    /// The records that follow the `reaction` record in its entry.
    pub records: Vec<Record>,
    /// Carried out by the member whose entry applied: plans whose records are in the
    /// entry (their proposals are empty), then runner commands.
    pub plans: Vec<Plan>,
    pub runners: Vec<Command>,
    /// Reactions that could not be prepared, with why (logged by the caller).
    pub errors: Vec<String>,
}

/// Prepares every reaction of an event; one that fails is left out and reported.
pub fn prepare(view: &dyn AdminView, reactions: &[Reaction]) -> Prepared {
    let mut out = Prepared::default();
    for r in reactions {
        let what = format!("reaction {:?} ({}.{})", r.name, r.kind.as_str(), r.fun);
        match action(r).and_then(|a| a.prepare(view)) {
            Ok(Step::Plan(mut plan)) => {
                out.records.extend(std::mem::take(&mut plan.proposals).into_iter().flatten());
                out.plans.push(plan);
            }
            Ok(Step::Runner(c)) => out.runners.push(c),
            Ok(Step::Nothing(why)) => tracing::info!("{what}: {why}"),
            Err(e) => out.errors.push(format!("{what}: {e}")),
        }
    }
    out
}

/// What a reaction asks for, as an admin verb.
#[derive(Debug, Clone, PartialEq)]
enum Action {
    Publish(JobCmd),
    Keys { cmd: Cmd, pattern: String, include: Include },
    Runner(J),
}

enum Step {
    Plan(Plan),
    Runner(Command),
    Nothing(String),
}

impl Action {
    fn prepare(self, view: &dyn AdminView) -> Result<Step, String> {
        match self {
            Action::Publish(c) => c.answer(view).map(Step::Plan).map_err(|e| e.to_string()),
            Action::Keys { cmd, pattern, include } => {
                let listing = keys::state_listing(view.state()).map_err(|e| e.to_string())?;
                let selected = keys::select(&listing, cmd, &pattern, include);
                if selected.is_empty() {
                    return Ok(Step::Nothing(format!("no key matches {pattern:?}")));
                }
                KeyCmd::Apply { cmd, selected }.answer(view).map(Step::Plan).map_err(|e| e.to_string())
            }
            Action::Runner(req) => Command::parse(&req).map(Step::Runner).map_err(|e| e.to_string()),
        }
    }
}

/// Keys that name the reaction itself, not an argument.
const INTERNAL: [&str; 7] = ["__id__", "__sls__", "name", "order", "fun", "key", "state"];

/// Positional and keyword arguments as Salt's reactor reads them: `args` (a map or a
/// list of one-key maps) is all keyword arguments; otherwise `arg` and `kwarg`, and for
/// runners and wheels the other keys as keyword arguments too.
fn arguments(r: &Reaction, skip: &[&str]) -> Result<(Vec<J>, Map<String, J>), String> {
    if let Some(args) = r.low.get("args") {
        let mut kwarg = Map::new();
        match args {
            J::Object(m) => kwarg.extend(m.clone()),
            J::Array(items) => {
                for i in items {
                    let J::Object(m) = i else { return Err("`args` is not a list of one-key maps".into()) };
                    kwarg.extend(m.clone());
                }
            }
            _ => return Err("`args` is not a map".into()),
        }
        return Ok((Vec::new(), kwarg));
    }
    let arg = match r.low.get("arg") {
        None | Some(J::Null) => Vec::new(),
        Some(J::Array(a)) => a.clone(),
        Some(other) => vec![other.clone()],
    };
    let mut kwarg = match r.low.get("kwarg") {
        None | Some(J::Null) => Map::new(),
        Some(J::Object(m)) => m.clone(),
        Some(_) => return Err("`kwarg` is not a map".into()),
    };
    if r.kind != Kind::Local {
        for (k, v) in &r.low {
            if !["arg", "kwarg"].contains(&k.as_str()) && !INTERNAL.contains(&k.as_str()) && !skip.contains(&k.as_str()) {
                kwarg.insert(k.clone(), v.clone());
            }
        }
    }
    Ok((arg, kwarg))
}

/// The admin verb a reaction asks for.
fn action(r: &Reaction) -> Result<Action, String> {
    match r.kind {
        Kind::Local => {
            let tgt = r.low.get("tgt").cloned().filter(|t| t.is_string() || t.is_array()).ok_or("a local reaction needs a `tgt` (a string or a list)")?;
            let tgt_type = r.low.get("tgt_type").or_else(|| r.low.get("expr_form")).and_then(J::as_str).unwrap_or("glob").to_string();
            let (arg, kwarg) = arguments(r, &[])?;
            Ok(Action::Publish(JobCmd::Publish { fun: r.fun.clone(), tgt, tgt_type, arg, kwarg, user: "root".into(), acl_checked: false, opts: Default::default() }))
        }
        Kind::Wheel => {
            let cmd = match r.fun.as_str() {
                "key.accept" => Cmd::Accept,
                "key.reject" => Cmd::Reject,
                "key.delete" => Cmd::Delete,
                other => return Err(format!("the wheel function {other:?} is not supported (key.accept, key.reject, key.delete)")),
            };
            let (arg, kwarg) = arguments(r, &[])?;
            let pattern = match kwarg.get("match").or(arg.first()) {
                Some(J::String(s)) => s.clone(),
                Some(J::Array(l)) => l.iter().filter_map(J::as_str).collect::<Vec<_>>().join(","),
                _ => return Err(format!("wheel.{} needs a `match`", r.fun)),
            };
            let flag = |k: &str| kwarg.get(k).and_then(J::as_bool).unwrap_or(false);
            let include = Include { accepted: flag("include_accepted"), rejected: flag("include_rejected"), denied: flag("include_denied") };
            Ok(Action::Keys { cmd, pattern, include })
        }
        Kind::Runner => {
            // The master only renders an orchestration; `salt-run` or salt-api drives it.
            if crate::orchestrate::NAMES.contains(&r.fun.as_str()) {
                return Err(format!("runner.{} is not supported in a reaction (run it with salt-run)", r.fun));
            }
            let (arg, kwarg) = arguments(r, &[])?;
            let mut req = json!({ "cmd": "runner", "fun": r.fun, "arg": arg, "kwarg": kwarg });
            // Halite's runners read their keyword arguments from the request itself.
            if let J::Object(m) = &mut req {
                for (k, v) in kwarg {
                    m.entry(k).or_insert(v);
                }
            }
            Ok(Action::Runner(req))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reactor::render::render;

    fn one(sls: &str) -> Result<Action, String> {
        action(&render(sls, "t", &json!({})).unwrap()[0])
    }

    #[test]
    fn reactions_become_admin_verbs() {
        let Action::Publish(JobCmd::Publish { fun, tgt, tgt_type, arg, kwarg, .. }) = one("a:\n  local.cmd.run:\n    - tgt: 'web*'\n    - tgt_type: glob\n    - arg: ['touch /tmp/x']\n    - kwarg: {cwd: /}\n").unwrap() else { panic!() };
        assert_eq!((fun.as_str(), tgt, tgt_type.as_str(), arg, J::Object(kwarg)), ("cmd.run", json!("web*"), "glob", vec![json!("touch /tmp/x")], json!({"cwd": "/"})));
        // `args`: every argument by keyword; `expr_form`, the old name of `tgt_type`.
        let Action::Publish(JobCmd::Publish { arg, kwarg, tgt_type, .. }) = one("a:\n  local.test.echo:\n    - tgt: [m1, m2]\n    - expr_form: list\n    - args:\n      - text: hi\n").unwrap() else { panic!() };
        assert_eq!((arg, J::Object(kwarg), tgt_type.as_str()), (vec![], json!({"text": "hi"}), "list"));
        assert_eq!(one("a:\n  wheel.key.accept:\n    - match: 'ink*'\n").unwrap(), Action::Keys { cmd: Cmd::Accept, pattern: "ink*".into(), include: Include::default() });
        assert_eq!(one("a:\n  wheel.key.reject:\n    - args:\n      - match: [a, b]\n      - include_accepted: true\n").unwrap(), Action::Keys { cmd: Cmd::Reject, pattern: "a,b".into(), include: Include { accepted: true, ..Default::default() } });
        assert_eq!(one("a:\n  runner.jobs.lookup_jid:\n    - jid: '20261124000000000001'\n").unwrap(), Action::Runner(json!({"cmd": "runner", "fun": "jobs.lookup_jid", "arg": [], "kwarg": {"jid": "20261124000000000001"}, "jid": "20261124000000000001"})));
        for (sls, why) in [
            ("a:\n  local.test.ping: []\n", "tgt"),
            ("a:\n  wheel.key.accept: []\n", "match"),
            ("a:\n  wheel.key.finger:\n    - match: x\n", "not supported"),
            ("a:\n  runner.state.orchestrate:\n    - mods: orch.x\n", "not supported in a reaction"),
            ("a:\n  local.test.ping:\n    - tgt: x\n    - kwarg: 3\n", "kwarg"),
        ] {
            assert!(one(sls).unwrap_err().contains(why), "{sls}");
        }
    }
}
