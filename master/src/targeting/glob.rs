//! Shell-style matching as Python's `fnmatch.fnmatch` does it on POSIX (case-sensitive):
//! `*` any run, `?` one character, `[seq]`, `[!seq]` and ranges `[a-z]`. Used by
//! `salt-key` globs, `default_include` and (later) minion targeting.

/// True when `name` matches the shell pattern `pat`.
pub fn fnmatch(pat: &str, name: &str) -> bool {
    // The common targets, without collecting characters: `*` (a publish to every
    // minion tests each accepted id) and a pattern with no special character.
    if pat == "*" {
        return true;
    }
    if !pat.contains(['*', '?', '[']) {
        return pat == name;
    }
    let p: Vec<char> = pat.chars().collect();
    let n: Vec<char> = name.chars().collect();
    matches(&p, &n)
}

fn matches(p: &[char], n: &[char]) -> bool {
    // Iterative matcher with backtracking on the last `*`.
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                '[' => {
                    if let Some((ok, next)) = class(p, pi, n[ni]) {
                        if ok {
                            pi = next;
                            ni += 1;
                            continue;
                        }
                    } else if n[ni] == '[' {
                        // An unclosed `[` is a literal, as in Python.
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                }
                c if c == n[ni] => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Matches `c` against the class starting at `p[start] == '['`. Returns (matched, index
/// after the class), or None if the class is not closed.
fn class(p: &[char], start: usize, c: char) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = i < p.len() && p[i] == '!';
    if negate {
        i += 1;
    }
    let mut first = true;
    let mut hit = false;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            if p[i] <= c && c <= p[i + 2] {
                hit = true;
            }
            i += 3;
        } else {
            if p[i] == c {
                hit = true;
            }
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::fnmatch;

    #[test]
    fn python_fnmatch_cases() {
        for (p, n, want) in [
            ("*", "anything", true),
            ("web*", "web01", true),
            ("web*", "Web01", false),
            ("w?b0[0-9]", "web01", true),
            ("w?b0[!0-9]", "web01", false),
            ("*.conf", "10-keys.conf", true),
            ("*.conf", "10-keys.conf.bak", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("[]]", "]", true),
            ("[", "[", true),
            ("", "", true),
            ("acc-0[12]", "acc-03", false),
            ("*", "", true),
            ("web01", "web01", true),
            ("web01", "web011", false),
            ("", "x", false),
            ("ünï", "ünï", true),
        ] {
            assert_eq!(fnmatch(p, n), want, "{p} vs {n}");
        }
    }

    proptest::proptest! {
        /// The shortcuts (`*`, a pattern with no special character) answer as the
        /// general matcher does.
        #[test]
        fn shortcuts_agree_with_the_matcher(p in "[a-c.*?\\[\\]!-]{0,6}", n in "[a-c.\\[\\]-]{0,6}") {
            let (pc, nc): (Vec<char>, Vec<char>) = (p.chars().collect(), n.chars().collect());
            proptest::prop_assert_eq!(fnmatch(&p, &n), super::matches(&pc, &nc));
            proptest::prop_assert!(fnmatch("*", &n));
        }
    }
}
