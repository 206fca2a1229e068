//! Rendering a reactor SLS file: Jinja (minijinja) with Salt's context names `tag` and
//! `data`, then YAML, then the reactions it declares:
//!
//! ```yaml
//! echo_on_start:                 # the reaction's name
//!   local.test.echo:             # kind (local, runner, wheel; cmd = local) . function
//!     - tgt: {{ data['id'] }}    # its arguments: one-key maps, merged in order
//!     - arg: [hello]
//! ```
//!
//! Bounded, because the data comes from minions: reading and rendering are
//! [`crate::template`]'s (a file size, fuel, an output size) and at most
//! [`MAX_REACTIONS`] reactions are taken from one event. Any failure is a
//! [`ReactorSlsError`] naming the file; the caller logs and counts it and the event gets
//! no reaction from that file.

use std::path::Path;

use serde_json::{json, Map, Value as J};

use halite_storage::format::RootsTree;

use super::SlsFile;
use crate::template::{self, ReadError, TemplateError, MAX_SLS_BYTES};
use crate::view::RootsSource;

/// Most reactions one event starts.
pub const MAX_REACTIONS: usize = 64;

/// Why a reactor SLS gave no reactions.
#[derive(Debug, thiserror::Error)]
pub enum ReactorSlsError {
    /// A `salt://` file that is not in the `base` saltenv of the file roots.
    #[error("{0} is not in the base file roots")]
    NotInRoots(String),
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A file on disk that could not be read.
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// A file on disk larger than [`MAX_SLS_BYTES`].
    #[error("{path} is {len} bytes, more than {MAX_SLS_BYTES}")]
    TooLarge { path: String, len: u64 },
    /// The template did not render, in the file named.
    #[error("{file}: {source}")]
    In { file: String, source: Box<ReactorSlsError> },
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The rendered data is not a map of reactions as the reactor reads them.
    #[error("{0}")]
    Shape(String),
}

impl ReactorSlsError {
    fn in_file(self, file: impl std::fmt::Display) -> Self {
        ReactorSlsError::In { file: file.to_string(), source: Box::new(self) }
    }
}

/// One reaction: a kind (`local`, `runner` or `wheel`), a function and its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Reaction {
    /// Its id in the SLS file.
    pub name: String,
    pub kind: Kind,
    pub fun: String,
    /// The merged argument maps (`tgt`, `tgt_type`, `arg`, `kwarg`, `args`, `match`...).
    pub low: Map<String, J>,
}

/// The reaction kinds Halite carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Local,
    Runner,
    Wheel,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Local => "local",
            Kind::Runner => "runner",
            Kind::Wheel => "wheel",
        }
    }
}

impl Reaction {
    /// As carried in the reaction record (and shown by `halite-ctl dump`).
    pub fn to_json(&self) -> J {
        json!({ "name": self.name, "fun": format!("{}.{}", self.kind.as_str(), self.fun), "args": self.low })
    }
}

/// Reads and renders one reactor SLS for an event: a `salt://` file from `roots` (the
/// file roots the admin verbs read, `crate::admin::AdminView::roots`), a path from disk.
pub fn render_sls(roots: &dyn RootsSource, file: &SlsFile, tag: &str, data: &J) -> Result<Vec<Reaction>, ReactorSlsError> {
    let rel = match file {
        SlsFile::Path(p) => return render_file(p, tag, data),
        SlsFile::Roots(rel) => rel,
    };
    let found = roots.find(RootsTree::File, "base", rel).ok_or_else(|| ReactorSlsError::NotInRoots(file.to_string()))?;
    let text = template::read(roots, &found, &file.to_string())?;
    render(&text, tag, data).map_err(|e| e.in_file(file))
}

