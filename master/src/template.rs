//! The first half of reading an SLS file, shared by the reactor ([`crate::reactor`]) and
//! orchestration ([`crate::orchestrate`]): the file read from a roots tree, bounded, then
//! rendered as Jinja (minijinja, with Python's string and dict methods from
//! [`crate::pycompat`]) and parsed as YAML into JSON. What the data declares is each
//! caller's own business.
//!
//! Bounded, because what a template reads may come from minions (an event's data): a
//! file over [`MAX_SLS_BYTES`] is not read, a rendering runs on [`FUEL`] units of
//! minijinja's fuel (a loop that never ends runs out) and its output is cut at
//! [`MAX_OUTPUT`] bytes.

use serde_json::Value as J;

use halite_storage::format::RootsTree;

use crate::view::{FileRef, RootsSource};

/// Largest SLS file read.
pub const MAX_SLS_BYTES: usize = 1 << 20;
/// Largest rendered output parsed as YAML.
pub const MAX_OUTPUT: usize = 1 << 20;
/// minijinja fuel for one rendering (each instruction costs about one unit).
pub const FUEL: u64 = 2_000_000;

/// Why a template gave no data.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The Jinja did not parse or failed while rendering (out of fuel among others).
    #[error("Jinja: {0}")]
    Jinja(#[from] minijinja::Error),
    /// The rendered text is longer than [`MAX_OUTPUT`].
    #[error("rendered to {0} bytes, more than {MAX_OUTPUT}")]
    TooLong(usize),
    /// The rendered text is not YAML.
    #[error("YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
}

/// Why an SLS file found in a roots tree could not be read as text.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0} could not be read")]
    Unreadable(String),
    #[error("{0} is more than {MAX_SLS_BYTES} bytes")]
    TooLarge(String),
    #[error("{0} is not UTF-8")]
    NotUtf8(String),
}

/// The text of `file` (found in `roots`' file tree), named `name` in errors.
pub fn read(roots: &dyn RootsSource, file: &FileRef, name: &str) -> Result<String, ReadError> {
    let bytes = roots
        .read(RootsTree::File, file, 0, MAX_SLS_BYTES as u64 + 1)
        .ok_or_else(|| ReadError::Unreadable(name.to_string()))?;
    if bytes.len() > MAX_SLS_BYTES {
        return Err(ReadError::TooLarge(name.to_string()));
    }
    String::from_utf8(bytes).map_err(|_| ReadError::NotUtf8(name.to_string()))
}

/// Renders `text` with `ctx` and parses the output as YAML: `Null` when it renders to
/// nothing but blanks.
pub fn render(text: &str, ctx: minijinja::Value) -> Result<J, TemplateError> {
    let mut env = minijinja::Environment::new();
    env.set_keep_trailing_newline(true);
    env.set_fuel(Some(FUEL));
    env.set_unknown_method_callback(crate::pycompat::methods);
    let out = env.render_str(text, ctx)?;
    if out.len() > MAX_OUTPUT {
        return Err(TemplateError::TooLong(out.len()));
    }
    if out.trim().is_empty() {
        return Ok(J::Null);
    }
    let y: serde_yaml::Value = serde_yaml::from_str(&out)?;
    Ok(crate::pillar::yaml_to_json(y))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_then_parses_and_bounds_both() {
        let v = render("a: {{ x.upper() }}\n", minijinja::context! { x => "b" }).unwrap();
        assert_eq!(v, serde_json::json!({"a": "B"}));
        assert_eq!(render("{% if false %}a: 1{% endif %}\n", minijinja::context! {}).unwrap(), J::Null);
        assert!(matches!(render("{% if %}", minijinja::context! {}), Err(TemplateError::Jinja(_))));
        assert!(matches!(render("a: [b", minijinja::context! {}), Err(TemplateError::Yaml(_))));
        let forever = "{% for i in range(10000) %}{% for j in range(10000) %}x{% endfor %}{% endfor %}";
        assert!(matches!(render(forever, minijinja::context! {}), Err(TemplateError::Jinja(_))));
        let long = "#".repeat(MAX_OUTPUT + 1);
        assert!(matches!(render(&long, minijinja::context! {}), Err(TemplateError::TooLong(n)) if n == MAX_OUTPUT + 1));
    }

    #[test]
    fn reads_only_bounded_text() {
        let mut roots = crate::view::memory::MemoryRoots::default();
        roots.put(RootsTree::File, "base", "ok.sls", b"a: 1\n");
        roots.put(RootsTree::File, "base", "big.sls", &vec![b'#'; MAX_SLS_BYTES + 1]);
        roots.put(RootsTree::File, "base", "bin.sls", &[0xff, 0xfe]);
        let at = |p: &str| roots.find(RootsTree::File, "base", p).unwrap();
        assert_eq!(read(&roots, &at("ok.sls"), "ok").unwrap(), "a: 1\n");
        assert!(matches!(read(&roots, &at("big.sls"), "big"), Err(ReadError::TooLarge(n)) if n == "big"));
        assert!(matches!(read(&roots, &at("bin.sls"), "bin"), Err(ReadError::NotUtf8(_))));
    }
}
