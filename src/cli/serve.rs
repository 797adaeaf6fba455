//! `vouch serve`: the long-running service (scheduler, proof policies,
//! alerting, API, metrics, console) and `vouch token`.
//!
//! Everything it keeps lives in the data directory:
//!
//! | path | what |
//! |---|---|
//! | `events/` | the event log: the service's only memory of decisions |
//! | `read-store/` | the sled read store (derived, rebuilt from the log) |
//! | `repository/` | the default repository |
//! | `repository.passphrase` | its generated passphrase (mode 0600) |
//! | `tokens.json` | API tokens, hashed (mode 0600) |
//! | `sandbox/` | restore tests (each deleted when done) |
//! | `agents/NAME/` | each registered agent's own repository and its passphrase |

use std::net::TcpListener;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use serde::Deserialize;
use vouch_actors::service::{
    self, AgentBoard, AlertingConfig, DispatchConfig, ReadBackWindow, Receiver, ReceiverAuth,
    SchedulerConfig, Secret, ServiceConfig, ServiceHandle, WebhookFormat,
};
use vouch_actors::{BackoffPolicy, SystemClock};
use vouch_events::sources::{Protected, RootList, SourcePolicy, DEFAULT_SOURCE_ROOTS};
use vouch_events::{EventLog, LogOptions, RepositoryId, SharedLog, SledStore};
use vouch_web::{AppState, LiveTokens, Role, TokenStore};

use crate::backend::s3::credentials::Credentials;
use crate::backend::s3::{S3Location, S3Options};
use crate::backend::storage::{S3Storage, Storage};
use crate::backend::LocalBackend;
use crate::repo::{InitOptions, Repository};
use crate::workers::{EngineBrowser, EngineRepoStore, EngineWorker, RepoSet, RepoSpec};

/// Options of `vouch serve`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch serve                            data in ./vouch-data, console on 127.0.0.1:8420
  vouch serve --config /etc/vouch/vouch.toml
  vouch serve --listen 0.0.0.0:8420 --tls-cert cert.pem --tls-key key.pem

SIGTERM or Ctrl-C drains (running jobs get a grace period), a second stops
at once; SIGHUP reloads the configuration. docs/operations.md has the rest.

EXIT STATUS
  0  stopped cleanly; 1 it could not start or failed (the log says why)")]
pub struct ServeArgs {
    /// Address for the API and console (port 0 picks a free one).
    #[arg(long, env = "VOUCH_LISTEN")]
    pub listen: Option<String>,
    /// Where the service keeps its log, read store, default repository and
    /// tokens: default the configuration's `data_dir`, else `./vouch-data`
    /// from a checkout, `/var/lib/vouch` as root, `~/.local/share/vouch`
    /// otherwise.
    #[arg(long, env = "VOUCH_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// A TOML configuration file (see docs/operations.md); default
    /// `/etc/vouch/vouch.toml` as root, `~/.config/vouch/vouch.toml`
    /// otherwise, when it exists (none from a checkout).
    #[arg(long, env = "VOUCH_CONFIG")]
    pub config: Option<PathBuf>,
    /// Serve HTTPS with this PEM certificate chain (with `--tls-key`).
    #[arg(long, env = "VOUCH_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(long, env = "VOUCH_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve plain HTTP on an address other than loopback. Without it such
    /// an address needs TLS (`--tls-cert`/`--tls-key` or `[tls]`): tokens
    /// and the content of backed-up files would cross the network in clear.
    #[arg(long, env = "VOUCH_INSECURE_HTTP")]
    pub insecure_http: bool,
    /// Log lines as `text` or `json` (on stderr).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Open an event log whose acknowledged events are damaged or missing
    /// by cutting them (set aside in `.torn` files and recorded as a
    /// `service.log_repaired` event with `lost_acknowledged`), and set the
    /// read store aside so it is rebuilt from the log as it is. Without it
    /// such a log refuses to open (docs/events.md, "Log invariants").
    #[arg(long)]
    pub repair_log: bool,
    /// Sign checkpoints of the event log's head with this chain key (made
    /// by `vouch events keygen`; refused inside the data directory), so
    /// that `vouch events verify --chain-key-file` detects a rewritten
    /// history. Overrides `[log] chain_key_file`.
    #[arg(long, env = "VOUCH_CHAIN_KEY_FILE")]
    pub chain_key_file: Option<PathBuf>,
}

/// Options of `vouch token`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch token create --name ops --role operator --expires 90d
  vouch token create --role enroll --expires 1h     for `vouch agent --enroll`
  vouch token list
  vouch token revoke ops

EXIT STATUS
  0  done; 1 it failed; 2 wrong usage")]
pub struct TokenArgs {
    /// The service's data directory; default as `vouch serve`: the
    /// configuration's `data_dir`, else `./vouch-data` from a checkout,
    /// `/var/lib/vouch` as root, `~/.local/share/vouch` otherwise.
    #[arg(long, env = "VOUCH_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The service's configuration file: its `data_dir` is used unless
    /// `--data-dir` is given (so a token lands where the service reads
    /// them).
    #[arg(long, env = "VOUCH_CONFIG")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub action: TokenAction,
}

/// `vouch token` subcommands.
#[derive(Subcommand, Debug)]
pub enum TokenAction {
    /// Make a token; it is printed once and stored only as a hash.
    Create {
        /// Its unique name (an agent's token is named after the agent);
        /// optional for `enroll` tokens (`enroll-` and random digits).
        #[arg(long)]
        name: Option<String>,
        /// admin, operator, viewer, restore (viewer plus file contents),
        /// metrics (only /metrics), agent, enroll (registers one agent,
        /// once: give it to `vouch agent --enroll`; pair it with
        /// --expires) or append (the repository protocol only: read and
        /// add, never delete).
        #[arg(
            long,
            default_value = "viewer",
            value_parser = ["admin", "operator", "viewer", "restore", "metrics", "agent", "enroll", "append"]
        )]
        role: String,
        /// Refused after this long (e.g. "90d"); never expires without it.
        #[arg(long)]
        expires: Option<String>,
    },
    /// List tokens (names, roles, dates; never the tokens).
    List,
    /// Revoke a token by name (a running service refuses it within seconds).
    Revoke {
        /// Its name.
        name: String,
    },
}

fn default_listen() -> String {
    "127.0.0.1:8080".into()
}

fn dur(s: &str, key: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(s)
        .with_context(|| format!("{key}: {s:?} is not a duration (e.g. \"30s\", \"5m\", \"1h\")"))
}

