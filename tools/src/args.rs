//! Arguments as Salt's command line and its runner and wheel clients read them:
//! `key=value` words are keyword arguments, the rest positional, and each value is read
//! as YAML the way Salt's `yamlify_arg` reads it (as far as the runners here need).
//! `salt-run` splits its command line with these, salt-api its runner and wheel chunks'
//! `arg` lists (pepper sends `["jid=..."]`, as Salt's `parse_input` reads it).

use std::collections::BTreeMap;

use serde_json::Value;

/// `salt-run` arguments: positional ones, and `key=value` keywords (a `=` inside a
/// value that starts like a YAML mapping or list does not make a keyword).
pub fn split_args(args: &[String]) -> (Vec<String>, BTreeMap<String, String>) {
    let mut kwargs = BTreeMap::new();
    let mut positional = Vec::new();
    for x in args {
        match x.split_once('=') {
            Some((k, v)) if !k.is_empty() && !k.contains([' ', '{', '[', ':']) => {
                kwargs.insert(k.to_string(), v.to_string());
            }
            _ => positional.push(x.clone()),
        }
    }
    (positional, kwargs)
}

/// A command-line value as Salt reads it (`yamlify_arg`), as far as these runners need:
/// `True`/`False`, `None`, YAML lists and mappings; anything else (numbers included:
/// a jid stays the jid) is text.
pub fn yamlify(v: &str) -> Value {
    match v.trim() {
        "True" | "true" => Value::Bool(true),
        "False" | "false" => Value::Bool(false),
        "None" | "null" | "~" => Value::Null,
        t if t.starts_with('[') || t.starts_with('{') => serde_yaml::from_str::<Value>(t).unwrap_or_else(|_| Value::String(v.to_string())),
        _ => Value::String(v.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn arguments_split_and_read_as_salt_reads_them() {
        let args: Vec<String> = ["20261124001122334455", "saltenv=dev", "subset=[a, b]", "{a: b=c}", "show_ip=True"].iter().map(|s| s.to_string()).collect();
        let (pos, kw) = split_args(&args);
        assert_eq!(pos, ["20261124001122334455", "{a: b=c}"]);
        assert_eq!(kw.keys().collect::<Vec<_>>(), ["saltenv", "show_ip", "subset"]);
        assert_eq!(yamlify(&pos[0]), json!("20261124001122334455"), "a jid stays text");
        assert_eq!(yamlify(&kw["subset"]), json!(["a", "b"]));
        assert_eq!(yamlify(&kw["show_ip"]), json!(true));
        assert_eq!(yamlify("None"), Value::Null);
        assert_eq!(yamlify("[unclosed"), json!("[unclosed"));
    }
}
