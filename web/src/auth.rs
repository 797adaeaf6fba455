//! API tokens: stored only as hashes, checked in constant time.
//!
//! Every route under `/api/v1` (and `/metrics`) sits behind
//! [`require_token`], which wants `Authorization: Bearer <token>`. Tokens
//! are long random strings, so a fast keyed hash is enough (no password
//! KDF): the store holds the BLAKE3 hash, derived with a context string of
//! its own, and a presented token is hashed and compared with
//! `blake3::Hash`'s constant-time equality.
//!
//! The store persists as a JSON file (`<data-dir>/tokens.json`, mode 0600,
//! replaced atomically): `{"tokens": [{"name", "role", "hash", "created_at"}]}`.
//! A running server holds it as [`LiveTokens`], which re-reads the file
//! when it changed (looked at no more than once a second), so `vouch token
//! revoke` takes effect without a restart.

use std::fmt;
use std::future::{ready, Ready};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header::AUTHORIZATION;
use actix_web::middleware::Next;
use actix_web::{web, Error, FromRequest, HttpMessage, HttpRequest};
use serde::{Deserialize, Serialize};

use crate::error::WebError;

/// Domain separation of token hashes; changing it invalidates every token.
const TOKEN_CONTEXT: &str = "vouch 2026 api token v1";

/// The prefix of every token made by [`TokenStore::create`].
pub const TOKEN_PREFIX: &str = "vouch_";

/// The stored form of an API token.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenHash(blake3::Hash);

impl TokenHash {
    /// The hash of a token as presented by a client.
    pub fn of(token: &str) -> Self {
        TokenHash(blake3::Hash::from(blake3::derive_key(
            TOKEN_CONTEXT,
            token.as_bytes(),
        )))
    }

    /// Reads a hash written by [`TokenHash::to_hex`].
    pub fn from_hex(hex: &str) -> Option<Self> {
        blake3::Hash::from_hex(hex).ok().map(TokenHash)
    }

    /// 64 lowercase hex digits, for configuration files.
    pub fn to_hex(&self) -> String {
        self.0.to_hex().to_string()
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only a prefix: enough to tell tokens apart in logs.
        write!(f, "TokenHash({}…)", &self.to_hex()[..8])
    }
}

/// What a token may do (see the role table in `docs/api.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything, including token management.
    Admin,
    /// Reads everything; plans, jobs and locks: create, change, run, cancel.
    Operator,
    /// Read only: plans, points, jobs, alerts, events, file names; never
    /// the content of a backed-up file.
    Viewer,
    /// What a viewer reads, plus the content of backed-up files (download).
    Restore,
    /// Only `GET /metrics` (for Prometheus: its token sits in a readable
    /// scrape configuration, so it can read nothing else).
    Metrics,
    /// A backup agent: only plans whose source is `agent:<token name>:...`,
    /// their jobs and points, its leases, and its own repository
    /// (`agent-<token name>`) through the repository protocol: read and
    /// add under a current lease, never delete or overwrite.
    Agent,
    /// A one-time enrollment token: only `POST /api/v1/agent/register`,
    /// which uses it up (see `docs/agents.md`).
    Enroll,
    /// An append-only repository client (`vouch backup --repo https://...`):
    /// reads and adds to the served repositories that are not an agent's
    /// own, never deletes or overwrites; nothing of the API beyond whoami.
    Append,
}

impl Role {
    /// The lower-case name (`admin`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Viewer => "viewer",
            Role::Restore => "restore",
            Role::Metrics => "metrics",
            Role::Agent => "agent",
            Role::Enroll => "enroll",
            Role::Append => "append",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "admin" => Ok(Role::Admin),
            "operator" => Ok(Role::Operator),
            "viewer" => Ok(Role::Viewer),
            "restore" => Ok(Role::Restore),
            "metrics" => Ok(Role::Metrics),
            "agent" => Ok(Role::Agent),
            "enroll" => Ok(Role::Enroll),
            "append" => Ok(Role::Append),
            _ => Err(format!(
                "unknown role {s:?}: expected admin, operator, viewer, restore, metrics, agent, enroll or append"
            )),
        }
    }
}

/// The authenticated caller of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Principal {
    /// The token's name.
    pub name: String,
    /// The token's role.
    pub role: Role,
}

