//! Pillar compilation, as Salt 3008.5's `salt/pillar/__init__.py` does it (Salt's default
//! `jinja|yaml` renderer), from `pillar_roots` and the external pillars (`ext_pillar`).
//!
//! 1. Every env's `top.sls` is rendered (Jinja, then YAML); its targets are matched
//!    against the minion (glob by default, or the `- match: <type>` given in the list).
//!    A minion's `pillarenv` limits the top files to that env; the `none` merging
//!    strategy to its `saltenv` (else `base`).
//! 2. Each matched SLS (`a.b` → `a/b.sls` or `a/b/init.sls`, first env directory holding
//!    it) is rendered with `grains`, `opts`, `pillar` (compiled so far), `saltenv`, `sls`
//!    and `salt['grains.get']` / `salt['pillar.get']`; its `include:` list is compiled
//!    first; the result is merged into the pillar ([`merge`]: the
//!    `pillar_source_merging_strategy` and `pillar_merge_lists`).
//! 3. The external pillars ([`ext`]: git_pillar ([`git`]), `cmd_yaml`, `cmd_json`) are
//!    merged in order after the `pillar_roots` pillar, or before it with
//!    `ext_pillar_first` (its SLS files then see them as `pillar`).
//! 4. Errors do not stop compilation: they are collected under `_errors`, as Salt does,
//!    and logged.
//!
//! Reading the roots and the `git_pillar` tree goes through [`RootsSource`]; running a
//! command through [`ext::ExtRun`], which the daemon implements: compiling stays pure.

pub mod ext;
pub mod git;
pub mod merge;

use std::collections::BTreeMap;

use minijinja::value::Value as JV;
use serde_json::{Map, Value as J};

use halite_storage::format::RootsTree;

use crate::config::MasterConfig;
use crate::matcher::{matches, Subject};
use crate::view::RootsSource;
use ext::{ExtPillarConfig, ExtRun, ExtSource};
use merge::{MergeOpts, Strategy};

/// Salt's recursive merge: maps merge key by key, anything else replaces.
pub fn merge(into: &mut J, from: J) {
    *into = MergeOpts::default().merge(std::mem::take(into), from);
}

/// The minion a pillar is compiled for.
#[derive(Debug, Clone, Copy)]
pub struct Minion<'a> {
    pub id: &'a str,
    pub grains: &'a J,
    /// The `saltenv` and `pillarenv` of its request (`None`: not set).
    pub saltenv: Option<&'a str>,
    pub pillarenv: Option<&'a str>,
}

/// Where a pillar's parts are read from, and who runs commands.
pub struct Sources<'a> {
    /// `pillar_roots`.
    pub roots: &'a dyn RootsSource,
    /// The applied `git_pillar` tree (`None`: git_pillar is not read here).
    pub git: Option<&'a dyn RootsSource>,
    pub run: &'a dyn ExtRun,
}

/// One compilation's roots: `envs` of `tree` in `src`, each path looked up below each
/// of `dirs` in order (`""`: the env's own top).
pub(crate) struct Roots<'a> {
    pub src: &'a dyn RootsSource,
    pub tree: RootsTree,
    pub dirs: &'a [String],
    pub envs: Vec<String>,
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
    roots: &'a Roots<'a>,
    id: &'a str,
    grains: &'a J,
    pillar: J,
    opts: MergeOpts,
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
        let r = self.roots;
        let below = |dir: &String, cand: &str| if dir.is_empty() { cand.to_string() } else { format!("{dir}/{cand}") };
        let file = [format!("{rel}.sls"), format!("{rel}/init.sls")].into_iter().find_map(|cand| r.dirs.iter().find_map(|d| r.src.find(r.tree, env, &below(d, &cand))))?;
        match r.src.read_all(r.tree, &file).map(String::from_utf8) {
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
            J::Object(_) => self.pillar = self.opts.merge(std::mem::take(&mut self.pillar), data),
            J::Null => {}
            _ => self.error(format!("SLS '{env}:{sls}' does not render to a dictionary")),
        }
    }
}

