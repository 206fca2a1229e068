use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::wire::crypto::PublicKey;

fn opts(sign: bool, use_file: bool) -> SignOptions {
    SignOptions { sign_pubkey: sign, key_name: "master_sign".into(), signature_file: "master_pubkey_signature".into(), use_signature_file: use_file }
}

fn b64(v: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let text = std::str::from_utf8(v).unwrap();
    assert!(text.ends_with('\n'), "Salt's b2a_base64 ends with a newline");
    base64::engine::general_purpose::STANDARD.decode(text.trim_end()).unwrap()
}

#[test]
fn off_signs_nothing_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    assert!(load(&opts(false, false), &mut Store::files(dir.path())).unwrap().is_none());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_missing_pair_is_made_once_and_signs_for_both_algorithms() {
    let dir = tempfile::tempdir().unwrap();
    let pub_clean = b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----";
    let first = load(&opts(true, false), &mut Store::files(dir.path())).unwrap().unwrap().sign(pub_clean).unwrap();
    let pem = std::fs::read(dir.path().join("master_sign.pem")).unwrap();
    let public = std::fs::read(dir.path().join("master_sign.pub")).unwrap();
    for f in ["master_sign.pem", "master_sign.pub"] {
        assert_eq!(std::fs::metadata(dir.path().join(f)).unwrap().permissions().mode() & 0o777, 0o400, "{f}: Salt's master_keys mode");
    }
    assert!(String::from_utf8_lossy(&pem).starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    let verifier = PublicKey::from_pem(&public).unwrap();
    let PubkeySignature::Computed { sha1, sha224 } = &first else { panic!("computed expected") };
    assert!(verifier.verify(pub_clean, &b64(sha1), SigAlgo::Pkcs1v15Sha1).unwrap());
    assert!(verifier.verify(pub_clean, &b64(sha224), SigAlgo::Pkcs1v15Sha224).unwrap());
    assert!(!verifier.verify(b"another key", &b64(sha1), SigAlgo::Pkcs1v15Sha1).unwrap());
    assert_eq!(first.value(SigAlgo::Pkcs1v15Sha224), Value::Binary(sha224.clone()));
    // The next start reads the same pair (PKCS#1 v1.5 is deterministic: same signature).
    let again = load(&opts(true, false), &mut Store::files(dir.path())).unwrap().unwrap().sign(pub_clean).unwrap();
    assert_eq!(again, first);
    assert_eq!(std::fs::read(dir.path().join("master_sign.pem")).unwrap(), pem);
}

#[test]
fn a_precomputed_signature_is_sent_as_its_file_says() {
    let dir = tempfile::tempdir().unwrap();
    let Err(err) = load(&opts(true, true), &mut Store::files(dir.path())) else { panic!("a missing signature file must stop the start") };
    assert!(err.to_string().contains("master_pubkey_signature"), "{err}");
    std::fs::write(dir.path().join("master_pubkey_signature"), "c2lnbmF0dXJl\n").unwrap();
    let s = load(&opts(true, true), &mut Store::files(dir.path())).unwrap().unwrap().sign(b"pub").unwrap();
    assert_eq!(s.value(SigAlgo::Pkcs1v15Sha1), Value::from("c2lnbmF0dXJl"));
    // No signing key is needed, nor made.
    assert!(!dir.path().join("master_sign.pem").exists());
}

#[test]
fn names_that_leave_pki_dir_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["../x", "a/b", "/etc/passwd", "", "..", "a\0b"] {
        let mut o = opts(true, false);
        o.key_name = bad.into();
        assert!(load(&o, &mut Store::files(dir.path())).is_err(), "key name {bad:?}");
        let mut o = opts(true, true);
        o.signature_file = bad.into();
        assert!(load(&o, &mut Store::files(dir.path())).is_err(), "signature file {bad:?}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_corrupt_signing_key_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("master_sign.pem"), "not a key").unwrap();
    assert!(load(&opts(true, false), &mut Store::files(dir.path())).is_err());
    assert_eq!(std::fs::read(dir.path().join("master_sign.pem")).unwrap(), b"not a key", "never overwritten");
}

#[test]
fn the_default_signature_file_is_named_after_the_id() {
    let mut cfg = crate::config::MasterConfig::under(std::path::Path::new("/nonexistent/halite-test"));
    cfg.id = "m1_master".into();
    assert_eq!(SignOptions::of(&cfg).signature_file, "m1_master_pubkey_signature");
    assert_eq!(SignOptions::of(&cfg).key_name, "master_sign");
    cfg.master_pubkey_signature = Some("sig".into());
    assert_eq!(SignOptions::of(&cfg).signature_file, "sig");
}
