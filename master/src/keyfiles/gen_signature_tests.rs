use std::os::unix::fs::PermissionsExt;

use super::*;

fn cfg(dir: &Path, extra: &str) -> MasterConfig {
    let conf = dir.join("master");
    std::fs::write(&conf, format!("root_dir: {}\npki_dir: {}/pki\nid: m0\n{extra}", dir.display(), dir.display())).unwrap();
    MasterConfig::load(dir).unwrap()
}

fn b64(v: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let text = std::str::from_utf8(v).unwrap();
    assert!(text.ends_with('\n'));
    base64::engine::general_purpose::STANDARD.decode(text.trim_end()).unwrap()
}

#[test]
fn auto_create_makes_the_pair_and_signs_master_pub_once() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path(), "");
    let master = PrivateKey::generate(2048).unwrap();
    std::fs::create_dir_all(&c.pki_dir).unwrap();
    std::fs::write(c.pki_dir.join("master.pub"), master.public_pem().unwrap()).unwrap();
    // Without a signing key and without --auto-create: Salt's answer.
    assert_eq!(gen_signature(&c, &GenSignature::default()).unwrap(), Outcome::Refused("No usable private-key found".into()));
    let req = GenSignature { auto_create: true, ..Default::default() };
    let target = c.pki_dir.join("m0_pubkey_signature");
    assert_eq!(gen_signature(&c, &req).unwrap(), Outcome::Written(target.clone()));
    assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o400);
    let signer = PublicKey::from_pem(&std::fs::read(c.pki_dir.join("master_sign.pub")).unwrap()).unwrap();
    let signed = clean_key(&master.public_pem().unwrap());
    assert!(signer.verify(&signed, &b64(&std::fs::read(&target).unwrap()), SigAlgo::Pkcs1v15Sha1).unwrap());
    // A second run leaves the file alone.
    assert_eq!(gen_signature(&c, &req).unwrap(), Outcome::Exists(target));
}

#[test]
fn named_keys_and_a_signature_path() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path(), "master_pubkey_signature: sig\n");
    let (signer, other) = (PrivateKey::generate(2048).unwrap(), PrivateKey::generate(2048).unwrap());
    let (priv_file, pub_file) = (dir.path().join("s.pem"), dir.path().join("o.pub"));
    std::fs::write(&priv_file, signer.to_pem().unwrap()).unwrap();
    std::fs::write(&pub_file, other.public_pem().unwrap()).unwrap();
    let out = dir.path().join("out");
    let req = GenSignature { public: Some(pub_file.clone()), private: Some(priv_file), signature_path: Some(out.clone()), ..Default::default() };
    assert_eq!(gen_signature(&c, &req).unwrap(), Outcome::Written(out.join("sig")));
    let v = b64(&std::fs::read(out.join("sig")).unwrap());
    assert!(signer.public_key().unwrap().verify(&clean_key(&other.public_pem().unwrap()), &v, SigAlgo::Pkcs1v15Sha1).unwrap());
    // PKCS#1 v1.5 is deterministic: the same bytes as `sign` gives.
    assert_eq!(std::fs::read(out.join("sig")).unwrap(), sign(&signer, &other.public_key().unwrap(), SigAlgo::Pkcs1v15Sha1).unwrap());
    let missing = GenSignature { public: Some(dir.path().join("nope.pub")), ..Default::default() };
    assert!(matches!(gen_signature(&c, &missing).unwrap(), Outcome::Refused(m) if m.contains("does not exist")));
}
