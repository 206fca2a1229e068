//! Key tooling and key views, offline (no master running): `salt-key` over the
//! reference trees Salt 3008.5 wrote, key changes through the log, `pki.migrate_to_mmap`,
//! `halite-ctl verify --views` / `rebuild-views` on a damaged view, and Salt 3008.5's own
//! `salt-key` reading what Halite wrote.

use std::process::Command;

use serde_json::{json, Value};

use halite_storage::keys::mmap::MmapKeys;
use halite_storage::keys::{Geometry, KeyView};

use crate::support::*;

/// The mmap geometry every [`Env`] configures.
const GEO: Geometry = Geometry { size: 32, slot_size: 96, key_size: 64, max_segment_bytes: 2048 };

/// What Salt 3008.5's `salt-key -L --out json` printed over the reference trees.
fn expected_listing() -> Value {
    serde_json::from_slice(&std::fs::read(vectors().join("mmap_key/salt_key_list_keys.json")).expect("vector")).expect("vector json")
}

/// An env over a copy of the reference tree of each driver.
fn reference_envs() -> Vec<(&'static str, Env)> {
    [("mmap_key", "mmap_key/pki"), ("localfs_key", "localfs_key/pki")]
        .into_iter()
        .map(|(driver, tree)| {
            let env = Env::new(driver, "");
            copy_dir(&vectors().join(tree), &env.pki());
            (driver, env)
        })
        .collect()
}

#[test]
fn salt_key_json_listing_matches_salts_for_both_drivers() {
    for (driver, env) in reference_envs() {
        assert_eq!(env.listing(), expected_listing(), "{driver}");
    }
}

#[test]
fn salt_key_text_listing_has_salts_sections_in_salts_order() {
    for (driver, env) in reference_envs() {
        let text = env.ok(SALT_KEY, &["-L"]);
        assert!(text.starts_with("Accepted Keys:\nMixed_Case-01\nacc-01"), "{driver}: {text}");
        assert!(text.contains("Denied Keys:\nacc-02\nden-only-01\nUnaccepted Keys:\npend-01\npend-02\nRejected Keys:\nrej-01\nrej-02"), "{driver}: {text}");
    }
}

#[test]
fn salt_key_lists_one_state_alone() {
    for (driver, env) in reference_envs() {
        let one = json(&env.ok(SALT_KEY, &["-l", "rej", "--out", "json"]));
        assert_eq!(one, json!({"minions_rejected": ["rej-01", "rej-02"]}), "{driver}");
    }
}

#[test]
fn salt_key_fingerprint_has_salts_sha256_shape() {
    for (driver, env) in reference_envs() {
        let f = json(&env.ok(SALT_KEY, &["-f", "acc-03", "--out", "json"]));
        let fp = f["minions"]["acc-03"].as_str().unwrap_or_else(|| panic!("{driver}: no fingerprint in {f}"));
        assert_eq!(fp.len(), 95, "{driver}: {fp}");
        assert!(fp.split(':').all(|pair| pair.len() == 2 && pair.bytes().all(|b| b.is_ascii_hexdigit())), "{driver}: {fp}");
    }
}

#[test]
fn listing_keys_writes_nothing() {
    for (driver, env) in reference_envs() {
        env.listing();
        env.ok(SALT_KEY, &["-f", "acc-03"]);
        assert!(!env.root.join("data").exists(), "{driver}: a listing created the data dir");
    }
}

// ---------------------------------------------------------------------------------------
// Key changes through the log (offline: the tool runs the node itself).

/// An env with pending keys web01, web02, db01 and an invalid one, `bogus`.
fn pending_env() -> Env {
    let env = Env::new("localfs_key", "");
    let pre = env.pki().join("minions_pre");
    std::fs::create_dir_all(&pre).expect("minions_pre");
    for (i, id) in ["web01", "web02", "db01"].iter().enumerate() {
        std::fs::write(pre.join(id), fake_pub(i)).expect("write key");
    }
    std::fs::write(pre.join("bogus"), "not a key").expect("write key");
    env
}