/// The pillar of a minion: `pillar_roots` and the external pillars, merged as the
/// merge options say, `_errors` listing what went wrong.
pub fn compile(cfg: &MasterConfig, src: &Sources, m: &Minion) -> J {
    let opts = MergeOpts::from_raw(&cfg.raw, &mut Vec::new());
    let ext = ExtPillarConfig::from_raw(&cfg.raw);
    let dirs = [String::new()];
    let roots = Roots { src: src.roots, tree: RootsTree::Pillar, dirs: &dirs, envs: roots_envs(cfg, m, opts) };
    let mut errors = Vec::new();
    let mut pillar = if opts.ext_first && !ext.sources.is_empty() {
        let ext_data = ext_pillar(cfg, &ext, src, m, J::Object(Map::new()), opts, &mut errors);
        let (compiled, errs) = compile_roots(cfg, &roots, m, ext_data, opts);
        errors.extend(errs);
        compiled
    } else {
        let (compiled, errs) = compile_roots(cfg, &roots, m, J::Object(Map::new()), opts);
        errors.extend(errs);
        ext_pillar(cfg, &ext, src, m, compiled, opts, &mut errors)
    };
    if !errors.is_empty() {
        if let Some(p) = pillar.as_object_mut() {
            p.insert("_errors".into(), J::Array(errors.into_iter().map(J::String).collect()));
        }
    }
    pillar
}

/// The `pillar_roots` envs whose top files are read, `base` first: the minion's
/// `pillarenv` alone when set, the minion's `saltenv` (else `base`) alone with the
/// `none` strategy, else all.
fn roots_envs(cfg: &MasterConfig, m: &Minion, opts: MergeOpts) -> Vec<String> {
    let mut envs: Vec<String> = cfg.pillar_roots.keys().cloned().collect();
    envs.sort_by_key(|e| (e.as_str() != "base", e.clone()));
    let only = match (m.pillarenv, opts.strategy) {
        (Some(p), _) => Some(p),
        (None, Strategy::None) => Some(m.saltenv.unwrap_or("base")),
        _ => None,
    };
    if let Some(only) = only {
        envs.retain(|e| e == only);
    }
    envs
}

/// `pillar` with every external pillar merged in, in order (Salt's `ext_pillar`).
fn ext_pillar(cfg: &MasterConfig, ext: &ExtPillarConfig, src: &Sources, m: &Minion, mut pillar: J, opts: MergeOpts, errors: &mut Vec<String>) -> J {
    for s in &ext.sources {
        let data = match s {
            ExtSource::Git(idx) => match src.git {
                Some(tree) => git::compile(cfg, ext, idx, tree, m, errors),
                None => continue,
            },
            ExtSource::Cmd { format, command } => match src.run.run(command, m.id).and_then(|out| ext::parse_output(*format, &out)) {
                Ok(d) => d,
                Err(why) => {
                    // As Salt's cmd_yaml/cmd_json: logged, nothing merged, no `_errors`
                    // (which would stop the minion's state runs).
                    tracing::warn!(minion = m.id, "pillar: Failed to load ext_pillar {}: {why}", format.name());
                    continue;
                }
            },
        };
        if data.as_object().is_some_and(|d| !d.is_empty()) {
            pillar = opts.merge(pillar, data);
        }
    }
    pillar
}

/// The pillar of `roots` for a minion, starting from `pillar`, and the errors met.
pub(crate) fn compile_roots(cfg: &MasterConfig, roots: &Roots, m: &Minion, pillar: J, opts: MergeOpts) -> (J, Vec<String>) {
    let (id, grains) = (m.id, m.grains);
    let mut c = Compiler { roots, id, grains, pillar, opts, errors: Vec::new(), rendered: Default::default() };
    let mut todo: Vec<(String, String)> = Vec::new();
    let empty = J::Object(Map::new());
    let subject = Subject { id, grains, pillar: &empty };
    for env in &roots.envs {
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
    (c.pillar, c.errors)
}

/// One saltenv's top targets: (target, order, items).
type TopTargets = Vec<(String, i64, Vec<J>)>;

/// The pillar top data as Salt's `pillar.show_top` gives it (Salt's `get_top`): every
/// env's `top.sls` rendered for minion `id` with its `grains`, merged into `{saltenv:
/// {target: [{match: ...}, sls, ...]}}` (a target named again by a later top file is
/// replaced; `include` is skipped), targets ordered by their `order` (default 0, stable),
/// with the rendering errors.
pub fn top(cfg: &MasterConfig, roots: &dyn RootsSource, id: &str, grains: &J) -> (J, Vec<String>) {
    let dirs = [String::new()];
    let mut envs: Vec<String> = cfg.pillar_roots.keys().cloned().collect();
    envs.sort_by_key(|e| (e.as_str() != "base", e.clone()));
    let r = Roots { src: roots, tree: RootsTree::Pillar, dirs: &dirs, envs: envs.clone() };
    let mut c = Compiler { roots: &r, id, grains, pillar: J::Object(Map::new()), opts: MergeOpts::default(), errors: Vec::new(), rendered: Default::default() };
    // saltenv → [(target, order, items)] in first-seen order.
    let mut merged: Vec<(String, TopTargets)> = Vec::new();
    for env in &envs {
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
mod tests;
#[cfg(test)]
mod git_tests;
