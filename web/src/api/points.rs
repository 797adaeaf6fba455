//! Recovery points: list, detail with evidence and history, lock, files.

use actix_web::body::SizedStream;
use actix_web::http::header;
use actix_web::{web, HttpResponse};
use serde::Deserialize;
use tokio::sync::mpsc;
use utoipa::IntoParams;
use vouch_events::{PointLocked, PointUnlocked, SnapshotId};

use super::{download, grammar, limit, point_visible, ChannelBody, Ctx, PointIdParam, MAX_LIMIT};
use crate::auth::{Principal, TokenWatch};
use crate::error::{doc as errors, WebError};
use crate::views::{
    event_view, parse_point_state, parse_rfc3339, point_detail, point_view, rfc3339, EntryView,
    FileList, LockRequest, PointDetail, PointView, UnlockRequest,
};

fn point_state_schema() -> utoipa::openapi::Object {
    let states: Vec<&str> = crate::views::POINT_STATES
        .iter()
        .map(|s| s.as_str())
        .collect();
    grammar::enum_schema("Only points in this state.", &states)
}

/// Filters of `GET /api/v1/points`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct PointsQuery {
    /// Only points of this plan (an id no plan has matches nothing).
    #[param(value_type = String, required = false)]
    plan: Option<String>,
    /// Only points in this state.
    #[param(schema_with = point_state_schema, required = false)]
    state: Option<String>,
    /// At most this many (default 100).
    #[serde(default, deserialize_with = "grammar::query_limit")]
    #[param(schema_with = grammar::limit_schema, required = false)]
    limit: Option<usize>,
}

