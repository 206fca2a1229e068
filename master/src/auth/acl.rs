//! `external_auth` and `publisher_acl` rules: which rules a user gets, and whether they
//! allow a call. salt-api (`halite_api`) checks its logins' calls with them; the
//! admin socket checks the publishes of system users `publisher_acl` names
//! ([`crate::publisher_acl`]).
//!
//! The rules are Salt's (`external_auth: {BACKEND: {USER: [RULE, ...]}}`), matched the
//! way Salt's master matches them:
//!
//! - a user's rules are those of every entry whose name matches the user (equal, a shell
//!   glob, or a whole-name regex), or of the `*` entry when none matched, and of every
//!   `GROUP%` entry naming one of the user's groups (the `pam` backend's system groups;
//!   the `file` backend has none);
//! - a string rule is a function regex, matched from the start (Python's `re.match`), and
//!   allows that function on every minion;
//! - `{TARGET: [function rules]}` allows the functions on the minions `TARGET` (a
//!   compound expression) names, when every minion the call targets is among them;
//!   `*` is every minion, and targets starting with `@` name no minion;
//! - a function rule may be `{FUN_REGEX: {args: [REGEX|null, ...], kwargs: {NAME:
//!   REGEX|null}}}` (or a list of such `{args, kwargs}` maps): the call's positional
//!   arguments and keyword arguments must match (`null`: anything present);
//! - runner and wheel calls match `@runner`/`@runners`/`@wheel`/`@wheels` or `@MODULE`
//!   (e.g. `@jobs` for every `jobs.*` runner), as strings (everything) or as
//!   `{"@runner": [function rules]}` maps.
//!
//! The minions of targets are looked up by the caller (they need the master); this file
//! is pure and unit tested.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value as J;

use crate::glob::fnmatch;
use crate::matcher::re_match;

/// The rules of `user`, a member of `groups`, under one backend's `external_auth`
/// entry (a map of user patterns to rule lists), in Salt's order (the map's).
pub fn rules_for(backend: &J, user: &str, groups: &[String]) -> Vec<J> {
    let mut out = Vec::new();
    let Some(map) = backend.as_object() else { return out };
    let mut matched = false;
    for (pat, rules) in map {
        if pat == "*" || pat.starts_with('^') {
            continue;
        }
        if let Some(group) = pat.strip_suffix('%') {
            if groups.iter().any(|g| g == group) {
                extend(&mut out, rules);
            }
            continue;
        }
        if pat == user || fnmatch(pat, user) || whole_re(pat, user) {
            matched = true;
            extend(&mut out, rules);
        }
    }
    if !matched {
        if let Some(rules) = map.get("*") {
            extend(&mut out, rules);
        }
    }
    out
}

fn extend(out: &mut Vec<J>, rules: &J) {
    match rules {
        J::Array(a) => out.extend(a.iter().cloned()),
        J::Null => {}
        other => out.push(other.clone()),
    }
}

fn whole_re(pat: &str, s: &str) -> bool {
    regex::Regex::new(&format!("^(?:{pat})$")).map(|r| r.is_match(s)).unwrap_or(false)
}

/// The target expressions (keys of `{TARGET: [...]}` rules) whose minions
/// [`minion_call_allowed`] needs: every one but `*` and `@...`.
pub fn targets_needed(rules: &[J]) -> BTreeSet<String> {
    rules.iter().filter_map(single_key).filter(|(k, _)| *k != "*" && !k.starts_with('@')).map(|(k, _)| k.to_string()).collect()
}

fn single_key(rule: &J) -> Option<(&str, &J)> {
    let m = rule.as_object()?;
    if m.len() != 1 {
        return None;
    }
    m.iter().next().map(|(k, v)| (k.as_str(), v))
}