/// Reads and renders one SLS file on disk for an event.
pub fn render_file(path: &Path, tag: &str, data: &J) -> Result<Vec<Reaction>, ReactorSlsError> {
    let io = |source| ReactorSlsError::Io { path: path.display().to_string(), source };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.len() > MAX_SLS_BYTES as u64 {
        return Err(ReactorSlsError::TooLarge { path: path.display().to_string(), len: meta.len() });
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    render(&text, tag, data).map_err(|e| e.in_file(path.display()))
}

/// Renders SLS text for an event into its reactions (sorted by name, as Salt orders
/// reactions of equal `order`).
pub fn render(text: &str, tag: &str, data: &J) -> Result<Vec<Reaction>, ReactorSlsError> {
    let ctx = minijinja::context! { tag => tag, data => minijinja::Value::from_serialize(data) };
    compile(&template::render(text, ctx)?)
}

/// The reactions of rendered data: `{name: {kind.fun: [ {arg: value}, ... ]}}`.
pub fn compile(high: &J) -> Result<Vec<Reaction>, ReactorSlsError> {
    let shape = ReactorSlsError::Shape;
    let high = match high {
        J::Null => return Ok(Vec::new()),
        J::Object(m) => m,
        _ => return Err(shape("the SLS is not a map of reactions".into())),
    };
    let mut out = Vec::new();
    let mut names: Vec<&String> = high.keys().collect();
    names.sort();
    for name in names {
        let Some(body) = high[name].as_object() else { return Err(shape(format!("reaction {name:?} is not a map"))) };
        for (key, args) in body {
            let (kind, fun) = key.split_once('.').ok_or_else(|| shape(format!("reaction {name:?}: {key:?} is not kind.function")))?;
            let kind = match kind {
                "local" | "cmd" => Kind::Local,
                "runner" => Kind::Runner,
                "wheel" => Kind::Wheel,
                other => return Err(shape(format!("reaction {name:?}: the kind {other:?} is not supported (local, runner, wheel)"))),
            };
            let mut low = Map::new();
            match args {
                J::Null => {}
                J::Array(items) => {
                    for item in items {
                        let J::Object(m) = item else { return Err(shape(format!("reaction {name:?}: an argument that is not a one-key map"))) };
                        low.extend(m.clone());
                    }
                }
                _ => return Err(shape(format!("reaction {name:?}: its arguments are not a list"))),
            }
            out.push(Reaction { name: name.clone(), kind, fun: fun.to_string(), low });
            if out.len() > MAX_REACTIONS {
                return Err(shape(format!("more than {MAX_REACTIONS} reactions")));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_and_data_are_in_the_context() {
        let sls = "echo_{{ data['id'] }}:\n  local.test.echo:\n    - tgt: {{ data['id'] }}\n    - arg:\n      - {{ tag }}\n{% if data.get('missing') %}never:\n  runner.x.y: []\n{% endif %}";
        let r = render(sls, "salt/minion/m1/start", &json!({"id": "m1"})).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].name, "echo_m1");
        assert_eq!((r[0].kind, r[0].fun.as_str()), (Kind::Local, "test.echo"));
        assert_eq!(J::Object(r[0].low.clone()), json!({"tgt": "m1", "arg": ["salt/minion/m1/start"]}));
        assert_eq!(r[0].to_json()["fun"], "local.test.echo");
        // Salt's classic auto-accept test, with the Python methods templates use.
        let sls = "{% if data.get('act') == 'pend' and data['id'].startswith('ink') and data.get('x', 'd') == 'd' %}add:\n  wheel.key.accept:\n    - match: {{ data['id'].upper() }}\n{% endif %}";
        assert_eq!(render(sls, "salt/auth", &json!({"act": "pend", "id": "ink1"})).unwrap()[0].low["match"], "INK1");
        assert!(render(sls, "salt/auth", &json!({"act": "accept", "id": "ink1"})).unwrap().is_empty());
        assert!(render(sls, "salt/auth", &json!({"act": "pend", "id": "web1"})).unwrap().is_empty());
        assert!(render("{{ data.nosuch() }}", "t", &json!({})).is_err());
    }

    #[test]
    fn kinds_aliases_and_order() {
        let sls = "b:\n  wheel.key.accept:\n    - match: web*\na:\n  cmd.cmd.run:\n    - tgt: '*'\n    - arg: [true]\n";
        let r = render(sls, "t", &json!({})).unwrap();
        assert_eq!(r.iter().map(|r| (r.name.as_str(), r.kind, r.fun.as_str())).collect::<Vec<_>>(), [("a", Kind::Local, "cmd.run"), ("b", Kind::Wheel, "key.accept")]);
        // A template that renders nothing is no reaction.
        assert!(render("{% if false %}x: y{% endif %}\n", "t", &json!({})).unwrap().is_empty());
    }

    #[test]
    fn bad_templates_are_errors() {
        let data = json!({"id": "m1"});
        for (sls, why) in [
            ("{% if %}", "Jinja"),
            ("{{ data['id'] | nosuchfilter }}", "Jinja"),
            ("a: [b", "YAML"),
            ("- a\n- b\n", "not a map"),
            ("a: 3\n", "not a map"),
            ("a:\n  nodot: []\n", "kind.function"),
            ("a:\n  state.apply: []\n", "not supported"),
            ("a:\n  local.test.ping: [3]\n", "one-key map"),
            ("a:\n  local.test.ping: 3\n", "not a list"),
            // A loop that would never end runs out of fuel.
            ("{% for i in range(10000) %}{% for j in range(10000) %}x{% endfor %}{% endfor %}", "Jinja"),
        ] {
            let e = render(sls, "t", &data).unwrap_err().to_string();
            assert!(e.contains(why), "{sls:?}: {e}");
        }
        let many: String = (0..=MAX_REACTIONS).map(|i| format!("r{i}:\n  local.test.ping:\n    - tgt: x\n")).collect();
        assert!(render(&many, "t", &data).unwrap_err().to_string().contains("more than"));
        let d = tempfile::tempdir().unwrap();
        let big = d.path().join("big.sls");
        std::fs::write(&big, vec![b'#'; MAX_SLS_BYTES + 1]).unwrap();
        assert!(render_file(&big, "t", &data).unwrap_err().to_string().contains("more than"));
        assert!(render_file(&d.path().join("none.sls"), "t", &data).unwrap_err().to_string().contains("cannot read"));
    }

    #[test]
    fn salt_urls_are_read_from_the_roots_given() {
        let mut roots = crate::view::memory::MemoryRoots::default();
        roots.put(RootsTree::File, "base", "reactor/a.sls", b"echo:\n  local.test.echo:\n    - tgt: {{ data['id'] }}\n");
        roots.put(RootsTree::File, "dev", "reactor/b.sls", b"echo:\n  local.test.echo: []\n");
        roots.put(RootsTree::File, "base", "big.sls", &vec![b'#'; MAX_SLS_BYTES + 1]);
        let data = json!({"id": "m1"});
        let r = render_sls(&roots, &SlsFile::Roots("reactor/a.sls".into()), "t", &data).unwrap();
        assert_eq!(r[0].low["tgt"], "m1");
        let e = render_sls(&roots, &SlsFile::Roots("reactor/b.sls".into()), "t", &data).unwrap_err().to_string();
        assert!(e.contains("salt://reactor/b.sls is not in the base file roots"), "{e}");
        assert!(render_sls(&roots, &SlsFile::Roots("big.sls".into()), "t", &data).unwrap_err().to_string().contains("more than"));
    }
}
