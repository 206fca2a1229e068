//! Target matching, as Salt's matchers do it: `glob` (shell pattern on the id), `list`,
//! `pcre` (regex from the start of the id), `grain` (`key:subkey:glob` on grains),
//! `grain_pcre`, `pillar` and `compound` (`G@`, `P@`, `I@`, `L@`, `E@`, bare globs, with
//! `and`, `or`, `not` and parentheses). Used for pillar top files and for the minions a
//! job is expected to reach.

use serde_json::Value as J;

use crate::glob::fnmatch;

/// What a minion is matched on.
pub struct Subject<'a> {
    pub id: &'a str,
    pub grains: &'a J,
    pub pillar: &'a J,
}

/// Regex match anchored at the start, as Python's `re.match`.
pub fn re_match(pat: &str, s: &str) -> bool {
    match regex::Regex::new(&format!("^(?:{pat})")) {
        Ok(r) => r.is_match(s),
        Err(e) => {
            tracing::warn!(pattern = pat, "bad regular expression in a target: {e}");
            false
        }
    }
}

/// `key:sub:value` lookup: walks the data by all but the last `:`-separated part and
/// matches the value (or any list element) with `m`.
fn data_match(data: &J, expr: &str, m: &dyn Fn(&str, &str) -> bool) -> bool {
    let parts: Vec<&str> = expr.split(':').collect();
    if parts.len() < 2 {
        return false;
    }
    // Try every split point: values may contain ':' (e.g. time strings).
    for k in (1..parts.len()).rev() {
        let (path, value) = (&parts[..k], parts[k..].join(":"));
        let mut cur = data;
        let mut ok = true;
        for p in path {
            match cur.get(*p) {
                Some(v) => cur = v,
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            continue;
        }
        let hit = |v: &J| match v {
            J::String(s) => m(&value, s),
            J::Bool(b) => m(&value, if *b { "True" } else { "False" }),
            J::Number(n) => m(&value, &n.to_string()),
            _ => false,
        };
        return match cur {
            J::Array(a) => a.iter().any(hit),
            v => hit(v),
        };
    }
    false
}

/// Matches one expression of a given type.
pub fn matches(s: &Subject, tgt: &str, tgt_type: &str) -> bool {
    match tgt_type {
        "glob" => fnmatch(tgt, s.id),
        "list" => tgt.split(',').map(str::trim).any(|x| x == s.id),
        "pcre" => re_match(tgt, s.id),
        "grain" => data_match(s.grains, tgt, &|p, v| fnmatch(p, v)),
        "grain_pcre" => data_match(s.grains, tgt, &|p, v| re_match(p, v)),
        "pillar" => data_match(s.pillar, tgt, &|p, v| fnmatch(p, v)),
        "pillar_pcre" => data_match(s.pillar, tgt, &|p, v| re_match(p, v)),
        "pillar_exact" => data_match(s.pillar, tgt, &|p, v| p == v),
        "compound" => compound(s, tgt),
        other => {
            tracing::warn!(tgt_type = other, "unsupported target type; not matched");
            false
        }
    }
}

/// Evaluates a compound expression.
pub fn compound(s: &Subject, expr: &str) -> bool {
    let spaced = expr.replace('(', " ( ").replace(')', " ) ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut pos = 0;
    let v = or_expr(s, &tokens, &mut pos);
    v && pos == tokens.len()
}

fn or_expr(s: &Subject, t: &[&str], pos: &mut usize) -> bool {
    let mut v = and_expr(s, t, pos);
    while *pos < t.len() && t[*pos] == "or" {
        *pos += 1;
        let r = and_expr(s, t, pos);
        v = v || r;
    }
    v
}

fn and_expr(s: &Subject, t: &[&str], pos: &mut usize) -> bool {
    let mut v = not_expr(s, t, pos);
    loop {
        if *pos < t.len() && t[*pos] == "and" {
            *pos += 1;
        } else if *pos < t.len() && t[*pos] != "or" && t[*pos] != ")" {
            // Salt treats adjacent words as "and".
        } else {
            return v;
        }
        let r = not_expr(s, t, pos);
        v = v && r;
    }
}

fn not_expr(s: &Subject, t: &[&str], pos: &mut usize) -> bool {
    if *pos < t.len() && t[*pos] == "not" {
        *pos += 1;
        return !not_expr(s, t, pos);
    }
    atom(s, t, pos)
}

fn atom(s: &Subject, t: &[&str], pos: &mut usize) -> bool {
    let Some(tok) = t.get(*pos) else { return false };
    *pos += 1;
    if *tok == "(" {
        let v = or_expr(s, t, pos);
        if t.get(*pos) == Some(&")") {
            *pos += 1;
        }
        return v;
    }
    match tok.split_once('@') {
        Some((engine, rest)) if engine.len() == 1 => match engine {
            "G" => matches(s, rest, "grain"),
            "P" => matches(s, rest, "grain_pcre"),
            "I" => matches(s, rest, "pillar"),
            "J" => matches(s, rest, "pillar_pcre"),
            "L" => matches(s, rest, "list"),
            "E" => matches(s, rest, "pcre"),
            _ => {
                tracing::warn!(engine, "unsupported compound engine; not matched");
                false
            }
        },
        _ => fnmatch(tok, s.id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salt_matchers() {
        let grains = serde_json::json!({"os": "Debian", "roles": ["web", "db"], "ip": {"eth0": "10.0.0.1"}, "num_cpus": 2});
        let pillar = serde_json::json!({"tier": "prod"});
        let s = Subject { id: "web01", grains: &grains, pillar: &pillar };
        assert!(matches(&s, "web*", "glob"));
        assert!(!matches(&s, "db*", "glob"));
        assert!(matches(&s, "db01,web01", "list"));
        assert!(matches(&s, "web0[0-9]", "pcre"));
        assert!(!matches(&s, "eb01", "pcre"), "pcre is anchored at the start");
        assert!(matches(&s, "os:Deb*", "grain"));
        assert!(matches(&s, "roles:db", "grain"));
        assert!(matches(&s, "ip:eth0:10.0.*", "grain"));
        assert!(matches(&s, "num_cpus:2", "grain"));
        assert!(matches(&s, "os:(Debian|Ubuntu)", "grain_pcre"));
        assert!(matches(&s, "tier:prod", "pillar"));
        assert!(matches(&s, "G@os:Debian and web*", "compound"));
        assert!(matches(&s, "G@os:RedHat or L@web01,web02", "compound"));
        assert!(!matches(&s, "web* and not G@roles:db", "compound"));
        assert!(matches(&s, "( G@os:RedHat or E@web.* ) and not I@tier:dev", "compound"));
        assert!(!matches(&s, "G@nosuch:x", "compound"));
    }
}