/// The configuration file. Every key is optional; unknown keys are an
/// error. Documented in `docs/operations.md`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `listen = "127.0.0.1:8080"`.
    pub listen: Option<String>,
    /// `data_dir = "/var/lib/vouch"`.
    pub data_dir: Option<PathBuf>,
    /// `[tls]`.
    pub tls: Option<TlsConfig>,
    /// `[scheduler]`.
    #[serde(default)]
    pub scheduler: SchedulerSection,
    /// `[jobs]`.
    #[serde(default)]
    pub jobs: JobsSection,
    /// `[alerting]`.
    #[serde(default)]
    pub alerting: AlertingSection,
    /// `[verification]`.
    #[serde(default)]
    pub verification: VerificationSection,
    /// `[read_store]`.
    #[serde(default)]
    pub read_store: ReadStoreSection,
    /// `[log]`.
    #[serde(default)]
    pub log: LogSection,
    /// `[[webhooks]]`.
    #[serde(default)]
    pub webhooks: Vec<WebhookSection>,
    /// `[[repositories]]` besides the default one.
    #[serde(default)]
    pub repositories: Vec<RepositorySection>,
    /// `[sources]`.
    #[serde(default)]
    pub sources: SourcesSection,
    /// `[api]`.
    #[serde(default)]
    pub api: ApiSection,
    /// `[agents]`.
    #[serde(default)]
    pub agents: AgentsSection,
    /// `[[proxmox]]`: Proxmox VE clusters whose guests plans back up
    /// (`pve:NAME/qemu/VMID`).
    #[serde(default)]
    pub proxmox: Vec<ProxmoxSection>,
    /// `[reports]`: protection reports (PDF printing, delivery).
    #[serde(default)]
    pub reports: super::reports_cfg::ReportsSection,
    /// `[security]`: the security center (docs/security.md).
    #[serde(default)]
    pub security: SecuritySection,
    /// `[maintenance]`: the repositories' own upkeep.
    #[serde(default)]
    pub maintenance: MaintenanceSection,
    /// `[hooks]`: the programs plans may run around their backups.
    #[serde(default)]
    pub hooks: HooksSection,
}

/// `[hooks]`: where the programs that plans name as hooks are installed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksSection {
    /// The directory (absolute; none: this server runs no hooks, and a
    /// plan that asks for one fails its backups saying so). Only its
    /// administrator should be able to write to it: every file in it can
    /// be run by anyone allowed to write plans.
    pub dir: Option<PathBuf>,
}

/// `[maintenance]`: prune jobs that free what retention gave up.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceSection {
    /// How often each repository is pruned (default 24h; "off": never,
    /// and space is never freed; at least 1s). The first prune after a
    /// start comes after this long, at most an hour.
    pub prune_every: Option<String>,
    /// Packs in no index younger than this are kept (default 1h).
    pub prune_grace: Option<String>,
}

/// `[security]`: the security center's evaluation and thresholds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecuritySection {
    /// How often the checks are evaluated (default 5m; "off": only when
    /// the API asks).
    pub evaluate_every: Option<String>,
    /// A token unused this long is reported (default 90d).
    pub token_unused_after: Option<String>,
    /// More admin tokens than this is reported (default 3).
    pub max_admins: Option<usize>,
}

/// `[[proxmox]]`: one Proxmox VE cluster (docs/proxmox.md).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxmoxSection {
    /// Its name in plan sources.
    pub name: String,
    /// The API's URL, `https://HOST:8006`.
    pub url: String,
    /// The API token's id, `USER@REALM!TOKENID`.
    pub token_id: String,
    /// A file holding the token's secret.
    pub token_secret_file: PathBuf,
    /// The SHA-256 fingerprint of the API's certificate (`pvenode cert
    /// info`); else the certificate must chain to Mozilla's roots.
    pub fingerprint: Option<String>,
    /// The storage vzdump writes to (its Proxmox VE id).
    pub storage: String,
    /// Where that storage is mounted on this server (archives in
    /// `MOUNT/dump/`).
    pub mount: PathBuf,
    /// How long one vzdump task may run (default 6h).
    pub task_timeout: Option<String>,
    /// How often a running task is asked about (default 5s).
    pub poll: Option<String>,
}

impl ProxmoxSection {
    /// A client of the cluster.
    pub fn cluster(&self) -> anyhow::Result<crate::providers::proxmox::api::Cluster> {
        use crate::providers::proxmox::api::{Cluster, ClusterSettings};
        let what = format!("proxmox {:?}", self.name);
        if !vouch_events::sources::is_cluster_name(&self.name) {
            bail!("{what}: the name must be 1-64 of A-Z a-z 0-9 . _ -");
        }
        if !self.mount.is_absolute() {
            bail!(
                "{what}: mount {} is not an absolute path",
                self.mount.display()
            );
        }
        let secret = read_secret(&self.token_secret_file)?;
        let secret = String::from_utf8(secret)
            .map_err(|_| anyhow::anyhow!("{what}: the token secret is not UTF-8"))?;
        let fingerprint = self
            .fingerprint
            .as_deref()
            .map(crate::tls_pin::Pin::sha256)
            .transpose()
            .map_err(|e| anyhow::anyhow!("{what}: fingerprint: {e}"))?;
        let task_timeout = match &self.task_timeout {
            Some(t) => dur(t, "proxmox.task_timeout")?,
            None => Duration::from_secs(6 * 3600),
        };
        let poll = match &self.poll {
            Some(t) => dur(t, "proxmox.poll")?,
            None => Duration::from_secs(5),
        };
        Cluster::new(ClusterSettings {
            name: self.name.clone(),
            url: self.url.clone(),
            token_id: self.token_id.clone(),
            token_secret: zeroize::Zeroizing::new(secret),
            fingerprint,
            storage: self.storage.clone(),
            mount: self.mount.clone(),
            task_timeout,
            poll,
        })
        .map_err(|e| anyhow::anyhow!(e))
    }
}

/// `[agents]`: how the service deals with its agents (docs/agents.md).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsSection {
    /// How long a job's lease lasts unless the agent renews it (default
    /// 60s): an agent that stops renewing has its job given to another
    /// attempt this long after its last renewal.
    pub lease_ttl: Option<String>,
}

/// `[api]`: limits of the HTTP API.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiSection {
    /// Refused tokens a client address may present per minute before it
    /// is answered 429 for the rest of the minute (default 100; 0: no
    /// limit).
    pub failed_auth_per_minute: Option<u32>,
}

/// `[sources]`: where plan sources may lie (see
/// `vouch_events::sources`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourcesSection {
    /// Absolute roots sources must lie at or below (default `["/home",
    /// "/srv"]`; `["/"]` allows the whole host but the service's own
    /// files).
    pub allow: Option<Vec<PathBuf>>,
}

/// `[tls]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

/// `[scheduler]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerSection {
    /// How often schedules are evaluated (default 10s).
    pub tick: Option<String>,
    /// Largest per-plan jitter (default 5m).
    pub max_jitter: Option<String>,
}

/// `[jobs]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsSection {
    /// Jobs at once (default 2).
    pub max_concurrent: Option<usize>,
    /// Attempts per job (default 3).
    pub max_attempts: Option<u32>,
    /// First retry delay, doubling (default 30s).
    pub retry_initial: Option<String>,
    /// Largest restore test before sampling (default 1GiB, in bytes).
    pub restore_test_max_bytes: Option<u64>,
    /// Time running jobs get to finish on SIGTERM (default 60s).
    pub shutdown_grace: Option<String>,
    /// The shortest `verification.every`, `restore_test.every` and
    /// `restore_test.full_every` a plan may set (default 1h).
    pub min_every: Option<String>,
}

/// `[alerting]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertingSection {
    /// How often the rules are evaluated (default 30s).
    pub evaluate_every: Option<String>,
    /// An agent unseen this long is lost (default 10m).
    pub agent_lost_after: Option<String>,
    /// The console's URL, for links in alerts.
    pub external_url: Option<String>,
}

/// `[verification]`: the rolling read-back of every repository's packs.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerificationSection {
    /// Every pack is read back within this long (default 30d; "off" turns
    /// the rolling read-back off).
    pub read_back_window: Option<String>,
    /// Slices the pack-name space is cut into (default 720: one slice's
    /// turn an hour over 30 days).
    pub read_back_slices: Option<u32>,
}

/// `[read_store]`: the derived state's checkpoints.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadStoreSection {
    /// How often the projections are checkpointed when they changed
    /// (default 30s; at least 1s). A shorter interval makes restarts
    /// replay less of the log and costs a snapshot encoding each time.
    pub checkpoint_every: Option<String>,
}

