//! Salt's multi-master PKI (`master_sign_pubkey`) with real salt-minion 3008.5 processes
//! that set `verify_master_pubkey_sign`: a minion holding the master's `master_sign.pub`
//! signs in, one holding another key refuses the master, a signature made by Salt's own
//! `salt-key --gen-signature` is served as is, Halite's own `salt-key --gen-signature`
//! writes Salt's bytes and a minion accepts them, and the tutorial's failover between two
//! masters with their own `master.pem` and one shared signing pair.

use std::path::Path;
use std::process::Command;

use crate::support::*;

const SIGNED: &str = "Received signed and verified master pubkey";
const REFUSED: &str = "but signature verification failed";

/// Puts `pub_pem` as `master_sign.pub` in the pki dir of the minion `id` under `root`
/// (before it first starts, as the tutorial has it copied).
fn give_sign_pub(root: &Path, id: &str, pub_pem: &[u8]) {
    let pki = root.join(id).join("pki");
    std::fs::create_dir_all(&pki).expect("minion pki dir");
    std::fs::write(pki.join("master_sign.pub"), pub_pem).expect("write master_sign.pub");
}

fn verifying(env: &Env) -> String {
    format!("master: {}\nmaster_port: {}\nverify_master_pubkey_sign: True\n", env.ip, env.ret)
}

#[test]
fn a_minion_verifying_the_signature_signs_in_and_answers() {
    let env = Env::master(&one_ip(), "localfs_key", "auto_accept: True\nmaster_sign_pubkey: True\n");
    let _master = start_master(&env);
    // Made at the first start, as Salt makes it.
    let sign_pub = std::fs::read(env.pki().join("master_sign.pub")).expect("the master made master_sign.pub");
    assert!(env.pki().join("master_sign.pem").exists());
    give_sign_pub(&env.root, "m1", &sign_pub);
    let _minion = start_minion(&env.root, "m1", &verifying(&env));
    wait_ping(&env, "m1", 90);
    assert!(minion_log(&env.root, "m1").contains(SIGNED), "the minion checked the signature: {}", minion_log(&env.root, "m1"));
}

#[test]
fn a_minion_holding_another_signing_key_refuses_the_master() {
    let env = Env::master(&one_ip(), "localfs_key", "auto_accept: True\nmaster_sign_pubkey: True\n");
    let _master = start_master(&env);
    let other = halite_master::wire::crypto::PrivateKey::generate(2048).expect("key").public_pem().expect("pem");
    give_sign_pub(&env.root, "m1", &other);
    let _minion = start_minion(&env.root, "m1", &verifying(&env));
    wait_for("m1 to refuse the master's signature", 90, || minion_log(&env.root, "m1").contains(REFUSED));
    assert!(!ping_via(&env, "m1", 3), "a minion that refused the master must not answer it");
    assert_eq!(minion_log_count(&env.root, "m1", "Minion is ready to receive requests!"), 0);
}

