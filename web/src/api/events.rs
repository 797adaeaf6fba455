//! The event log: pages, and the live stream (Server-Sent Events).

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header;
use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc};
use utoipa::IntoParams;
use vouch_actors::service::{LiveProgress, ServiceHandle};
use vouch_events::{Envelope, Event, PlanId};

use super::{grammar, limit, ChannelBody, Ctx};
use crate::auth::{Principal, TokenWatch};
use crate::error::{doc as errors, WebError};
use crate::views::{event_view, EventsPage};

/// How often a comment keeps an idle stream (and its proxies) alive.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events read from the log per step of a catch-up.
const CATCH_UP_BATCH: usize = 512;
/// How often an open stream looks at its token again: a revoked token's
/// stream ends within about this long (plus the token file's own check,
/// once a second).
pub(crate) const TOKEN_CHECK: Duration = Duration::from_secs(2);
/// Events one `GET /events` request reads from the log at most; a filtered
/// page that found fewer than `limit` continues at `next_seq`.
pub(crate) const MAX_SCAN: usize = 10_000;

/// Filters of `GET /api/v1/events`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventsQuery {
    /// The first seq to return (default: the first event).
    #[serde(default, deserialize_with = "grammar::query_seq")]
    #[param(schema_with = grammar::seq_schema, required = false)]
    from_seq: Option<u64>,
    /// At most this many (default 100).
    #[serde(default, deserialize_with = "grammar::query_limit")]
    #[param(schema_with = grammar::limit_schema, required = false)]
    limit: Option<usize>,
    /// Only events of this type (`backup.committed`, ...; a type no event
    /// has matches nothing).
    #[serde(rename = "type")]
    #[param(value_type = String, required = false)]
    event_type: Option<String>,
    /// Only events about this plan (directly, or through its jobs and
    /// points).
    #[param(value_type = String, required = false)]
    plan: Option<String>,
}

/// The plan an event is about, directly.
fn direct_plan(e: &Event) -> Option<&PlanId> {
    match e {
        Event::PlanCreated(x) => Some(&x.plan),
        Event::PlanChanged(x) => Some(&x.plan),
        Event::PlanRemoved(x) => Some(&x.plan),
        Event::JobScheduled(x) => x.plan.as_ref(),
        Event::BackupCommitted(x) => x.plan.as_ref(),
        Event::PointDiscovered(x) => x.plan.as_ref(),
        _ => None,
    }
}

/// The job an event is about.
fn job_of(e: &Event) -> Option<&vouch_events::JobId> {
    match e {
        Event::JobStarted(x) => Some(&x.job),
        Event::JobProgress(x) => Some(&x.job),
        Event::JobFinished(x) => Some(&x.job),
        Event::JobFailed(x) => Some(&x.job),
        Event::JobAbandoned(x) => Some(&x.job),
        Event::LeaseGranted(x) => Some(&x.job),
        Event::LeaseExpired(x) => Some(&x.job),
        _ => None,
    }
}

/// A page of the log, oldest first.
#[utoipa::path(get, path = "/api/v1/events", operation_id = "list_events", tag = "events", params(EventsQuery),
    responses((status = 200, body = EventsPage), (status = 400, response = errors::BadRequest),
        (status = 403, response = errors::Forbidden), (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn list(
    ctx: web::Data<Ctx>,
    who: Principal,
    q: web::Query<EventsQuery>,
) -> Result<HttpResponse, WebError> {
    who.require_not_agent()?;
    let q = q.into_inner();
    let handle = ctx.service()?;
    let from = q.from_seq.unwrap_or(1).max(1);
    let n = limit(q.limit);
    // Jobs and points of the plan, to attribute events that name only those.
    let plan_things = match q.plan.clone() {
        Some(plan) => {
            let plan = PlanId::new(plan);
            Some(
                handle
                    .query(0, move |p| {
                        let jobs: std::collections::HashSet<_> = p
                            .jobs
                            .jobs
                            .values()
                            .filter(|j| j.plan.as_ref() == Some(&plan))
                            .map(|j| j.id.clone())
                            .collect();
                        let points: std::collections::HashSet<_> = p
                            .points
                            .points
                            .values()
                            .filter(|pt| pt.plan.as_ref() == Some(&plan))
                            .map(|pt| pt.id)
                            .collect();
                        (plan, jobs, points)
                    })
                    .await?,
            )
        }
        None => None,
    };
    let (events, next_seq) = handle
        .scan_events(from, move |it| {
            let mut out = Vec::new();
            let mut next = from;
            for env in it.take(MAX_SCAN) {
                next = env.seq + 1;
                let type_ok = q
                    .event_type
                    .as_deref()
                    .is_none_or(|t| env.event.event_type() == t);
                let plan_ok = plan_things.as_ref().is_none_or(|(plan, jobs, points)| {
                    direct_plan(&env.event) == Some(plan)
                        || job_of(&env.event).is_some_and(|j| jobs.contains(j))
                        || env.event.point().is_some_and(|pt| points.contains(&pt))
                });
                if type_ok && plan_ok {
                    out.push(event_view(&env));
                    if out.len() >= n {
                        break;
                    }
                }
            }
            (out, next)
        })
        .await?;
    Ok(HttpResponse::Ok().json(EventsPage { events, next_seq }))
}

/// Where a stream starts: after `Last-Event-ID`, else at `from_seq`, else
/// with the next event.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct StreamQuery {
    /// The first seq to send (`Last-Event-ID: N` means `N+1` and wins).
    #[serde(default, deserialize_with = "grammar::query_seq")]
    #[param(schema_with = grammar::seq_schema, required = false)]
    from_seq: Option<u64>,
}

/// The live stream: committed events (`id`, `event`, `data`), progress
/// (`event: progress`, no id) and `: keep-alive` comments.
#[utoipa::path(get, path = "/api/v1/events/stream", tag = "events", params(StreamQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "resume after this seq")),
    responses((status = 200, content_type = "text/event-stream", body = String),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 429, response = errors::TooManyRequests),
        (status = 503, response = errors::Busy), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn stream(
    req: HttpRequest,
    ctx: web::Data<Ctx>,
    who: Principal,
    watch: TokenWatch,
    q: web::Query<StreamQuery>,
) -> Result<HttpResponse, WebError> {
    who.require_not_agent()?;
    let handle = ctx.service()?.clone();
    if handle.streams_closed() {
        return Err(vouch_actors::service::ServiceError::ShuttingDown.into());
    }
    let slot = ctx.limits.stream(&who.name)?;
    // Subscribe before reading the log, so nothing falls between the two.
    let live = handle.subscribe_events();
    let progress = handle.subscribe_progress();
    let last_id = match req.headers().get("last-event-id") {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| WebError::BadRequest("Last-Event-ID must be a seq".into()))?,
        ),
        None => None,
    };
    let from = match (last_id, q.from_seq) {
        (Some(n), _) => n.saturating_add(1),
        (None, Some(f)) => f.max(1),
        (None, None) => handle.last_seq() + 1,
    };
    let (tx, rx) = mpsc::channel(64);
    tracing::debug!(from, "event stream opened");
    actix_web::rt::spawn(async move {
        let _slot = slot;
        pump(handle, from, live, progress, tx, watch).await;
    });
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(ChannelBody(rx)))
}