/// [`pending_env`] after `-a 'web*'`, `-r db01`, `-d web01`, the refused `-a bogus` and an
/// accept that matched nothing: the listing is web02 accepted, db01 rejected, bogus pending.
pub fn changed_keys_env() -> Env {
    let env = pending_env();
    env.ok(SALT_KEY, &["--offline", "-a", "web*", "-y"]);
    env.ok(SALT_KEY, &["--offline", "-r", "db01", "-y"]);
    env.ok(SALT_KEY, &["--offline", "-d", "web01", "-y"]);
    env.ok(SALT_KEY, &["--offline", "-a", "nomatch*", "-y"]);
    env.run(SALT_KEY, &["--offline", "-a", "bogus", "-y"]);
    let l = env.listing();
    assert_eq!((&l["minions"], &l["minions_rejected"], &l["minions_pre"]), (&json!(["web02"]), &json!(["db01"]), &json!(["bogus"])), "the scenario's listing: {l}");
    env
}

#[test]
fn accepting_by_glob_moves_the_matching_keys_and_keeps_their_bytes() {
    let env = pending_env();
    let out = env.ok(SALT_KEY, &["--offline", "-a", "web*", "-y"]);
    assert!(out.contains("The following keys are going to be accepted:\nUnaccepted Keys:\nweb01\nweb02\n"), "{out}");
    assert!(out.contains("Key for minion web01 accepted.\nKey for minion web02 accepted."), "{out}");
    assert!(env.pki().join("minions/web01").exists() && !env.pki().join("minions_pre/web01").exists());
    assert_eq!(std::fs::read_to_string(env.pki().join("minions/web02")).expect("accepted key"), fake_pub(1), "bytes kept");
    assert_eq!(env.listing()["minions"], json!(["web01", "web02"]));
    assert_eq!(env.listing()["minions_pre"], json!(["bogus", "db01"]));
}

#[test]
fn the_reject_prompt_defaults_to_yes() {
    let env = pending_env();
    // stdin is empty: the answer is the default.
    let out = env.ok(SALT_KEY, &["--offline", "-r", "db01"]);
    assert!(out.contains("Proceed? [n/Y] Key for minion db01 rejected."), "{out}");
    assert_eq!(env.listing()["minions_rejected"], json!(["db01"]));
}

#[test]
fn the_delete_prompt_defaults_to_no() {
    let env = pending_env();
    env.ok(SALT_KEY, &["--offline", "-a", "web01", "-y"]);
    let out = env.ok(SALT_KEY, &["--offline", "-d", "web01"]);
    assert!(!out.contains("Key for minion web01 deleted."), "{out}");
    assert_eq!(env.listing()["minions"], json!(["web01"]), "nothing deleted");
}

#[test]
fn delete_with_yes_removes_the_key() {
    let env = pending_env();
    env.ok(SALT_KEY, &["--offline", "-a", "web01", "-y"]);
    let out = env.ok(SALT_KEY, &["--offline", "-d", "web01", "-y"]);
    assert!(out.contains("Key for minion web01 deleted."), "{out}");
    assert_eq!(env.listing()["minions"], json!([]));
    assert!(!env.pki().join("minions/web01").exists());
}

#[test]
fn a_glob_matching_no_pending_key_says_so() {
    let env = pending_env();
    let out = env.ok(SALT_KEY, &["--offline", "-a", "nomatch*", "-y"]);
    assert_eq!(out.trim(), "The key glob 'nomatch*' does not match any unaccepted keys.");
}

