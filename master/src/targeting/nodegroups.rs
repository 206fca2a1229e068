//! Nodegroups: named targets from the `nodegroups` master option, expanded by the master
//! into compound expressions before anything is matched or published, as Salt's
//! `LocalClient` does (minions never see `N@`).
//!
//! A group is a compound expression (a string, split on whitespace) or a list of words:
//!
//! ```yaml
//! nodegroups:
//!   web: 'L@web1,web2 or G@role:web'
//!   db: [db1, db2]              # plain ids, no operators: the list `L@db1,db2`
//!   prod: 'N@web or N@db'        # nested groups
//! ```
//!
//! Expansion, following Salt's `nodegroup_comp`: words are kept, `N@name` words are
//! replaced by the named group's expansion in parentheses; a group whose words hold no
//! operator, no `X@` engine and no `*` is a list of ids (`L@a,b`), or a regular expression
//! if a word holds a regex character. Unlike Salt, the words of such an expression are
//! alternatives (`E@a|b`; Salt's `E@a,b` is one regex that needs a comma), a nested group
//! of plain ids expands as a list too (Salt splits its joined string into characters),
//! and every expansion is parenthesised, so `N@a and N@b` means what it says. An unknown group or a
//! group that contains itself is an error naming it.

use std::collections::BTreeMap;

/// The `nodegroups` option: group name → its words.
pub type Nodegroups = BTreeMap<String, Vec<String>>;

const OPERATORS: [&str; 5] = ["and", "or", "not", "(", ")"];

/// Why a nodegroup could not be expanded, or the option read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodegroupError {
    /// Salt's words for an unknown group.
    #[error("Node group {0} unavailable in the master config")]
    Unknown(String),
    /// A group that names itself, with the chain that got there.
    #[error("Nodegroup {name} contains itself ({chain} -> {name})")]
    Cycle { name: String, chain: String },
    /// The `nodegroups` option is not a mapping of names to targets.
    #[error("{0}")]
    Option(String),
}

/// The words of group `name` with every nested group expanded, in parentheses.
fn expand_words(name: &str, groups: &Nodegroups, stack: &mut Vec<String>) -> Result<Vec<String>, NodegroupError> {
    if stack.iter().any(|g| g == name) {
        return Err(NodegroupError::Cycle { name: name.to_string(), chain: stack.join(" -> ") });
    }
    let Some(words) = groups.get(name) else {
        return Err(NodegroupError::Unknown(name.to_string()));
    };
    let plain = words.iter().all(|w| !OPERATORS.contains(&w.as_str()) && !w.contains('*') && !has_engine(w));
    let mut out = vec!["(".to_string()];
    if plain && !words.is_empty() {
        let regex = words.iter().any(|w| w.contains(['(', '[', '{', '\\', '?', '}', ']', ')']));
        out.push(if regex { format!("E@{}", words.join("|")) } else { format!("L@{}", words.join(",")) });
    } else {
        stack.push(name.to_string());
        for w in words {
            match w.strip_prefix("N@") {
                Some(inner) if !inner.is_empty() => out.extend(expand_words(inner, groups, stack)?),
                _ => out.push(w.clone()),
            }
        }
        stack.pop();
    }
    out.push(")".to_string());
    Ok(out)
}

/// Whether a word starts with an engine letter and `@` (`G@`, `L@`, ...).
fn has_engine(w: &str) -> bool {
    let b = w.as_bytes();
    b.len() >= 2 && b[0].is_ascii_uppercase() && b[1] == b'@'
}

/// The compound expression a nodegroup stands for.
pub fn expand(name: &str, groups: &Nodegroups) -> Result<String, NodegroupError> {
    Ok(expand_words(name, groups, &mut Vec::new())?.join(" "))
}

/// A compound expression with every `N@name` replaced by its group's expansion.
pub fn expand_compound(expr: &str, groups: &Nodegroups) -> Result<String, NodegroupError> {
    let mut out = Vec::new();
    for w in expr.split_whitespace() {
        match w.strip_prefix("N@") {
            Some(inner) if !inner.is_empty() => out.extend(expand_words(inner, groups, &mut Vec::new())?),
            _ => out.push(w.to_string()),
        }
    }
    Ok(out.join(" "))
}

/// The target to match or publish for (`tgt`, `tgt_type`): a `nodegroup` becomes its
/// compound expression, a `compound` has its `N@` words expanded, others are unchanged.
pub fn resolve(tgt: &str, tgt_type: &str, groups: &Nodegroups) -> Result<(String, String), NodegroupError> {
    match tgt_type {
        "nodegroup" => Ok((expand(tgt.trim(), groups)?, "compound".into())),
        "compound" => Ok((expand_compound(tgt, groups)?, "compound".into())),
        other => Ok((tgt.to_string(), other.to_string())),
    }
}

