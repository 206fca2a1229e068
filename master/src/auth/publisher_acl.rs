//! `publisher_acl` and `publisher_acl_blacklist`: what system users may publish with
//! `salt` on the master's host, checked as Salt's master checks them.
//!
//! ```yaml
//! publisher_acl:
//!   fred:                 # a user name, a shell glob or a whole-name regex
//!     - 'test.*'          # rules as in external_auth (crate::acl): function regexes,
//!     - 'web*':           # {TARGET: [functions]}, argument rules
//!       - 'pkg.*'
//! publisher_acl_blacklist:
//!   users: ['^bad.*']     # globs or whole-name regexes
//!   modules: ['cmd.*']
//! ```
//!
//! Who the caller is comes from the admin socket's peer credentials (`SO_PEERCRED`, the
//! uid mapped to its name), never from what it sends. Root and the master's own user are
//! not checked against `publisher_acl` (as in Salt); every other user needs rules from
//! the entries whose pattern matches its name (every match adds its rules), and a user
//! with none is refused. The blacklist applies to every publish, whoever asks: a
//! blacklisted user, or a function matching `modules`, is refused. `saltutil.find_job`
//! is always allowed by the rules (not by the blacklist), as Salt allows it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value as J;

use crate::glob::fnmatch;

/// Salt's `expr_match`: `expr` as a shell glob, else as a regex matching all of `line`.
pub fn expr_match(line: &str, expr: &str) -> bool {
    fnmatch(expr, line) || regex::Regex::new(&format!(r"\A(?:{expr})\z")).map(|r| r.is_match(line)).unwrap_or(false)
}

/// The rules `publisher_acl` gives `user`: those of every entry whose pattern matches.
pub fn rules(acl: &J, user: &str) -> Vec<J> {
    let mut out = Vec::new();
    for (pat, rules) in acl.as_object().into_iter().flatten() {
        if expr_match(user, pat) {
            match rules {
                J::Array(a) => out.extend(a.iter().cloned()),
                J::Null => {}
                other => out.push(other.clone()),
            }
        }
    }
    out
}

fn listed(list: Option<&J>, value: &str) -> bool {
    match list {
        Some(J::String(s)) => expr_match(value, s),
        Some(J::Array(a)) => a.iter().filter_map(J::as_str).any(|e| expr_match(value, e)),
        _ => false,
    }
}

/// Whether `publisher_acl_blacklist` refuses `user` or `fun`.
pub fn blacklisted(blacklist: &J, user: &str, fun: &str) -> bool {
    listed(blacklist.get("users"), user) || listed(blacklist.get("modules"), fun)
}

/// The target expressions whose minions [`allowed`] needs for `user`'s rules.
pub fn targets_needed(acl: &J, user: &str) -> BTreeSet<String> {
    crate::acl::targets_needed(&rules(acl, user))
}

/// Whether `user` (not root nor the master's user) may publish `fun` with these
/// arguments to `minions`; `targets` holds the minions of [`targets_needed`].
pub fn allowed(acl: &J, user: &str, fun: &str, args: &[J], kwargs: &serde_json::Map<String, J>, minions: &BTreeSet<String>, targets: &BTreeMap<String, BTreeSet<String>>) -> bool {
    let rules = rules(acl, user);
    !rules.is_empty() && (fun == "saltutil.find_job" || crate::acl::minion_call_allowed(&rules, fun, args, kwargs, minions, targets))
}

/// The name of the user with `uid` (`getpwuid_r`), if the system knows it.
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: a zeroed passwd is a valid out value for getpwuid_r.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut res: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every buffer is valid for its length; res is set to &pwd or NULL.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut res) };
    if rc != 0 || res.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name points into buf, NUL-terminated.
    Some(unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) }.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn users_get_the_rules_of_every_matching_entry() {
        let acl = json!({ "fred": ["test.*"], "f*": ["grains.items"], "ops_[0-9]+": ["cmd.run"] });
        assert_eq!(rules(&acl, "fred"), vec![json!("test.*"), json!("grains.items")]);
        assert_eq!(rules(&acl, "ops_7"), vec![json!("cmd.run")]);
        assert!(rules(&acl, "mallory").is_empty());
        let none = BTreeMap::new();
        let m = BTreeSet::from(["m1".to_string()]);
        assert!(allowed(&acl, "fred", "test.ping", &[], &Default::default(), &m, &none));
        assert!(!allowed(&acl, "fred", "cmd.run", &[], &Default::default(), &m, &none));
        assert!(!allowed(&acl, "mallory", "saltutil.find_job", &[], &Default::default(), &m, &none), "no rules: nothing");
        assert!(allowed(&acl, "fred", "saltutil.find_job", &[], &Default::default(), &m, &none));
    }

    #[test]
    fn the_blacklist_refuses_users_and_functions() {
        let bl = json!({ "users": ["^bad.*", "eve"], "modules": ["cmd.*", "^state\\..*"] });
        assert!(blacklisted(&bl, "badger", "test.ping"));
        assert!(blacklisted(&bl, "eve", "test.ping"));
        assert!(blacklisted(&bl, "fred", "cmd.run"));
        assert!(blacklisted(&bl, "fred", "state.apply"));
        assert!(!blacklisted(&bl, "fred", "test.ping"));
        assert!(!blacklisted(&json!({}), "root", "cmd.run"));
        assert!(blacklisted(&json!({ "users": "root" }), "root", "test.ping"));
    }

    #[test]
    fn uid_zero_is_root() {
        assert_eq!(user_name(0).as_deref(), Some("root"));
    }
}
