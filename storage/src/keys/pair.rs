//! Key pairs the key view materialises from the state machine: a lone master's own pair
//! (`<master_id>.pem` / `.pub`) and a cluster's (`cluster.pem` / `cluster.pub`). The
//! records hold only the private key (PKCS#1 or PKCS#8 PEM); the public file is derived
//! here, as SubjectPublicKeyInfo PEM with `\n` line ends and a final newline: the bytes
//! Salt (through `cryptography`) and OpenSSL write, so fingerprints of `cluster.pub`
//! computed anywhere agree.

use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::{DecodePrivateKey, EncodePublicKey, LineEnding};

use crate::error::{Error, Result};

/// The public key PEM of an RSA private key PEM.
pub fn public_pem_of(private_pem: &[u8]) -> Result<Vec<u8>> {
    let text = std::str::from_utf8(private_pem).map_err(|_| Error::Invalid("private key PEM is not text".into()))?;
    let key = rsa::RsaPrivateKey::from_pkcs1_pem(text)
        .or_else(|_| rsa::RsaPrivateKey::from_pkcs8_pem(text))
        .map_err(|e| Error::Invalid(format!("private key PEM does not parse: {e}")))?;
    let pem = key.to_public_key().to_public_key_pem(LineEnding::LF).map_err(|e| Error::Invalid(format!("cannot encode the public key: {e}")))?;
    Ok(pem.into_bytes())
}

/// The file names of the cluster pair in the keys directory.
pub const CLUSTER_PEM: &str = "cluster.pem";
pub const CLUSTER_PUB: &str = "cluster.pub";

#[cfg(test)]
mod tests {
    #[test]
    fn garbage_is_refused() {
        assert!(super::public_pem_of(b"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n").is_err());
        assert!(super::public_pem_of(&[0xff, 0xfe]).is_err());
    }
}