#[test]
fn an_invalid_pending_key_is_not_accepted() {
    let env = pending_env();
    let o = env.run(SALT_KEY, &["--offline", "-a", "bogus", "-y"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("Unable to accept invalid key for bogus."), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(env.listing()["minions_pre"], json!(["bogus", "db01", "web01", "web02"]));
    assert_eq!(env.listing()["minions"], json!([]));
}

#[test]
fn accepted_key_files_are_mode_0600() {
    let env = pending_env();
    env.ok(SALT_KEY, &["--offline", "-a", "web02", "-y"]);
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(env.pki().join("minions/web02")).expect("accepted key").permissions());
    assert_eq!(mode & 0o777, 0o600);
}

// ---------------------------------------------------------------------------------------
// pki.migrate_to_mmap, offline.

/// The localfs reference tree with a (fake) master key pair.
fn localfs_with_master_key() -> Env {
    let env = Env::new("localfs_key", "");
    copy_dir(&vectors().join("localfs_key/pki"), &env.pki());
    std::fs::write(env.pki().join("master.pem"), "-----BEGIN RSA PRIVATE KEY-----\nSECRET\n-----END RSA PRIVATE KEY-----\n").expect("master.pem");
    std::fs::write(env.pki().join("master.pub"), "-----BEGIN PUBLIC KEY-----\nPUBLIC\n-----END PUBLIC KEY-----\n").expect("master.pub");
    env
}

const MIGRATED: &str = "PKI keys migrated to mmap_key backend successfully.\n  Accepted: 5\n  Pending:  2\n  Rejected: 2\n  Denied:   2\n  Total:    11\n";

/// [`localfs_with_master_key`] migrated, with the config switched to mmap_key.
fn migrated() -> Env {
    let env = localfs_with_master_key();
    assert_eq!(env.ok(SALT_RUN, &["--offline", "pki.migrate_to_mmap"]), MIGRATED);
    env.set_driver("mmap_key");
    env
}

#[test]
fn migrate_dry_run_counts_the_keys_and_writes_nothing() {
    let env = localfs_with_master_key();
    let dry = env.ok(SALT_RUN, &["pki.migrate_to_mmap", "test=True"]);
    assert_eq!(dry, "PKI migration dry-run (no changes written):\n  Accepted: 5\n  Pending:  2\n  Rejected: 2\n  Denied:   2\n  Total:    11\n");
    assert!(!env.pki().join(".mmap_keys.idx").exists(), "a dry run writes nothing");
}

#[test]
fn migrate_commits_one_record_per_key() {
    let env = localfs_with_master_key();
    assert_eq!(env.ok(SALT_RUN, &["--offline", "pki.migrate_to_mmap"]), MIGRATED);
    assert_eq!(env.ok(CTL, &["dump", "--kind", "key_set"]).lines().count(), 11);
}

#[test]
fn migrate_a_second_time_proposes_nothing_new() {
    let env = localfs_with_master_key();
    assert_eq!(env.ok(SALT_RUN, &["--offline", "pki.migrate_to_mmap"]), MIGRATED);
    assert_eq!(env.ok(SALT_RUN, &["--offline", "pki.migrate_to_mmap"]), MIGRATED, "the same report");
    assert_eq!(env.ok(CTL, &["dump", "--kind", "key_set"]).lines().count(), 11, "no new record");
}

#[test]
fn the_migrated_mmap_view_lists_every_key() {
    let env = migrated();
    assert_eq!(env.listing(), expected_listing());
}

#[test]
fn the_migrated_mmap_view_holds_the_master_key_pair_byte_for_byte() {
    let env = migrated();
    let view = MmapKeys::open(&env.pki(), GEO).expect("mmap view");
    for name in ["master.pem", "master.pub"] {
        assert_eq!(view.get_master_key(name).expect("read").expect(name), std::fs::read(env.pki().join(name)).expect(name), "{name}");
    }
}

#[test]
fn the_migrated_mmap_view_keeps_each_keys_bytes() {
    let env = migrated();
    let view = MmapKeys::open(&env.pki(), GEO).expect("mmap view");
    for id in ["acc-03", "rej-02", "Mixed_Case-01"] {
        let dir = if id.starts_with("rej") { "minions_rejected" } else { "minions" };
        assert_eq!(view.get_key(id).expect("read").expect(id).pub_key, std::fs::read(env.pki().join(dir).join(id)).expect(id), "{id} bytes kept exactly");
    }
}

#[test]
fn verify_views_passes_on_a_freshly_migrated_view() {
    let env = migrated();
    let v = env.ok(CTL, &["verify", "--views"]);
    assert!(v.ends_with("OK\n"), "{v}");
}

/// Flips one byte of `pend-01`'s entry in the mmap view's heap.
fn damage_pend_01(env: &Env) {
    let slot = halite_storage::mmap_cache::MmapReader::open(&env.pki().join(".mmap_keys.idx"), GEO).expect("open index").expect("index exists").find(b"pend-01").expect("pend-01 slot");
    let heap = env.pki().join(if slot.segment == 0 { ".mmap_keys.idx.heap".to_string() } else { format!(".mmap_keys.idx.heap.{}", slot.segment) });
    let mut b = std::fs::read(&heap).expect("heap");
    b[slot.offset as usize + 20] ^= 0x01;
    std::fs::write(&heap, b).expect("write heap");
}

#[test]
fn verify_views_names_a_damaged_key_in_the_mmap_view() {
    let env = migrated();
    damage_pend_01(&env);
    let o = env.run(CTL, &["verify", "--views"]);
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("BAD: key view (mmap_key): pend-01"), "{out}");
}

