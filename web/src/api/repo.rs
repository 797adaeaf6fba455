//! The repository protocol, `/repo/v1/{repo}/...` (docs/agents.md): what
//! lets an agent, or `vouch backup --repo https://...`, use a repository
//! the service serves as if it were local. These handlers decide who may
//! do what; the [`RepoStore`] checks what is written.
//!
//! | caller | may |
//! |---|---|
//! | admin | everything, in every served repository |
//! | agent `NAME` | its own repository `agent-NAME` only: read; add packs, indexes, snapshots and shared locks, and remove its shared locks, while a lease of its is current (`X-Vouch-Lease`) |
//! | append | every served repository but agents': read; add; remove shared locks |
//! | any other role | nothing |
//!
//! Refusals of 403 and 409 are recorded as `audit.refused` (at most one
//! per caller and action every [`REFUSAL_RECORD_EVERY`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix_web::http::header;
use actix_web::web::{self, Bytes, BytesMut};
use actix_web::{HttpRequest, HttpResponse};
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use vouch_events::sources::agent_repository;
use vouch_events::AccessRefused;

use super::Ctx;
use crate::auth::{Principal, Role};
use crate::error::{doc as errors, WebError};
use crate::repo_store::{PutOutcome, PutRules, RepoFile, RepoStore, RepoStoreError};

/// The header an agent's writes carry: the fencing token of its lease.
pub const LEASE_HEADER: &str = "x-vouch-lease";
/// `now` on an upload: durable before the answer (else at the next sync).
pub const SYNC_HEADER: &str = "x-vouch-sync";
/// A file's last write, nanoseconds since the Unix epoch (HEAD answers).
pub const MODIFIED_HEADER: &str = "x-vouch-modified-unix-ns";
/// A file's size in bytes (HEAD answers; also in `Content-Length`).
pub const SIZE_HEADER: &str = "x-vouch-size";
/// Names per `missing` request at most.
pub const MAX_MISSING: usize = 10_000;
/// How often one caller's refusals of one action are recorded at most.
pub const REFUSAL_RECORD_EVERY: Duration = Duration::from_secs(10);

/// When each (caller, action) last had a refusal recorded.
#[derive(Debug, Default)]
pub(crate) struct RefusalLimiter(Mutex<HashMap<(String, String), Instant>>);

impl RefusalLimiter {
    fn admit(&self, who: &str, action: &str) -> bool {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if m.len() > 10_000 {
            m.retain(|_, at| now.duration_since(*at) < REFUSAL_RECORD_EVERY);
        }
        let key = (who.to_owned(), action.to_owned());
        match m.get(&key) {
            Some(at) if now.duration_since(*at) < REFUSAL_RECORD_EVERY => false,
            _ => {
                m.insert(key, now);
                true
            }
        }
    }
}

/// Records (rate-limited) and returns a refusal.
pub(crate) async fn refuse(
    ctx: &Ctx,
    who: &Principal,
    action: &str,
    target: &str,
    error: WebError,
) -> WebError {
    tracing::warn!(principal = %who.name, role = %who.role, action, target, reason = %error, "refused");
    if ctx.refusals.admit(&who.name, action) {
        if let Ok(service) = ctx.service() {
            let event = AccessRefused {
                principal: who.name.clone(),
                role: who.role.as_str().to_owned(),
                action: action.to_owned(),
                target: target.to_owned(),
                reason: error.to_string(),
            };
            if let Err(e) = service.append(vec![event.into()]).await {
                tracing::warn!(error = %e, "a refusal could not be recorded");
            }
        }
    }
    error
}

/// What a caller may do, found by [`authorize`].
struct Granted {
    rules: PutRules,
    /// An agent's lease: (agent, fencing token).
    lease: Option<(String, u64)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    Delete,
    Sync,
}

impl Op {
    fn action(self) -> &'static str {
        match self {
            Op::Read => "repo.read",
            Op::Write => "repo.put",
            Op::Delete => "repo.delete",
            Op::Sync => "repo.sync",
        }
    }
}

