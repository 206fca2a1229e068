//! An orchestration SLS, read from the `file_roots` tree the admin verbs read
//! (`crate::admin::AdminView::roots`: on a lone master what minions are served, as it
//! is on disk at the request) and turned into ordered steps.
//!
//! `orch.deploy` is `orch/deploy.sls`, else `orch/deploy/init.sls`, in the saltenv. The
//! text is rendered Jinja (minijinja, with `pillar`, `saltenv` and `sls` in the context,
//! bounded by [`crate::template`] as the reactor's templates are) then
//! YAML, and each ID declares one step:
//!
//! ```yaml
//! write_file:                  # the ID
//!   salt.function:             # salt.function, salt.state, salt.runner or salt.wheel
//!     - name: cmd.run          # what it runs (default: the ID)
//!     - tgt: 'web*'
//!     - arg: ['touch /tmp/x']
//! apply:
//!   salt.state:
//!     - tgt: 'web*'
//!     - sls: web
//!     - require:
//!       - salt: write_file
//! ```
//!
//! Steps are sorted as Salt sorts chunks: an integer `order` first (lowest first, `order:
//! first` before all), then the steps without one in the file's order, then `order:
//! last`. Requisites (`require`, `onfail`) can pull a step forward; that happens when
//! the run is driven ([`super::run`]).

use serde_json::{Map, Value as J};

use halite_storage::format::RootsTree;

use crate::template::{self, ReadError, TemplateError};
use crate::view::RootsSource;

/// Most steps one orchestration declares.
pub const MAX_STEPS: usize = 256;

/// Why an orchestration SLS gave no steps (shown as the run's error, in Salt's words
/// where Salt has them).
#[derive(Debug, thiserror::Error)]
pub enum SlsError {
    #[error("{0:?} is not an SLS name")]
    BadName(String),
    #[error("No matching sls found for '{sls}' in env '{saltenv}'")]
    NotFound { sls: String, saltenv: String },
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("Rendering SLS '{saltenv}:{sls}' failed: {source}")]
    Rendering { saltenv: String, sls: String, source: Box<SlsError> },
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The rendered data does not declare steps as an orchestration does.
    #[error("{0}")]
    Shape(String),
}

/// What a step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Function,
    State,
    Runner,
    Wheel,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Function => "function",
            Kind::State => "state",
            Kind::Runner => "runner",
            Kind::Wheel => "wheel",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "function" => Kind::Function,
            "state" => Kind::State,
            "runner" => Kind::Runner,
            "wheel" => Kind::Wheel,
            _ => return None,
        })
    }
}

/// One step of an orchestration.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub id: String,
    pub kind: Kind,
    /// The function, runner or wheel function; for `salt.state`, a label (the ID).
    pub name: String,
    /// Its other arguments (`tgt`, `tgt_type`, `arg`, `kwarg`, `sls`, `fail_minions`...).
    pub args: Map<String, J>,
    /// IDs (or names) of the steps that must succeed first.
    pub require: Vec<String>,
    /// IDs (or names) of the steps whose failure makes this one run.
    pub onfail: Vec<String>,
}

impl Step {
    /// Salt's state tag, the key of the step's result.
    pub fn tag(&self) -> String {
        format!(
            "salt_|-{}_|-{}_|-{}",
            self.id,
            self.name,
            self.kind.as_str()
        )
    }

    /// As the master sends it to `salt-run`.
    pub fn to_json(&self) -> J {
        serde_json::json!({ "id": self.id, "kind": self.kind.as_str(), "name": self.name, "args": self.args, "require": self.require, "onfail": self.onfail })
    }