/// `[log]`: the event log's own maintenance.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    /// How often the whole log is re-read and checked (default 24h; "off"
    /// turns the periodic scrub off; at least 1s). The first scrub runs
    /// at most 15 minutes after a start.
    pub scrub_every: Option<String>,
    /// The chain key file (`vouch events keygen`), outside the data
    /// directory: the log's head is then signed in `events/CHECKPOINTS`.
    pub chain_key_file: Option<PathBuf>,
    /// How often the log is mirrored into the repositories for disaster
    /// recovery (default 10s; "off" turns the mirror off; at least 1s).
    pub mirror_every: Option<String>,
}

/// `[[webhooks]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSection {
    /// Its name.
    pub name: String,
    /// Where to POST.
    pub url: String,
    /// `json` (default), `alertmanager-api` or `alertmanager-webhook`
    /// (`alertmanager`: its deprecated old name).
    pub format: Option<WebhookFormatName>,
    /// Attempts per message (default 8).
    pub max_attempts: Option<u32>,
    /// First retry delay, doubling up to 5m (default 5s).
    pub retry_initial: Option<String>,
    /// Time per attempt (default 10s).
    pub timeout: Option<String>,
    /// PEM file of CA certificates an `https://` receiver's certificate
    /// may chain to, besides Mozilla's roots (a private CA).
    pub ca_file: Option<PathBuf>,
    /// A file holding the token sent as `Authorization: Bearer`.
    pub bearer_token_file: Option<PathBuf>,
    /// A file holding the key of the `X-Vouch-Signature` HMAC-SHA256.
    pub hmac_key_file: Option<PathBuf>,
}

/// A `[[webhooks]] format` as written in the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WebhookFormatName {
    /// Plain JSON.
    Json,
    /// Alertmanager's API (`POST /api/v2/alerts`).
    AlertmanagerApi,
    /// Alertmanager's outgoing webhook payload (version 4).
    AlertmanagerWebhook,
    /// The old name of `alertmanager-webhook`, kept so that existing
    /// configurations keep working (a warning at start says to rename it).
    Alertmanager,
}

impl WebhookFormatName {
    /// The format it names, and whether the name is deprecated.
    pub fn format(self) -> (WebhookFormat, bool) {
        match self {
            WebhookFormatName::Json => (WebhookFormat::Json, false),
            WebhookFormatName::AlertmanagerApi => (WebhookFormat::AlertmanagerApi, false),
            WebhookFormatName::AlertmanagerWebhook => (WebhookFormat::AlertmanagerWebhook, false),
            WebhookFormatName::Alertmanager => (WebhookFormat::AlertmanagerWebhook, true),
        }
    }
}

/// The CA certificates of `path` (PEM).
fn read_ca_file(
    name: &str,
    path: &Path,
) -> anyhow::Result<Vec<rustls_pki_types::CertificateDer<'static>>> {
    use rustls_pki_types::pem::PemObject;
    let bytes = std::fs::read(path)
        .with_context(|| format!("webhook {name:?}: reading {}", path.display()))?;
    let certs = rustls_pki_types::CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("webhook {name:?}: {} is not PEM: {e}", path.display()))?;
    if certs.is_empty() {
        bail!("webhook {name:?}: no certificate in {}", path.display());
    }
    Ok(certs)
}

/// The credentials of a receiver, from their files.
fn webhook_auth(w: &WebhookSection) -> anyhow::Result<Option<ReceiverAuth>> {
    Ok(match (&w.bearer_token_file, &w.hmac_key_file) {
        (Some(_), Some(_)) => bail!(
            "webhook {:?}: bearer_token_file and hmac_key_file exclude each other",
            w.name
        ),
        (Some(f), None) => {
            let token = read_secret(f)?;
            if !token.iter().all(u8::is_ascii_graphic) {
                bail!(
                    "webhook {:?}: the token in {} must be one line of visible ASCII",
                    w.name,
                    f.display()
                );
            }
            Some(ReceiverAuth::Bearer(Secret::new(token)))
        }
        (None, Some(f)) => Some(ReceiverAuth::Hmac(Secret::new(read_secret(f)?))),
        (None, None) => None,
    })
}

/// `[[repositories]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepositorySection {
    /// Its id in plans.
    pub id: String,
    /// Its directory (an existing repository); or `location`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Its S3 location, `s3:https://HOST[:PORT]/BUCKET/PREFIX` (an existing
    /// repository); or `path`.
    #[serde(default)]
    pub location: Option<String>,
    /// For S3: a credentials file in the AWS CLI's format (else the
    /// service's environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or
    /// ~/.aws/credentials).
    #[serde(default)]
    pub s3_credentials_file: Option<PathBuf>,
    /// For S3: the profile of that file (`default`).
    #[serde(default)]
    pub s3_profile: Option<String>,
    /// For S3: the signing region (else AWS_REGION, else `us-east-1`).
    #[serde(default)]
    pub s3_region: Option<String>,
    /// For S3: virtual-hosted-style addressing (`BUCKET.HOST`) instead of
    /// path-style.
    #[serde(default)]
    pub s3_virtual_hosted: Option<bool>,
    /// A file holding its passphrase.
    pub passphrase_file: PathBuf,
}

impl RepositorySection {
    /// Where the repository is, with the keys to reach it.
    pub fn storage(&self) -> anyhow::Result<Storage> {
        match (&self.path, &self.location) {
            (Some(path), None) => Ok(Storage::Local(path.clone())),
            (None, Some(location)) => {
                let parsed = S3Location::parse(location)
                    .with_context(|| format!("repository {:?}", self.id))?;
                let credentials = match &self.s3_credentials_file {
                    Some(f) => Credentials::from_file(f, self.s3_profile.as_deref().unwrap_or("default")),
                    None => Credentials::from_environment(),
                }
                .with_context(|| format!("the S3 credentials of repository {:?}", self.id))?;
                let mut options = S3Options::default();
                if let Some(region) = &self.s3_region {
                    options.region = region.clone();
                }
                if let Some(v) = self.s3_virtual_hosted {
                    options.virtual_hosted = v;
                }
                Ok(Storage::S3(Box::new(S3Storage {
                    location: parsed,
                    credentials,
                    options,
                })))
            }
            _ => bail!(
                "repository {:?} needs exactly one of path (a directory) and location (s3:https://HOST/BUCKET/PREFIX)",
                self.id
            ),
        }
    }
}

impl Config {
    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the configuration {}", path.display()))?;
        toml::from_str(&text)
            .with_context(|| format!("configuration {} is not valid", path.display()))
    }
}

/// Writes `bytes` to a new file with mode 0600 (never over an existing one).
fn write_secret(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

fn read_secret(path: &Path) -> anyhow::Result<Vec<u8>> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "secret file is readable by group or others; chmod 600 it");
    }
    let mut s = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    while s.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        s.pop();
    }
    if s.is_empty() {
        bail!("{} is empty", path.display());
    }
    Ok(s)
}

/// `[hooks] dir`, checked ([`crate::hooks::check_dir`]).
fn hooks_dir(section: &HooksSection) -> anyhow::Result<Option<PathBuf>> {
    section
        .dir
        .as_deref()
        .map(|d| crate::hooks::check_dir(d, "hooks.dir"))
        .transpose()
        .map_err(anyhow::Error::msg)
}