fn store(ctx: &Ctx) -> Result<std::sync::Arc<dyn RepoStore>, WebError> {
    ctx.repo_store
        .clone()
        .ok_or_else(|| WebError::Unavailable("this service serves no repository protocol".into()))
}

/// Who may do `op` in `repo`, with which rules; refusals are recorded.
async fn authorize(
    ctx: &Ctx,
    who: &Principal,
    req: &HttpRequest,
    repo: &str,
    op: Op,
    target: &str,
) -> Result<Granted, WebError> {
    let verdict = check(ctx, who, req, repo, op);
    match verdict {
        Ok(g) => Ok(g),
        Err(e @ (WebError::Forbidden(_) | WebError::Conflict(_))) => {
            Err(refuse(ctx, who, op.action(), target, e).await)
        }
        Err(e) => Err(e),
    }
}

fn check(
    ctx: &Ctx,
    who: &Principal,
    req: &HttpRequest,
    repo: &str,
    op: Op,
) -> Result<Granted, WebError> {
    match who.role {
        Role::Admin => Ok(Granted {
            rules: PutRules::default(),
            lease: None,
        }),
        Role::Append => {
            if repo.starts_with("agent-") {
                return Err(WebError::Forbidden(format!(
                    "repository {repo:?} is an agent's own; an append-only token may not use it"
                )));
            }
            Ok(Granted {
                rules: PutRules {
                    append_only: true,
                    ..PutRules::default()
                },
                lease: None,
            })
        }
        Role::Agent => {
            let own = agent_repository(&who.name);
            if repo != own {
                return Err(WebError::Forbidden(format!(
                    "agent {} may use only its own repository {own:?}, not {repo:?}",
                    who.name
                )));
            }
            let mut granted = Granted {
                rules: PutRules {
                    append_only: true,
                    ..PutRules::default()
                },
                lease: None,
            };
            if op != Op::Read {
                let fence = lease_of(req)?;
                let board = ctx
                    .agents
                    .as_ref()
                    .ok_or_else(|| WebError::Unavailable("this service takes no agents".into()))?;
                let lease = board
                    .check(&who.name, fence)
                    .map_err(|e| WebError::Conflict(e.to_string()))?;
                granted.rules.expect_tag = Some(lease.job.tag);
                granted.lease = Some((who.name.clone(), fence));
            }
            Ok(granted)
        }
        role => Err(WebError::Forbidden(format!(
            "a token with role {role} may not use the repository protocol"
        ))),
    }
}

/// The fencing token an agent's request carries.
fn lease_of(req: &HttpRequest) -> Result<u64, WebError> {
    let value = req.headers().get(LEASE_HEADER).ok_or_else(|| {
        WebError::Conflict(format!(
            "an agent writes only under a lease: send its fencing token in {LEASE_HEADER}"
        ))
    })?;
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| WebError::BadRequest(format!("{LEASE_HEADER} is not a fencing token")))
}

fn kind_of(segment: &str) -> Result<RepoFile, WebError> {
    RepoFile::from_segment(segment).ok_or_else(|| {
        WebError::NotFound(format!(
            "no file kind {segment:?}: expected config, owner, keys, data, index, snapshots or locks"
        ))
    })
}

fn store_error(e: RepoStoreError) -> WebError {
    match e {
        RepoStoreError::NoRepository(_) | RepoStoreError::NotFound(_) => {
            WebError::NotFound(e.to_string())
        }
        RepoStoreError::Invalid(m) => WebError::BadRequest(m),
        RepoStoreError::Refused(m) => WebError::Conflict(m),
        RepoStoreError::Unavailable(m) => WebError::Unavailable(m),
    }
}

/// Runs a store call on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RepoStoreError> + Send + 'static,
) -> Result<T, WebError> {
    web::block(f)
        .await
        .map_err(|e| WebError::Internal(e.to_string()))?
        .map_err(store_error)
}

/// A file of the listing of a kind.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileEntry {
    /// Its name (64 hex digits).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
}