    pub fn from_json(v: &J) -> Option<Step> {
        let list = |k: &str| {
            v[k].as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        Some(Step {
            id: v["id"].as_str()?.into(),
            kind: Kind::parse(v["kind"].as_str()?)?,
            name: v["name"].as_str()?.into(),
            args: v["args"].as_object()?.clone(),
            require: list("require"),
            onfail: list("onfail"),
        })
    }
}

/// The relative paths an SLS name may be at, in the order Salt tries them.
pub fn candidates(sls: &str) -> Result<[String; 2], SlsError> {
    if sls.is_empty()
        || sls
            .split('.')
            .any(|p| p.is_empty() || p == ".." || p.contains('/') || p.contains('\\'))
    {
        return Err(SlsError::BadName(sls.to_string()));
    }
    let base = sls.replace('.', "/");
    Ok([format!("{base}.sls"), format!("{base}/init.sls")])
}

/// Reads `sls` from `roots` and renders it.
pub fn load(roots: &dyn RootsSource, saltenv: &str, sls: &str, pillar: &J) -> Result<Vec<Step>, SlsError> {
    let unknown = || SlsError::NotFound { sls: sls.to_string(), saltenv: saltenv.to_string() };
    if halite_storage::id::validate_saltenv(saltenv).is_err() {
        return Err(unknown());
    }
    for path in candidates(sls)? {
        let Some(file) = roots.find(RootsTree::File, saltenv, &path) else { continue };
        let text = template::read(roots, &file, &path)?;
        return render(&text, saltenv, sls, pillar).map_err(|e| SlsError::Rendering {
            saltenv: saltenv.to_string(),
            sls: sls.to_string(),
            source: Box::new(e),
        });
    }
    Err(unknown())
}

/// Renders SLS text into its sorted steps.
pub fn render(text: &str, saltenv: &str, sls: &str, pillar: &J) -> Result<Vec<Step>, SlsError> {
    let ctx = minijinja::context! { pillar => minijinja::Value::from_serialize(pillar), saltenv => saltenv, sls => sls };
    compile(&template::render(text, ctx)?)
}

/// A requisite list: `- salt: ID`, `- ID`, or `- {any module: ID}`.
fn requisites(id: &str, what: &str, v: &J) -> Result<Vec<String>, String> {
    let items = match v {
        J::Array(a) => a.clone(),
        other => vec![other.clone()],
    };
    let mut out = Vec::new();
    for i in items {
        match i {
            J::String(s) => out.push(s),
            J::Object(m) if m.len() == 1 => match m.values().next() {
                Some(J::String(s)) => out.push(s.clone()),
                _ => return Err(format!("{id}: a {what} that does not name a step")),
            },
            _ => return Err(format!("{id}: a {what} that does not name a step")),
        }
    }
    Ok(out)
}

/// The steps of rendered data, sorted by `order`.
pub fn compile(high: &J) -> Result<Vec<Step>, SlsError> {
    steps(high).map_err(SlsError::Shape)
}

fn steps(high: &J) -> Result<Vec<Step>, String> {
    let high = match high {
        J::Null => return Ok(Vec::new()),
        J::Object(m) => m,
        _ => return Err("the SLS is not a map of IDs".into()),
    };
    let mut steps: Vec<((u8, i64, usize), Step)> = Vec::new();
    for (index, (id, body)) in high.iter().enumerate() {
        if id == "include" || id == "exclude" || id == "extend" {
            return Err(format!("{id} is not supported in an orchestration"));
        }
        let Some(body) = body.as_object() else {
            return Err(format!("ID {id:?} is not a map"));
        };
        let mut found = None;
        for (key, args) in body {
            if key.starts_with("__") {
                continue;
            }
            // `salt.function: [...]`, or `salt: [function, ...]`.
            let (module, fun, mut items) = match key.split_once('.') {
                Some((m, f)) => (
                    m,
                    f.to_string(),
                    args.as_array().cloned().unwrap_or_default(),
                ),
                None => {
                    let mut items = args.as_array().cloned().unwrap_or_default();
                    let pos = items
                        .iter()
                        .position(J::is_string)
                        .ok_or_else(|| format!("ID {id:?}: {key} names no function"))?;
                    let f = items.remove(pos).as_str().unwrap_or_default().to_string();
                    (key.as_str(), f, items)
                }
            };
            if module != "salt" {
                return Err(format!("ID {id:?}: the state module {module:?} is not supported in an orchestration (salt.function, salt.state, salt.runner, salt.wheel)"));
            }
            let kind = Kind::parse(&fun).ok_or_else(|| {
                format!("ID {id:?}: salt.{fun} is not supported (function, state, runner, wheel)")
            })?;
            if found.is_some() {
                return Err(format!("ID {id:?} declares more than one step"));
            }
            let mut merged = Map::new();
            for item in items.drain(..) {
                let J::Object(m) = item else {
                    return Err(format!("ID {id:?}: an argument that is not a one-key map"));
                };
                merged.extend(m);
            }
            found = Some((kind, merged));
        }
        let Some((kind, mut args)) = found else {
            return Err(format!("ID {id:?} declares no step"));
        };
        let name = match args.remove("name") {
            Some(J::String(s)) => s,
            Some(_) => return Err(format!("ID {id:?}: `name` is not text")),
            None => id.clone(),
        };
        let require = args
            .remove("require")
            .map(|v| requisites(id, "require", &v))
            .transpose()?
            .unwrap_or_default();
        let onfail = args
            .remove("onfail")
            .map(|v| requisites(id, "onfail", &v))
            .transpose()?
            .unwrap_or_default();
        let key = match args.remove("order") {
            None => (1, 0, index),
            Some(J::String(s)) if s == "first" => (0, i64::MIN, index),
            Some(J::String(s)) if s == "last" => (2, 0, index),
            Some(J::Number(n)) => (
                0,
                n.as_i64()
                    .ok_or_else(|| format!("ID {id:?}: `order` is not an integer"))?,
                index,
            ),
            Some(_) => {
                return Err(format!(
                    "ID {id:?}: `order` is not an integer, first or last"
                ))
            }
        };
        steps.push((
            key,
            Step {
                id: id.clone(),
                kind,
                name,
                args,
                require,
                onfail,
            },
        ));
        if steps.len() > MAX_STEPS {
            return Err(format!("more than {MAX_STEPS} steps"));
        }
    }
    steps.sort_by_key(|(k, _)| *k);
    Ok(steps.into_iter().map(|(_, s)| s).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn steps_are_read_with_their_requisites_and_sorted_by_order() {
        let sls = "write:\n  salt.function:\n    - name: cmd.run\n    - tgt: {{ pillar['target'] }}\n    - arg: ['touch /tmp/x']\napply:\n  salt.state:\n    - tgt: '*'\n    - sls: web\n    - require:\n      - salt: write\nfirst:\n  salt:\n    - runner\n    - name: jobs.list_jobs\n    - order: 1\ncleanup:\n  salt.function:\n    - name: test.ping\n    - tgt: '*'\n    - onfail: [apply]\n    - order: last\n";
        let s = render(sls, "base", "orch.x", &json!({"target": "m1"})).unwrap();
        assert_eq!(
            s.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            ["first", "write", "apply", "cleanup"]
        );
        assert_eq!(
            (s[1].kind, s[1].name.as_str(), &s[1].args["tgt"]),
            (Kind::Function, "cmd.run", &json!("m1"))
        );
        assert_eq!(
            (s[2].kind, s[2].name.as_str(), s[2].require.clone()),
            (Kind::State, "apply", vec!["write".to_string()])
        );
        assert_eq!(s[3].onfail, ["apply"]);
        assert_eq!(s[0].tag(), "salt_|-first_|-jobs.list_jobs_|-runner");
        assert_eq!(Step::from_json(&s[2].to_json()).as_ref(), Some(&s[2]));
    }

    #[test]
    fn bad_sls_are_errors() {
        for (sls, why) in [
            ("a:\n  cmd.run: []\n", "not supported"),
            ("a:\n  salt.event: []\n", "not supported"),
            ("a:\n  salt.function: [3]\n", "one-key map"),
            ("a: 3\n", "not a map"),
            ("- a\n", "not a map of IDs"),
            (
                "a:\n  salt.function:\n    - require: [{salt: [x]}]\n",
                "does not name",
            ),
            ("a:\n  salt.function:\n    - order: x\n", "order"),
            ("{% if %}", "Jinja"),
        ] {
            let e = render(sls, "base", "o", &json!({})).unwrap_err().to_string();
            assert!(e.contains(why), "{sls:?}: {e}");
        }
        assert!(
            candidates("../x").is_err()
                && candidates("a..b").is_err()
                && candidates("a/b").is_err()
        );
        assert_eq!(
            candidates("orch.deploy").unwrap(),
            [
                "orch/deploy.sls".to_string(),
                "orch/deploy/init.sls".to_string()
            ]
        );
    }
}