/// The administrator's rules over plan sources: below the configured roots
/// (default [`DEFAULT_SOURCE_ROOTS`]), and never over the service's own
/// files: its data directory, its configuration, its TLS key, every
/// repository and passphrase file.
fn source_policy(s: &Settings, data_dir: &Path) -> anyhow::Result<SourcePolicy> {
    let allow: Vec<PathBuf> = match &s.config.sources.allow {
        Some(roots) => roots.clone(),
        None => DEFAULT_SOURCE_ROOTS.iter().map(PathBuf::from).collect(),
    };
    if let Some(bad) = allow.iter().find(|p| !p.is_absolute()) {
        bail!("sources.allow: {} is not an absolute path", bad.display());
    }
    let mut protected = vec![Protected {
        what: "the service's data directory".into(),
        path: data_dir.to_path_buf(),
    }];
    if let Some(c) = &s.config_path {
        protected.push(Protected {
            what: "the service's configuration file".into(),
            path: std::path::absolute(c)?,
        });
    }
    if let Some((_, key)) = &s.tls {
        protected.push(Protected {
            what: "the service's TLS key".into(),
            path: std::path::absolute(key)?,
        });
    }
    for r in &s.config.repositories {
        if let Some(path) = &r.path {
            protected.push(Protected {
                what: format!("repository {:?}", r.id),
                path: std::path::absolute(path)?,
            });
        }
        if let Some(f) = &r.s3_credentials_file {
            protected.push(Protected {
                what: format!("the S3 credentials of repository {:?}", r.id),
                path: std::path::absolute(f)?,
            });
        }
        protected.push(Protected {
            what: format!("the passphrase file of repository {:?}", r.id),
            path: std::path::absolute(&r.passphrase_file)?,
        });
    }
    for w in &s.config.webhooks {
        for f in [&w.bearer_token_file, &w.hmac_key_file]
            .into_iter()
            .flatten()
        {
            protected.push(Protected {
                what: format!("the credentials of webhook {:?}", w.name),
                path: std::path::absolute(f)?,
            });
        }
    }
    Ok(SourcePolicy::new(&allow, protected))
}

/// The default repository: created on first start with a generated
/// passphrase stored beside it.
fn default_repository(data_dir: &Path) -> anyhow::Result<RepoSpec> {
    let path = data_dir.join("repository");
    let pw_path = data_dir.join("repository.passphrase");
    if !path.join("config").exists() {
        let passphrase = hex::encode(crate::crypto::random_array::<32>());
        write_secret(&pw_path, passphrase.as_bytes())?;
        Repository::init(
            Arc::new(LocalBackend::new(&path)),
            passphrase.as_bytes(),
            &InitOptions::default(),
        )
        .with_context(|| format!("creating the default repository at {}", path.display()))?;
        // Through the log, not around it: `--log-format json` stays pure
        // JSON lines (ecosystem review D6).
        tracing::warn!(
            repository = %path.display(),
            passphrase_file = %pw_path.display(),
            "created the default repository; its passphrase is in the file named (mode 0600). COPY THAT PASSPHRASE SOMEWHERE SAFE, AWAY FROM THIS MACHINE: without it nobody can read the backups"
        );
    }
    Ok(RepoSpec {
        id: RepositoryId::new("default"),
        passphrase: read_secret(&pw_path)?.into(),
        storage: Storage::Local(path),
    })
}

/// The addresses `listen` resolves to that are not loopback ones.
fn beyond_loopback(listen: &str) -> anyhow::Result<Vec<String>> {
    use std::net::ToSocketAddrs;
    Ok(listen
        .to_socket_addrs()
        .with_context(|| format!("listen address {listen:?} is not an address"))?
        .filter(|a| !a.ip().is_loopback())
        .map(|a| a.to_string())
        .collect())
}

/// How `serve` listens without a configured certificate: plain HTTP on
/// loopback or with `--insecure-http`, else HTTPS with a self-signed
/// certificate of its own.
#[derive(Debug, PartialEq, Eq)]
enum WithoutCertificate {
    PlainHttp,
    SelfSigned,
}

fn without_certificate(listen: &str, insecure_http: bool) -> anyhow::Result<WithoutCertificate> {
    let open = beyond_loopback(listen)?;
    if open.is_empty() {
        return Ok(WithoutCertificate::PlainHttp);
    }
    if insecure_http {
        tracing::warn!(listen, "serving plain HTTP beyond loopback (--insecure-http): tokens and file contents cross the network in clear");
        return Ok(WithoutCertificate::PlainHttp);
    }
    Ok(WithoutCertificate::SelfSigned)
}

/// Everything the service creates from now on is its user's alone: the
/// event log, the read store, the restore-test sandbox and the files a
/// restore test writes there before their recorded modes are applied (a
/// copy of `/etc/shadow` must never be world-readable, not even for the
/// seconds of a test).
pub(super) fn make_private() {
    // SAFETY: umask only sets this process's file-mode creation mask; it
    // has no failure mode and touches no memory.
    unsafe {
        libc::umask(0o077);
    }
}

/// Creates the data directory with mode 0700, or brings an existing one
/// to 0700 (with a warning): it holds the repository passphrase, the token
/// hashes, the event log and restored copies of what is backed up.
pub(super) fn private_data_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating the data directory {}", dir.display()))?;
    let mode = std::fs::metadata(dir)
        .with_context(|| format!("reading the data directory {}", dir.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        tracing::warn!(
            path = %dir.display(),
            mode = format!("{:o}", mode & 0o777),
            "the data directory was open to group or others; set to 0700"
        );
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).with_context(
            || format!("setting the data directory {} to mode 0700", dir.display()),
        )?;
    }
    Ok(())
}

/// The file in the data directory where the first start leaves the first
/// admin token (mode 0600).
pub const INITIAL_ADMIN_TOKEN_FILE: &str = "initial-admin-token";

/// On the very first start (no `tokens.json` yet) makes the first admin
/// token and leaves it in [`INITIAL_ADMIN_TOKEN_FILE`], readable by the
/// service's user only; it is shown on the terminal only when stdout is
/// one, so it never lands in a journal or a log file. A token store that
/// exists but is empty (every token revoked, say during an incident) stays
/// empty: a restart never mints a token nobody asked for.
pub(super) fn ensure_admin_token(data_dir: &Path) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let path = data_dir.join("tokens.json");
    if path.exists() {
        if TokenStore::load(&path)?.is_empty() {
            tracing::warn!(
                path = %path.display(),
                "no API token is valid: every request will be refused; make one with `vouch token create --data-dir DIR --name NAME --role admin`"
            );
        }
        return Ok(());
    }
    let mut store = TokenStore::new();
    let token = store.create("admin", Role::Admin)?;
    let file = data_dir.join(INITIAL_ADMIN_TOKEN_FILE);
    // A start cut off before the store was saved left a token no store
    // knows: this one replaces it.
    match std::fs::remove_file(&file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing {}", file.display()))
        }
        _ => {}
    }
    write_secret(&file, format!("{token}\n").as_bytes())?;
    store.save(&path)?;
    tracing::warn!(
        file = %file.display(),
        "the first admin token is in the file named (mode 0600); only its hash is kept. Sign in with it, keep it somewhere safe, then delete the file. Make more with `vouch token create`"
    );
    if std::io::stdout().is_terminal() {
        println!("admin token: {token}");
    }
    Ok(())
}

