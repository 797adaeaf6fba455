//! Jobs: list, detail, cancel.

use actix_web::{web, HttpResponse};
use serde::Deserialize;
use utoipa::IntoParams;
use vouch_actors::service::kind_name;
use vouch_events::JobId;

use super::{limit, plan_visible, Ctx};
use crate::auth::Principal;
use crate::error::{ErrorBody, WebError};
use crate::views::{job_view, parse_job_state, JobView};

/// Filters of `GET /api/v1/jobs`.
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct JobsQuery {
    /// `scheduled`, `running`, `succeeded`, `failed` or `abandoned`.
    state: Option<String>,
    /// A plan id.
    plan: Option<String>,
    /// `backup`, `verify`, `restore-test`, `retention`.
    kind: Option<String>,
    /// At most this many (default 100, at most 1000).
    limit: Option<usize>,
}

/// Jobs, newest first.
#[utoipa::path(get, path = "/api/v1/jobs", tag = "jobs", params(JobsQuery),
    responses((status = 200, body = [JobView]), (status = 400, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn list(
    ctx: web::Data<Ctx>,
    who: Principal,
    q: web::Query<JobsQuery>,
) -> Result<HttpResponse, WebError> {
    let q = q.into_inner();
    let state = match q.state.as_deref() {
        Some(s) => Some(
            parse_job_state(s)
                .ok_or_else(|| WebError::BadRequest(format!("unknown job state {s:?}")))?,
        ),
        None => None,
    };
    let n = limit(q.limit);
    let jobs = ctx
        .service()?
        .query(0, move |p| {
            let mut jobs: Vec<_> = p
                .jobs
                .jobs
                .values()
                .filter(|j| state.is_none_or(|s| j.state == s))
                .filter(|j| {
                    q.plan
                        .as_deref()
                        .is_none_or(|pl| j.plan.as_ref().is_some_and(|x| x.as_str() == pl))
                })
                .filter(|j| q.kind.as_deref().is_none_or(|k| kind_name(j.kind) == k))
                .filter(|j| plan_visible(p, &who, j.plan.as_ref()))
                .collect();
            jobs.sort_by_key(|j| std::cmp::Reverse(j.scheduled.seq));
            let jobs: Vec<JobView> = jobs.into_iter().take(n).map(job_view).collect();
            jobs
        })
        .await?;
    Ok(HttpResponse::Ok().json(jobs))
}

async fn read_job(ctx: &Ctx, who: &Principal, id: &str, min: u64) -> Result<JobView, WebError> {
    let (who, jid) = (who.clone(), JobId::new(id));
    ctx.service()?
        .query(min, move |p| {
            p.jobs
                .jobs
                .get(&jid)
                .filter(|j| plan_visible(p, &who, j.plan.as_ref()))
                .map(job_view)
        })
        .await?
        .ok_or_else(|| WebError::not_found("job", id))
}

/// One job.
#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = String, Path, description = "job id")),
    responses((status = 200, body = JobView), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn get(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
) -> Result<HttpResponse, WebError> {
    Ok(HttpResponse::Ok().json(read_job(&ctx, &who, &id, 0).await?))
}

/// Cancels a job; it ends `failed` with error kind `cancelled` (a
/// scheduled one is abandoned at once).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/cancel", tag = "jobs",
    params(("id" = String, Path, description = "job id")),
    responses((status = 202, body = JobView), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub(crate) async fn cancel(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
) -> Result<HttpResponse, WebError> {
    who.require_write()?;
    let before = read_job(&ctx, &who, &id, 0).await?;
    if matches!(before.state.as_str(), "succeeded" | "failed" | "abandoned") {
        return Err(WebError::Conflict(format!(
            "job {id} already ended ({})",
            before.state
        )));
    }
    let handle = ctx.service()?;
    tracing::info!(job = %id, "cancelling job");
    handle.cancel(JobId::new(id.as_str())).await?;
    let view = read_job(&ctx, &who, &id, handle.last_seq()).await?;
    Ok(HttpResponse::Accepted().json(view))
}