/// Whether `rules` allow `fun` with `args`/`kwargs` on `minions` (the minions the call
/// targets). `targets` holds the minions of each expression [`targets_needed`] named.
pub fn minion_call_allowed(rules: &[J], fun: &str, args: &[J], kwargs: &serde_json::Map<String, J>, minions: &BTreeSet<String>, targets: &BTreeMap<String, BTreeSet<String>>) -> bool {
    for rule in rules {
        match rule {
            J::String(re) if re_match(re, fun) => return true,
            J::Object(_) => {
                let Some((valid, funs)) = single_key(rule) else { continue };
                let on_all = valid == "*"
                    || (!valid.starts_with('@') && targets.get(valid).is_some_and(|v| minions.is_subset(v)));
                if on_all && fun_allowed(funs, fun, args, kwargs) {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// Whether `rules` allow the runner or wheel function `fun` (`form`: `runner` or
/// `wheel`).
pub fn special_call_allowed(rules: &[J], form: &str, fun: &str, args: &[J], kwargs: &serde_json::Map<String, J>) -> bool {
    let Some((module, name)) = fun.split_once('.') else { return false };
    if name.contains('.') {
        return false;
    }
    let is_form = |s: &str| s == form || s == format!("{form}s");
    for rule in rules {
        match rule {
            J::String(s) => {
                if let Some(what) = s.strip_prefix('@') {
                    if what == module || is_form(what) {
                        return true;
                    }
                }
            }
            J::Object(_) => {
                let Some((valid, funs)) = single_key(rule) else { continue };
                let Some(what) = valid.strip_prefix('@') else { continue };
                if what == module && fun_allowed(funs, name, args, kwargs) {
                    return true;
                }
                if is_form(what) && fun_allowed(funs, fun, args, kwargs) {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// Function rules (a rule or a list): a regex, or `{REGEX: ARG_RULES}`.
fn fun_allowed(valid: &J, fun: &str, args: &[J], kwargs: &serde_json::Map<String, J>) -> bool {
    let list = match valid {
        J::Array(a) => a.as_slice(),
        other => std::slice::from_ref(other),
    };
    list.iter().any(|cond| match cond {
        J::String(re) => re_match(re, fun),
        J::Object(_) => single_key(cond).is_some_and(|(re, arg_rules)| re_match(re, fun) && args_allowed(arg_rules, args, kwargs)),
        _ => false,
    })
}

/// `{args: [...], kwargs: {...}}` or a list of them: any one that matches allows.
fn args_allowed(valid: &J, args: &[J], kwargs: &serde_json::Map<String, J>) -> bool {
    let list = match valid {
        J::Array(a) => a.as_slice(),
        other => std::slice::from_ref(other),
    };
    list.iter().any(|cond| {
        let Some(cond) = cond.as_object() else { return false };
        let args_ok = cond.get("args").and_then(J::as_array).is_none_or(|want| {
            want.iter().enumerate().all(|(i, w)| match (args.get(i), w) {
                (None, _) => false,
                (Some(_), J::Null) => true,
                (Some(a), J::String(re)) => re_match(re, &py_str(a)),
                _ => false,
            })
        });
        let kwargs_ok = cond.get("kwargs").and_then(J::as_object).is_none_or(|want| {
            want.iter().all(|(k, w)| match (kwargs.get(k), w) {
                (None, _) => false,
                (Some(_), J::Null) => true,
                (Some(a), J::String(re)) => re_match(re, &py_str(a)),
                _ => false,
            })
        });
        args_ok && kwargs_ok
    })
}

/// An argument as Python's `str()` shows it (strings bare, the rest as JSON, booleans
/// and null as Python spells them).
fn py_str(v: &J) -> String {
    match v {
        J::String(s) => s.clone(),
        J::Bool(true) => "True".into(),
        J::Bool(false) => "False".into(),
        J::Null => "None".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn no_kw() -> serde_json::Map<String, J> {
        serde_json::Map::new()
    }

    #[test]
    fn users_get_their_entries_or_the_star_entry() {
        let backend = json!({
            "fred": ["test.*"],
            "dev*": ["cmd.run"],
            "ops_[0-9]+": ["@runner"],
            "admins%": [".*"],
            "*": ["grains.items"],
        });
        assert_eq!(rules_for(&backend, "fred", &[]), vec![json!("test.*")]);
        assert_eq!(rules_for(&backend, "devin", &[]), vec![json!("cmd.run")]);
        assert_eq!(rules_for(&backend, "ops_12", &[]), vec![json!("@runner")]);
        assert_eq!(rules_for(&backend, "mallory", &[]), vec![json!("grains.items")]);
        // Group entries add to the user's own (or the `*` entry's) rules.
        let admins = ["wheel".to_string(), "admins".to_string()];
        assert_eq!(rules_for(&backend, "fred", &admins), vec![json!("test.*"), json!(".*")]);
        assert_eq!(rules_for(&backend, "mallory", &admins), vec![json!(".*"), json!("grains.items")]);
        assert_eq!(rules_for(&json!({"fred": null}), "fred", &[]), Vec::<J>::new());
        assert_eq!(rules_for(&json!("not a map"), "fred", &[]), Vec::<J>::new());
    }

    #[test]
    fn function_regexes_match_from_the_start_on_every_minion() {
        let rules = vec![json!("test.*"), json!("grains.item$")];
        let t = BTreeMap::new();
        let m = set(&["m1", "m2"]);
        assert!(minion_call_allowed(&rules, "test.ping", &[], &no_kw(), &m, &t));
        assert!(minion_call_allowed(&rules, "grains.item", &[], &no_kw(), &m, &t));
        assert!(!minion_call_allowed(&rules, "grains.items", &[], &no_kw(), &m, &t));
        assert!(!minion_call_allowed(&rules, "cmd.run", &[], &no_kw(), &m, &t));
        // re.match anchors at the start only: "xtest.ping" is not allowed.
        assert!(!minion_call_allowed(&rules, "xtest.ping", &[], &no_kw(), &m, &t));
        // A bad regex allows nothing.
        assert!(!minion_call_allowed(&[json!("(")], "(", &[], &no_kw(), &m, &t));
    }

    #[test]
    fn target_rules_allow_only_subsets_of_their_minions() {
        let rules = vec![json!({"G@os:Debian": ["cmd.run", "test.*"]}), json!({"*": ["grains.items"]}), json!({"@runner": ["cmd.*"]})];
        let mut t = BTreeMap::new();
        t.insert("G@os:Debian".to_string(), set(&["d1", "d2"]));
        assert_eq!(targets_needed(&rules), set(&["G@os:Debian"]));
        assert!(minion_call_allowed(&rules, "cmd.run", &[], &no_kw(), &set(&["d1"]), &t));
        assert!(minion_call_allowed(&rules, "cmd.run", &[], &no_kw(), &set(&["d1", "d2"]), &t));
        assert!(!minion_call_allowed(&rules, "cmd.run", &[], &no_kw(), &set(&["d1", "r1"]), &t));
        assert!(minion_call_allowed(&rules, "grains.items", &[], &no_kw(), &set(&["d1", "r1"]), &t));
        assert!(!minion_call_allowed(&rules, "state.apply", &[], &no_kw(), &set(&["d1"]), &t));
        // Unresolved targets allow nothing.
        assert!(!minion_call_allowed(&rules, "cmd.run", &[], &no_kw(), &set(&["d1"]), &BTreeMap::new()));
    }

    #[test]
    fn argument_rules() {
        let rules = vec![json!({"*": [{"cmd.run": {"args": ["ls( .*)?$", null], "kwargs": {"cwd": "/tmp"}}}, {"test.echo": [{"args": ["hi"]}, {"kwargs": {"x": null}}]}]})];
        let t = BTreeMap::new();
        let m = set(&["m1"]);
        let mut kw = no_kw();
        kw.insert("cwd".into(), json!("/tmp"));
        assert!(minion_call_allowed(&rules, "cmd.run", &[json!("ls -l"), json!(1)], &kw, &m, &t));
        assert!(!minion_call_allowed(&rules, "cmd.run", &[json!("ls -l")], &kw, &m, &t), "the second argument must be there");
        assert!(!minion_call_allowed(&rules, "cmd.run", &[json!("rm -rf /"), json!(1)], &kw, &m, &t));
        assert!(!minion_call_allowed(&rules, "cmd.run", &[json!("ls"), json!(1)], &no_kw(), &m, &t), "cwd is required");
        assert!(minion_call_allowed(&rules, "test.echo", &[json!("hi")], &no_kw(), &m, &t));
        let mut x = no_kw();
        x.insert("x".into(), json!(false));
        assert!(minion_call_allowed(&rules, "test.echo", &[json!("bye")], &x, &m, &t));
        assert!(!minion_call_allowed(&rules, "test.echo", &[json!("bye")], &no_kw(), &m, &t));
        assert_eq!(py_str(&json!(true)), "True");
        assert_eq!(py_str(&json!(3)), "3");
    }

    #[test]
    fn runner_and_wheel_rules() {
        let k = no_kw();
        assert!(special_call_allowed(&[json!("@runner")], "runner", "jobs.list_jobs", &[], &k));
        assert!(special_call_allowed(&[json!("@runners")], "runner", "manage.present", &[], &k));
        assert!(!special_call_allowed(&[json!("@runner")], "wheel", "key.list_all", &[], &k));
        assert!(special_call_allowed(&[json!("@jobs")], "runner", "jobs.lookup_jid", &[], &k));
        assert!(!special_call_allowed(&[json!("@jobs")], "runner", "manage.present", &[], &k));
        assert!(special_call_allowed(&[json!("@wheel")], "wheel", "key.accept", &[], &k));
        assert!(special_call_allowed(&[json!({"@wheel": ["key.list_all"]})], "wheel", "key.list_all", &[], &k));
        assert!(!special_call_allowed(&[json!({"@wheel": ["key.list_all"]})], "wheel", "key.delete", &[], &k));
        assert!(special_call_allowed(&[json!({"@jobs": ["list_.*"]})], "runner", "jobs.list_job", &[], &k));
        assert!(!special_call_allowed(&[json!({"@jobs": ["list_.*"]})], "runner", "jobs.lookup_jid", &[], &k));
        // Minion function rules allow no runner, and malformed names nothing.
        assert!(!special_call_allowed(&[json!(".*")], "runner", "jobs.list_jobs", &[], &k));
        assert!(!special_call_allowed(&[json!("@runner")], "runner", "jobs", &[], &k));
        assert!(!special_call_allowed(&[json!("@runner")], "runner", "a.b.c", &[], &k));
        // And runner rules allow no minion function.
        assert!(!minion_call_allowed(&[json!({"@runner": [".*"]})], "test.ping", &[], &k, &set(&["m"]), &BTreeMap::new()));
    }
}