#[test]
fn a_signature_made_by_salts_salt_key_is_sent_as_is() {
    let env = Env::master(&one_ip(), "localfs_key", "auto_accept: True\nmaster_pubkey_signature: master_pubkey_signature\n");
    // The first start makes master.pem / master.pub; Salt's own tool then makes the
    // signing pair and the signature of master.pub (the tutorial's step), master stopped.
    let mut master = start_master(&env);
    master.stop();
    let o = run(Command::new(reference_venv().join("bin/salt-key")).arg("-c").arg(env.conf()).args(["--gen-signature", "--auto-create"]), TOOL_TIMEOUT);
    assert!(o.status.success(), "salt-key --gen-signature: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let sig = env.pki().join("master_pubkey_signature");
    assert!(sig.exists(), "Salt's salt-key wrote no signature file");
    // Halite sends that file, and needs no signing key for it.
    std::fs::remove_file(env.pki().join("master_sign.pem")).expect("remove the signing key");
    env.append_conf("master_sign_pubkey: True\nmaster_use_pubkey_signature: True\n");
    let _master = start_master(&env);
    give_sign_pub(&env.root, "m1", &std::fs::read(env.pki().join("master_sign.pub")).expect("master_sign.pub"));
    let _minion = start_minion(&env.root, "m1", &verifying(&env));
    wait_ping(&env, "m1", 90);
    assert!(minion_log(&env.root, "m1").contains(SIGNED));
    assert!(!env.pki().join("master_sign.pem").exists(), "no signing key is made with master_use_pubkey_signature");
}

/// Halite's own `salt-key --gen-signature --auto-create` (the tutorial's step, master
/// stopped): Salt's answers, the very bytes Salt's `salt-key` writes for the same keys
/// (PKCS#1 v1.5 is deterministic), and a verifying minion accepts the master that sends it.
#[test]
fn a_signature_made_by_halites_salt_key_is_salts_and_a_minion_accepts_it() {
    let env = Env::master(&one_ip(), "localfs_key", "auto_accept: True\nmaster_pubkey_signature: master_pubkey_signature\n");
    let mut master = start_master(&env);
    master.stop();
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).to_string();
    let o = env.run(SALT_KEY, &["--gen-signature"]);
    assert_eq!((o.status.success(), text(&o).as_str()), (true, "return:\n    No usable private-key found\n"), "without a signing key, Salt's answer");
    let o = env.run(SALT_KEY, &["--gen-signature", "--auto-create"]);
    assert_eq!((o.status.success(), text(&o).as_str()), (true, "return:\n    True\n"), "{}", String::from_utf8_lossy(&o.stderr));
    let sig = env.pki().join("master_pubkey_signature");
    let ours = std::fs::read(&sig).expect("Halite's salt-key wrote the signature file");
    let o = env.run(SALT_KEY, &["--gen-signature", "--auto-create"]);
    assert_eq!(text(&o), "return:\n    False\n", "an existing file is left alone");
    assert_eq!(std::fs::read(&sig).unwrap(), ours);
    // Salt's salt-key, on the same two keys (its own config and pki dir, so it leaves
    // this master's alone), writes the same bytes; and answers as Halite's does.
    let scratch = env.root.join("salt-ref");
    std::fs::create_dir_all(scratch.join("conf")).unwrap();
    std::fs::write(
        scratch.join("conf/master"),
        format!("root_dir: {0}\npki_dir: {0}/pki\ncachedir: {0}/cache\nsock_dir: {0}/sock\nlog_file: {0}/log\nmaster_pubkey_signature: master_pubkey_signature\n", scratch.display()),
    )
    .unwrap();
    let (sign_pem, master_pub, out) = (env.pki().join("master_sign.pem"), env.pki().join("master.pub"), scratch.join("out"));
    std::fs::create_dir_all(&out).unwrap();
    let salts = |extra: &[&str]| {
        let mut c = Command::new(reference_venv().join("bin/salt-key"));
        c.arg("-c").arg(scratch.join("conf")).arg("--gen-signature").arg("--priv").arg(&sign_pem).arg("--pub").arg(&master_pub).arg("--signature-path").arg(&out).args(extra);
        run(&mut c, TOOL_TIMEOUT)
    };
    let o = salts(&[]);
    assert!(o.status.success(), "Salt's salt-key: {}{}", text(&o), String::from_utf8_lossy(&o.stderr));
    // Salt 3008.5 writes it in its pki_dir whatever --signature-path says.
    let salts_file = [out.join("master_pubkey_signature"), scratch.join("pki/master_pubkey_signature")].into_iter().find(|p| p.exists()).expect("Salt's signature file");
    assert_eq!(std::fs::read(salts_file).unwrap(), ours, "the same bytes as Salt's salt-key");
    assert_eq!(text(&salts(&[])), "return:\n    False\n", "Salt's answer for an existing file, as Halite's");
    // Halite's salt-key with the same flags writes the same file elsewhere.
    let ours_out = env.root.join("halite-out");
    let o = env.run(SALT_KEY, &["--gen-signature", "--priv", sign_pem.to_str().unwrap(), "--pub", master_pub.to_str().unwrap(), "--signature-path", ours_out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(ours_out.join("master_pubkey_signature")).unwrap(), ours);
    // The master sends it, needing no signing key; a verifying minion accepts it.
    std::fs::remove_file(&sign_pem).expect("remove the signing key");
    env.append_conf("master_sign_pubkey: True\nmaster_use_pubkey_signature: True\n");
    let _master = start_master(&env);
    give_sign_pub(&env.root, "m1", &std::fs::read(env.pki().join("master_sign.pub")).expect("master_sign.pub"));
    let _minion = start_minion(&env.root, "m1", &verifying(&env));
    wait_ping(&env, "m1", 90);
    assert!(minion_log(&env.root, "m1").contains(SIGNED));
}

#[test]
fn a_missing_signature_file_stops_the_start() {
    let env = Env::master(&one_ip(), "localfs_key", "master_sign_pubkey: True\nmaster_use_pubkey_signature: True\n");
    let mut master = spawn_master(&env);
    let status = master.wait_exit("the master to stop for want of its signature file", 60);
    assert!(!status.success());
    assert!(env.master_log().contains("_pubkey_signature"), "the error names the file: {}", env.master_log());
}

/// Salt's multi-master PKI tutorial: two masters, each with its own `master.pem`, the
/// first's signing pair copied to the second, `master_sign_pubkey` on both; a minion with
/// `master_type: failover`, `master_alive_interval`, `verify_master_pubkey_sign` and the
/// signing public key. Killed with SIGKILL, the first master leaves the minion to the
/// second, whose differently keyed but signed public key it accepts.
#[test]
fn a_failover_minion_moves_to_a_master_with_another_key_signed_by_the_same_pair() {
    let ips = loopback(2);
    let (ret, publish) = two_ports_on(&[&ips[0], &ips[1]]);
    let conf = "auto_accept: True\nmaster_sign_pubkey: True\n";
    let e1 = Env::master_on(&ips[0], ret, publish, "localfs_key", conf);
    let e2 = Env::master_on(&ips[1], ret, publish, "localfs_key", conf);
    let mut m1 = start_master(&e1);
    for f in ["master_sign.pem", "master_sign.pub"] {
        std::fs::copy(e1.pki().join(f), e2.pki().join(f)).expect("copy the signing pair");
    }
    let _m2 = start_master(&e2);
    let master_pub = |e: &Env| std::fs::read(e.pki().join("master.pub")).expect("master.pub");
    assert_ne!(master_pub(&e1), master_pub(&e2), "each master has its own key");
    assert_eq!(std::fs::read(e2.pki().join("master_sign.pem")).unwrap(), std::fs::read(e1.pki().join("master_sign.pem")).unwrap(), "the copied pair is used, not replaced");
    let minions = tempfile::tempdir().expect("tempdir");
    give_sign_pub(minions.path(), "fo1", &std::fs::read(e1.pki().join("master_sign.pub")).expect("master_sign.pub"));
    let cfg = format!(
        "master:\n  - {}\n  - {}\nmaster_port: {ret}\npublish_port: {publish}\nmaster_type: failover\nmaster_alive_interval: 2\n\
         master_failback: True\nmaster_failback_interval: 2\nretry_dns: 0\nverify_master_pubkey_sign: True\n",
        ips[0], ips[1]
    );
    let _fo = start_minion(minions.path(), "fo1", &cfg);
    wait_ping(&e1, "fo1", 90);
    m1.kill9();
    wait_ping(&e2, "fo1", 120);
    // It took the second master's key because it is signed.
    assert!(minion_log_count(minions.path(), "fo1", SIGNED) >= 2, "{}", minion_log(minions.path(), "fo1"));
    let held = std::fs::read(minions.path().join("fo1/pki/minion_master.pub")).expect("minion_master.pub");
    assert_eq!(String::from_utf8_lossy(&held).trim(), String::from_utf8_lossy(&master_pub(&e2)).trim());
}
