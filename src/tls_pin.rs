//! TLS clients that trust exactly one server certificate, named by a hash
//! of its DER bytes: the service's self-signed certificate needs no CA,
//! only its fingerprint (printed by `vouch serve`, kept by agents, or
//! carried in a repository's ownership record).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Which certificate is trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pin {
    /// The BLAKE3 of its DER, 64 lower-case hex digits (ownership records).
    Blake3(String),
    /// The SHA-256 of its DER, 64 lower-case hex digits (what `vouch
    /// serve` and browsers show as `AB:CD:...`).
    Sha256(String),
}

impl Pin {
    /// A SHA-256 fingerprint as `AB:CD:...` or plain hex, any case.
    pub fn sha256(fingerprint: &str) -> Result<Pin, String> {
        let hex: String = fingerprint
            .chars()
            .filter(|c| *c != ':')
            .collect::<String>()
            .to_ascii_lowercase();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "{fingerprint:?} is not a SHA-256 fingerprint (32 bytes as hex, `AB:CD:...` or plain)"
            ));
        }
        Ok(Pin::Sha256(hex))
    }

    fn matches(&self, der: &[u8]) -> bool {
        match self {
            Pin::Blake3(d) => blake3::hash(der).to_hex().as_str() == d,
            Pin::Sha256(d) => {
                hex::encode(ring::digest::digest(&ring::digest::SHA256, der).as_ref()) == *d
            }
        }
    }
}

/// A client configuration (HTTP/1.1 only) that trusts exactly the
/// certificate `pin` names.
pub fn pinned_config(pin: Pin) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned { pin, provider }))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A client configuration (HTTP/1.1 only) that trusts Mozilla's roots.
pub fn public_roots_config() -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Trusts exactly the certificate its pin names; signatures are still
/// checked, so only the holder of that certificate's key passes.
#[derive(Debug)]
struct Pinned {
    pin: Pin,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.pin.matches(end_entity.as_ref()) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_parse_in_either_spelling_and_match_only_their_certificate() {
        let der = b"not really a certificate, but bytes to hash";
        let hex = hex::encode(ring::digest::digest(&ring::digest::SHA256, der).as_ref());
        let colons = hex
            .as_bytes()
            .chunks(2)
            .map(|c| {
                std::str::from_utf8(c)
                    .unwrap_or_default()
                    .to_ascii_uppercase()
            })
            .collect::<Vec<_>>()
            .join(":");
        let pin = Pin::sha256(&colons).expect("colon form");
        assert_eq!(pin, Pin::sha256(&hex).expect("plain form"));
        assert!(pin.matches(der));
        assert!(!pin.matches(b"another certificate"));
        assert!(Pin::sha256("AB:CD").is_err());
        assert!(Pin::Blake3(blake3::hash(der).to_hex().to_string()).matches(der));
    }
}
