//! Plans: CRUD, defaults, run now, pause and resume.

use actix_web::{web, HttpResponse};
use vouch_events::{PlanChanged, PlanCreated, PlanDefinition, PlanId, PlanRemoved};

use super::PlanIdParam;
use super::{audited, plan_visible, Ctx};
use crate::auth::Principal;
use crate::error::{doc as errors, WebError};
use crate::validate::{self, NewPlan, PlanInput};
use crate::views::{job_view, plan_view, JobView, PlanView};

/// Reads plan `id` back (after `min_seq`) as the caller may see it.
pub(crate) async fn read_plan(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    min_seq: u64,
) -> Result<PlanView, WebError> {
    let handle = ctx.service()?.clone();
    let name = id.to_owned();
    let (who, id) = (who.clone(), PlanId::new(id));
    let h = handle.clone();
    handle
        .query(min_seq, move |p| {
            let plan = p
                .plans
                .plans
                .get(&id)
                .filter(|pl| pl.removed.is_none() && plan_visible(p, &who, Some(&id)))?;
            let next = h.next_run(&plan.id, &plan.definition);
            Some(plan_view(p, plan, h.now_unix_ns(), next))
        })
        .await?
        .ok_or_else(|| WebError::not_found("plan", name))
}

/// The current definition of a visible plan, or 404.
async fn current(ctx: &Ctx, who: &Principal, id: &str) -> Result<PlanDefinition, WebError> {
    let handle = ctx.service()?;
    let (who, pid) = (who.clone(), PlanId::new(id));
    handle
        .query(0, move |p| {
            p.plans
                .plans
                .get(&pid)
                .filter(|pl| pl.removed.is_none() && plan_visible(p, &who, Some(&pid)))
                .map(|pl| pl.definition.clone())
        })
        .await?
        .ok_or_else(|| WebError::not_found("plan", id))
}

/// Refuses (404) a plan that does not exist or was removed, as the
/// decision of an [`ServiceHandle::append_decided`]: it may have been
/// removed since the caller's check.
///
/// [`ServiceHandle::append_decided`]: vouch_actors::service::ServiceHandle::append_decided
fn live_plan(p: &vouch_events::Projections, pid: &PlanId) -> Result<(), WebError> {
    match p.plans.plans.get(pid) {
        Some(pl) if pl.removed.is_none() => Ok(()),
        _ => Err(WebError::not_found("plan", pid.as_str())),
    }
}

