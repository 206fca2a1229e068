//! HTTPS for salt-api: `rest_cherrypy: ssl_crt` (a PEM certificate chain, the server's
//! certificate first) and `ssl_key` (its PEM private key: PKCS#8, PKCS#1 or SEC1), served
//! with rustls (TLS 1.2 and 1.3, ring's algorithms), as rest_cherrypy serves HTTPS unless
//! `disable_ssl: True`.
//!
//! A client that does not complete a TLS handshake within the head timeout, or speaks
//! plain HTTP to the port, is closed and counted (`refuse`, reason `tls_handshake`).
//! The files are read once, at start: a new certificate needs a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Most bytes read from either file (a certificate chain is a few KiB).
pub const MAX_PEM: u64 = 1 << 20;

/// Why the certificate or key cannot be served (each names the option and the file).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("salt-api: rest_cherrypy:{what} {}: {source}", path.display())]
    Read { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("salt-api: rest_cherrypy:{what} {}: larger than {MAX_PEM} bytes", path.display())]
    TooLarge { what: &'static str, path: PathBuf },
    #[error("salt-api: rest_cherrypy:ssl_crt {}: {why}", path.display())]
    BadCertificate { path: PathBuf, why: String },
    #[error("salt-api: rest_cherrypy:ssl_crt {} holds no certificate", path.display())]
    NoCertificate { path: PathBuf },
    #[error("salt-api: rest_cherrypy:ssl_key {}: no private key read: {why}", path.display())]
    BadKey { path: PathBuf, why: String },
    #[error("salt-api: rest_cherrypy:ssl_crt/ssl_key: {0}")]
    Rejected(rustls::Error),
}

/// The acceptor for `crt`/`key`, or why it cannot be made (the error names the file).
pub fn acceptor(crt: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let crt_pem = read(crt, "ssl_crt")?;
    let key_pem = read(key, "ssl_key")?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&crt_pem).collect::<Result<_, _>>().map_err(|e| TlsError::BadCertificate { path: crt.to_path_buf(), why: e.to_string() })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: crt.to_path_buf() });
    }
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::BadKey { path: key.to_path_buf(), why: e.to_string() })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rejected)?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(TlsError::Rejected)?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|source| TlsError::Read { what, path: path.to_path_buf(), source })?;
    let mut buf = Vec::new();
    f.take(MAX_PEM + 1).read_to_end(&mut buf).map_err(|source| TlsError::Read { what, path: path.to_path_buf(), source })?;
    if buf.len() as u64 > MAX_PEM {
        return Err(TlsError::TooLarge { what, path: path.to_path_buf() });
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key and self-signed certificate made by the openssl CLI (under coreutils'
    /// `timeout`: killed, and the test failed, past a minute).
    fn openssl_pair(dir: &Path, key_args: &[&str]) -> (std::path::PathBuf, std::path::PathBuf) {
        let (crt, key) = (dir.join("c.pem"), dir.join("k.pem"));
        let ok = std::process::Command::new("timeout")
            .args(["--kill-after=5", "60", "openssl", "req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=localhost"])
            .args(key_args)
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&crt)
            .output()
            .expect("openssl")
            .status
            .success();
        assert!(ok, "openssl req (within a minute)");
        (crt, key)
    }

    #[test]
    fn certificates_made_by_openssl_load_and_bad_files_are_named() {
        let d = tempfile::tempdir().unwrap();
        let (crt, key) = openssl_pair(d.path(), &["-newkey", "rsa:2048"]);
        assert!(acceptor(&crt, &key).is_ok());
        let e = d.path().join("ec");
        std::fs::create_dir(&e).unwrap();
        let (ecrt, ekey) = openssl_pair(&e, &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]);
        assert!(acceptor(&ecrt, &ekey).is_ok());
        // A key that is not the certificate's, a certificate given as the key, no file.
        assert!(acceptor(&crt, &ekey).is_err());
        let err = |c: &Path, k: &Path| acceptor(c, k).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(&crt, &crt).contains("ssl_key"));
        assert!(err(&d.path().join("none"), &key).contains("ssl_crt"));
        assert!(err(&key, &key).contains("no certificate"));
    }
}
