//! The TLS listener's configuration: a PEM certificate chain and its
//! private key, served with rustls on the `ring` provider (TLS 1.2 and 1.3,
//! rustls's safe defaults; no client certificates).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::ring;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why the certificate or key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read.
    #[error("TLS {what} {path}: {source}")]
    Read {
        /// `certificate` or `key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not PEM, or holds nothing of the expected kind.
    #[error("TLS {what} {path}: {why} (expected PEM: {expected})")]
    Pem {
        /// `certificate` or `key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What was wrong.
        why: String,
        /// What the file must hold.
        expected: &'static str,
    },
    /// rustls refused the pair (e.g. the key does not match the certificate).
    #[error("TLS certificate {cert} with key {key}: {source}")]
    Refused {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's reason.
        source: rustls::Error,
    },
}

const CERT_PEM: &str = "one or more \"-----BEGIN CERTIFICATE-----\" blocks, leaf first";
const KEY_PEM: &str = "a PKCS#8, PKCS#1 (RSA) or SEC1 (EC) private key block";

/// Reads `cert` and `key` and builds the server configuration. A key file
/// that others may read is served, with a warning naming it.
pub fn server_config(cert: &Path, key: &Path) -> Result<ServerConfig, TlsError> {
    let chain = read_chain(cert)?;
    let private = read_key(key)?;
    if let Ok(meta) = std::fs::metadata(key) {
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                path = %key.display(),
                "the TLS private key is readable by other users: chmod 600 it"
            );
        }
    }
    let refused = |source| TlsError::Refused {
        cert: cert.to_owned(),
        key: key.to_owned(),
        source,
    };
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(refused)?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(refused)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// BLAKE3 (hex) of the DER of the first (leaf) certificate in `cert`: what
/// the ownership record pins, so the CLI trusts exactly this certificate.
pub fn leaf_digest(cert: &Path) -> Result<String, TlsError> {
    let chain = read_chain(cert)?;
    Ok(chain
        .first()
        .map(|c| blake3::hash(c.as_ref()).to_hex().to_string())
        .unwrap_or_default())
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path, "certificate")?;
    let pem = |why: String| TlsError::Pem {
        what: "certificate",
        path: path.to_owned(),
        why,
        expected: CERT_PEM,
    };
    let chain = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(e.to_string()))?;
    if chain.is_empty() {
        return Err(pem("no certificate in the file".into()));
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path, "key")?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Pem {
        what: "key",
        path: path.to_owned(),
        why: match e {
            rustls_pki_types::pem::Error::NoItemsFound => "no private key in the file".into(),
            other => other.to_string(),
        },
        expected: KEY_PEM,
    })
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let params = rcgen::CertificateParams::new(vec!["localhost".into()]).expect("params");
        let cert = params.self_signed(&key).expect("cert");
        (cert.pem(), key.serialize_pem())
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn a_matching_pair_is_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = pair();
        let c = write(dir.path(), "cert.pem", &cert);
        let k = write(dir.path(), "key.pem", &key);
        let config = server_config(&c, &k).expect("config");
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, _) = pair();
        let (_, other_key) = pair();
        let c = write(dir.path(), "cert.pem", &cert);
        let k = write(dir.path(), "key.pem", &other_key);
        let err = server_config(&c, &k).expect_err("mismatched pair");
        assert!(matches!(err, TlsError::Refused { .. }), "{err}");
    }

    #[test]
    fn files_without_pem_say_what_they_must_hold() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = pair();
        let c = write(dir.path(), "cert.pem", &cert);
        let k = write(dir.path(), "key.pem", &key);
        let junk = write(dir.path(), "junk.pem", "not pem at all\n");

        let err = server_config(&junk, &k).expect_err("no certificate");
        let msg = err.to_string();
        assert!(
            msg.contains("no certificate") && msg.contains("BEGIN CERTIFICATE"),
            "{msg}"
        );

        // A certificate where the key should be: no private key in it.
        let err = server_config(&c, &c).expect_err("no key");
        let msg = err.to_string();
        assert!(
            msg.contains("no private key") && msg.contains("PKCS#8"),
            "{msg}"
        );

        let err = server_config(&dir.path().join("missing.pem"), &k).expect_err("missing");
        assert!(
            matches!(
                err,
                TlsError::Read {
                    what: "certificate",
                    ..
                }
            ),
            "{err}"
        );
    }
}
