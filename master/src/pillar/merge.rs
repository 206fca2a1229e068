//! How pillar sources merge, as Salt 3008.5's `salt.utils.dictupdate.merge` does with
//! `pillar_source_merging_strategy` and `pillar_merge_lists`:
//!
//! - `recurse` (and `smart`, which is `recurse` with Halite's `jinja|yaml` renderer, and
//!   `none`, whose merge is `recurse` without list merging): maps merge key by key; two
//!   lists are joined (the second's items not already in the first appended) when
//!   `pillar_merge_lists` is on, else the second replaces; anything else replaces.
//! - `overwrite`: a top-level key of the second replaces the first's whole value.
//! - `list`: a key both hold becomes the list `[first, second]`; the second's other
//!   keys are dropped, as Salt's `merge_list` does.
//! - `aggregate` (yamlex's merge) is not implemented: it is named in a warning at start
//!   and merged as `recurse`, which is also what Salt does with a strategy it does not
//!   know.
//!
//! `none` also limits the pillar top files read to the minion's saltenv (else `base`):
//! [`super::compile`].

use serde_json::{Map, Value as J};

/// `pillar_source_merging_strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Recurse,
    Overwrite,
    List,
    /// Merges as `recurse`, never merging lists; reads one saltenv's top file.
    None,
}

/// The merge options of a master config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeOpts {
    pub strategy: Strategy,
    /// `pillar_merge_lists`.
    pub merge_lists: bool,
    /// `ext_pillar_first`.
    pub ext_first: bool,
}

impl Default for MergeOpts {
    fn default() -> Self {
        MergeOpts { strategy: Strategy::Recurse, merge_lists: false, ext_first: false }
    }
}

impl MergeOpts {
    /// Reads the options, with what is not implemented named in `warnings`.
    pub fn from_raw(raw: &serde_yaml::Mapping, warnings: &mut Vec<String>) -> MergeOpts {
        let strategy = match raw.get("pillar_source_merging_strategy") {
            None | Option::Some(serde_yaml::Value::Null) => Strategy::Recurse,
            Some(v) => match v.as_str().unwrap_or("") {
                "smart" | "recurse" => Strategy::Recurse,
                "overwrite" => Strategy::Overwrite,
                "list" => Strategy::List,
                "none" => Strategy::None,
                "aggregate" => {
                    warnings.push("pillar_source_merging_strategy aggregate (yamlex's merge) is not implemented: pillar sources are merged as recurse".into());
                    Strategy::Recurse
                }
                other => {
                    warnings.push(format!("pillar_source_merging_strategy {other:?} is not a strategy Salt knows: pillar sources are merged as recurse, as Salt does"));
                    Strategy::Recurse
                }
            },
        };
        MergeOpts { strategy, merge_lists: raw.get("pillar_merge_lists").is_some_and(truthy), ext_first: raw.get("ext_pillar_first").is_some_and(truthy) }
    }

    /// `a` merged with `b` (b wins), as Salt's `merge(a, b, strategy, merge_lists)`.
    pub fn merge(&self, a: J, b: J) -> J {
        match self.strategy {
            Strategy::Recurse => recurse(a, b, self.merge_lists),
            Strategy::None => recurse(a, b, false),
            Strategy::Overwrite => {
                let (J::Object(mut a), J::Object(b)) = (a, b) else { return J::Object(Map::new()) };
                for (k, v) in b {
                    a.insert(k, v);
                }
                J::Object(a)
            }
            Strategy::List => {
                let (J::Object(a), J::Object(mut b)) = (a, b) else { return J::Object(Map::new()) };
                J::Object(
                    a.into_iter()
                        .map(|(k, v)| match b.remove(&k) {
                            Some(w) => (k, J::Array(vec![v, w])),
                            None => (k, v),
                        })
                        .collect(),
                )
            }
        }
    }
}

/// Salt's `merge_recurse` (`update` with `recursive_update`).
fn recurse(a: J, b: J, merge_lists: bool) -> J {
    match (a, b) {
        (J::Object(mut a), J::Object(b)) => {
            for (k, v) in b {
                let merged = match (a.remove(&k), v) {
                    (Some(old @ J::Object(_)), new @ J::Object(_)) => recurse(old, new, merge_lists),
                    (Some(J::Array(mut old)), J::Array(new)) if merge_lists => {
                        for x in new {
                            if !old.contains(&x) {
                                old.push(x);
                            }
                        }
                        J::Array(old)
                    }
                    (_, new) => new,
                };
                a.insert(k, merged);
            }
            J::Object(a)
        }
        (_, b) => b,
    }
}