/// Runs `vouch token`.
pub fn token(a: TokenArgs) -> anyhow::Result<i32> {
    let defaults = super::defaults::defaults();
    let data_dir = match (a.data_dir, a.config.or(defaults.config)) {
        (Some(d), _) => d,
        (None, Some(c)) => Config::load(&c)?.data_dir.unwrap_or(defaults.data_dir),
        (None, None) => defaults.data_dir,
    };
    let path = data_dir.join("tokens.json");
    let mut store = TokenStore::load(&path)?;
    match a.action {
        TokenAction::Create {
            name,
            role,
            expires,
        } => {
            let role: Role = role.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
            let name = match (name, role) {
                (Some(n), _) => n,
                (None, Role::Enroll) => {
                    format!("enroll-{}", hex::encode(crate::crypto::random_array::<4>()))
                }
                (None, _) => bail!("--name is required (only enroll tokens get one made up)"),
            };
            let expires_unix = match &expires {
                Some(d) => {
                    let d = dur(d, "--expires")?;
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)?
                        .as_secs();
                    Some(i64::try_from(now.saturating_add(d.as_secs())).unwrap_or(i64::MAX))
                }
                None => None,
            };
            std::fs::create_dir_all(&data_dir)?;
            let token = store.create_expiring(&name, role, expires_unix)?;
            store.save(&path)?;
            println!("{token}");
            eprintln!("token {name:?} ({role}) created; it is shown once");
        }
        TokenAction::List => {
            let usage =
                vouch_web::token_usage::read(&data_dir.join(vouch_web::token_usage::USAGE_FILE));
            for t in store.list() {
                println!(
                    "{}\t{}\t{}\t{}\t{}",
                    t.name,
                    t.role,
                    t.created_at,
                    t.expires_at
                        .as_deref()
                        .map_or_else(|| "never expires".to_owned(), |e| format!("expires {e}")),
                    last_used(usage.get(&t.name), &t.created_at)
                );
            }
        }
        TokenAction::Revoke { name } => {
            if !store.revoke(&name) {
                bail!("no token named {name:?}");
            }
            store.save(&path)?;
            eprintln!("token {name:?} revoked (a running service refuses it within a few seconds)");
        }
    }
    Ok(0)
}

/// A token's last use for `vouch token list`: "never used" when none is
/// recorded since the token (of that name) was created.
fn last_used(usage: Option<&vouch_web::token_usage::LastUse>, created_at: &str) -> String {
    use time::format_description::well_known::Rfc3339;
    let created =
        time::OffsetDateTime::parse(created_at, &Rfc3339).map_or(i64::MIN, |t| t.unix_timestamp());
    let Some(u) = usage.filter(|u| u.at >= created) else {
        return "never used".into();
    };
    let at = time::OffsetDateTime::from_unix_timestamp(u.at)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| u.at.to_string());
    match &u.from {
        Some(from) => format!("last used {at} from {from}"),
        None => format!("last used {at}"),
    }
}

/// What `serve` runs with, after the file, the environment and the flags.
struct Settings {
    listen: String,
    data_dir: PathBuf,
    /// The configuration file, when one was given.
    config_path: Option<PathBuf>,
    /// Certificate chain and key, when serving HTTPS.
    tls: Option<(PathBuf, PathBuf)>,
    config: Config,
}

fn settings(a: &ServeArgs) -> anyhow::Result<Settings> {
    let defaults = super::defaults::defaults();
    let config_path = a.config.clone().or(defaults.config.clone());
    let config = match &config_path {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        _ => config.tls.as_ref().map(|t| (t.cert.clone(), t.key.clone())),
    };
    Ok(Settings {
        tls,
        config_path,
        listen: a
            .listen
            .clone()
            .or_else(|| config.listen.clone())
            .unwrap_or_else(default_listen),
        data_dir: a
            .data_dir
            .clone()
            .or_else(|| config.data_dir.clone())
            .unwrap_or(defaults.data_dir),
        config,
    })
}

fn service_config(c: &Config) -> anyhow::Result<ServiceConfig> {
    let mut dispatch = DispatchConfig::default();
    if let Some(n) = c.jobs.max_concurrent {
        dispatch.max_concurrent = n.max(1);
    }
    if let Some(n) = c.jobs.max_attempts {
        dispatch.max_attempts = n.max(1);
    }
    if let Some(s) = &c.jobs.retry_initial {
        let d = dur(s, "jobs.retry_initial")?;
        dispatch.retry_backoff = BackoffPolicy::new(
            d,
            2,
            Duration::from_secs(3600).max(d),
            Duration::from_secs(3600),
        )?;
    }
    let mut scheduler = SchedulerConfig::default();
    if let Some(s) = &c.scheduler.tick {
        scheduler.tick = dur(s, "scheduler.tick")?;
    }
    if let Some(s) = &c.scheduler.max_jitter {
        scheduler.max_jitter = dur(s, "scheduler.max_jitter")?;
    }
    scheduler.read_back = read_back(&c.verification)?;
    scheduler.prune_every = match c.maintenance.prune_every.as_deref() {
        Some("off") => None,
        Some(s) => {
            let d = dur(s, "maintenance.prune_every")?;
            if d < Duration::from_secs(1) {
                bail!("maintenance.prune_every must be at least 1s, or \"off\" (it is {s:?})");
            }
            Some(d)
        }
        None => Some(vouch_actors::service::PRUNE_EVERY),
    };
    let mut alerting = AlertingConfig::default();
    if let Some(s) = &c.alerting.evaluate_every {
        alerting.evaluate_every = dur(s, "alerting.evaluate_every")?;
    }
    if let Some(s) = &c.alerting.agent_lost_after {
        alerting.agent_lost_after = dur(s, "alerting.agent_lost_after")?;
    }
    alerting.external_url = c.alerting.external_url.clone().unwrap_or_default();
    for w in &c.webhooks {
        if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
            bail!(
                "webhook {:?}: url must start with http:// or https://",
                w.name
            );
        }
        let (format, deprecated) = w.format.unwrap_or(WebhookFormatName::Json).format();
        if deprecated {
            tracing::warn!(
                webhook = %w.name,
                "format = \"alertmanager\" is deprecated: it sends the payload Alertmanager sends to its own webhook receivers (now format = \"alertmanager-webhook\", which this is read as). Alertmanager itself does not take that payload in: to feed Alertmanager, use format = \"alertmanager-api\" with url = \"http://HOST:9093/api/v2/alerts\" (docs/operations.md, Alerts)"
            );
        }
        alerting.receivers.push(Receiver {
            name: w.name.clone(),
            url: w.url.clone(),
            format,
            max_attempts: w.max_attempts.unwrap_or(8).max(1),
            retry_initial: match &w.retry_initial {
                Some(s) => dur(s, "webhooks.retry_initial")?,
                None => Duration::from_secs(5),
            },
            timeout: match &w.timeout {
                Some(s) => dur(s, "webhooks.timeout")?,
                None => Duration::from_secs(10),
            },
            ca_certs: match &w.ca_file {
                Some(p) => read_ca_file(&w.name, p)?,
                None => Vec::new(),
            },
            auth: webhook_auth(w)?,
        });
    }
    let checkpoint_every = match &c.read_store.checkpoint_every {
        Some(s) => {
            let d = dur(s, "read_store.checkpoint_every")?;
            if d < Duration::from_secs(1) {
                bail!("read_store.checkpoint_every must be at least 1s (it is {s:?})");
            }
            d
        }
        None => vouch_actors::service::CHECKPOINT_EVERY,
    };
    let scrub_every = match c.log.scrub_every.as_deref() {
        Some("off") => None,
        Some(s) => {
            let d = dur(s, "log.scrub_every")?;
            if d < Duration::from_secs(1) {
                bail!("log.scrub_every must be at least 1s, or \"off\" (it is {s:?})");
            }
            Some(d)
        }
        None => Some(vouch_actors::service::SCRUB_EVERY),
    };
    let security_every = match c.security.evaluate_every.as_deref() {
        Some("off") => None,
        Some(s) => {
            let d = dur(s, "security.evaluate_every")?;
            if d < Duration::from_secs(1) {
                bail!("security.evaluate_every must be at least 1s, or \"off\" (it is {s:?})");
            }
            Some(d)
        }
        None => Some(vouch_actors::service::security::SECURITY_EVERY),
    };
    let mut security_policy = vouch_actors::service::security::SecurityPolicy::default();
    if let Some(s) = &c.security.token_unused_after {
        security_policy.token_unused_after = dur(s, "security.token_unused_after")?;
    }
    if let Some(n) = c.security.max_admins {
        security_policy.max_admins = n;
    }
    Ok(ServiceConfig {
        dispatch,
        scheduler,
        alerting,
        checkpoint_every,
        restart: BackoffPolicy::default(),
        version: env!("CARGO_PKG_VERSION").into(),
        scrub_every,
        read_store_seal_key: None,
        // Set by `serve` once the repositories and listeners are known.
        security_probe: None,
        security_every,
        security_policy,
    })
}

