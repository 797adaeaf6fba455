//! What the security center reads besides the log: facts about the
//! installation (listeners and their certificates, repositories and where
//! their keys live, tokens), gathered by the binary through a
//! [`SecurityProbe`] (the actors neither open files nor parse
//! certificates). A fact that could not be read is an `Err` with the
//! reason, and the checks built on it are `unknown`, never `ok`.

use std::time::Duration;

use serde::Serialize;
use vouch_events::RepositoryId;

/// Everything a probe found.
#[derive(Clone, Debug, Serialize)]
pub struct InstallationFacts {
    /// When it was gathered.
    pub probed_at_unix_ns: i64,
    /// The server's software version.
    pub version: String,
    /// The HTTP listeners.
    pub listeners: Vec<ListenerFacts>,
    /// Every repository the service serves.
    pub repositories: Vec<RepositoryFacts>,
    /// The API tokens, or why they could not be read.
    pub tokens: Result<Vec<TokenFacts>, String>,
    /// Whether a chain key signs the log's checkpoints.
    pub chain_key: bool,
    /// How often the log is scrubbed (none: never on a timer).
    pub scrub_every: Option<Duration>,
    /// The rolling read-back window (none: off).
    pub read_back_window: Option<Duration>,
}

/// One listener.
#[derive(Clone, Debug, Serialize)]
pub struct ListenerFacts {
    /// Its address, `IP:PORT`.
    pub address: String,
    /// Whether only this host can reach it.
    pub loopback: bool,
    /// Its certificate, when it serves HTTPS.
    pub tls: Option<CertificateFacts>,
}

/// A served certificate.
#[derive(Clone, Debug, Serialize)]
pub struct CertificateFacts {
    /// Where it is.
    pub path: String,
    /// Whether Vouch made it itself (self-signed; clients pin it).
    pub self_signed: bool,
    /// When it expires (Unix seconds), or why that could not be read.
    pub not_after_unix: Result<i64, String>,
}

/// How a repository keeps locked files from being deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Retention {
    /// S3 Object Lock: the store refuses to delete.
    ObjectLock,
    /// The Linux immutable attribute: the file system refuses.
    ImmutableAttribute,
    /// Only Vouch's tools refuse; anyone with write access to the storage
    /// could delete.
    VouchOnly,
}

/// One repository.
#[derive(Clone, Debug, Serialize)]
pub struct RepositoryFacts {
    /// Its id.
    pub id: RepositoryId,
    /// Where it is, for humans (a path or an `s3:` location without
    /// credentials).
    pub location: String,
    /// Whether it is on another host (object storage).
    pub off_host: bool,
    /// An agent's own repository.
    pub agent: bool,
    /// The cipher its data is sealed with, from its configuration (e.g.
    /// `AES-256-GCM`), or why the configuration could not be read.
    pub encryption: Result<String, String>,
    /// Where its passphrase lives.
    pub key: Result<KeyFacts, String>,
    /// The check code of its master key (what an export's confirmation
    /// must match), or why it could not be computed.
    pub key_check: Result<String, String>,
    /// How locked files are kept.
    pub retention: Result<Retention, String>,
}

/// Where a repository's passphrase lives.
#[derive(Clone, Debug, Serialize)]
pub struct KeyFacts {
    /// The passphrase file.
    pub file: String,
    /// Whether it is on the same file system as the repository (none:
    /// the repository is not a local directory).
    pub same_disk: Option<bool>,
    /// Whether it is inside the repository's directory.
    pub inside_repository: bool,
    /// Whether others than its owner may read it.
    pub readable_by_others: bool,
}

/// One API token (never its secret).
#[derive(Clone, Debug, Serialize)]
pub struct TokenFacts {
    /// Its name.
    pub name: String,
    /// Its role (`admin`, `agent`, ...).
    pub role: String,
    /// When it was made (Unix seconds), if known.
    pub created_unix: Option<i64>,
    /// When it expires (Unix seconds); none: never.
    pub expires_unix: Option<i64>,
    /// When it was last used (Unix seconds); none: never since usage is
    /// recorded.
    pub last_used_unix: Option<i64>,
}

/// Gathers [`InstallationFacts`]; called on the blocking pool.
pub trait SecurityProbe: Send + Sync {
    /// The facts as they are now.
    fn probe(&self) -> InstallationFacts;

    /// The check code of `repository`'s master key (to confirm a key
    /// export); none: no such repository; or why it could not be read.
    fn key_check(&self, repository: &RepositoryId) -> Result<Option<String>, String>;
}

impl std::fmt::Debug for dyn SecurityProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecurityProbe")
    }
}
