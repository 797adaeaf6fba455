//! How one webhook POST is made (security review finding 7): HTTPS with
//! rustls (Mozilla's roots, plus a receiver's own CA when it has one),
//! redirects never followed (a receiver, or whoever tampers with plain
//! HTTP, cannot bounce the POST elsewhere), and the receiver's credentials
//! (a bearer token, or an HMAC-SHA256 signature of the body) read from
//! files, never put in the URL.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::CertificateDer;

/// The header that carries a body's signature:
/// `t=<unix seconds>,v1=<hex HMAC-SHA256(key, "<t>.<body>")>`.
pub const SIGNATURE_HEADER: &str = "X-Vouch-Signature";

/// A secret read from a file; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wraps the secret's bytes.
    pub fn new(bytes: Vec<u8>) -> Self {
        Secret(bytes)
    }

    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// How a receiver knows a POST is the service's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReceiverAuth {
    /// `Authorization: Bearer <token>`.
    Bearer(Secret),
    /// [`SIGNATURE_HEADER`] over the timestamp and the body.
    Hmac(Secret),
}

/// Why a receiver's client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// A CA certificate of the receiver is not one rustls accepts.
    #[error("a CA certificate of receiver {receiver:?} is not usable: {reason}")]
    BadCa {
        /// The receiver.
        receiver: String,
        /// What rustls said.
        reason: String,
    },
    /// The TLS configuration could not be made.
    #[error("TLS for receiver {receiver:?}: {reason}")]
    Tls {
        /// The receiver.
        receiver: String,
        /// What rustls said.
        reason: String,
    },
    /// A bearer token that cannot be a header value.
    #[error("the bearer token of receiver {0:?} is not a valid header value (one line of visible ASCII)")]
    BadToken(String),
}

/// The client for one receiver: HTTPS against Mozilla's roots and
/// `ca_certs`, no redirects, `timeout` per attempt.
pub fn client(
    receiver: &str,
    ca_certs: &[CertificateDer<'static>],
    timeout: Duration,
) -> Result<awc::Client, WebhookError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in ca_certs {
        roots.add(cert.clone()).map_err(|e| WebhookError::BadCa {
            receiver: receiver.to_owned(),
            reason: e.to_string(),
        })?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| WebhookError::Tls {
        receiver: receiver.to_owned(),
        reason: e.to_string(),
    })?
    .with_root_certificates(roots)
    .with_no_client_auth();
    // HTTP/1.1 only: no HTTP/2 is ever negotiated, so h2 0.3's open
    // advisory (docs/supply-chain.md) is out of reach here too.
    let mut tls = tls;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(awc::Client::builder()
        .timeout(timeout)
        .disable_redirects()
        .connector(awc::Connector::new().rustls_0_23(Arc::new(tls)))
        .finish())
}

/// The signature header's value for `body` sent at `unix_secs`.
pub fn signature(key: &Secret, unix_secs: i64, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.bytes());
    let mut ctx = ring::hmac::Context::with_key(&key);
    ctx.update(unix_secs.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    format!("t={unix_secs},v1={}", hex::encode(ctx.sign().as_ref()))
}

/// The headers `auth` adds to a POST of `body` at `unix_secs`.
pub fn auth_headers(
    receiver: &str,
    auth: Option<&ReceiverAuth>,
    unix_secs: i64,
    body: &[u8],
) -> Result<Vec<(&'static str, String)>, WebhookError> {
    Ok(match auth {
        None => Vec::new(),
        Some(ReceiverAuth::Bearer(token)) => {
            let token = std::str::from_utf8(token.bytes())
                .ok()
                .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
                .ok_or_else(|| WebhookError::BadToken(receiver.to_owned()))?;
            vec![("Authorization", format!("Bearer {token}"))]
        }
        Some(ReceiverAuth::Hmac(key)) => {
            vec![(SIGNATURE_HEADER, signature(key, unix_secs, body))]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_the_timestamp_and_the_body() {
        // RFC 4231 test case 2 ("Jefe"), with the message split as the
        // signature splits it: "what do ya want " "." "for nothing?" is
        // not it, so compute the reference over "<t>.<body>" directly.
        let key = Secret::new(b"Jefe".to_vec());
        let s = signature(&key, 1_700_000_000, b"{\"a\":1}");
        let reference = ring::hmac::sign(
            &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"Jefe"),
            b"1700000000.{\"a\":1}",
        );
        assert_eq!(
            s,
            format!("t=1700000000,v1={}", hex::encode(reference.as_ref()))
        );
        // And the RFC's own vector, so the primitive is the one named.
        let rfc = ring::hmac::sign(
            &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"Jefe"),
            b"what do ya want for nothing?",
        );
        assert_eq!(
            hex::encode(rfc.as_ref()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_bearer_token_must_be_one_visible_line_and_secrets_never_print() {
        let ok = ReceiverAuth::Bearer(Secret::new(b"abc.DEF-123".to_vec()));
        let h = auth_headers("r", Some(&ok), 0, b"").unwrap();
        assert_eq!(h, vec![("Authorization", "Bearer abc.DEF-123".to_owned())]);
        let bad = ReceiverAuth::Bearer(Secret::new(b"two\nlines".to_vec()));
        assert!(matches!(
            auth_headers("r", Some(&bad), 0, b""),
            Err(WebhookError::BadToken(_))
        ));
        assert_eq!(format!("{ok:?}"), "Bearer(<redacted>)");
    }
}