/// A kind of named repository file.
#[derive(Debug, Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NamedKind {
    /// `keys/`.
    Keys,
    /// `data/`: packs.
    Data,
    /// `index/`.
    Index,
    /// `snapshots/`.
    Snapshots,
    /// `locks/`.
    Locks,
    /// `pointlocks/`: snapshots' locks until a date.
    Pointlocks,
}

impl NamedKind {
    fn file(self) -> RepoFile {
        match self {
            NamedKind::Keys => RepoFile::Key,
            NamedKind::Data => RepoFile::Pack,
            NamedKind::Index => RepoFile::Index,
            NamedKind::Snapshots => RepoFile::Snapshot,
            NamedKind::Locks => RepoFile::Lock,
            NamedKind::Pointlocks => RepoFile::PointLock,
        }
    }
}

/// A repository file's name.
#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[schema(value_type = String, pattern = "^[0-9a-f]{64}$")]
pub struct FileName(pub String);

/// The body of `POST /repo/v1/{repo}/missing`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MissingInput {
    /// The kind of the files.
    pub kind: NamedKind,
    /// Their names, at most 10,000.
    #[schema(max_items = 10000)]
    pub names: Vec<FileName>,
}

/// The answer of `POST /repo/v1/{repo}/missing`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MissingAnswer {
    /// The names asked about that the repository does not hold.
    pub missing: Vec<String>,
}

/// The body of `POST /repo/v1/{repo}/sync`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SyncInput {
    /// Also make the deletions of files of this kind durable.
    #[serde(default)]
    pub deletes: Option<NamedKind>,
}

/// The answer of an upload.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PutAnswer {
    /// `written`, or `present` when a file of that name (and so, for
    /// content-addressed kinds, of those bytes) was there already.
    pub outcome: String,
}

fn octets(bytes: Vec<u8>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/octet-stream")
        .body(bytes)
}

/// A listing of the files of a kind, or the one file `config` or `owner`.
#[utoipa::path(get, path = "/repo/v1/{repo}/{kind}", tag = "repository protocol",
    params(("repo" = String, Path, description = "a served repository's id"),
        ("kind" = String, Path, description = "config, owner, keys, data, index, snapshots or locks")),
    responses((status = 200, description = "config and owner: the file's bytes; other kinds: the names and sizes of their files",
            body = Vec<FileEntry>),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 503, response = errors::Unavailable),
        (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn get_kind(
    ctx: web::Data<Ctx>,
    who: Principal,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, WebError> {
    let (repo, segment) = path.into_inner();
    let kind = kind_of(&segment)?;
    authorize(
        &ctx,
        &who,
        &req,
        &repo,
        Op::Read,
        &format!("{repo}/{segment}"),
    )
    .await?;
    let store = store(&ctx)?;
    if kind.is_named() {
        let files = blocking(move || store.list(&repo, kind)).await?;
        let body: Vec<FileEntry> = files
            .into_iter()
            .map(|(name, size)| FileEntry { name, size })
            .collect();
        Ok(HttpResponse::Ok().json(body))
    } else {
        Ok(octets(
            blocking(move || store.read(&repo, kind, "", None)).await?,
        ))
    }
}

/// Whether `config` or `owner` exists, and its size.
#[utoipa::path(head, path = "/repo/v1/{repo}/{kind}", tag = "repository protocol",
    params(("repo" = String, Path, description = "a served repository's id"),
        ("kind" = String, Path, description = "config or owner")),
    responses((status = 200, description = "it exists: `Content-Length` is its size"),
        (status = 400, description = "not a single file"), (status = 403, description = "forbidden"),
        (status = 404, description = "no such file or repository")),
    security(("bearer" = [])))]