#[test]
fn rebuild_views_repairs_a_damaged_mmap_view() {
    let env = migrated();
    damage_pend_01(&env);
    env.ok(CTL, &["rebuild-views"]);
    let v = env.ok(CTL, &["verify", "--views"]);
    assert!(v.ends_with("OK\n"), "{v}");
    assert_eq!(env.listing(), expected_listing());
}

// ---------------------------------------------------------------------------------------
// Salt 3008.5's own tools over what Halite wrote.

/// The reference tree after Halite accepted pend-01 and deleted rej-01 through its log.
fn changed_by_halite() -> Env {
    let env = localfs_with_master_key();
    env.append_conf("user: root\n");
    env.ok(SALT_KEY, &["--offline", "-a", "pend-01", "-y"]);
    env.ok(SALT_KEY, &["--offline", "-d", "rej-01", "-y"]);
    env
}

/// [`changed_by_halite`], migrated to mmap_key, with the localfs tree gone.
fn changed_and_migrated() -> (Env, String) {
    let env = changed_by_halite();
    let localfs = env.ok(SALT_KEY, &["-L", "--out", "json"]);
    env.ok(SALT_RUN, &["--offline", "pki.migrate_to_mmap"]);
    env.set_driver("mmap_key");
    for d in ["minions", "minions_pre", "minions_rejected", "minions_denied"] {
        std::fs::remove_dir_all(env.pki().join(d)).expect("remove localfs dir");
    }
    (env, localfs)
}

/// Salt 3008.5's `salt-key -c CONF ARGS`.
fn reference_salt_key(env: &Env, args: &[&str]) -> String {
    run_ok(Command::new(reference_venv().join("bin/salt-key")).arg("-c").arg(env.conf()).args(args), TOOL_TIMEOUT)
}

#[test]
fn reference_salt_key_lists_what_halite_wrote_with_localfs_key() {
    let env = changed_by_halite();
    assert_eq!(reference_salt_key(&env, &["-L", "--out", "json"]), env.ok(SALT_KEY, &["-L", "--out", "json"]));
}

#[test]
fn reference_salt_key_fingerprints_what_halite_wrote_with_localfs_key() {
    let env = changed_by_halite();
    assert_eq!(reference_salt_key(&env, &["-f", "acc-03", "--out", "json"]), env.ok(SALT_KEY, &["-f", "acc-03", "--out", "json"]));
}

#[test]
fn the_mmap_listing_after_migration_equals_the_localfs_listing() {
    let (env, localfs) = changed_and_migrated();
    assert_eq!(env.ok(SALT_KEY, &["-L", "--out", "json"]), localfs);
}

#[test]
fn reference_salt_key_lists_what_halite_wrote_with_mmap_key() {
    let (env, localfs) = changed_and_migrated();
    assert_eq!(reference_salt_key(&env, &["-L", "--out", "json"]), localfs);
}

#[test]
fn reference_salt_key_fingerprints_what_halite_wrote_with_mmap_key() {
    let (env, _) = changed_and_migrated();
    assert_eq!(reference_salt_key(&env, &["-f", "acc-03", "--out", "json"]), env.ok(SALT_KEY, &["-f", "acc-03", "--out", "json"]));
}

#[test]
fn reference_salt_reads_the_master_key_from_the_mmap_view() {
    let (env, _) = changed_and_migrated();
    let script = format!(
        "import salt.config, salt.cache, sys\n\
         opts = salt.config.master_config('{conf}/master')\n\
         c = salt.cache.Cache(opts, driver=opts['keys.cache_driver'])\n\
         sys.stdout.write(c.fetch('master_keys', 'master.pem'))\n",
        conf = env.conf()
    );
    let o = run(Command::new(reference_venv().join("bin/python")).arg("-c").arg(script), TOOL_TIMEOUT);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, std::fs::read(env.pki().join("master.pem")).expect("master.pem"));
}