fn read_back(v: &VerificationSection) -> anyhow::Result<Option<ReadBackWindow>> {
    let mut w = ReadBackWindow::default();
    match v.read_back_window.as_deref() {
        Some("off") => return Ok(None),
        Some(s) => w.window = dur(s, "verification.read_back_window")?,
        None => {}
    }
    if let Some(n) = v.read_back_slices {
        w.slices = n;
    }
    if w.slices == 0 {
        bail!("verification.read_back_slices must be at least 1");
    }
    if w.window < Duration::from_secs(u64::from(w.slices)) / 1000 || w.window.is_zero() {
        bail!(
            "verification.read_back_window {:?} is too short for {} slices (each slice's turn must last at least 1ms)",
            humantime::format_duration(w.window).to_string(),
            w.slices
        );
    }
    Ok(Some(w))
}

/// Runs `vouch serve` until SIGINT/SIGTERM.
pub fn serve(a: ServeArgs) -> anyhow::Result<i32> {
    let s = settings(&a)?;
    let mut service_config = service_config(&s.config)?;
    // A polling agent is recorded often enough never to be taken for lost.
    let seen_every = vouch_web::SEEN_EVERY.min(service_config.alerting.agent_lost_after / 4);
    // A bad certificate or key stops the start before anything is created.
    let mut tls = match &s.tls {
        Some((cert, key)) => Some(super::tls::server_config(cert, key)?),
        None => None,
    };
    let self_signed = tls.is_none()
        && without_certificate(&s.listen, a.insecure_http)? == WithoutCertificate::SelfSigned;
    let grace = match &s.config.jobs.shutdown_grace {
        Some(g) => dur(g, "jobs.shutdown_grace")?,
        None => Duration::from_secs(60),
    };
    let lease_ttl = match &s.config.agents.lease_ttl {
        Some(t) => dur(t, "agents.lease_ttl")?,
        None => vouch_web::LEASE_TTL,
    };
    if lease_ttl < Duration::from_secs(1) {
        bail!("agents.lease_ttl must be at least 1s");
    }
    let min_every = match &s.config.jobs.min_every {
        Some(m) => dur(m, "jobs.min_every")?,
        None => vouch_web::MIN_EVERY,
    };
    make_private();
    private_data_dir(&s.data_dir)?;
    let data_dir = std::path::absolute(&s.data_dir)?;
    // Beyond loopback with no certificate: one of its own, never plain
    // HTTP (tokens and file contents would cross the network in clear).
    let mut cert_path = s.tls.as_ref().map(|t| t.0.clone());
    if self_signed {
        let own = super::self_signed::ensure(&data_dir, &s.listen)?;
        tls = Some(super::tls::server_config(&own.cert, &own.key)?);
        tracing::warn!(
            cert = %own.cert.display(),
            fingerprint = %own.fingerprint,
            created = own.created,
            "no certificate configured for an address beyond loopback: serving HTTPS with a self-signed one (install your own with [tls], or pin this fingerprint)"
        );
        println!("tls certificate fingerprint (SHA-256): {}", own.fingerprint);
        cert_path = Some(own.cert);
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut specs = vec![default_repository(&data_dir)?];
    for r in &s.config.repositories {
        specs.push(RepoSpec {
            id: RepositoryId::new(r.id.as_str()),
            storage: r.storage()?,
            passphrase: read_secret(&r.passphrase_file)?.into(),
        });
    }
    // The event log is mirrored into these (not into agents' repositories:
    // they live in the data directory and would be lost with it).
    let mirror_targets: Vec<RepositoryId> = specs.iter().map(|s| s.id.clone()).collect();
    // Each registered agent's own repository (docs/agents.md).
    for spec in crate::workers::agent_repositories(&data_dir)? {
        if specs.iter().any(|s| s.id == spec.id) {
            bail!(
                "repository {:?} is configured and is also an agent's own repository; rename the configured one",
                spec.id.as_str()
            );
        }
        specs.push(spec);
    }
    ensure_admin_token(&data_dir)?;
    let tokens = LiveTokens::from_file(data_dir.join("tokens.json"))?.with_failed_auth_limit(
        s.config
            .api
            .failed_auth_per_minute
            .unwrap_or(vouch_web::FAILED_AUTH_LIMIT),
    );
    let mut clusters = Vec::new();
    for section in &s.config.proxmox {
        if clusters
            .iter()
            .any(|c: &crate::providers::proxmox::api::Cluster| c.settings().name == section.name)
        {
            bail!("proxmox {:?} is configured twice", section.name);
        }
        clusters.push(section.cluster()?);
    }
    let sources = source_policy(&s, &data_dir)?
        .with_clusters(clusters.iter().map(|c| c.settings().name.clone()).collect());
    tracing::info!(
        allow = %RootList(sources.allowed_roots().to_vec()),
        protected = sources.protected().len(),
        "plan sources"
    );
    // Never walked into either, should a source come to contain one of
    // them after its check (a bind mount, say).
    let exclude = sources.protected().iter().map(|p| p.path.clone()).collect();
    let repos = Arc::new(
        RepoSet::new(
            specs,
            data_dir.join("sandbox"),
            s.config.jobs.restore_test_max_bytes.unwrap_or(1 << 30),
            exclude,
        )
        .with_source_policy(sources.clone())
        .with_clusters(clusters)
        .with_hooks_dir(hooks_dir(&s.config.hooks)?)
        .with_prune_grace(match &s.config.maintenance.prune_grace {
            Some(g) => dur(g, "maintenance.prune_grace")?,
            None => crate::workers::PRUNE_GRACE,
        }),
    );
    // Leftovers of restore tests cut short by a crash.
    let _ = std::fs::remove_dir_all(repos.sandbox_root());

    let chromium = s.config.reports.chromium.clone();
    let reports_config =
        super::reports_cfg::reports_config(&s.config.reports, &service_config.alerting.receivers)?;
    // One clock for the log's recorded times and every actor's decisions.
    let clock: Arc<dyn vouch_actors::Clock> = Arc::new(SystemClock);
    let log_dir = data_dir.join("events");
    let chain_key = match a
        .chain_key_file
        .as_ref()
        .or(s.config.log.chain_key_file.as_ref())
    {
        Some(p) => Some(super::events_cmd::load_chain_key(p, &data_dir)?),
        None => {
            tracing::warn!(
                "no chain key (--chain-key-file): the event log's hash chain is not authenticated"
            );
            None
        }
    };
    if let Some(k) = &chain_key {
        tracing::info!(key_id = %hex::encode(k.id()), "event log: signing chain checkpoints");
    }
    let signs_chain = chain_key.is_some();
    // The read store is trusted only on a seal made with the chain key.
    service_config.read_store_seal_key = chain_key.as_ref().map(|k| k.read_store_seal_key());
    let log_options = LogOptions {
        allow_cut_acknowledged: a.repair_log,
        chain_key,
        ..LogOptions::default()
    };
    let log = EventLog::open(&log_dir, log_options, clock.clone())
        .with_context(|| format!("opening the event log in {}", log_dir.display()))?;
    let log = Arc::new(SharedLog::new(log));
    let mirror_status = Arc::new(crate::workers::log_mirror::MirrorStatus::default());
    let mirror = start_log_mirror(
        &s.config.log,
        &log,
        &repos,
        &data_dir,
        mirror_targets,
        mirror_status.clone(),
    )?;
    let read_store_dir = data_dir.join("read-store");
    if a.repair_log && read_store_dir.exists() {
        // Derived state that may reflect events the repaired log no longer
        // holds: kept aside (never deleted), rebuilt from the log.
        let aside = data_dir.join(format!(
            "read-store.before-repair-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        ));
        std::fs::rename(&read_store_dir, &aside)
            .with_context(|| format!("setting the read store aside to {}", aside.display()))?;
        tracing::warn!(path = %aside.display(), "--repair-log: the read store was set aside and is rebuilt from the log");
    }
    let (read_store, set_aside) = SledStore::open_or_set_aside(read_store_dir)?;
    if let Some(p) = set_aside {
        tracing::warn!(path = %p.display(), "the read store was unreadable; set aside and rebuilt from the log");
    }
    let listener = TcpListener::bind(&s.listen)
        .with_context(|| format!("listening on {} (is another service using it?)", s.listen))?;
    let addr = listener.local_addr()?;
    // Each served repository records that this service owns it (docs/format.md).
    let url = super::service_link::base_url(scheme, addr);
    super::service_link::claim(&repos, &data_dir, &url, cert_path.as_deref())?;

    // What the security center reads of the installation.
    let key_files = s
        .config
        .repositories
        .iter()
        .map(|r| (RepositoryId::new(r.id.as_str()), r.passphrase_file.clone()))
        .collect();
    service_config.security_probe = Some(Arc::new(crate::workers::EngineSecurityProbe::new(
        repos.clone(),
        key_files,
        vec![crate::workers::ListenerSpec {
            address: addr,
            certificate: cert_path.clone().map(|p| (p, self_signed)),
        }],
        data_dir.clone(),
        env!("CARGO_PKG_VERSION").into(),
        signs_chain,
        service_config.scrub_every,
        service_config.scheduler.read_back.map(|w| w.window),
        clock.clone(),
    )));
    let system = actix_web::rt::System::new();
    system.block_on(async move {
        let agents = Arc::new(AgentBoard::new());
        let workers = EngineWorker::with_clock(repos.clone(), clock.clone())
            .with_agents(agents.clone())
            .start_all_kinds();
        let handle = service::start(log, read_store, workers, clock, service_config).await?;
        // Listening for signals before anything says ready: a SIGTERM right
        // after `listening on` drains like any other, never kills.
        let _signals = spawn_signal_handlers(handle.clone(), s.config_path.clone())?;
        let state = AppState::with_tokens(tokens)?
            .with_service(handle.clone())
            .with_browse(Arc::new(
                EngineBrowser::new(repos.clone()).with_mirror_status(mirror_status),
            ))
            .with_repo_store(Arc::new(EngineRepoStore::new(repos, &data_dir)))
            .with_agents(agents)
            .with_log_dir(log_dir)
            .with_source_policy(sources)
            .with_min_every(min_every)
            .with_lease_ttl(lease_ttl)
            .with_agent_seen_every(seen_every);
        let state = match &chromium {
            Some(path) => state.with_chromium(path),
            None => state,
        };
        let server = vouch_web::serve(listener, state, tls)?;
        // The periodic reports, restarted if they ever panic (what was
        // delivered is in the log, so a restart sends nothing twice).
        {
            let handle = handle.clone();
            actix_web::rt::spawn(async move {
                loop {
                    let run = actix_web::rt::spawn(vouch_actors::service::run_reports(
                        handle.clone(),
                        reports_config.clone(),
                    ));
                    match run.await {
                        Ok(()) => break,
                        Err(e) => {
                            tracing::error!(error = %e, "the periodic reports stopped unexpectedly; restarting them in 5s");
                            actix_web::rt::time::sleep(Duration::from_secs(5)).await;
                        }
                    }
                    if handle.is_stopping() {
                        break;
                    }
                }
            });
        }
        let server_handle = server.handle();
        let running = actix_web::rt::spawn(server);
        println!("listening on {scheme}://{addr}");
        tracing::info!(%addr, data_dir = %data_dir.display(), "vouch serve ready");
        let watchdog = service_manager_ready(&format!("listening on {scheme}://{addr}"));
        let mut last_ping = std::time::Instant::now();
        // A log that refuses appends for this long is escalated: the process
        // stops (non-zero) so its supervisor restarts it and the log is
        // reopened and repaired, rather than failing silently forever.
        const LOG_FAILING_EXIT_AFTER: Duration = Duration::from_secs(300);
        let mut log_failed = None;
        while crate::util::signals() == 0 {
            actix_web::rt::time::sleep(Duration::from_millis(200)).await;
            // The watchdog is fed from the event loop itself: a loop that
            // stops turning stops feeding it, and systemd restarts us.
            if watchdog.is_some_and(|every| last_ping.elapsed() >= every) {
                let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
                last_ping = std::time::Instant::now();
            }
            let append = handle.append_status();
            if append.should_escalate(handle.now_unix_ns(), LOG_FAILING_EXIT_AFTER) {
                log_failed = append.reason;
                break;
            }
        }
        if let Some(reason) = &log_failed {
            tracing::error!(after = %humantime::format_duration(LOG_FAILING_EXIT_AFTER), %reason, "the event log has refused appends; stopping so that a restart reopens it");
        }
        let _ = sd_notify::notify(
            false,
            &[
                sd_notify::NotifyState::Stopping,
                sd_notify::NotifyState::Status("stopping: draining running jobs"),
            ],
        );
        // The HTTP side stays up while jobs drain: `/readyz` says
        // "stopping", `/metrics` and the console still answer.
        tracing::info!(grace = %humantime::format_duration(grace), "stopping: no new jobs; waiting for running jobs (a second SIGTERM or SIGINT cancels them)");
        let drained = handle.shutdown(grace).await;
        if !drained {
            tracing::warn!("running jobs did not finish in time; they are abandoned and retried on the next start");
            crate::util::set_interrupted();
        }
        handle.close_streams();
        server_handle.stop(true).await;
        let _ = running.await;
        if let Some(m) = mirror {
            m.finish().await;
        }
        if let Some(reason) = log_failed {
            anyhow::bail!("the event log refuses appends: {reason}");
        }
        anyhow::Ok(())
    })?;
    tracing::info!("stopped");
    Ok(0)
}

/// Tells systemd (`Type=notify`) that the service is ready, when it runs
/// under it; returns how often to feed its watchdog (half of
/// `WatchdogSec`), if one is set. Outside systemd it does nothing.
fn service_manager_ready(status: &str) -> Option<Duration> {
    // Outside systemd: nothing to tell.
    std::env::var_os("NOTIFY_SOCKET")?;
    if let Err(e) = sd_notify::notify(
        false,
        &[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(status),
        ],
    ) {
        tracing::warn!(error = %e, "could not tell systemd that the service is ready");
    }
    // WATCHDOG_USEC asks for a watchdog; WATCHDOG_PID, when set, says
    // whose (systemd sets both; a process started by ours is not meant).
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok() != Some(std::process::id()) {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// The event log's mirror into the repositories (`docs/operations.md`,
/// "Disaster recovery").
struct RunningMirror {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl RunningMirror {
    /// Asks for a last pass (the service's last events) and waits up to
    /// 30 s for it.
    async fn finish(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !self.thread.is_finished() && std::time::Instant::now() < deadline {
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
        if !self.thread.is_finished() {
            tracing::warn!("the event log mirror's last pass did not finish in 30s; the repositories' copy may lack the last events");
        }
    }
}

/// Starts mirroring the log into `targets`.
fn start_log_mirror(
    c: &LogSection,
    log: &SharedLog,
    repos: &Arc<RepoSet>,
    data_dir: &Path,
    targets: Vec<RepositoryId>,
    status: Arc<crate::workers::log_mirror::MirrorStatus>,
) -> anyhow::Result<Option<RunningMirror>> {
    let every = match c.mirror_every.as_deref() {
        Some("off") => {
            tracing::warn!("[log] mirror_every = \"off\": the event log is not copied into the repositories, and losing the data directory loses every point's state");
            return Ok(None);
        }
        Some(s) => {
            let d = dur(s, "log.mirror_every")?;
            if d < Duration::from_secs(1) {
                bail!("log.mirror_every must be at least 1s, or \"off\" (it is {s:?})");
            }
            d
        }
        None => crate::workers::log_mirror::MIRROR_EVERY,
    };
    let mirror =
        crate::workers::log_mirror::LogMirror::new(log.reader(), repos.clone(), targets, status)
            .with_data_dir(data_dir.to_path_buf());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let thread = crate::workers::log_mirror::spawn(mirror, every, stop.clone())
        .context("starting the event log mirror")?;
    tracing::info!(every = %humantime::format_duration(every), "event log: mirrored into the repositories");
    Ok(Some(RunningMirror { stop, thread }))
}

/// What a signal asks of `vouch serve`.
#[cfg(unix)]
fn stop_signal(name: &str) {
    crate::util::note_signal();
    if crate::util::signals() == 1 {
        tracing::info!(signal = name, "stop asked");
    } else {
        tracing::warn!(
            signal = name,
            "stop asked again: running jobs are cancelled now"
        );
    }
}

/// Listens for the service's signals: SIGTERM and SIGINT stop it (the
/// first drains running jobs, the second cancels them), SIGHUP reloads
/// `[[webhooks]]` and `[alerting]` from the configuration file. The HTTP
/// server takes none of them (`disable_signals`), so it answers until the
/// drain is over.
#[cfg(unix)]
fn spawn_signal_handlers(
    handle: ServiceHandle,
    config_path: Option<PathBuf>,
) -> anyhow::Result<actix_web::rt::task::JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    let mut hup = signal(SignalKind::hangup()).context("listening for SIGHUP")?;
    Ok(actix_web::rt::spawn(async move {
        loop {
            tokio::select! {
                Some(()) = term.recv() => stop_signal("SIGTERM"),
                Some(()) = int.recv() => stop_signal("SIGINT"),
                Some(()) = hup.recv() => reload(config_path.as_deref(), &handle).await,
                else => break,
            }
        }
    }))
}

/// Off Unix: Ctrl-C stops (twice: at once); there is no reload signal.
#[cfg(not(unix))]
fn spawn_signal_handlers(
    _handle: ServiceHandle,
    _config_path: Option<PathBuf>,
) -> anyhow::Result<actix_web::rt::task::JoinHandle<()>> {
    Ok(actix_web::rt::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            crate::util::note_signal();
        }
    }))
}

/// SIGHUP: reads the configuration file again and applies what can change
/// while running (`[[webhooks]]` and `[alerting]`). A file that does not
/// load changes nothing: the running configuration stays, and the error
/// says why. Everything else takes effect at the next start.
#[cfg(unix)]
async fn reload(config_path: Option<&Path>, handle: &ServiceHandle) {
    let Some(path) = config_path else {
        tracing::info!("SIGHUP: nothing to reload (the service was started without --config)");
        return;
    };
    let alerting = match Config::load(path).and_then(|c| service_config(&c)) {
        Ok(c) => c.alerting,
        Err(e) => {
            tracing::error!(path = %path.display(), error = %format!("{e:#}"), "SIGHUP: the configuration was not reloaded (the running one stays); fix the file and send SIGHUP again");
            return;
        }
    };
    let receivers = alerting.receivers.len();
    match handle.reconfigure_alerting(alerting).await {
        Ok(()) => tracing::info!(
            path = %path.display(),
            receivers,
            "SIGHUP: [[webhooks]] and [alerting] reloaded; other sections take effect at the next start"
        ),
        Err(e) => {
            tracing::error!(error = %e, "SIGHUP: the alerter did not take the new configuration")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{service_config, without_certificate, Config, WebhookFormat, WithoutCertificate};
    use anyhow::Context;

    #[test]
    fn plain_http_is_for_loopback_unless_the_admin_says_otherwise() {
        for loopback in ["127.0.0.1:8080", "[::1]:0", "localhost:0"] {
            assert_eq!(
                without_certificate(loopback, false).unwrap(),
                WithoutCertificate::PlainHttp,
                "{loopback}"
            );
        }
        for open in ["0.0.0.0:8080", "192.0.2.7:8080", "[::]:0"] {
            assert_eq!(
                without_certificate(open, false).unwrap(),
                WithoutCertificate::SelfSigned,
                "{open}"
            );
            assert_eq!(
                without_certificate(open, true).unwrap(),
                WithoutCertificate::PlainHttp,
                "{open}"
            );
        }
        assert!(without_certificate("no port", false).is_err());
    }

    #[test]
    fn the_old_alertmanager_format_still_loads_as_alertmanager_webhook() {
        let formats = |format: &str| -> anyhow::Result<(WebhookFormat, bool)> {
            let c: Config = toml::from_str(&format!(
                "[[webhooks]]\nname = \"am\"\nurl = \"http://127.0.0.1:9093/\"\nformat = \"{format}\"\n"
            ))?;
            let w = c.webhooks.first().context("a webhook")?;
            Ok(w.format.context("a format")?.format())
        };
        assert_eq!(
            formats("alertmanager").expect("loads"),
            (WebhookFormat::AlertmanagerWebhook, true),
            "the old name is the webhook payload, with a warning"
        );
        assert_eq!(
            formats("alertmanager-webhook").expect("loads"),
            (WebhookFormat::AlertmanagerWebhook, false)
        );
        assert_eq!(
            formats("alertmanager-api").expect("loads"),
            (WebhookFormat::AlertmanagerApi, false)
        );
        assert_eq!(
            formats("json").expect("loads"),
            (WebhookFormat::Json, false)
        );
        assert!(formats("prometheus").is_err());
        let c: Config =
            toml::from_str("[[webhooks]]\nname = \"j\"\nurl = \"http://x/\"\n").expect("loads");
        let sc = service_config(&c).expect("config");
        assert_eq!(
            sc.alerting.receivers[0].format,
            WebhookFormat::Json,
            "json by default"
        );
    }
}