/// Every plan the caller may see.
#[utoipa::path(get, path = "/api/v1/plans", operation_id = "list_plans", tag = "plans",
    responses((status = 200, body = [PlanView]), (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn list(ctx: web::Data<Ctx>, who: Principal) -> Result<HttpResponse, WebError> {
    let handle = ctx.service()?.clone();
    let h = handle.clone();
    let plans = handle
        .query(0, move |p| {
            let now = h.now_unix_ns();
            p.plans
                .plans
                .values()
                .filter(|pl| pl.removed.is_none() && who.sees_source(&pl.definition.source))
                .map(|pl| plan_view(p, pl, now, h.next_run(&pl.id, &pl.definition)))
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(HttpResponse::Ok().json(plans))
}

/// A plan input with every default filled in.
#[utoipa::path(get, path = "/api/v1/plans/defaults", tag = "plans",
    responses((status = 200, body = PlanInput)), security(("bearer" = [])))]
pub(crate) async fn defaults(_who: Principal) -> HttpResponse {
    HttpResponse::Ok().json(validate::defaults_input())
}

/// Creates a plan.
#[utoipa::path(post, path = "/api/v1/plans", operation_id = "create_plan", tag = "plans", request_body = NewPlan,
    responses((status = 201, body = PlanView), (status = 400, response = errors::BadRequest),
        (status = 403, response = errors::Forbidden), (status = 409, response = errors::Conflict),
        (status = 413, response = errors::PayloadTooLarge),
        (status = 415, response = errors::UnsupportedMediaType),
        (status = 422, response = errors::Invalid), (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn create(
    ctx: web::Data<Ctx>,
    who: Principal,
    input: web::Json<serde_json::Map<String, serde_json::Value>>,
) -> Result<HttpResponse, WebError> {
    who.require_write()?;
    let handle = ctx.service()?;
    let input: PlanInput = validate::body(input.into_inner())?;
    let (id, def) = validate::definition(input, validate::default_definition(), None)?;
    source_allowed(&ctx, &def.source)?;
    validate::intervals_allowed(&def, ctx.min_every)?;
    let pid = PlanId::new(id.clone());
    let audit = audited(&who, "plan.create", &id);
    tracing::info!(plan = %id, "creating plan");
    // Decided and appended with nothing in between: of two creations of
    // one plan, one is appended and the other answered 409.
    let receipt = handle
        .append_decided(move |p| {
            let exists = p
                .plans
                .plans
                .get(&pid)
                .is_some_and(|pl| pl.removed.is_none());
            if exists {
                return Err(WebError::Conflict(format!(
                    "a plan named {:?} exists",
                    pid.as_str()
                )));
            }
            Ok(vec![
                PlanCreated {
                    plan: pid.clone(),
                    definition: def.clone(),
                }
                .into(),
                audit.clone(),
            ])
        })
        .await??;
    let view = read_plan(&ctx, &who, &id, receipt.last_seq).await?;
    Ok(HttpResponse::Created().json(view))
}

/// One plan.
#[utoipa::path(get, path = "/api/v1/plans/{id}", operation_id = "get_plan", tag = "plans",
    params(PlanIdParam),
    responses((status = 200, body = PlanView), (status = 404, response = errors::NotFound),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn get(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
) -> Result<HttpResponse, WebError> {
    Ok(HttpResponse::Ok().json(read_plan(&ctx, &who, &id, 0).await?))
}

/// Replaces a plan's definition.
#[utoipa::path(put, path = "/api/v1/plans/{id}", tag = "plans", request_body = PlanInput,
    params(PlanIdParam),
    responses((status = 200, body = PlanView), (status = 400, response = errors::BadRequest),
        (status = 403, response = errors::Forbidden), (status = 404, response = errors::NotFound),
        (status = 413, response = errors::PayloadTooLarge),
        (status = 415, response = errors::UnsupportedMediaType),
        (status = 422, response = errors::Invalid), (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn put(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
    input: web::Json<serde_json::Map<String, serde_json::Value>>,
) -> Result<HttpResponse, WebError> {
    who.require_write()?;
    let input: PlanInput = validate::body(input.into_inner())?;
    let old = current(&ctx, &who, &id).await?;
    // What the input does not say comes from the defaults, except `paused`
    // and `source`, which keep their current values.
    let mut base = validate::default_definition();
    base.paused = old.paused;
    base.source = old.source;
    let (_, def) = validate::definition(input, base, Some(&id))?;
    source_allowed(&ctx, &def.source)?;
    validate::intervals_allowed(&def, ctx.min_every)?;
    change(&ctx, &who, &id, def, "plan.change").await
}

/// Refuses a source the administrator's policy does not allow (outside
/// `[sources] allow`, or overlapping the service's own files), as a field
/// error of `source` (422).
fn source_allowed(ctx: &Ctx, source: &str) -> Result<(), WebError> {
    ctx.sources.check_plan_source(source).map_err(|e| {
        tracing::warn!(source, error = %e, "plan source refused");
        WebError::Invalid {
            message: format!("the plan does not validate: source: {e}"),
            fields: [("source".to_owned(), e.to_string())].into(),
        }
    })
}

async fn change(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    def: PlanDefinition,
    action: &str,
) -> Result<HttpResponse, WebError> {
    let handle = ctx.service()?;
    tracing::info!(plan = %id, "changing plan");
    let pid = PlanId::new(id);
    let audit = audited(who, action, id);
    let receipt = handle
        .append_decided(move |p| -> Result<Vec<vouch_events::Event>, WebError> {
            live_plan(p, &pid)?;
            // The same definition again records nothing (security review
            // finding 16: no growth of the log from no-op requests).
            if p.plans
                .plans
                .get(&pid)
                .is_some_and(|pl| pl.definition == def)
            {
                return Ok(Vec::new());
            }
            Ok(vec![
                PlanChanged {
                    plan: pid.clone(),
                    definition: def.clone(),
                }
                .into(),
                audit.clone(),
            ])
        })
        .await??;
    Ok(HttpResponse::Ok().json(read_plan(ctx, who, id, receipt.last_seq).await?))
}

/// Removes a plan (its points stay; retention stops).
#[utoipa::path(delete, path = "/api/v1/plans/{id}", tag = "plans",
    params(PlanIdParam),
    responses((status = 204, description = "removed"), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn delete(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
) -> Result<HttpResponse, WebError> {
    who.require_write()?;
    current(&ctx, &who, &id).await?;
    tracing::info!(plan = %id, "removing plan");
    let pid = PlanId::new(id.as_str());
    let audit = audited(&who, "plan.remove", &id);
    let handle = ctx.service()?;
    let removed = pid.clone();
    let receipt = handle
        .append_decided(move |p| -> Result<Vec<vouch_events::Event>, WebError> {
            live_plan(p, &removed)?;
            Ok(vec![
                PlanRemoved {
                    plan: removed.clone(),
                }
                .into(),
                audit.clone(),
            ])
        })
        .await??;
    cancel_backups_of(handle, pid, receipt.last_seq).await;
    Ok(HttpResponse::NoContent().finish())
}

/// Cancels the backups of a removed plan that are scheduled or running (one
/// offered to an agent that never takes it would otherwise stay `running`
/// until the service stops). Checks of its points go on: the points stay.
/// A job that ends meanwhile is no error.
async fn cancel_backups_of(handle: &vouch_actors::service::ServiceHandle, plan: PlanId, seq: u64) {
    use vouch_events::{JobKind, JobState};
    let open = handle
        .query(seq, move |p| {
            p.jobs
                .jobs
                .values()
                .filter(|j| j.plan.as_ref() == Some(&plan) && j.kind == JobKind::Backup)
                .filter(|j| matches!(j.state, JobState::Scheduled | JobState::Running))
                .map(|j| j.id.clone())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
    for job in open {
        tracing::info!(job = %job, "cancelling the backup of a removed plan");
        if let Err(e) = handle.cancel(job.clone()).await {
            tracing::debug!(job = %job, error = %e, "not cancelled");
        }
    }
}

/// Schedules a backup of the plan now.
#[utoipa::path(post, path = "/api/v1/plans/{id}/run", tag = "plans",
    params(PlanIdParam),
    responses((status = 202, body = JobView), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 409, response = errors::Conflict),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn run(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
) -> Result<HttpResponse, WebError> {
    who.require_write()?;
    current(&ctx, &who, &id).await?;
    let handle = ctx.service()?;
    let job = handle.run_now(PlanId::new(id.as_str())).await?;
    tracing::info!(plan = %id, job = %job, "backup asked for");
    handle
        .append(vec![audited(&who, "plan.run", &format!("{id} ({job})"))])
        .await?;
    let min = handle.last_seq();
    let view = {
        let job = job.clone();
        handle
            .query(min, move |p| p.jobs.jobs.get(&job).map(job_view))
            .await?
    };
    let view = view.ok_or_else(|| WebError::Internal(format!("job {job} is not in the log")))?;
    Ok(HttpResponse::Accepted().json(view))
}

async fn set_paused(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    paused: bool,
) -> Result<HttpResponse, WebError> {
    who.require_write()?;
    let mut def = current(ctx, who, id).await?;
    if def.paused == paused {
        return Ok(HttpResponse::Ok().json(read_plan(ctx, who, id, 0).await?));
    }
    def.paused = paused;
    let action = if paused { "plan.pause" } else { "plan.resume" };
    change(ctx, who, id, def, action).await
}

/// Pauses the plan's schedule.
#[utoipa::path(post, path = "/api/v1/plans/{id}/pause", tag = "plans",
    params(PlanIdParam),
    responses((status = 200, body = PlanView), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn pause(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
) -> Result<HttpResponse, WebError> {
    set_paused(&ctx, &who, &id, true).await
}

/// Resumes the plan's schedule.
#[utoipa::path(post, path = "/api/v1/plans/{id}/resume", tag = "plans",
    params(PlanIdParam),
    responses((status = 200, body = PlanView), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn resume(
    ctx: web::Data<Ctx>,
    who: Principal,
    id: web::Path<String>,
) -> Result<HttpResponse, WebError> {
    set_paused(&ctx, &who, &id, false).await
}
