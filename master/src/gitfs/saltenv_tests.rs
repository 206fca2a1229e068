//! Salt's rules for saltenvs, roots and mountpoints, as `gitfs_remotes` options set them.

use super::*;
use crate::gitfs::config::GitfsConfig;

fn remotes(yaml: &str) -> GitfsConfig {
    GitfsConfig::from_raw(&serde_yaml::from_str(yaml).unwrap())
}

fn names(s: std::collections::BTreeSet<String>) -> Vec<String> {
    s.into_iter().collect()
}

#[test]
fn branches_and_tags_are_saltenvs_and_base_is_gitfs_base() {
    let c = remotes("gitfs_remotes: [file:///srv/repo]");
    let r = &c.remotes[0];
    assert_eq!(r.base, "master", "Salt's default gitfs_base");
    assert_eq!(names(envs(r, ["master", "dev"], ["v1"])), ["base", "dev", "v1"]);
    assert_eq!(ref_of(r, "base").as_deref(), Some("master"));
    assert_eq!(ref_of(r, "dev").as_deref(), Some("dev"));

    let c = remotes("gitfs_base: main\ngitfs_remotes: [file:///srv/repo, {file:///srv/other: [{base: trunk}]}]");
    assert_eq!(names(envs(&c.remotes[0], ["main", "master"], [])), ["base", "master"]);
    assert_eq!(ref_of(&c.remotes[1], "base").as_deref(), Some("trunk"), "a per-remote base overrides gitfs_base");
}

#[test]
fn ref_types_limit_what_becomes_a_saltenv() {
    let c = remotes("gitfs_ref_types: [branch]\ngitfs_remotes: [file:///srv/repo]");
    assert_eq!(c.remotes[0].ref_types, [crate::gitfs::config::RefType::Branch]);
    let c = remotes("gitfs_remotes: [{file:///srv/repo: [{ref_types: [tag, bogus]}]}]");
    assert_eq!(c.remotes[0].ref_types, [crate::gitfs::config::RefType::Tag]);
    assert!(c.warnings.iter().any(|w| w.contains("bogus")), "{:?}", c.warnings);
}

#[test]
fn per_saltenv_mapping() {
    let yaml = "
gitfs_saltenv:
  - prod:
    - ref: release
  - qa:
    - ref: global-qa
gitfs_remotes:
  - file:///srv/repo:
    - saltenv:
      - qa:
        - ref: develop
        - mountpoint: salt://qa/files
      - base:
        - ref: trunk
";
    let c = remotes(yaml);
    let r = &c.remotes[0];
    assert_eq!(r.base, "trunk", "a per-remote saltenv ref for base replaces base");
    assert_eq!(ref_of(r, "qa").as_deref(), Some("develop"), "the remote's own mapping wins over gitfs_saltenv");
    assert_eq!(ref_of(r, "prod").as_deref(), Some("release"), "gitfs_saltenv applies to every remote");
    assert_eq!(mountpoint_of(r, "qa"), "qa/files");
    assert_eq!(mountpoint_of(r, "base"), "");
    // A mapped ref serves its saltenv, not one of its own name; mapped saltenvs exist.
    assert_eq!(names(envs(r, ["develop", "trunk", "feature"], [])), ["base", "feature", "prod", "qa"]);
}

#[test]
fn disable_saltenv_mapping_serves_base_and_mapped_only() {
    let c = remotes("gitfs_disable_saltenv_mapping: true\ngitfs_remotes: [{file:///srv/repo: [{saltenv: [{dev: [{ref: develop}]}]}]}]");
    let r = &c.remotes[0];
    assert_eq!(names(envs(r, ["master", "develop", "feature"], ["v1"])), ["base", "dev"]);
    assert_eq!(ref_of(r, "feature"), None);
    assert_eq!(ref_of(r, "dev").as_deref(), Some("develop"));
}

#[test]
fn root_and_mountpoint_global_per_remote_and_per_saltenv() {
    let yaml = "
gitfs_root: /salt/
gitfs_mountpoint: salt://top
gitfs_remotes:
  - file:///srv/a
  - file:///srv/b:
    - root: states
    - mountpoint: salt://b/
    - saltenv:
      - dev:
        - root: dev-states
";
    let c = remotes(yaml);
    let (a, b) = (&c.remotes[0], &c.remotes[1]);
    assert_eq!((root_of(a, "base"), mountpoint_of(a, "base")), ("salt".to_string(), "top".to_string()));
    assert_eq!((root_of(b, "base"), mountpoint_of(b, "base")), ("states".to_string(), "b".to_string()));
    assert_eq!(root_of(b, "dev"), "dev-states");
}

#[test]
fn whitelist_and_blacklist_as_salt_matches_them() {
    let c = remotes("gitfs_saltenv_whitelist: ['base', 'dev*', 'v[0-9]+']\ngitfs_saltenv_blacklist: [dev-secret]\ngitfs_remotes: [file:///srv/repo]");
    let r = &c.remotes[0];
    assert!(exposed(r, "base") && exposed(r, "dev") && exposed(r, "dev-x"));
    assert!(exposed(r, "v12"), "a regular expression, matched whole");
    assert!(!exposed(r, "dev-secret"), "the blacklist is checked first");
    assert!(!exposed(r, "prod") && !exposed(r, "xv1"));
    assert_eq!(names(envs(r, ["master", "dev", "dev-secret", "prod"], ["v1"])), ["base", "dev", "v1"]);
    // A per-remote list replaces the global one; a comma-separated string is a list.
    let c = remotes("gitfs_saltenv_blacklist: [dev]\ngitfs_remotes: [{file:///srv/repo: [{saltenv_blacklist: 'prod, qa'}]}]");
    assert!(exposed(&c.remotes[0], "dev") && !exposed(&c.remotes[0], "qa"));
    assert!(expr_match("web1", "web?") && expr_match("a.b", "a.b") && expr_match("ayb", "a[!x]b") && !expr_match("abc", "a?"));
}

#[test]
fn remotes_halite_cannot_read_are_named_and_left_out() {
    let c = remotes("gitfs_remotes:\n  - https://github.com/x/y.git\n  - git@github.com:x/y.git\n  - file:///srv/ok:\n    - privkey: /k\n    - name: ok\n  - /srv/plain\n  - /srv/plain\n");
    assert_eq!(c.remotes.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["ok", "/srv/plain"]);
    assert_eq!(c.remotes[0].path, std::path::PathBuf::from("/srv/ok"));
    let w = c.warnings.join("\n");
    assert!(w.contains("https://github.com/x/y.git") && w.contains("git@github.com:x/y.git"), "{w}");
    assert!(w.contains("privkey"), "{w}");
    assert!(w.contains("listed twice"), "{w}");
    assert_ne!(c.remotes[0].key, c.remotes[1].key);
    assert_eq!(c.update_interval, 60, "Salt's default gitfs_update_interval");
    let c = remotes("gitfs_provider: pygit2\ngitfs_update_interval: 5\ngitfs_remotes: [/srv/x]");
    assert!(c.warnings.iter().any(|w| w.contains("gitfs_provider pygit2")), "{:?}", c.warnings);
    assert_eq!(c.update_interval, 5);
}
