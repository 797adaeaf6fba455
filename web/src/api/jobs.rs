//! Jobs: list, detail, cancel.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use actix_web::{web, HttpResponse};
use serde::Deserialize;
use utoipa::IntoParams;
use vouch_actors::service::kind_name;
use vouch_events::JobId;

use super::{grammar, job_visible, limit, Ctx, JobIdParam};
use crate::auth::Principal;
use crate::error::{doc as errors, WebError};
use crate::views::{job_view, parse_job_state, JobView};

/// The job states of the API.
pub(crate) const JOB_STATES: [&str; 5] =
    ["scheduled", "running", "succeeded", "failed", "abandoned"];
/// The job kinds of the API (`vouch_actors::service::kind_name`), one per
/// `JobKind` (the test below fails when a kind is missing).
pub(crate) const JOB_KINDS: [&str; 9] = [
    "backup",
    "verify",
    "restore-test",
    "retention",
    "prune",
    "read-back",
    "reconcile",
    "restore",
    "copy",
];

fn job_state_schema() -> utoipa::openapi::Object {
    grammar::enum_schema("Only jobs in this state.", &JOB_STATES)
}

fn job_kind_schema() -> utoipa::openapi::Object {
    grammar::enum_schema("Only jobs of this kind.", &JOB_KINDS)
}

/// A job's kind, as `JobView` shows it.
pub(crate) fn job_kind_view_schema() -> utoipa::openapi::Object {
    grammar::enum_schema("What the job does.", &JOB_KINDS)
}

/// Filters of `GET /api/v1/jobs`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct JobsQuery {
    /// Only jobs in this state.
    #[param(schema_with = job_state_schema, required = false)]
    state: Option<String>,
    /// Only jobs of this plan (an id no plan has matches nothing).
    #[param(value_type = String, required = false)]
    plan: Option<String>,
    /// Only jobs of this kind.
    #[param(schema_with = job_kind_schema, required = false)]
    kind: Option<String>,
    /// At most this many (default 100).
    #[serde(default, deserialize_with = "grammar::query_limit")]
    #[param(schema_with = grammar::limit_schema, required = false)]
    limit: Option<usize>,
    /// Only jobs scheduled before this seq: the `scheduled_seq` of the
    /// last job of the previous page.
    #[serde(default, deserialize_with = "grammar::query_seq")]
    #[param(schema_with = grammar::seq_schema, required = false)]
    before_seq: Option<u64>,
}

/// Jobs, newest first (by `scheduled_seq`); pages continue with
/// `before_seq`.
#[utoipa::path(get, path = "/api/v1/jobs", operation_id = "list_jobs", tag = "jobs", params(JobsQuery),
    responses((status = 200, body = [JobView]), (status = 400, response = errors::BadRequest),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn list(
    ctx: web::Data<Ctx>,
    who: Principal,
    q: web::Query<JobsQuery>,
) -> Result<HttpResponse, WebError> {
    let q = q.into_inner();
    let state = match q.state.as_deref() {
        Some(s) => Some(parse_job_state(s).ok_or_else(|| {
            WebError::BadRequest(format!(
                "unknown job state {s:?}: expected one of {}",
                JOB_STATES.join(", ")
            ))
        })?),
        None => None,
    };
    if let Some(k) = q.kind.as_deref() {
        if !JOB_KINDS.contains(&k) {
            return Err(WebError::BadRequest(format!(
                "unknown job kind {k:?}: expected one of {}",
                JOB_KINDS.join(", ")
            )));
        }
    }
    let n = limit(q.limit);
    let jobs = ctx
        .service()?
        .query(0, move |p| {
            let before = q.before_seq.unwrap_or(u64::MAX);
            let matching = p
                .jobs
                .jobs
                .values()
                .filter(|j| j.scheduled.seq < before)
                .filter(|j| state.is_none_or(|s| j.state == s))
                .filter(|j| {
                    q.plan
                        .as_deref()
                        .is_none_or(|pl| j.plan.as_ref().is_some_and(|x| x.as_str() == pl))
                })
                .filter(|j| q.kind.as_deref().is_none_or(|k| kind_name(j.kind) == k))
                .filter(|j| job_visible(p, &who, j));
            // The `n` newest in a heap of `n` (finding 8): memory follows
            // the page, not the jobs ever run.
            let mut newest = BinaryHeap::with_capacity(n.saturating_add(1));
            for j in matching {
                newest.push(Reverse((j.scheduled.seq, &j.id)));
                if newest.len() > n {
                    newest.pop();
                }
            }
            let mut page: Vec<_> = newest.into_iter().map(|Reverse(k)| k).collect();
            page.sort_unstable_by(|a, b| b.cmp(a));
            page.into_iter()
                .filter_map(|(_, id)| p.jobs.jobs.get(id))
                .map(job_view)
                .collect::<Vec<JobView>>()
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
                .filter(|j| job_visible(p, &who, j))
                .map(job_view)
        })
        .await?
        .ok_or_else(|| WebError::not_found("job", id))
}

/// One job.
#[utoipa::path(get, path = "/api/v1/jobs/{id}", operation_id = "get_job", tag = "jobs",
    params(JobIdParam),
    responses((status = 200, body = JobView), (status = 404, response = errors::NotFound),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
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
    params(JobIdParam),
    responses((status = 202, body = JobView), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 409, response = errors::Conflict),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
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
    handle
        .append(vec![super::audited(&who, "job.cancel", &id)])
        .await?;
    let view = read_job(&ctx, &who, &id, handle.last_seq()).await?;
    Ok(HttpResponse::Accepted().json(view))
}

#[cfg(test)]
mod tests {
    use super::*;

    use vouch_events::JobKind;

    fn every_kind() -> Vec<JobKind> {
        JobKind::ALL.to_vec()
    }

    #[test]
    fn the_documented_states_and_kinds_are_the_real_ones() {
        for s in JOB_STATES {
            assert!(parse_job_state(s).is_some_and(|st| st.as_str() == s), "{s}");
        }
        let names: Vec<&str> = every_kind().into_iter().map(kind_name).collect();
        assert_eq!(names, JOB_KINDS, "one API kind per JobKind, in order");
    }

    #[test]
    fn the_console_offers_every_kind_as_a_filter() {
        let js = include_str!("../../console/jobs.js");
        let line = js
            .lines()
            .find(|l| l.starts_with("const KINDS = ["))
            .unwrap_or_default();
        let listed: Vec<&str> = line.split('\'').skip(1).step_by(2).collect();
        assert_eq!(listed, JOB_KINDS, "{line}");
    }
}
