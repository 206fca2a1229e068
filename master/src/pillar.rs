//! Pillar compilation from `pillar_roots` (Salt's default `jinja|yaml` renderer).
//!
//! 1. Every env's `top.sls` is rendered (Jinja, then YAML); its targets are matched
//!    against the minion (glob by default, or the `- match: <type>` given in the list).
//! 2. Each matched SLS (`a.b` → `a/b.sls` or `a/b/init.sls`, first env directory holding
//!    it) is rendered with `grains`, `opts`, `pillar` (compiled so far), `saltenv`, `sls`
//!    and `salt['grains.get']` / `salt['pillar.get']`; its `include:` list is compiled
//!    first; the result is merged into the pillar recursively (maps merge, other values
//!    replace: Salt's default `recurse` strategy).
//! 3. Rendering errors do not stop compilation: they are collected under `_errors`, as
//!    Salt does, and logged.

use std::collections::BTreeMap;

use minijinja::value::Value as JV;
use serde_json::{Map, Value as J};

use halite_storage::format::RootsTree;

use crate::config::MasterConfig;
use crate::matcher::{matches, Subject};
use crate::view::RootsSource;

/// Salt's recursive merge: maps merge key by key, anything else replaces.
pub fn merge(into: &mut J, from: J) {
    match (into, from) {
        (J::Object(a), J::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(slot) if slot.is_object() && v.is_object() => merge(slot, v),
                    _ => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// `a:b:c` lookup with a default, as `grains.get` / `pillar.get`.
fn nested_get(data: &J, key: &str) -> Option<J> {
    let mut cur = data;
    for p in key.split(':') {
        cur = cur.get(p)?;
    }
    Some(cur.clone())
}

pub(crate) fn yaml_to_json(v: serde_yaml::Value) -> J {
    use serde_yaml::Value as Y;
    match v {
        Y::Null => J::Null,
        Y::Bool(b) => J::Bool(b),
        Y::Number(n) => serde_json::to_value(&n).unwrap_or(J::Null),
        Y::String(s) => J::String(s),
        Y::Sequence(s) => J::Array(s.into_iter().map(yaml_to_json).collect()),
        Y::Mapping(m) => J::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Y::String(s) => s,
                        other => serde_yaml::to_string(&other).unwrap_or_default().trim().to_string(),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        Y::Tagged(t) => yaml_to_json(t.value),
    }
}

struct Compiler<'a> {
    roots: &'a dyn RootsSource,
    id: &'a str,
    grains: &'a J,
    pillar: J,
    errors: Vec<String>,
    rendered: std::collections::HashSet<(String, String)>,
}

impl Compiler<'_> {
    /// The text of an SLS name in an env (`a.b` → `a/b.sls`, else `a/b/init.sls`, each
    /// searched through the env's directories in order, as Salt's `get_state` does),
    /// refusing names that would leave the roots.
    fn sls_text(&mut self, env: &str, sls: &str) -> Option<String> {
        if sls.is_empty() || sls.contains(['/', '\\', '\0']) || sls.split('.').any(|p| p.is_empty() || p == "..") {
            return None;
        }
        let rel = sls.replace('.', "/");
        let roots = self.roots;
        let file = [format!("{rel}.sls"), format!("{rel}/init.sls")].into_iter().find_map(|cand| roots.find(RootsTree::Pillar, env, &cand))?;
        match roots.read_all(RootsTree::Pillar, &file).map(String::from_utf8) {
            Some(Ok(t)) => Some(t),
            Some(Err(_)) => {
                self.error(format!("Reading {}: not UTF-8", file.path));
                Some(String::new())
            }
            None => {
                self.error(format!("Reading {}: cannot read it", file.path));
                Some(String::new())
            }
        }
    }

    fn render(&mut self, env: &str, sls: &str, text: &str) -> Option<J> {
        let mut jenv = minijinja::Environment::new();
        jenv.set_keep_trailing_newline(true);
        let grains = self.grains.clone();
        let pillar_now = self.pillar.clone();
        let mut salt: BTreeMap<String, JV> = BTreeMap::new();
        salt.insert(
            "grains.get".into(),
            JV::from_function(move |key: String, default: Option<JV>| -> JV {
                nested_get(&grains, &key).map(|v| JV::from_serialize(&v)).unwrap_or_else(|| default.unwrap_or(JV::from("")))
            }),
        );
        salt.insert(
            "pillar.get".into(),
            JV::from_function(move |key: String, default: Option<JV>| -> JV {
                nested_get(&pillar_now, &key).map(|v| JV::from_serialize(&v)).unwrap_or_else(|| default.unwrap_or(JV::from("")))
            }),
        );
        let ctx = minijinja::context! {
            grains => JV::from_serialize(self.grains),
            pillar => JV::from_serialize(&self.pillar),
            opts => JV::from_serialize(serde_json::json!({ "id": self.id, "saltenv": env })),
            saltenv => env,
            sls => sls,
            salt => JV::from(salt),
        };
        let out = match jenv.render_str(text, ctx) {
            Ok(o) => o,
            Err(e) => {
                self.error(format!("Rendering SLS '{env}:{sls}' failed: {e}"));
                return None;
            }
        };
        if out.trim().is_empty() {
            return Some(J::Object(Map::new()));
        }
        match serde_yaml::from_str::<serde_yaml::Value>(&out) {
            Ok(v) => Some(yaml_to_json(v)),
            Err(e) => {
                self.error(format!("Rendering SLS '{env}:{sls}' failed: YAML: {e}"));
                None
            }
        }
    }

    fn error(&mut self, e: String) {
        tracing::warn!(minion = self.id, "pillar: {e}");
        self.errors.push(e);
    }

    fn compile_sls(&mut self, env: &str, sls: &str, depth: usize) {
        if depth > 32 || !self.rendered.insert((env.to_string(), sls.to_string())) {
            return;
        }
        let Some(text) = self.sls_text(env, sls) else {
            self.error(format!("Specified SLS '{sls}' in environment '{env}' is not available on the salt master"));
            return;
        };
        let Some(mut data) = self.render(env, sls, &text) else { return };
        if let Some(J::Array(inc)) = data.as_object_mut().and_then(|m| m.remove("include")) {
            for i in inc {
                let Some(name) = i.as_str() else { continue };
                let name = match name.strip_prefix('.') {
                    // Relative include: resolved against the including SLS's package.
                    Some(rel) => {
                        let base = sls.rsplit_once('.').map(|(b, _)| b).unwrap_or("");
                        if base.is_empty() {
                            rel.to_string()
                        } else {
                            format!("{base}.{rel}")
                        }
                    }
                    None => name.to_string(),
                };
                self.compile_sls(env, &name, depth + 1);
            }
        }
        match data {
            J::Object(_) => merge(&mut self.pillar, data),
            J::Null => {}
            _ => self.error(format!("SLS '{env}:{sls}' does not render to a dictionary")),
        }
    }
}

/// Compiles the pillar of minion `id` with its `grains`, reading SLS files from `roots`
/// for the saltenvs of `pillar_roots`.
pub fn compile(cfg: &MasterConfig, roots: &dyn RootsSource, id: &str, grains: &J) -> J {
    let mut c = Compiler { roots, id, grains, pillar: J::Object(Map::new()), errors: Vec::new(), rendered: Default::default() };
    let mut envs: Vec<&String> = cfg.pillar_roots.keys().collect();
    envs.sort_by_key(|e| (e.as_str() != "base", e.as_str().to_string()));
    let mut todo: Vec<(String, String)> = Vec::new();
    let empty = J::Object(Map::new());
    let subject = Subject { id, grains, pillar: &empty };
    for env in envs {
        let Some(text) = c.sls_text(env, "top") else { continue };
        let Some(J::Object(top)) = c.render(env, "top", &text) else { continue };
        for (top_env, targets) in top {
            let J::Object(targets) = targets else { continue };
            for (tgt, items) in targets {
                let J::Array(items) = items else { continue };
                let tgt_type = items.iter().find_map(|i| i.get("match").and_then(J::as_str)).unwrap_or("glob").to_string();
                let (tgt, tgt_type) = match crate::nodegroups::resolve(&tgt, &tgt_type, &cfg.nodegroups) {
                    Ok(t) => t,
                    Err(e) => {
                        c.error(format!("Pillar top target '{tgt}': {e}"));
                        continue;
                    }
                };
                if !matches(&subject, &tgt, &tgt_type) {
                    continue;
                }
                for i in &items {
                    if let Some(name) = i.as_str() {
                        let item = (top_env.clone(), name.to_string());
                        if !todo.contains(&item) {
                            todo.push(item);
                        }
                    }
                }
            }
        }
    }
    for (env, sls) in todo {
        c.compile_sls(&env, &sls, 0);
    }
    if !c.errors.is_empty() {
        let errs = c.errors.iter().map(|e| J::String(e.clone())).collect();
        if let Some(m) = c.pillar.as_object_mut() {
            m.insert("_errors".into(), J::Array(errs));
        }
    }
    c.pillar
}

/// One saltenv's top targets: (target, order, items).
type TopTargets = Vec<(String, i64, Vec<J>)>;

/// The pillar top data as Salt's `pillar.show_top` gives it (Salt's `get_top`): every
/// env's `top.sls` rendered for minion `id` with its `grains`, merged into `{saltenv:
/// {target: [{match: ...}, sls, ...]}}` (a target named again by a later top file is
/// replaced; `include` is skipped), targets ordered by their `order` (default 0, stable),
/// with the rendering errors.
pub fn top(cfg: &MasterConfig, roots: &dyn RootsSource, id: &str, grains: &J) -> (J, Vec<String>) {
    let mut c = Compiler { roots, id, grains, pillar: J::Object(Map::new()), errors: Vec::new(), rendered: Default::default() };
    let mut envs: Vec<&String> = cfg.pillar_roots.keys().collect();
    envs.sort_by_key(|e| (e.as_str() != "base", e.as_str().to_string()));
    // saltenv → [(target, order, items)] in first-seen order.
    let mut merged: Vec<(String, TopTargets)> = Vec::new();
    for env in envs {
        let Some(text) = c.sls_text(env, "top") else { continue };
        let Some(J::Object(top)) = c.render(env, "top", &text) else { continue };
        for (top_env, targets) in top {
            if top_env == "include" {
                continue;
            }
            let J::Object(targets) = targets else { continue };
            let slot = match merged.iter().position(|m| m.0 == top_env) {
                Some(i) => i,
                None => {
                    merged.push((top_env.clone(), Vec::new()));
                    merged.len() - 1
                }
            };
            for (tgt, items) in targets {
                let J::Array(items) = items else { continue };
                let mut matches = Vec::new();
                let mut states: Vec<J> = Vec::new();
                let mut order = 0i64;
                for i in &items {
                    match i {
                        J::Object(o) => {
                            if o.contains_key("match") {
                                matches.push(i.clone());
                            }
                            if let Some(v) = o.get("order") {
                                order = v.as_i64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok())).unwrap_or(0);
                            }
                        }
                        J::String(_) if !states.contains(i) => states.push(i.clone()),
                        _ => {}
                    }
                }
                matches.extend(states);
                let list = &mut merged[slot].1;
                match list.iter_mut().find(|t| t.0 == tgt) {
                    Some(t) => *t = (tgt, order, matches),
                    None => list.push((tgt, order, matches)),
                }
            }
        }
    }
    let mut out = Map::new();
    for (env, mut targets) in merged {
        targets.sort_by_key(|t| t.1);
        out.insert(env, J::Object(targets.into_iter().map(|(t, _, items)| (t, J::Array(items))).collect()));
    }
    (J::Object(out), c.errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_matching_jinja_includes_and_merge() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().join("pillar");
        std::fs::create_dir_all(r.join("users")).unwrap();
        std::fs::write(
            r.join("top.sls"),
            "base:\n  '*':\n    - common\n  'web*':\n    - web\n  'os:Debian':\n    - match: grain\n    - debian\n  'G@os:RedHat':\n    - match: compound\n    - redhat\n  'db01,web01':\n    - match: list\n    - users\n",
        )
        .unwrap();
        std::fs::write(r.join("common.sls"), "motd: hello {{ grains['id'] }}\nsettings:\n  a: 1\n  nested: {x: 1}\n").unwrap();
        std::fs::write(r.join("web.sls"), "include:\n  - .extra\nsettings:\n  b: {{ salt['grains.get']('num_cpus', 1) * 2 }}\n  nested: {y: 2}\nrole: {{ salt['pillar.get']('motd') }}\n").unwrap();
        std::fs::write(r.join("extra.sls"), "extra: true\n").unwrap();
        std::fs::write(r.join("debian.sls"), "pkg: apt\n").unwrap();
        std::fs::write(r.join("redhat.sls"), "pkg: yum\n").unwrap();
        std::fs::write(r.join("users/init.sls"), "users: [alice]\n{% if sls == 'users' %}which: init{% endif %}\n").unwrap();
        let mut cfg = MasterConfig::under(d.path());
        cfg.pillar_roots = [("base".to_string(), vec![r.clone()])].into_iter().collect();
        let roots = crate::view::fs::FsRoots::new(&cfg);
        let grains = serde_json::json!({"id": "web01", "os": "Debian", "num_cpus": 4});
        let p = compile(&cfg, &roots, "web01", &grains);
        assert_eq!(p["motd"], "hello web01");
        assert_eq!(p["settings"]["a"], 1);
        assert_eq!(p["settings"]["b"], 8);
        assert_eq!(p["settings"]["nested"], serde_json::json!({"x": 1, "y": 2}), "maps merge recursively");
        assert_eq!(p["role"], "hello web01", "pillar.get sees what was compiled before");
        assert_eq!(p["extra"], true);
        assert_eq!(p["pkg"], "apt");
        assert_eq!(p["users"], serde_json::json!(["alice"]));
        assert_eq!(p["which"], "init");
        assert!(p.get("_errors").is_none(), "{p}");
        let db = compile(&cfg, &roots, "db02", &serde_json::json!({"os": "RedHat"}));
        assert_eq!(db["pkg"], "yum");
        assert!(db.get("settings").unwrap().get("b").is_none());
        // Errors are collected, not fatal; escapes are refused.
        std::fs::write(r.join("top.sls"), "base:\n  '*':\n    - broken\n    - missing\n    - ..etc\n    - common\n").unwrap();
        std::fs::write(r.join("broken.sls"), "a: {{ unclosed\n").unwrap();
        let p = compile(&cfg, &roots, "x", &serde_json::json!({}));
        assert_eq!(p["motd"], "hello");
        assert_eq!(p["_errors"].as_array().unwrap().len(), 3, "{p}");
    }
}
