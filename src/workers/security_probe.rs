//! The engine's [`SecurityProbe`]: what the security center reads of the
//! installation besides the log. Repositories are opened through the
//! [`RepoSet`] (their key, their config, how their storage keeps locked
//! files); the passphrase files, listeners and certificates are looked at
//! on disk; tokens are read from the token file and its usage record,
//! never their secrets.

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use vouch_actors::service::security::{
    CertificateFacts, InstallationFacts, KeyFacts, ListenerFacts, RepositoryFacts, Retention,
    SecurityProbe, TokenFacts,
};
use vouch_events::RepositoryId;

use super::RepoSet;
use crate::backend::storage::Storage;
use crate::backend::Retained;

/// One HTTP listener, as served.
#[derive(Clone, Debug)]
pub struct ListenerSpec {
    /// Its bound address.
    pub address: std::net::SocketAddr,
    /// The certificate it serves, and whether Vouch made it.
    pub certificate: Option<(PathBuf, bool)>,
}

/// The installation as `vouch serve` set it up.
pub struct EngineSecurityProbe {
    repos: Arc<RepoSet>,
    /// Passphrase files of configured repositories, by id (others: the
    /// `repository.passphrase` beside a local repository's directory).
    key_files: HashMap<RepositoryId, PathBuf>,
    listeners: Vec<ListenerSpec>,
    data_dir: PathBuf,
    version: String,
    chain_key: bool,
    scrub_every: Option<Duration>,
    read_back_window: Option<Duration>,
    clock: Arc<dyn vouch_actors::Clock>,
}

impl EngineSecurityProbe {
    /// A probe of `repos`, the listeners and the tokens in `data_dir`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        repos: Arc<RepoSet>,
        key_files: HashMap<RepositoryId, PathBuf>,
        listeners: Vec<ListenerSpec>,
        data_dir: PathBuf,
        version: String,
        chain_key: bool,
        scrub_every: Option<Duration>,
        read_back_window: Option<Duration>,
        clock: Arc<dyn vouch_actors::Clock>,
    ) -> Self {
        EngineSecurityProbe {
            repos,
            key_files,
            listeners,
            data_dir,
            version,
            chain_key,
            scrub_every,
            read_back_window,
            clock,
        }
    }

    fn repository(&self, spec: &super::RepoSpec) -> RepositoryFacts {
        let (location, off_host, local) = match &spec.storage {
            Storage::Local(p) => (p.display().to_string(), false, Some(p.as_path())),
            Storage::S3(s) => (format!("s3:{}", s.location), true, None),
        };
        let opened = self.repos.open(&spec.id).map_err(|e| e.to_string());
        let key_file = self
            .key_files
            .get(&spec.id)
            .cloned()
            .or_else(|| local.map(|p| p.with_file_name("repository.passphrase")));
        RepositoryFacts {
            id: spec.id.clone(),
            location,
            off_host,
            agent: spec.id.as_str().starts_with("agent-"),
            encryption: opened
                .as_ref()
                .map(|r| {
                    format!(
                        "AES-256-GCM (per-file keys from a 256-bit master key; format v{})",
                        r.config().version
                    )
                })
                .map_err(Clone::clone),
            key: match key_file {
                Some(file) => key_facts(&file, local),
                None => Err("its passphrase file is not known".into()),
            },
            key_check: opened.as_ref().map(|r| r.key_check()).map_err(Clone::clone),
            retention: opened
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|r| r.backend().retention_support().map_err(|e| e.to_string()))
                .map(|r| match (r, off_host) {
                    (Retained::ByStorage, true) => Retention::ObjectLock,
                    (Retained::ByStorage, false) => Retention::ImmutableAttribute,
                    (Retained::ByVouch, _) => Retention::VouchOnly,
                }),
        }
    }

    fn tokens(&self) -> Result<Vec<TokenFacts>, String> {
        let path = self.data_dir.join("tokens.json");
        let store = vouch_web::TokenStore::load(&path).map_err(|e| e.to_string())?;
        let usage =
            vouch_web::token_usage::read(&self.data_dir.join(vouch_web::token_usage::USAGE_FILE));
        Ok(store
            .list()
            .into_iter()
            .map(|t| TokenFacts {
                last_used_unix: usage.get(&t.name).map(|u| u.at),
                created_unix: unix_of(&t.created_at),
                expires_unix: t.expires_at.as_deref().and_then(unix_of),
                role: t.role.as_str().to_owned(),
                name: t.name,
            })
            .collect())
    }
}

fn unix_of(rfc3339: &str) -> Option<i64> {
    time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.unix_timestamp())
}

/// Where a passphrase file is relative to its repository's directory.
fn key_facts(file: &Path, repository: Option<&Path>) -> Result<KeyFacts, String> {
    let meta = std::fs::metadata(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let canonical = std::fs::canonicalize(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let (same_disk, inside) = match repository {
        Some(dir) => {
            let dir_meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let dir = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            (
                Some(dir_meta.dev() == meta.dev()),
                canonical.starts_with(&dir),
            )
        }
        None => (None, false),
    };
    Ok(KeyFacts {
        file: canonical.display().to_string(),
        same_disk,
        inside_repository: inside,
        readable_by_others: meta.permissions().mode() & 0o077 != 0,
    })
}

/// When the first certificate of the PEM file `path` expires (Unix s).
fn not_after(path: &Path) -> Result<i64, String> {
    use rustls_pki_types::pem::PemObject;
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let der = rustls_pki_types::CertificateDer::pem_slice_iter(&bytes)
        .next()
        .ok_or_else(|| format!("{}: no certificate", path.display()))?
        .map_err(|e| format!("{}: not PEM: {e}", path.display()))?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|e| format!("{}: not a certificate: {e}", path.display()))?;
    Ok(cert.validity().not_after.timestamp())
}

impl SecurityProbe for EngineSecurityProbe {
    fn probe(&self) -> InstallationFacts {
        let repositories = self
            .repos
            .specs()
            .iter()
            .map(|spec| self.repository(spec))
            .collect();
        let listeners = self
            .listeners
            .iter()
            .map(|l| ListenerFacts {
                address: l.address.to_string(),
                loopback: l.address.ip().is_loopback(),
                tls: l
                    .certificate
                    .as_ref()
                    .map(|(path, self_signed)| CertificateFacts {
                        path: path.display().to_string(),
                        self_signed: *self_signed,
                        not_after_unix: not_after(path),
                    }),
            })
            .collect();
        InstallationFacts {
            probed_at_unix_ns: self.clock.now_unix_ns(),
            version: self.version.clone(),
            listeners,
            repositories,
            tokens: self.tokens(),
            chain_key: self.chain_key,
            scrub_every: self.scrub_every,
            read_back_window: self.read_back_window,
        }
    }

    fn key_check(&self, repository: &RepositoryId) -> Result<Option<String>, String> {
        if !self.repos.contains(repository) {
            return Ok(None);
        }
        self.repos
            .open(repository)
            .map(|r| Some(r.key_check()))
            .map_err(|e| e.to_string())
    }
}
