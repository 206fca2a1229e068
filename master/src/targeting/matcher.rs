//! Target matching, as Salt's matchers do it: `glob` (shell pattern on the id), `list`,
//! `pcre` (regex from the start of the id), `grain` (`key:subkey:glob` on grains),
//! `grain_pcre`, `pillar`, `pillar_pcre`, `pillar_exact`, `ipcidr` (an address or a
//! network against the `ipv4`/`ipv6` grains) and `compound` (`G@`, `P@`, `I@`, `J@`,
//! `L@`, `E@`, `S@`, bare globs, with `and`, `or`, `not` and parentheses). Used for pillar
//! top files and for the minions a job is expected to reach.
//!
//! Nodegroups (`nodegroup`, `N@`) are not matched here: the master expands them into a
//! compound expression before matching or publishing (`crate::nodegroups`), as Salt does.

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
        "ipcidr" => ipcidr(s.grains, tgt),
        "compound" => compound(s, tgt),
        other => {
            tracing::warn!(tgt_type = other, "unsupported target type; not matched");
            false
        }
    }
}

/// An address or a network (`10.0.0.0/8`, `fe80::/10`), as Python's `ip_address` /
/// `ip_network` (strict: host bits set in a network is not a network).
enum IpTarget {
    Addr(std::net::IpAddr),
    Net(std::net::IpAddr, u8),
}

fn ip_target(t: &str) -> Option<IpTarget> {
    use std::net::IpAddr;
    if let Ok(a) = t.parse::<IpAddr>() {
        return Some(IpTarget::Addr(a));
    }
    let (a, len) = t.split_once('/')?;
    let a: IpAddr = a.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    let bits = if a.is_ipv4() { 32 } else { 128 };
    if len > bits || ip_bits(&a) & !prefix_mask(len, bits) != 0 {
        return None;
    }
    Some(IpTarget::Net(a, len))
}

fn ip_bits(a: &std::net::IpAddr) -> u128 {
    match a {
        std::net::IpAddr::V4(v) => u32::from(*v) as u128,
        std::net::IpAddr::V6(v) => u128::from(*v),
    }
}

fn prefix_mask(len: u8, bits: u8) -> u128 {
    let all = if bits == 32 { u32::MAX as u128 } else { u128::MAX };
    if len == 0 {
        0
    } else {
        all & !((1u128 << (bits - len)) - 1)
    }
}

/// Salt's `ipcidr` matcher: an address is one of the minion's `ipv4`/`ipv6` grains, a
/// network holds one of them. A target that is neither matches nothing.
fn ipcidr(grains: &J, tgt: &str) -> bool {
    let Some(t) = ip_target(tgt.trim()) else {
        tracing::warn!(target = tgt, "invalid IP/CIDR target; not matched");
        return false;
    };
    let v4 = match &t {
        IpTarget::Addr(a) | IpTarget::Net(a, _) => a.is_ipv4(),
    };
    let Some(J::Array(addrs)) = grains.get(if v4 { "ipv4" } else { "ipv6" }) else { return false };
    addrs.iter().filter_map(J::as_str).filter_map(|a| a.parse::<std::net::IpAddr>().ok()).any(|a| match &t {
        IpTarget::Addr(want) => a == *want,
        IpTarget::Net(net, len) => {
            let bits = if v4 { 32 } else { 128 };
            a.is_ipv4() == v4 && ip_bits(&a) & prefix_mask(*len, bits) == ip_bits(net)
        }
    })
}

/// Evaluates a compound expression. Words are separated by whitespace only, as in Salt:
/// parentheses are words of their own (`( G@os:Debian or web* )`), and a parenthesis
/// inside a word belongs to it (`E@(web|db)[0-9]` is one regular expression).
pub fn compound(s: &Subject, expr: &str) -> bool {
    let tokens: Vec<&str> = expr.split_whitespace().collect();
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
            "S" => matches(s, rest, "ipcidr"),
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
        assert!(matches(&s, "tier:pr*", "pillar"));
        assert!(matches(&s, "tier:p.o", "pillar_pcre"));
        assert!(!matches(&s, "tier:pr*", "pillar_exact"));
        assert!(matches(&s, "J@tier:pro. and I@tier:prod", "compound"));
        assert!(matches(&s, "E@(web|db)0[0-9] and J@tier:(prod|dev)", "compound"), "parentheses inside a word are the word's");
        assert!(!matches(&s, "(G@os:Debian and web*)", "compound"), "unspaced parentheses are not operators (Salt's rule)");
    }

    #[test]
    fn ipcidr_as_salt() {
        let grains = serde_json::json!({"ipv4": ["127.0.0.1", "10.1.2.3"], "ipv6": ["::1", "fe80::1"]});
        let pillar = serde_json::json!({});
        let s = Subject { id: "m1", grains: &grains, pillar: &pillar };
        assert!(matches(&s, "10.1.2.3", "ipcidr"));
        assert!(!matches(&s, "10.1.2.4", "ipcidr"));
        assert!(matches(&s, "10.1.0.0/16", "ipcidr"));
        assert!(matches(&s, "10.0.0.0/8", "ipcidr"));
        assert!(matches(&s, "0.0.0.0/0", "ipcidr"));
        assert!(!matches(&s, "10.2.0.0/16", "ipcidr"));
        assert!(!matches(&s, "10.1.2.3/16", "ipcidr"), "host bits set: not a network (Python's strict ip_network)");
        assert!(!matches(&s, "10.1.2.0/33", "ipcidr"));
        assert!(!matches(&s, "nonsense", "ipcidr"));
        assert!(matches(&s, "fe80::/10", "ipcidr"));
        assert!(matches(&s, "::1", "ipcidr"));
        assert!(!matches(&s, "2001:db8::/32", "ipcidr"));
        assert!(matches(&s, "S@10.1.0.0/16 and m*", "compound"));
        assert!(!matches(&s, "S@192.168.0.0/16 or L@m2", "compound"));
        let none = serde_json::json!({});
        assert!(!matches(&Subject { id: "m1", grains: &none, pillar: &pillar }, "0.0.0.0/0", "ipcidr"), "no ipv4 grain: no match");
    }
}