/// Reads the `nodegroups` option (a mapping of name to a string or a list of words).
pub fn from_option(v: Option<&serde_yaml::Value>) -> Result<Nodegroups, NodegroupError> {
    use serde_yaml::Value as Y;
    let mut out = Nodegroups::new();
    let m = match v {
        None | Some(Y::Null) => return Ok(out),
        Some(Y::Mapping(m)) => m,
        Some(_) => return Err(NodegroupError::Option("must be a mapping of group names to targets".into())),
    };
    let word = |v: &Y| -> Option<String> {
        match v {
            Y::String(s) => Some(s.clone()),
            Y::Number(n) => Some(n.to_string()),
            Y::Bool(b) => Some(if *b { "True" } else { "False" }.to_string()),
            _ => None,
        }
    };
    for (k, v) in m {
        let name = word(k).ok_or_else(|| NodegroupError::Option("a group name is not a string".into()))?;
        let words = match v {
            Y::Sequence(s) => s.iter().map(|w| word(w).ok_or_else(|| NodegroupError::Option(format!("group {name}: a list item is not a string")))).collect::<Result<Vec<_>, _>>()?,
            other => word(other).ok_or_else(|| NodegroupError::Option(format!("group {name}: neither a string nor a list")))?.split_whitespace().map(String::from).collect(),
        };
        out.insert(name, words);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups() -> Nodegroups {
        let y: serde_yaml::Value = serde_yaml::from_str(
            "web: 'L@web1,web2 or G@role:web'\ndb: [db1, db2]\nre: ['db[0-9]', 'web1']\nglob: 'web*'\nprod: 'N@web or N@db'\nall: ['N@prod', 'and', 'not', 'N@glob']\nloop1: 'N@loop2'\nloop2: 'x* or N@loop1'\n",
        )
        .unwrap();
        from_option(Some(&y)).unwrap()
    }

    #[test]
    fn groups_expand_as_salt_documents() {
        let g = groups();
        assert_eq!(expand("web", &g).unwrap(), "( L@web1,web2 or G@role:web )");
        assert_eq!(expand("db", &g).unwrap(), "( L@db1,db2 )", "plain ids are a list");
        assert_eq!(expand("re", &g).unwrap(), "( E@db[0-9]|web1 )", "a regex character makes it an expression");
        assert_eq!(expand("glob", &g).unwrap(), "( web* )");
        assert_eq!(expand("prod", &g).unwrap(), "( ( L@web1,web2 or G@role:web ) or ( L@db1,db2 ) )");
        assert_eq!(expand("all", &g).unwrap(), "( ( ( L@web1,web2 or G@role:web ) or ( L@db1,db2 ) ) and not ( web* ) )");
        assert_eq!(expand("nosuch", &g).unwrap_err(), NodegroupError::Unknown("nosuch".into()));
        assert!(matches!(expand("loop1", &g).unwrap_err(), NodegroupError::Cycle { name, .. } if name == "loop1"));
        assert!(expand("loop1", &g).unwrap_err().to_string().contains("contains itself"));
        assert_eq!(expand_compound("N@db or ( G@os:Debian and N@glob )", &g).unwrap(), "( L@db1,db2 ) or ( G@os:Debian and ( web* ) )");
        assert_eq!(resolve("db", "nodegroup", &g).unwrap(), ("( L@db1,db2 )".to_string(), "compound".to_string()));
        assert_eq!(resolve("db*", "glob", &g).unwrap(), ("db*".to_string(), "glob".to_string()));
        assert!(from_option(Some(&serde_yaml::Value::String("x".into()))).is_err());
    }

    #[test]
    fn expanded_groups_match() {
        let g = groups();
        let grains = serde_json::json!({"role": "web"});
        let empty = serde_json::json!({});
        let hit = |id: &str, gr: &serde_json::Value, name: &str| {
            let (t, ty) = resolve(name, "nodegroup", &g).unwrap();
            crate::matcher::matches(&crate::matcher::Subject { id, grains: gr, pillar: &empty }, &t, &ty)
        };
        assert!(hit("web1", &empty, "web"));
        assert!(hit("other", &grains, "web"));
        assert!(!hit("other", &empty, "web"));
        assert!(hit("db2", &empty, "prod"));
        assert!(hit("db2", &empty, "all"));
        assert!(!hit("web1", &empty, "all"), "web1 is in prod but also web*");
        assert!(hit("db7", &empty, "re"));
    }
}