pub(crate) async fn head_kind(
    ctx: web::Data<Ctx>,
    who: Principal,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, WebError> {
    let (repo, segment) = path.into_inner();
    let kind = kind_of(&segment)?;
    if kind.is_named() {
        return Err(WebError::BadRequest(format!(
            "{segment} is a list: HEAD a file of it"
        )));
    }
    head(ctx, who, req, repo, kind, String::new()).await
}

/// A whole file, or with `Range: bytes=A-B` a part of it (206).
#[utoipa::path(get, path = "/repo/v1/{repo}/{kind}/{name}", tag = "repository protocol",
    params(("repo" = String, Path, description = "a served repository's id"),
        ("kind" = String, Path, description = "keys, data, index, snapshots or locks"),
        ("name" = String, Path, description = "the file's name, 64 lower-case hex digits")),
    responses((status = 200, description = "the file", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 206, description = "the range asked for", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 503, response = errors::Unavailable),
        (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn get_file(
    ctx: web::Data<Ctx>,
    who: Principal,
    req: HttpRequest,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, WebError> {
    let (repo, segment, name) = path.into_inner();
    let kind = named_kind(&segment)?;
    authorize(
        &ctx,
        &who,
        &req,
        &repo,
        Op::Read,
        &format!("{repo}/{segment}/{name}"),
    )
    .await?;
    let range = range_of(&req)?;
    let store = store(&ctx)?;
    let bytes = blocking(move || store.read(&repo, kind, &name, range)).await?;
    Ok(match range {
        None => octets(bytes),
        Some((offset, _)) => {
            let end = offset + bytes.len() as u64;
            HttpResponse::PartialContent()
                .content_type("application/octet-stream")
                .insert_header((
                    header::CONTENT_RANGE,
                    format!("bytes {offset}-{}/*", end.saturating_sub(1)),
                ))
                .body(bytes)
        }
    })
}

fn named_kind(segment: &str) -> Result<RepoFile, WebError> {
    let kind = kind_of(segment)?;
    if !kind.is_named() {
        return Err(WebError::NotFound(format!(
            "{segment} is one file: use /repo/v1/{{repo}}/{segment}"
        )));
    }
    Ok(kind)
}

/// `Range: bytes=A-B` as (offset, length); none without the header.
fn range_of(req: &HttpRequest) -> Result<Option<(u64, u64)>, WebError> {
    let Some(value) = req.headers().get(header::RANGE) else {
        return Ok(None);
    };
    let bad = || WebError::BadRequest("Range must be one `bytes=A-B` (B >= A)".into());
    let spec = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().strip_prefix("bytes="))
        .ok_or_else(bad)?;
    let (a, b) = spec.split_once('-').ok_or_else(bad)?;
    let (a, b): (u64, u64) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if b < a || b - a >= 1 << 31 {
        return Err(bad());
    }
    Ok(Some((a, b - a + 1)))
}

/// Whether a file exists: its size in `Content-Length` and its last write
/// in `X-Vouch-Modified-Unix-Ns`.
#[utoipa::path(head, path = "/repo/v1/{repo}/{kind}/{name}", tag = "repository protocol",
    params(("repo" = String, Path, description = "a served repository's id"),
        ("kind" = String, Path, description = "keys, data, index, snapshots or locks"),
        ("name" = String, Path, description = "the file's name, 64 lower-case hex digits")),
    responses((status = 200, description = "it exists"),
        (status = 400, description = "a malformed name"), (status = 403, description = "forbidden"),
        (status = 404, description = "no such file or repository")),
    security(("bearer" = [])))]
pub(crate) async fn head_file(
    ctx: web::Data<Ctx>,
    who: Principal,
    req: HttpRequest,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, WebError> {
    let (repo, segment, name) = path.into_inner();
    let kind = named_kind(&segment)?;
    head(ctx, who, req, repo, kind, name).await
}

async fn head(
    ctx: web::Data<Ctx>,
    who: Principal,
    req: HttpRequest,
    repo: String,
    kind: RepoFile,
    name: String,
) -> Result<HttpResponse, WebError> {
    let target = format!("{repo}/{}/{name}", kind.segment());
    authorize(&ctx, &who, &req, &repo, Op::Read, &target).await?;
    let store = store(&ctx)?;
    let stat = blocking(move || store.stat(&repo, kind, &name)).await?;
    let stat = stat.ok_or_else(|| WebError::NotFound(format!("no file {target}")))?;
    let mut answer = HttpResponse::Ok();
    answer.insert_header((SIZE_HEADER, stat.size.to_string()));
    if let Some(ns) = stat.modified_unix_ns {
        answer.insert_header((MODIFIED_HEADER, ns.to_string()));
    }
    Ok(answer.finish())
}

/// Stores a file. Packs, indexes and snapshots must be named by the BLAKE3
/// of their bytes (an existing name answers `present` without writing); a
/// snapshot is accepted only if every blob it references is stored.
/// Agents send their lease's fencing token in `X-Vouch-Lease`;
/// `X-Vouch-Sync: now` makes the file durable before the answer.
#[utoipa::path(put, path = "/repo/v1/{repo}/{kind}/{name}", tag = "repository protocol",
    params(("repo" = String, Path, description = "a served repository's id"),
        ("kind" = String, Path, description = "keys, data, index, snapshots or locks"),
        ("name" = String, Path, description = "the file's name, 64 lower-case hex digits")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 200, body = PutAnswer),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 409, response = errors::Conflict),
        (status = 413, response = errors::PayloadTooLarge), (status = 503, response = errors::Unavailable),
        (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn put_file(
    ctx: web::Data<Ctx>,
    who: Principal,
    req: HttpRequest,
    path: web::Path<(String, String, String)>,
    payload: web::Payload,
) -> Result<HttpResponse, WebError> {
    let (repo, segment, name) = path.into_inner();
    let kind = named_kind(&segment)?;
    let target = format!("{repo}/{segment}/{name}");
    let granted = authorize(&ctx, &who, &req, &repo, Op::Write, &target).await?;
    let store = store(&ctx)?;
    let limit = {
        let (s, r) = (store.clone(), repo.clone());
        blocking(move || s.max_upload(&r)).await?
    };
    let _permit = ctx.limits.upload().await?;
    let body = read_body(payload, limit).await?;
    let mut rules = granted.rules;
    rules.durable = req
        .headers()
        .get(SYNC_HEADER)
        .is_some_and(|v| v.as_bytes() == b"now");
    let (r, n) = (repo.clone(), name.clone());
    let s = store.clone();
    let result = blocking(move || s.put(&r, kind, &n, &body, &rules)).await;
    let (outcome, facts) = match result {
        Ok(v) => v,
        Err(e @ WebError::Conflict(_)) => {
            return Err(refuse(&ctx, &who, Op::Write.action(), &target, e).await)
        }
        Err(e) => return Err(e),
    };
    if let (Some(facts), Some((agent, fence))) = (&facts, &granted.lease) {
        if let Some(board) = &ctx.agents {
            // Timed by this server's clock: an agent's clock may be skewed,
            // and retention and freshness must not follow it.
            let accepted = ctx
                .service()
                .map_or(facts.time_unix_ns, |s| s.now_unix_ns());
            let committed = vouch_actors::service::Committed {
                id: facts.id.clone(),
                time_unix_ns: accepted,
                files: facts.files,
                bytes: facts.bytes,
                added_bytes: facts.added_bytes,
                total_bytes: Some(facts.total_bytes),
                warnings: Some(facts.warnings),
            };
            if let Err(e) = board.committed(agent, *fence, committed) {
                // The lease ended while the snapshot was checked: it stays
                // (it is complete), but no result may claim it.
                return Err(refuse(
                    &ctx,
                    &who,
                    Op::Write.action(),
                    &target,
                    WebError::Conflict(e.to_string()),
                )
                .await);
            }
        }
    }
    Ok(HttpResponse::Ok().json(PutAnswer {
        outcome: match outcome {
            PutOutcome::Written => "written".into(),
            PutOutcome::AlreadyPresent => "present".into(),
        },
    }))
}

/// Reads a body of at most `limit` bytes.
async fn read_body(mut payload: web::Payload, limit: u64) -> Result<Vec<u8>, WebError> {
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk: Bytes = chunk.map_err(|e| WebError::BadRequest(format!("upload cut: {e}")))?;
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(WebError::PayloadTooLarge(format!(
                "uploads to this repository are at most {limit} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.to_vec())
}

/// Removes a file: admins anything; others only their shared locks.
#[utoipa::path(delete, path = "/repo/v1/{repo}/{kind}/{name}", tag = "repository protocol",
    params(("repo" = String, Path, description = "a served repository's id"),
        ("kind" = String, Path, description = "keys, data, index, snapshots or locks"),
        ("name" = String, Path, description = "the file's name, 64 lower-case hex digits")),
    responses((status = 204, description = "removed (or was not there)"),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 409, response = errors::Conflict),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn delete_file(
    ctx: web::Data<Ctx>,
    who: Principal,
    req: HttpRequest,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, WebError> {
    let (repo, segment, name) = path.into_inner();
    let kind = named_kind(&segment)?;
    let target = format!("{repo}/{segment}/{name}");
    let granted = authorize(&ctx, &who, &req, &repo, Op::Delete, &target).await?;
    let store = store(&ctx)?;
    let append_only = granted.rules.append_only;
    if append_only && kind != RepoFile::Lock {
        return Err(refuse(
            &ctx,
            &who,
            Op::Delete.action(),
            &target,
            WebError::Forbidden(format!(
                "a token with role {} never deletes {segment} (append-only: prune runs on the server)",
                who.role
            )),
        )
        .await);
    }
    match blocking(move || store.delete(&repo, kind, &name, append_only)).await {
        Ok(()) => Ok(HttpResponse::NoContent().finish()),
        Err(e @ WebError::Conflict(_)) => {
            Err(refuse(&ctx, &who, Op::Delete.action(), &target, e).await)
        }
        Err(e) => Err(e),
    }
}

/// Of the names given, those the repository lacks: what a client still
/// has to upload (an interrupted backup asks this for the packs it sent).
#[utoipa::path(post, path = "/repo/v1/{repo}/missing", tag = "repository protocol",
    params(("repo" = String, Path, description = "a served repository's id")),
    request_body = MissingInput,
    responses((status = 200, body = MissingAnswer),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 413, response = errors::PayloadTooLarge),
        (status = 415, response = errors::UnsupportedMediaType),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn missing(
    ctx: web::Data<Ctx>,
    who: Principal,
    req: HttpRequest,
    repo: web::Path<String>,
    body: web::Json<MissingInput>,
) -> Result<HttpResponse, WebError> {
    let repo = repo.into_inner();
    let input = body.into_inner();
    let kind = input.kind.file();
    let names: Vec<String> = input.names.into_iter().map(|n| n.0).collect();
    if names.len() > MAX_MISSING {
        return Err(WebError::BadRequest(format!(
            "at most {MAX_MISSING} names per request"
        )));
    }
    authorize(
        &ctx,
        &who,
        &req,
        &repo,
        Op::Read,
        &format!("{repo}/missing"),
    )
    .await?;
    let store = store(&ctx)?;
    let missing = blocking(move || store.missing(&repo, kind, &names)).await?;
    Ok(HttpResponse::Ok().json(MissingAnswer { missing }))
}

/// Makes every upload so far durable (and the deletions of one kind).
#[utoipa::path(post, path = "/repo/v1/{repo}/sync", tag = "repository protocol",
    params(("repo" = String, Path, description = "a served repository's id")),
    request_body = SyncInput,
    responses((status = 204, description = "durable"),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 409, response = errors::Conflict),
        (status = 413, response = errors::PayloadTooLarge),
        (status = 415, response = errors::UnsupportedMediaType),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn sync(
    ctx: web::Data<Ctx>,
    who: Principal,
    req: HttpRequest,
    repo: web::Path<String>,
    body: web::Json<SyncInput>,
) -> Result<HttpResponse, WebError> {
    let repo = repo.into_inner();
    let deletes = body.deletes.map(NamedKind::file);
    authorize(&ctx, &who, &req, &repo, Op::Sync, &format!("{repo}/sync")).await?;
    let store = store(&ctx)?;
    blocking(move || store.sync(&repo, deletes)).await?;
    Ok(HttpResponse::NoContent().finish())
}