impl Principal {
    /// Ok if the caller may change things (admin, operator); 403 otherwise.
    pub fn require_write(&self) -> Result<(), WebError> {
        match self.role {
            Role::Admin | Role::Operator => Ok(()),
            Role::Viewer
            | Role::Restore
            | Role::Metrics
            | Role::Agent
            | Role::Enroll
            | Role::Append => Err(WebError::Forbidden(format!(
                "a token with role {} may not change anything",
                self.role
            ))),
        }
    }

    /// Ok if the caller is an administrator; 403 naming `what` otherwise.
    pub fn require_admin(&self, what: &str) -> Result<(), WebError> {
        match self.role {
            Role::Admin => Ok(()),
            _ => Err(WebError::Forbidden(format!(
                "{what} needs an admin token, not {}",
                self.role
            ))),
        }
    }

    /// Ok if the caller may read the content of backed-up files (admin,
    /// restore); 403 otherwise. Metadata (names, sizes, modes) is not
    /// content.
    pub fn require_content(&self) -> Result<(), WebError> {
        match self.role {
            Role::Admin | Role::Restore => Ok(()),
            Role::Operator
            | Role::Viewer
            | Role::Metrics
            | Role::Agent
            | Role::Enroll
            | Role::Append => Err(WebError::Forbidden(format!(
                "reading the content of backed-up files needs an admin or restore token, not {}",
                self.role
            ))),
        }
    }

    /// Ok if the caller may scrape `/metrics` (every role but agents,
    /// enrollment and append-only tokens: the metrics name every plan).
    pub fn require_metrics(&self) -> Result<(), WebError> {
        match self.role {
            Role::Agent | Role::Enroll | Role::Append => Err(WebError::Forbidden(format!(
                "a token with role {} may not read /metrics (it names every plan)",
                self.role
            ))),
            _ => Ok(()),
        }
    }