/// Recovery points, newest first.
#[utoipa::path(get, path = "/api/v1/points", operation_id = "list_points", tag = "points", params(PointsQuery),
    responses((status = 200, body = [PointView]), (status = 400, response = errors::BadRequest),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn list(
    ctx: web::Data<Ctx>,
    who: Principal,
    q: web::Query<PointsQuery>,
) -> Result<HttpResponse, WebError> {
    let q = q.into_inner();
    let state = match q.state.as_deref() {
        Some(s) => Some(
            parse_point_state(s)
                .ok_or_else(|| WebError::BadRequest(format!("unknown point state {s:?}")))?,
        ),
        None => None,
    };
    let n = limit(q.limit);
    let points = ctx
        .service()?
        .query(0, move |p| {
            // Already in the list's order (newest change first): the
            // read model stops after `n` matches instead of sorting them all.
            p.points
                .newest_first()
                .filter(|pt| state.is_none_or(|s| pt.state == s))
                .filter(|pt| {
                    q.plan
                        .as_deref()
                        .is_none_or(|pl| pt.plan.as_ref().is_some_and(|x| x.as_str() == pl))
                })
                .filter(|pt| point_visible(p, &who, pt))
                .take(n)
                .map(point_view)
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(HttpResponse::Ok().json(points))
}

fn until_schema() -> utoipa::openapi::Object {
    grammar::date_time_schema(
        "Locked until then: an RFC 3339 time. Times past 2262-04-11T23:47:16Z (the end of the \
         range the log can hold) lock until that end.",
    )
}

/// Body of `POST /api/v1/points/{id}/lock`, for the OpenAPI document (the
/// server reads it as a `LockRequest`).
#[derive(utoipa::ToSchema)]
#[schema(as = LockRequest)]
#[allow(dead_code)]
pub(crate) struct LockInput {
    #[schema(schema_with = until_schema)]
    until: String,
}

/// An RFC 3339 time as Unix nanoseconds; times outside the range of i64
/// nanoseconds (years 1677 to 2262) are clamped to its ends.
pub(crate) fn parse_until(s: &str) -> Option<i64> {
    parse_rfc3339(s).or_else(|| {
        use time::format_description::well_known::Rfc3339;
        let ns = time::OffsetDateTime::parse(s, &Rfc3339)
            .ok()?
            .unix_timestamp_nanos();
        Some(if ns > 0 { i64::MAX } else { i64::MIN })
    })
}

fn parse_id(id: &str) -> Result<SnapshotId, WebError> {
    id.parse()
        .map_err(|_| WebError::NotFound(format!("no point {id:?}: ids are 64 hex digits")))
}

/// A visible point (after `min`), through `f`.
async fn with_point<R: Send + 'static>(
    ctx: &Ctx,
    who: &Principal,
    id: SnapshotId,
    min: u64,
    f: impl FnOnce(&vouch_events::Point) -> R + Send + 'static,
) -> Result<R, WebError> {
    let who = who.clone();
    ctx.service()?
        .query(min, move |p| {
            p.points
                .points
                .get(&id)
                .filter(|pt| point_visible(p, &who, pt))
                .map(f)
        })
        .await?
        .ok_or_else(|| WebError::not_found("point", id))
}

/// One point with its latest verification, restore test and history.
#[utoipa::path(get, path = "/api/v1/points/{id}", operation_id = "get_point", tag = "points",
    params(PointIdParam),
    responses((status = 200, body = PointDetail), (status = 404, response = errors::NotFound),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn get(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
) -> Result<HttpResponse, WebError> {
    let id = parse_id(&id)?;
    let point = with_point(&ctx, &who, id, 0, Clone::clone).await?;
    // From the point's index of seqs (finding 8): the cost follows its own
    // events, not the length of the log.
    let handle = ctx.service()?;
    let seqs = handle
        .query(0, move |p| {
            p.point_history.get(&id).cloned().unwrap_or_default()
        })
        .await?;
    let history = handle
        .read_events(seqs)
        .await?
        .iter()
        .map(event_view)
        .collect();
    Ok(HttpResponse::Ok().json(point_detail(&point, history)))
}

/// Locks a point against deletion until a time. A lock is never
/// shortened: an `until` earlier than the point's lock is refused (409);
/// the same `until` again is answered without a new event.
#[utoipa::path(post, path = "/api/v1/points/{id}/lock", tag = "points",
    params(PointIdParam), request_body = LockInput,
    responses((status = 200, body = PointView), (status = 400, response = errors::BadRequest),
        (status = 403, response = errors::Forbidden), (status = 404, response = errors::NotFound),
        (status = 409, response = errors::Conflict),
        (status = 413, response = errors::PayloadTooLarge),
        (status = 415, response = errors::UnsupportedMediaType),
        (status = 422, response = errors::Invalid), (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn lock(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
    body: web::Json<serde_json::Map<String, serde_json::Value>>,
) -> Result<HttpResponse, WebError> {
    let body: LockRequest = crate::validate::body(body.into_inner())?;
    who.require_write()?;
    let id = parse_id(&id)?;
    let until = parse_until(&body.until).ok_or_else(|| WebError::Invalid {
        message: "the lock does not validate: until".into(),
        fields: [(
            "until".to_owned(),
            format!("{:?} is not an RFC 3339 time", body.until),
        )]
        .into(),
    })?;
    tracing::info!(point = %id, until = %rfc3339(until), "locking point");
    // Stored in the repository first: a record every tool honours, and the
    // storage's own retention where it has one. Only then recorded here.
    let now = ctx.service()?.now_unix_ns();
    if let (Some(browse), true) = (ctx.browse.clone(), until > now) {
        let repo = with_point(&ctx, &who, id, 0, |pt| pt.repository.to_string()).await?;
        let (hex, by) = (id.to_hex(), format!("service principal {}", who.name));
        let stored = web::block(move || browse.lock_point(&repo, &hex, until, &by))
            .await
            .map_err(|e| WebError::Internal(e.to_string()))??;
        tracing::info!(
            point = %id,
            enforced_by = %stored.enforced_by,
            files_retained = stored.files_retained,
            "lock stored in the repository"
        );
    }
    let seen = who.clone();
    // Decided and appended with nothing in between (L7): a lock is never
    // shortened, not even by two requests deciding on one stale view.
    let decided = ctx
        .service()?
        .append_decided(move |p| {
            let pt = p
                .points
                .points
                .get(&id)
                .filter(|pt| point_visible(p, &seen, pt))
                .ok_or_else(|| LockRefused::Error(WebError::not_found("point", id)))?;
            match pt.locked_until_unix_ns {
                Some(current) if current > until => {
                    Err(LockRefused::Error(WebError::Conflict(format!(
                        "point {id} is locked until {}, later than {}: a lock cannot be shortened",
                        rfc3339(current),
                        rfc3339(until)
                    ))))
                }
                Some(current) if current == until => Err(LockRefused::AlreadyLocked(p.last_seq)),
                _ => Ok(vec![
                    PointLocked {
                        point: id,
                        until_unix_ns: until,
                    }
                    .into(),
                    super::audited(&seen, "point.lock", &id.to_hex()),
                ]),
            }
        })
        .await?;
    let seq = match decided {
        Ok(receipt) => receipt.last_seq,
        Err(LockRefused::AlreadyLocked(seq)) => seq,
        Err(LockRefused::Error(e)) => return Err(e),
    };
    let view = with_point(&ctx, &who, id, seq, point_view).await?;
    Ok(HttpResponse::Ok().json(view))
}

/// The longest reason of an unlock.
pub(crate) const MAX_UNLOCK_REASON: usize = 500;

/// Removes a point's lock before its end: administrators only, with a
/// reason, recorded (`point.unlocked` and the `audit.action` naming who).
/// A point without a lock in force is answered 409.
#[utoipa::path(post, path = "/api/v1/points/{id}/unlock", tag = "points",
    params(PointIdParam), request_body = UnlockRequest,
    responses((status = 200, body = PointView), (status = 400, response = errors::BadRequest),
        (status = 403, response = errors::Forbidden), (status = 404, response = errors::NotFound),
        (status = 409, response = errors::Conflict),
        (status = 413, response = errors::PayloadTooLarge),
        (status = 415, response = errors::UnsupportedMediaType),
        (status = 422, response = errors::Invalid), (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn unlock(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
    body: web::Json<serde_json::Map<String, serde_json::Value>>,
) -> Result<HttpResponse, WebError> {
    let body: UnlockRequest = crate::validate::body(body.into_inner())?;
    who.require_admin("removing a lock")?;
    let id = parse_id(&id)?;
    let reason = body.reason;
    let n = reason.chars().count();
    if !(1..=MAX_UNLOCK_REASON).contains(&n) || reason.chars().any(char::is_control) {
        return Err(WebError::Invalid {
            message: "the unlock does not validate: reason".into(),
            fields: [(
                "reason".to_owned(),
                format!("1 to {MAX_UNLOCK_REASON} characters, no control characters"),
            )]
            .into(),
        });
    }
    let now = ctx.service()?.now_unix_ns();
    // A lock stored in the repository cannot be removed before its end, by
    // anyone: that is what makes it worth having.
    if let Some(browse) = ctx.browse.clone() {
        let repo = with_point(&ctx, &who, id, 0, |pt| pt.repository.to_string()).await?;
        let (hex, r) = (id.to_hex(), repo.clone());
        let stored = web::block(move || browse.stored_lock(&r, &hex))
            .await
            .map_err(|e| WebError::Internal(e.to_string()))??;
        if let Some(until) = stored.filter(|&u| u > now) {
            return Err(WebError::Conflict(format!(
                "point {id}'s lock is stored in repository {repo} and holds until {}: nothing can remove it before",
                rfc3339(until)
            )));
        }
    }
    tracing::warn!(point = %id, principal = %who.name, reason = %reason, "removing a point's lock");
    let seen = who.clone();
    let receipt = ctx
        .service()?
        .append_decided(move |p| {
            let pt = p
                .points
                .points
                .get(&id)
                .filter(|pt| point_visible(p, &seen, pt))
                .ok_or_else(|| WebError::not_found("point", id))?;
            match pt.locked_until_unix_ns {
                Some(until) if until > now => Ok(vec![
                    PointUnlocked {
                        point: id,
                        reason: reason.clone(),
                    }
                    .into(),
                    super::audited(&seen, "point.unlock", &id.to_hex()),
                ]),
                _ => Err(WebError::Conflict(format!(
                    "point {id} has no lock in force"
                ))),
            }
        })
        .await??;
    let view = with_point(&ctx, &who, id, receipt.last_seq, point_view).await?;
    Ok(HttpResponse::Ok().json(view))
}

/// Why a lock appends nothing.
enum LockRefused {
    /// The point is already locked until exactly then (as of this seq):
    /// answered like a lock, appends nothing.
    AlreadyLocked(u64),
    /// Refused.
    Error(WebError),
}

fn snapshot_path_schema() -> utoipa::openapi::Object {
    grammar::pattern_schema(
        "An absolute path inside the snapshot (default `/`).",
        grammar::SNAPSHOT_PATH_PATTERN,
        None,
        false,
    )
}

/// The `path` query parameter of the file browser.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct PathQuery {
    /// An absolute path inside the snapshot (default `/`).
    #[param(schema_with = snapshot_path_schema, required = false)]
    path: Option<String>,
}

fn browse_path(q: &PathQuery) -> Result<String, WebError> {
    let path = q.path.clone().unwrap_or_else(|| "/".into());
    if !path.starts_with('/') || path.contains('\0') {
        return Err(WebError::BadRequest(format!(
            "path {path:?} must be absolute"
        )));
    }
    Ok(path)
}

fn files_limit_schema() -> utoipa::openapi::Object {
    grammar::integer_schema(
        "At most this many entries (default and maximum 1000).",
        1,
        MAX_LIMIT as u64,
        false,
    )
}

/// The query of `GET /api/v1/points/{id}/files`: a page of a directory.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct FilesQuery {
    /// An absolute path inside the snapshot (default `/`).
    #[param(schema_with = snapshot_path_schema, required = false)]
    path: Option<String>,
    /// At most this many entries (default and maximum 1000).
    #[serde(default, deserialize_with = "grammar::query_limit")]
    #[param(schema_with = files_limit_schema, required = false)]
    limit: Option<usize>,
    /// Only entries whose name sorts after this one: the `next` of the
    /// previous page.
    #[param(value_type = String, required = false)]
    after: Option<String>,
}

/// A directory of a point, one page at a time: entries sorted by name,
/// `next` (the `after` of the next page) while more follow.
#[utoipa::path(get, path = "/api/v1/points/{id}/files", tag = "points",
    params(PointIdParam, FilesQuery),
    responses((status = 200, body = FileList), (status = 400, response = errors::BadRequest),
        (status = 404, response = errors::NotFound), (status = 503, response = errors::Busy), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn files(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
    q: web::Query<FilesQuery>,
) -> Result<HttpResponse, WebError> {
    let q = q.into_inner();
    let id = parse_id(&id)?;
    let path = browse_path(&PathQuery {
        path: q.path.clone(),
    })?;
    let n = q.limit.unwrap_or(MAX_LIMIT).clamp(1, MAX_LIMIT);
    let repo = with_point(&ctx, &who, id, 0, |pt| pt.repository.to_string()).await?;
    let browse = ctx.browse()?;
    let permit = ctx.limits.browse().await?;
    let (hex, p) = (id.to_hex(), path.clone());
    let mut entries = web::block(move || {
        let _permit = permit;
        browse.list(&repo, &hex, &p)
    })
    .await
    .map_err(|e| WebError::Internal(e.to_string()))??;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let after = q.after.unwrap_or_default();
    let mut page: Vec<EntryView> = entries
        .into_iter()
        .filter(|e| after.is_empty() || e.name > after)
        .take(n + 1)
        .map(|e| EntryView {
            name: e.name,
            kind: e.kind.as_str().to_owned(),
            size: e.size,
            mode: e.mode,
            mtime: e.mtime_unix_ns.map(rfc3339),
        })
        .collect();
    let next = if page.len() > n {
        page.truncate(n);
        page.last().map(|e| e.name.clone())
    } else {
        None
    };
    Ok(HttpResponse::Ok().json(FileList {
        path,
        entries: page,
        next,
    }))
}

/// A file of a point, as bytes, streamed with `Content-Length`.
#[utoipa::path(get, path = "/api/v1/points/{id}/file", tag = "points",
    params(PointIdParam, PathQuery),
    responses((status = 200, content_type = "application/octet-stream", body = Vec<u8>,
            headers(("Content-Length" = u64, description = "the file's size"))),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound),
        (status = 503, response = errors::Busy), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn file(
    ctx: web::Data<Ctx>,
    who: Principal,
    watch: TokenWatch,
    id: web::Path<String>,
    q: web::Query<PathQuery>,
) -> Result<HttpResponse, WebError> {
    let (file, path, permit) = open_content(&ctx, &who, &id, &q, "file", |b, repo, hex, p| {
        b.read_file(repo, hex, p)
    })
    .await?;
    let (tx, rx) = mpsc::channel(download::CHANNEL_CHUNKS);
    download::spawn_file(file.reader, tx, watch, permit);
    Ok(attachment(&path, "")
        .content_type("application/octet-stream")
        .body(SizedStream::new(file.size, ChannelBody(rx))))
}

/// A directory of a point as a tar archive (streamed; no `Content-Length`).
#[utoipa::path(get, path = "/api/v1/points/{id}/archive", tag = "points",
    params(PointIdParam, PathQuery),
    responses((status = 200, content_type = "application/x-tar", body = Vec<u8>),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound),
        (status = 503, response = errors::Busy), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn archive(
    ctx: web::Data<Ctx>,
    who: Principal,
    watch: TokenWatch,
    id: web::Path<String>,
    q: web::Query<PathQuery>,
) -> Result<HttpResponse, WebError> {
    let (writer, path, permit) = open_content(&ctx, &who, &id, &q, "archive", |b, repo, hex, p| {
        b.archive(repo, hex, p)
    })
    .await?;
    let (tx, rx) = mpsc::channel(download::CHANNEL_CHUNKS);
    download::spawn_archive(writer, tx, watch, permit);
    Ok(attachment(&path, ".tar")
        .content_type("application/x-tar")
        .streaming(ChannelBody(rx)))
}

/// What a download (`kind`: `file` or `archive`) does before its first
/// byte: checks that `who` may read content of point `id`, takes a
/// download slot, opens the content with `open` on the blocking pool and
/// records the read. Returns the opened content, the path and the slot.
async fn open_content<T: Send + 'static>(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    q: &PathQuery,
    kind: &str,
    open: impl FnOnce(
            &dyn crate::browse::Browse,
            &str,
            &str,
            &str,
        ) -> Result<T, crate::browse::BrowseError>
        + Send
        + 'static,
) -> Result<(T, String, tokio::sync::OwnedSemaphorePermit), WebError> {
    who.require_content()?;
    let id = parse_id(id)?;
    let path = browse_path(q)?;
    let repo = with_point(ctx, who, id, 0, |pt| pt.repository.to_string()).await?;
    let permit = ctx.limits.download()?;
    let browse = ctx.browse()?;
    let (hex, p) = (id.to_hex(), path.clone());
    let opened = web::block(move || open(browse.as_ref(), &repo, &hex, &p))
        .await
        .map_err(|e| WebError::Internal(e.to_string()))??;
    tracing::info!(point = %id, kind, "download");
    record_read(ctx, who, id, &path, kind).await?;
    Ok((opened, path, permit))
}

/// Records who reads what (`audit.content_read`) before the first byte
/// leaves: a download that cannot be recorded does not happen (the log
/// refusing appends answers 503).
async fn record_read(
    ctx: &Ctx,
    who: &Principal,
    point: SnapshotId,
    path: &str,
    kind: &str,
) -> Result<(), WebError> {
    ctx.service()?
        .append(vec![vouch_events::ContentRead {
            principal: who.name.clone(),
            role: who.role.as_str().to_owned(),
            point,
            path: path.to_owned(),
            kind: kind.to_owned(),
        }
        .into()])
        .await?;
    Ok(())
}

/// A 200 answer naming the download after the last part of `path`.
fn attachment(path: &str, suffix: &str) -> actix_web::HttpResponseBuilder {
    let name: String = path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("root")
        .chars()
        .filter(|c| !c.is_control() && *c != '"' && *c != '\\')
        .collect();
    let mut res = HttpResponse::Ok();
    res.insert_header((
        header::CONTENT_DISPOSITION,
        format!("attachment; filename=\"{name}{suffix}\""),
    ));
    res
}

/// The body of `POST /api/v1/points/{id}/restore`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreRequest {
    /// The path inside the point to restore (default `/`: all of it).
    #[serde(default)]
    #[schema(pattern = "^/[^\\x00]*$", max_length = 4096)]
    pub path: Option<String>,
    /// The directory on the host to restore into: absolute; it must be
    /// empty or missing (or hold an interrupted restore of the same
    /// point, which then resumes).
    #[schema(pattern = "^/[^\\x00]*$", max_length = 4096)]
    pub destination: String,
    /// Where: `agent` (the agent whose plan made the point; the default
    /// for such points) or `server` (the default for the others).
    #[serde(default)]
    #[schema(pattern = "^(agent|server)$")]
    pub host: Option<String>,
}

/// Restores a point, or a path in it, into a directory of a host: the
/// agent that backed it up (its own repository, its own host), or the
/// server (below `[sources] allow`, never over the service's files). A
/// job: its progress and end are those of `/api/v1/jobs/{id}`, and
/// `restore.completed` records what went where.
#[utoipa::path(post, path = "/api/v1/points/{id}/restore", tag = "points",
    params(PointIdParam), request_body = RestoreRequest,
    responses((status = 202, body = crate::views::JobView),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 409, response = errors::Conflict),
        (status = 413, response = errors::PayloadTooLarge),
        (status = 415, response = errors::UnsupportedMediaType), (status = 422, response = errors::Invalid),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn restore(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
    body: web::Json<RestoreRequest>,
) -> Result<HttpResponse, WebError> {
    // Restoring is reading contents (onto a host).
    who.require_content()?;
    let id = parse_id(&id)?;
    let input = body.into_inner();
    let path = input.path.unwrap_or_else(|| "/".into());
    // What the schema says (`^/`, no NUL, at most 4096 bytes), checked: a
    // relative destination would be resolved against the worker's directory.
    let mut fields = std::collections::BTreeMap::new();
    for (name, value) in [("path", &path), ("destination", &input.destination)] {
        if !value.starts_with('/') || value.contains('\0') || value.chars().count() > 4096 {
            fields.insert(
                name.to_owned(),
                "must be an absolute path (starting with /, no NUL, at most 4096 characters)"
                    .to_owned(),
            );
        }
    }
    if !fields.is_empty() {
        return Err(WebError::Invalid {
            message: "the restore request does not validate".into(),
            fields,
        });
    }
    let handle = ctx.service()?.clone();
    let w = who.clone();
    let found = handle
        .query(0, move |p| {
            p.points
                .points
                .get(&id)
                .filter(|pt| point_visible(p, &w, pt))
                .map(|pt| {
                    let agent = pt
                        .plan
                        .as_ref()
                        .and_then(|pl| p.plans.plans.get(pl))
                        .and_then(|pl| {
                            vouch_events::sources::agent_source(&pl.definition.source)
                                .map(|(a, _)| a.to_owned())
                        });
                    (pt.repository.clone(), pt.plan.clone(), agent)
                })
        })
        .await?
        .ok_or_else(|| WebError::not_found("point", id))?;
    let (repository, plan, agent) = found;
    let agent =
        match (input.host.as_deref(), agent) {
            (Some("server"), _) | (None, None) => None,
            (Some("agent") | None, Some(a)) => Some(a),
            (Some("agent"), None) => return Err(WebError::Conflict(
                "this point was not made by an agent: restore it on the server (host \"server\")"
                    .into(),
            )),
            (Some(other), _) => {
                return Err(WebError::BadRequest(format!(
                    "host {other:?}: expected agent or server"
                )))
            }
        };
    let spec = vouch_events::RestoreSpec {
        path,
        destination: input.destination,
        agent,
    };
    let target = format!(
        "{} {}:{} -> {}:{}",
        id.to_hex(),
        repository,
        spec.path,
        spec.agent.as_deref().unwrap_or("server"),
        spec.destination
    );
    let job = handle
        .enqueue(vouch_actors::service::JobCommand::Restore {
            point: id,
            plan,
            repository,
            spec,
        })
        .await?;
    handle
        .append(vec![super::audited(&who, "point.restore", &target)])
        .await?;
    let min = handle.last_seq();
    let view = {
        let job = job.clone();
        handle
            .query(min, move |p| {
                p.jobs.jobs.get(&job).map(crate::views::job_view)
            })
            .await?
    };
    let view = view.ok_or_else(|| WebError::Internal(format!("job {job} is not in the log")))?;
    Ok(HttpResponse::Accepted().json(view))
}