type Tx = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// Whether the stream's token still holds; logs the end when not.
fn still_valid(watch: &TokenWatch) -> bool {
    let valid = watch.still_valid();
    if !valid {
        tracing::info!(token = %watch.name(), "event stream ended: its token was revoked");
    }
    valid
}

fn frame(env: &Envelope) -> Bytes {
    let data = serde_json::to_string(&event_view(env)).unwrap_or_else(|_| "null".into());
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {data}\n\n",
        env.seq,
        env.event.event_type()
    ))
}

/// Sends every logged event from `*next` on; false once the client is gone,
/// the log cannot be read or the token is revoked (looked at per batch).
async fn catch_up(handle: &ServiceHandle, next: &mut u64, tx: &Tx, watch: &TokenWatch) -> bool {
    loop {
        if !still_valid(watch) {
            return false;
        }
        let batch = match handle.events(*next, CATCH_UP_BATCH).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "event stream: the log could not be read");
                return false;
            }
        };
        if batch.is_empty() {
            return true;
        }
        for env in &batch {
            if env.seq < *next {
                continue;
            }
            if tx.send(Ok(frame(env))).await.is_err() {
                return false;
            }
            *next = env.seq + 1;
        }
    }
}

/// Feeds one client: the log from `next`, then the live tail, with no gap
/// (a jump or a lag is filled from the log) and no duplicate (seqs already
/// sent are skipped). Ends when the client goes away.
async fn pump(
    handle: ServiceHandle,
    mut next: u64,
    mut live: broadcast::Receiver<Arc<Envelope>>,
    mut progress: broadcast::Receiver<Arc<LiveProgress>>,
    tx: Tx,
    watch: TokenWatch,
) {
    if !catch_up(&handle, &mut next, &tx, &watch).await {
        return;
    }
    let mut keep_alive =
        tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    let mut token_check =
        tokio::time::interval_at(tokio::time::Instant::now() + TOKEN_CHECK, TOKEN_CHECK);
    let mut progress_open = true;
    let closing = handle.streams_closing();
    tokio::pin!(closing);
    loop {
        tokio::select! {
            _ = tx.closed() => break,
            // The service stops: end the response so that it never holds
            // the HTTP shutdown (the console reconnects to the next run).
            () = &mut closing => {
                tracing::debug!("event stream ended: the service is stopping");
                break;
            }
            r = live.recv() => match r {
                Ok(env) => {
                    if env.seq > next && !catch_up(&handle, &mut next, &tx, &watch).await {
                        break;
                    }
                    if env.seq == next {
                        if tx.send(Ok(frame(&env))).await.is_err() {
                            break;
                        }
                        next = env.seq + 1;
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    if !catch_up(&handle, &mut next, &tx, &watch).await {
                        break;
                    }
                }
                Err(RecvError::Closed) => break,
            },
            p = progress.recv(), if progress_open => match p {
                Ok(p) => {
                    let data = serde_json::to_string(&*p).unwrap_or_else(|_| "null".into());
                    let msg = Bytes::from(format!("event: progress\ndata: {data}\n\n"));
                    if tx.send(Ok(msg)).await.is_err() {
                        break;
                    }
                }
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => progress_open = false,
            },
            _ = token_check.tick() => {
                if !still_valid(&watch) {
                    break;
                }
            }
            _ = keep_alive.tick() => {
                if tx.send(Ok(Bytes::from_static(b": keep-alive\n\n"))).await.is_err() {
                    break;
                }
            }
        }
    }
    tracing::debug!(next, "event stream closed");
}
