//! E-mail of periodic reports: SMTP with STARTTLS (required, never a
//! plaintext fallback) through lettre on rustls with ring; the server's
//! certificate must chain to Mozilla's roots or to the configured CA file;
//! the password is read from a file and never logged.

use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{Message, SmtpTransport, Transport};
use vouch_actors::service::{Mail, Mailer};

/// An SMTP relay reached with STARTTLS.
pub struct SmtpMailer {
    transport: SmtpTransport,
    from: Mailbox,
    /// For logs: host and port, never credentials.
    relay: String,
}

impl std::fmt::Debug for SmtpMailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpMailer")
            .field("relay", &self.relay)
            .field("from", &self.from.to_string())
            .finish_non_exhaustive()
    }
}

/// What the SMTP client is built from (`[reports.smtp]`).
pub struct SmtpSettings {
    /// The relay's host name (also the name its certificate must carry).
    pub host: String,
    /// Its port (587: submission with STARTTLS).
    pub port: u16,
    /// The sender.
    pub from: String,
    /// Login, if the relay wants one.
    pub credentials: Option<(String, String)>,
    /// PEM CA certificates the relay's certificate may chain to, besides
    /// Mozilla's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Time allowed per connection and command.
    pub timeout: Duration,
}

impl SmtpMailer {
    /// The client for `s` (no connection is made yet).
    pub fn new(s: SmtpSettings) -> anyhow::Result<Self> {
        let from: Mailbox = s
            .from
            .parse()
            .map_err(|e| anyhow::anyhow!("[reports.smtp] from {:?}: {e}", s.from))?;
        let mut tls = TlsParameters::builder(s.host.clone());
        if let Some(pem) = &s.ca_pem {
            let cert = Certificate::from_pem(pem)
                .map_err(|e| anyhow::anyhow!("[reports.smtp] ca_file: {e}"))?;
            tls = tls.add_root_certificate(cert);
        }
        let tls = tls
            .build_rustls()
            .map_err(|e| anyhow::anyhow!("[reports.smtp] TLS: {e}"))?;
        let mut builder = SmtpTransport::builder_dangerous(&s.host)
            .port(s.port)
            .tls(Tls::Required(tls))
            .timeout(Some(s.timeout));
        if let Some((user, password)) = s.credentials {
            builder = builder.credentials(Credentials::new(user, password));
        }
        Ok(SmtpMailer {
            transport: builder.build(),
            from,
            relay: format!("{}:{}", s.host, s.port),
        })
    }
}

impl Mailer for SmtpMailer {
    fn send(&self, to: &[String], mail: &Mail) -> Result<(), String> {
        let mut builder = Message::builder()
            .from(self.from.clone())
            .subject(mail.subject.clone());
        for t in to {
            let mbox: Mailbox = t.parse().map_err(|e| format!("recipient {t:?}: {e}"))?;
            builder = builder.to(mbox);
        }
        let body = MultiPart::alternative()
            .singlepart(SinglePart::plain(mail.text.clone()))
            .singlepart(SinglePart::html(
                String::from_utf8_lossy(&mail.html).into_owned(),
            ));
        let mut mixed = MultiPart::mixed().multipart(body);
        for (name, media, bytes) in &mail.attachments {
            let ct = ContentType::parse(media).map_err(|e| format!("{media}: {e}"))?;
            mixed = mixed.singlepart(Attachment::new(name.clone()).body(bytes.clone(), ct));
        }
        let message = builder
            .multipart(mixed)
            .map_err(|e| format!("the message could not be made: {e}"))?;
        self.transport
            .send(&message)
            .map(|_| ())
            .map_err(|e| format!("SMTP {}: {e}", self.relay))
    }
}