pub(crate) fn truthy(v: &serde_yaml::Value) -> bool {
    match v {
        serde_yaml::Value::Bool(b) => *b,
        serde_yaml::Value::String(s) => matches!(s.to_ascii_lowercase().as_str(), "true" | "yes" | "on" | "1"),
        serde_yaml::Value::Number(n) => n.as_i64().is_some_and(|n| n != 0),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn opts(strategy: &str, lists: bool) -> (MergeOpts, Vec<String>) {
        let raw: serde_yaml::Mapping = serde_yaml::from_str(&format!("pillar_source_merging_strategy: {strategy}\npillar_merge_lists: {lists}\n")).unwrap();
        let mut w = Vec::new();
        (MergeOpts::from_raw(&raw, &mut w), w)
    }

    fn a() -> J {
        json!({"users": {"alice": {"uid": 1, "groups": ["adm"]}, "bob": {"uid": 2}}, "pkgs": ["vim", "git"], "motd": "a", "only_a": 1})
    }

    fn b() -> J {
        json!({"users": {"alice": {"groups": ["wheel", "adm"], "shell": "zsh"}}, "pkgs": ["git", "curl"], "motd": "b", "only_b": 2})
    }

    /// Each value below is what Salt 3008.5's `salt.utils.dictupdate.merge(a, b, strategy,
    /// "yaml", merge_lists)` returns for these inputs, worked out from its rules.
    #[test]
    fn strategies_as_salt_merges() {
        let recurse = json!({"users": {"alice": {"uid": 1, "groups": ["wheel", "adm"], "shell": "zsh"}, "bob": {"uid": 2}}, "pkgs": ["git", "curl"], "motd": "b", "only_a": 1, "only_b": 2});
        for s in ["smart", "recurse", "none"] {
            assert_eq!(opts(s, false).0.merge(a(), b()), recurse, "{s}");
        }
        // pillar_merge_lists: the second's new items appended, at every depth.
        let lists = json!({"users": {"alice": {"uid": 1, "groups": ["adm", "wheel"], "shell": "zsh"}, "bob": {"uid": 2}}, "pkgs": ["vim", "git", "curl"], "motd": "b", "only_a": 1, "only_b": 2});
        assert_eq!(opts("recurse", true).0.merge(a(), b()), lists);
        assert_eq!(opts("smart", true).0.merge(a(), b()), lists);
        // `none` merges recursively but never merges lists.
        assert_eq!(opts("none", true).0.merge(a(), b()), recurse);
        // overwrite: b's top-level keys replace a's whole values.
        let over = json!({"users": {"alice": {"groups": ["wheel", "adm"], "shell": "zsh"}}, "pkgs": ["git", "curl"], "motd": "b", "only_a": 1, "only_b": 2});
        assert_eq!(opts("overwrite", false).0.merge(a(), b()), over);
        assert_eq!(opts("overwrite", true).0.merge(a(), b()), over, "lists replaced: the top-level values are b's already");
        // list: shared keys paired, b's own keys dropped.
        let list = json!({"users": [a()["users"].clone(), b()["users"].clone()], "pkgs": [["vim", "git"], ["git", "curl"]], "motd": ["a", "b"], "only_a": 1});
        assert_eq!(opts("list", false).0.merge(a(), b()), list);
        // A map over a scalar and a scalar over a map replace.
        assert_eq!(opts("recurse", true).0.merge(json!({"x": 1, "y": {"z": 1}}), json!({"x": {"k": 1}, "y": 2})), json!({"x": {"k": 1}, "y": 2}));
        // A list over a map replaces even with merge_lists (Salt raises only when strict).
        assert_eq!(opts("recurse", true).0.merge(json!({"x": {"k": 1}}), json!({"x": [1]})), json!({"x": [1]}));
    }

    #[test]
    fn unimplemented_strategies_are_named() {
        let (o, w) = opts("aggregate", false);
        assert_eq!(o.strategy, Strategy::Recurse);
        assert!(w[0].contains("aggregate") && w[0].contains("not implemented"), "{w:?}");
        let (o, w) = opts("mystery", false);
        assert_eq!(o.strategy, Strategy::Recurse);
        assert!(w[0].contains("mystery"), "{w:?}");
        let (_, w) = opts("smart", false);
        assert!(w.is_empty());
        let raw: serde_yaml::Mapping = serde_yaml::from_str("ext_pillar_first: True\n").unwrap();
        assert!(MergeOpts::from_raw(&raw, &mut Vec::new()).ext_first);
        assert_eq!(MergeOpts::from_raw(&Default::default(), &mut Vec::new()), MergeOpts::default());
    }
}