    /// Ok unless the caller is an agent, which sees only its own plans.
    pub fn require_not_agent(&self) -> Result<(), WebError> {
        match self.role {
            Role::Agent => Err(WebError::Forbidden(
                "an agent token sees only its own plans, jobs and points".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Whether the caller may see a plan with this source.
    pub fn sees_source(&self, source: &str) -> bool {
        match self.role {
            Role::Agent => source
                .strip_prefix("agent:")
                .and_then(|rest| rest.strip_prefix(self.name.as_str()))
                .is_some_and(|rest| rest.starts_with(':')),
            _ => true,
        }
    }
}

/// A stored token, as listed (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenEntry {
    /// Its unique name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// The hex BLAKE3 hash of the token ([`TokenHash::to_hex`]).
    pub hash: String,
    /// When it was made (RFC 3339).
    pub created_at: String,
    /// When it stops being accepted (RFC 3339); never when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// Errors of [`TokenStore::load`], [`TokenStore::save`] and
/// [`TokenStore::create`].
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be read or written.
    #[error("token file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a token store.
    #[error("token file {path} is damaged: {message}")]
    Format {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A token of that name exists.
    #[error("a token named {0:?} exists; revoke it first")]
    NameTaken(String),
    /// The name is empty or has characters other than `[A-Za-z0-9._-]`.
    #[error("token name {0:?} is not allowed: use 1-64 of A-Z a-z 0-9 . _ -")]
    BadName(String),
    /// The operating system gave no randomness.
    #[error("no randomness for a new token: {0}")]
    Random(String),
}

#[derive(Serialize, Deserialize)]
struct TokenFile {
    tokens: Vec<TokenEntry>,
}

/// The known tokens, by hash.
#[derive(Debug, Clone, Default)]
pub struct TokenStore {
    /// Hash, caller, creation time (RFC 3339), expiry (Unix seconds).
    tokens: Vec<(TokenHash, Principal, String, Option<i64>)>,
}

impl TokenStore {
    /// A store that accepts no token.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a token by its hash.
    pub fn insert(&mut self, hash: TokenHash, name: impl Into<String>, role: Role) {
        self.tokens.push((
            hash,
            Principal {
                name: name.into(),
                role,
            },
            crate::views::rfc3339_now(),
            None,
        ));
    }

    /// Makes a new token for `name` with `role`: 32 random bytes as hex,
    /// prefixed `vouch_`. Returns the token (shown once; only its hash is
    /// kept).
    pub fn create(&mut self, name: &str, role: Role) -> Result<String, TokenError> {
        self.create_expiring(name, role, None)
    }

    /// [`TokenStore::create`] for a token accepted only before
    /// `expires_unix` (seconds), when given.
    pub fn create_expiring(
        &mut self,
        name: &str,
        role: Role,
        expires_unix: Option<i64>,
    ) -> Result<String, TokenError> {
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !name_ok {
            return Err(TokenError::BadName(name.to_owned()));
        }
        if self.tokens.iter().any(|(_, p, _, _)| p.name == name) {
            return Err(TokenError::NameTaken(name.to_owned()));
        }
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| TokenError::Random(e.to_string()))?;
        let token = format!(
            "{TOKEN_PREFIX}{}",
            bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        self.insert(TokenHash::of(&token), name, role);
        if let Some(last) = self.tokens.last_mut() {
            last.3 = expires_unix;
        }
        Ok(token)
    }

    /// Removes the token named `name`; whether there was one.
    pub fn revoke(&mut self, name: &str) -> bool {
        let before = self.tokens.len();
        self.tokens.retain(|(_, p, _, _)| p.name != name);
        self.tokens.len() != before
    }

    /// Every token (name, role, hash, creation time), in creation order.
    pub fn list(&self) -> Vec<TokenEntry> {
        self.tokens
            .iter()
            .map(|(h, p, at, exp)| TokenEntry {
                name: p.name.clone(),
                role: p.role,
                hash: h.to_hex(),
                created_at: at.clone(),
                expires_at: exp.map(rfc3339_secs),
            })
            .collect()
    }

    /// Whether no token is stored.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Reads a store written by [`TokenStore::save`]; a missing file is an
    /// empty store.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, TokenError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::new()),
            Err(source) => {
                return Err(TokenError::Io {
                    path: shown,
                    source,
                })
            }
        };
        let file: TokenFile = serde_json::from_slice(&bytes).map_err(|e| TokenError::Format {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        let mut store = Self::new();
        for t in file.tokens {
            let hash = TokenHash::from_hex(&t.hash).ok_or_else(|| TokenError::Format {
                path: shown.clone(),
                message: format!("token {:?} has no valid hash", t.name),
            })?;
            let expires = match &t.expires_at {
                None => None,
                Some(at) => Some(parse_rfc3339_secs(at).ok_or_else(|| TokenError::Format {
                    path: shown.clone(),
                    message: format!("token {:?} has no valid expires_at {at:?}", t.name),
                })?),
            };
            store.tokens.push((
                hash,
                Principal {
                    name: t.name,
                    role: t.role,
                },
                t.created_at,
                expires,
            ));
        }
        Ok(store)
    }

    /// Writes the store to `path` atomically (a temporary file in the same
    /// directory, synced, mode 0600, renamed over `path`).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), TokenError> {
        let path = path.as_ref();
        let io = |source| TokenError::Io {
            path: path.display().to_string(),
            source,
        };
        let body = serde_json::to_vec_pretty(&TokenFile {
            tokens: self.list(),
        })
        .map_err(|e| TokenError::Format {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "tokens.json".into());
        let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let result = (|| {
            let mut f = options.open(&tmp)?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            }
            f.write_all(&body)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            if let Ok(d) = std::fs::File::open(dir) {
                // Best effort: makes the rename durable where supported.
                let _ = d.sync_all();
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map_err(io)
    }

    /// The caller holding `presented`, if it matches a stored hash.
    ///
    /// Every stored hash is compared, in constant time each, whether or not
    /// an earlier one matched.
    pub fn authenticate(&self, presented: &str) -> Option<&Principal> {
        self.authenticate_hash(&TokenHash::of(presented))
    }

    /// The caller whose token hashes to `hash` (constant time per stored
    /// hash, as [`TokenStore::authenticate`]).
    fn authenticate_hash(&self, hash: &TokenHash) -> Option<&Principal> {
        let now = now_secs();
        self.tokens
            .iter()
            .fold(None, |found, (stored, who, _, expires)| {
                let matches = stored == hash;
                // An expired token is refused like a revoked one (and ends the
                // streams it holds, which look again).
                let live = expires.is_none_or(|e| now < e);
                found.or((matches && live).then_some(who))
            })
    }
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn rfc3339_secs(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| secs.to_string())
}

fn parse_rfc3339_secs(s: &str) -> Option<i64> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.unix_timestamp())
}

/// Failed authentications per client address: after
/// [`FAILED_AUTH_LIMIT`] in [`FAILED_AUTH_WINDOW`], the address is answered
/// 429 until the window has passed (security review finding 17: guessing
/// tokens is not realistic, but a client looping on a revoked one should
/// cost the service nothing).
#[derive(Debug)]
pub struct FailedAuth {
    by_addr: Mutex<std::collections::HashMap<std::net::IpAddr, (Instant, u32)>>,
    /// Failures allowed per window (0: no limit).
    limit: u32,
}

impl Default for FailedAuth {
    fn default() -> Self {
        FailedAuth {
            by_addr: Mutex::new(std::collections::HashMap::new()),
            limit: FAILED_AUTH_LIMIT,
        }
    }
}

/// Failed authentications an address may make per window.
pub const FAILED_AUTH_LIMIT: u32 = 100;
/// The window of [`FAILED_AUTH_LIMIT`].
pub const FAILED_AUTH_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

impl FailedAuth {
    /// Seconds until `addr` may try again, when it is over the limit.
    fn blocked(&self, addr: std::net::IpAddr) -> Option<u64> {
        let map = self
            .by_addr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (since, n) = map.get(&addr)?;
        let left = FAILED_AUTH_WINDOW.checked_sub(since.elapsed())?;
        (self.limit > 0 && *n >= self.limit).then(|| left.as_secs().max(1))
    }

    fn failed(&self, addr: std::net::IpAddr) {
        let mut map = self
            .by_addr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() > 10_000 {
            map.retain(|_, (since, _)| since.elapsed() < FAILED_AUTH_WINDOW);
        }
        let entry = map.entry(addr).or_insert((Instant::now(), 0));
        if entry.0.elapsed() >= FAILED_AUTH_WINDOW {
            *entry = (Instant::now(), 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

/// How often [`LiveTokens`] looks at its file at most.
const TOKEN_FILE_CHECK_EVERY: Duration = Duration::from_secs(1);

/// What tells that the token file changed: replaced (inode), rewritten
/// (modification time, size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    ino: u64,
    mtime_ns: i64,
    len: u64,
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            ino: m.ino(),
            mtime_ns: m.mtime().saturating_mul(1_000_000_000) + m.mtime_nsec(),
            len: m.len(),
        })
    }
}

/// The tokens a running server accepts. Made from a file, it re-reads the
/// file when its inode, modification time or size changed, looking at most
/// once a second (on a request; no thread of its own). A file that cannot
/// be read or parsed keeps the tokens in memory, with a warning, so a file
/// broken by hand never locks everybody out (`vouch token` replaces it
/// atomically, so it never leaves one half-written).
#[derive(Debug)]
pub struct LiveTokens {
    current: RwLock<Arc<TokenStore>>,
    file: Option<PathBuf>,
    stamp: Mutex<Option<FileStamp>>,
    started: Instant,
    /// Milliseconds after `started` before which the file is not looked at.
    next_check_ms: AtomicU64,
    /// Failed authentications per client address.
    failures: FailedAuth,
    /// When and from where each token was last used.
    pub(crate) usage: Arc<crate::token_usage::TokenUsage>,
}

impl LiveTokens {
    /// Tokens that never change (tests, embedded servers).
    pub fn fixed(store: TokenStore) -> Self {
        LiveTokens {
            current: RwLock::new(Arc::new(store)),
            file: None,
            stamp: Mutex::new(None),
            started: Instant::now(),
            next_check_ms: AtomicU64::new(0),
            failures: FailedAuth::default(),
            usage: Arc::default(),
        }
    }

    /// Tokens read from `path` (as [`TokenStore::load`]), followed; their
    /// last uses are kept beside it ([`crate::token_usage::USAGE_FILE`]).
    pub fn from_file(path: impl Into<PathBuf>) -> Result<Self, TokenError> {
        let path = path.into();
        let stamp = FileStamp::of(&path);
        let store = TokenStore::load(&path)?;
        let usage =
            crate::token_usage::TokenUsage::at(path.with_file_name(crate::token_usage::USAGE_FILE));
        Ok(LiveTokens {
            current: RwLock::new(Arc::new(store)),
            file: Some(path),
            stamp: Mutex::new(stamp),
            started: Instant::now(),
            next_check_ms: AtomicU64::new(0),
            failures: FailedAuth::default(),
            usage: Arc::new(usage),
        })
    }

    /// Writes the tokens' last uses if they changed (see
    /// [`crate::token_usage`]).
    pub fn flush_usage(&self) {
        if let Err(e) = self.usage.flush() {
            tracing::warn!(error = %e, "the tokens' last uses could not be written");
        }
    }

    /// At most `limit` rejected tokens per client address a minute, then
    /// 429 for the rest of the minute (default [`FAILED_AUTH_LIMIT`]; 0: no
    /// limit).
    pub fn with_failed_auth_limit(mut self, limit: u32) -> Self {
        self.failures.limit = limit;
        self
    }

    /// The tokens as they are now (after looking at the file, if due).
    pub fn current(&self) -> Arc<TokenStore> {
        self.refresh();
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The caller holding `presented` (see [`TokenStore::authenticate`]).
    pub fn authenticate(&self, presented: &str) -> Option<Principal> {
        self.current().authenticate(presented).cloned()
    }

    /// Changes the tokens: `change` gets the newest store (the file's, read
    /// again, when the tokens follow one) and what it leaves is saved and
    /// in force at once. One change at a time in this process; the file is
    /// replaced atomically, as `vouch token` does.
    pub fn update<T>(
        &self,
        change: impl FnOnce(&mut TokenStore) -> Result<T, TokenError>,
    ) -> Result<T, TokenError> {
        let mut seen = self.stamp.lock().unwrap_or_else(PoisonError::into_inner);
        let mut store = match &self.file {
            Some(path) => TokenStore::load(path)?,
            None => (**self.current.read().unwrap_or_else(PoisonError::into_inner)).clone(),
        };
        let out = change(&mut store)?;
        if let Some(path) = &self.file {
            store.save(path)?;
            *seen = FileStamp::of(path);
        }
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(store);
        Ok(out)
    }

    /// Whether the token hashing to `hash` is still accepted as `who`
    /// (not revoked, not re-created with another role).
    fn still_accepts(&self, hash: &TokenHash, who: &Principal) -> bool {
        self.current().authenticate_hash(hash) == Some(who)
    }

    fn refresh(&self) {
        let Some(path) = &self.file else { return };
        let now_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let due = self.next_check_ms.load(Ordering::Relaxed);
        let next = now_ms.saturating_add(TOKEN_FILE_CHECK_EVERY.as_millis() as u64);
        // One request looks; the others go on with what is in memory.
        if now_ms < due
            || self
                .next_check_ms
                .compare_exchange(due, next, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let stamp = FileStamp::of(path);
        let mut seen = self.stamp.lock().unwrap_or_else(PoisonError::into_inner);
        if stamp == *seen {
            return;
        }
        match TokenStore::load(path) {
            Ok(store) => {
                let n = store.tokens.len();
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(store);
                *seen = stamp;
                tracing::info!(path = %path.display(), tokens = n, "token file changed; tokens reloaded");
            }
            Err(e) => {
                // Looked at again once it changes again.
                *seen = stamp;
                tracing::warn!(error = %e, "the token file changed but cannot be read; the tokens in memory stay in force");
            }
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header value.
fn bearer_token(req: &ServiceRequest) -> Result<&str, WebError> {
    let value = req
        .headers()
        .get(AUTHORIZATION)
        .ok_or(WebError::Unauthorized("missing bearer token"))?
        .to_str()
        .map_err(|_| WebError::Unauthorized("malformed Authorization header"))?;
    // HTTP strips trailing spaces, so `Bearer ` arrives as `Bearer`.
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    // The auth scheme is case-insensitive (RFC 9110, section 11.1).
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(WebError::Unauthorized("expected a Bearer token"));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(WebError::Unauthorized("missing bearer token"));
    }
    Ok(token)
}

/// The one route a [`Role::Metrics`] token may use.
pub const METRICS_PATH: &str = "/metrics";

/// The one route an enrollment token may call.
pub const REGISTER_PATH: &str = "/api/v1/agent/register";

/// Where the repository protocol lives (`/repo/v1/{repo}/...`).
pub const REPO_PROTOCOL_PREFIX: &str = "/repo/v1/";

/// The refusal of a request to `path` by a role confined to a few routes
/// (metrics, enrollment and append-only tokens); `None` when it may go on
/// to the handler, which checks the rest.
fn outside_role(who: &Principal, path: &str) -> Option<WebError> {
    match who.role {
        Role::Metrics if path != METRICS_PATH => Some(WebError::Forbidden(format!(
            "a metrics token may only read {METRICS_PATH}"
        ))),
        Role::Enroll if path != REGISTER_PATH => Some(WebError::Forbidden(format!(
            "an enrollment token may only register an agent ({REGISTER_PATH})"
        ))),
        Role::Append if !path.starts_with(REPO_PROTOCOL_PREFIX) && path != "/api/v1/whoami" => {
            Some(WebError::Forbidden(format!(
                "an append-only token may only use the repository protocol ({REPO_PROTOCOL_PREFIX}...)"
            )))
        }
        _ => None,
    }
}

/// Middleware (for `middleware::from_fn`) that lets a request through only
/// with a valid bearer token, and records its [`Principal`] in the request
/// extensions.
pub async fn require_token(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let store = req
        .app_data::<web::Data<LiveTokens>>()
        .ok_or(WebError::Misconfigured("no token store"))?;
    let peer = req.peer_addr().map(|a| a.ip());
    if let Some(wait) = peer.and_then(|ip| store.failures.blocked(ip)) {
        return Err(WebError::TooManyRequests(format!(
            "too many failed authentications from this address; try again in {wait} s"
        ))
        .into());
    }
    let token = bearer_token(&req)?;
    // Only a token presented and refused counts against the address (a
    // request without one guesses nothing).
    let principal = match store.authenticate(token) {
        Some(p) => p,
        None => {
            if let Some(ip) = peer {
                store.failures.failed(ip);
            }
            return Err(WebError::Unauthorized("unknown, expired or revoked token").into());
        }
    };
    store.usage.record(&principal.name, peer);
    if let Some(refusal) = outside_role(&principal, req.path()) {
        return Err(refusal.into());
    }
    let watch = TokenWatch {
        tokens: store.clone(),
        hash: TokenHash::of(token),
        principal: principal.clone(),
    };
    req.extensions_mut().insert(principal);
    req.extensions_mut().insert(watch);
    next.call(req).await
}

/// The token a request came with, to look again later: long answers
/// (event streams, downloads) end once it is revoked (see
/// [`TokenWatch::still_valid`]). Holds the token's hash, never the token.
#[derive(Clone)]
pub(crate) struct TokenWatch {
    tokens: web::Data<LiveTokens>,
    hash: TokenHash,
    principal: Principal,
}

impl TokenWatch {
    /// Whether the token is still accepted, as the same caller. The token
    /// file is looked at no more than once a second ([`LiveTokens`]), so
    /// this is cheap enough to call between chunks of a download.
    pub(crate) fn still_valid(&self) -> bool {
        self.tokens.still_accepts(&self.hash, &self.principal)
    }

    /// The name of the token, for logs and per-token limits.
    pub(crate) fn name(&self) -> &str {
        &self.principal.name
    }
}

impl fmt::Debug for TokenWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenWatch")
            .field("hash", &self.hash)
            .field("principal", &self.principal)
            .finish()
    }
}

impl FromRequest for TokenWatch {
    type Error = WebError;
    type Future = Ready<Result<Self, Self::Error>>;

    /// The token recorded by [`require_token`]; outside the protected
    /// scope, 401.
    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(
            req.extensions()
                .get::<TokenWatch>()
                .cloned()
                .ok_or(WebError::Unauthorized("missing bearer token")),
        )
    }
}

impl FromRequest for Principal {
    type Error = WebError;
    type Future = Ready<Result<Self, Self::Error>>;

    /// The caller recorded by [`require_token`]; a handler outside the
    /// protected scope gets 401.
    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(
            req.extensions()
                .get::<Principal>()
                .cloned()
                .ok_or(WebError::Unauthorized("missing bearer token")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> TokenStore {
        let mut s = TokenStore::new();
        s.insert(TokenHash::of("s3cret-admin"), "root", Role::Admin);
        s.insert(TokenHash::of("s3cret-viewer"), "dash", Role::Viewer);
        s
    }

    #[test]
    fn live_tokens_follow_their_file_and_keep_the_last_good_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tokens.json");
        let mut s = TokenStore::new();
        let admin = s.create("admin", Role::Admin).expect("create");
        s.save(&path).expect("save");
        let live = LiveTokens::from_file(&path).expect("live");
        assert!(live.authenticate(&admin).is_some());

        // A new token, written as `vouch token create` does.
        let viewer = s.create("dash", Role::Viewer).expect("create");
        s.save(&path).expect("save");
        let until = Instant::now() + Duration::from_secs(10);
        while live.authenticate(&viewer).is_none() {
            assert!(Instant::now() < until, "the new token was never picked up");
            std::thread::sleep(Duration::from_millis(50));
        }

        // A broken file keeps what was in force.
        std::fs::write(&path, b"{ not json").expect("break");
        std::thread::sleep(TOKEN_FILE_CHECK_EVERY + Duration::from_millis(100));
        assert!(live.authenticate(&admin).is_some());
        assert!(live.authenticate(&viewer).is_some());

        // Revocation.
        assert!(s.revoke("dash"));
        s.save(&path).expect("save");
        let until = Instant::now() + Duration::from_secs(10);
        while live.authenticate(&viewer).is_some() {
            assert!(Instant::now() < until, "the revoked token stayed valid");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(live.authenticate(&admin).is_some());
        assert!(LiveTokens::fixed(store())
            .authenticate("s3cret-admin")
            .is_some());
    }

    #[test]
    fn authenticates_by_hash() {
        let s = store();
        assert_eq!(
            s.authenticate("s3cret-admin").map(|p| p.role),
            Some(Role::Admin)
        );
        assert_eq!(
            s.authenticate("s3cret-viewer").map(|p| p.name.as_str()),
            Some("dash")
        );
        assert_eq!(s.authenticate("s3cret-admin "), None);
        assert_eq!(s.authenticate(""), None);
        assert_eq!(TokenStore::new().authenticate("s3cret-admin"), None);
    }

    /// Changing the derivation would invalidate every stored token.
    const GOLDEN_S3CRET_ADMIN: &str =
        "e47ba852278f868c42c403f6656bb5e78e1aae0bba46f5e57442c9876b5cf411";

    #[test]
    fn hash_round_trips_through_hex_and_is_pinned() {
        let h = TokenHash::of("s3cret-admin");
        let hex = h.to_hex();
        assert_eq!(hex, GOLDEN_S3CRET_ADMIN);
        assert_eq!(TokenHash::from_hex(&hex), Some(h.clone()));
        assert_eq!(TokenHash::from_hex("zz"), None);
        // Not a plain BLAKE3 of the token: the context separates it.
        assert_ne!(hex, blake3::hash(b"s3cret-admin").to_hex().to_string());
        assert!(!format!("{h:?}").contains(&hex));
    }

    #[test]
    fn tokens_persist_hashed_with_mode_0600_and_revoke() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("tokens.json");
        let mut s = TokenStore::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(s.is_empty());
        let t = s
            .create("ops", Role::Operator)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(t.starts_with(TOKEN_PREFIX) && t.len() == TOKEN_PREFIX.len() + 64);
        assert!(matches!(
            s.create("ops", Role::Viewer),
            Err(TokenError::NameTaken(_))
        ));
        assert!(matches!(
            s.create("a b", Role::Viewer),
            Err(TokenError::BadName(_))
        ));
        s.save(&path).unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(!text.contains(&t), "the token itself must not be stored");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path)
                .map(|m| m.permissions().mode())
                .unwrap_or(0);
            assert_eq!(mode & 0o777, 0o600);
        }
        let mut back = TokenStore::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.list(), s.list());
        assert_eq!(back.authenticate(&t).map(|p| p.role), Some(Role::Operator));
        assert!(back.revoke("ops"));
        assert!(!back.revoke("ops"));
        assert_eq!(back.authenticate(&t), None);
    }

    #[test]
    fn agents_see_only_their_sources() {
        let p = Principal {
            name: "web-1".into(),
            role: Role::Agent,
        };
        assert!(p.sees_source("agent:web-1:/etc"));
        assert!(!p.sees_source("agent:web-10:/etc"));
        assert!(!p.sees_source("/etc"));
        let v = Principal {
            name: "x".into(),
            role: Role::Viewer,
        };
        assert!(v.sees_source("/etc"));
        assert!(v.require_write().is_err());
    }
}
