//! Health, readiness, whoami, overview, alerts, repositories, metrics.

use std::collections::BTreeMap;

use actix_web::{web, HttpResponse};
use serde::Deserialize;
use utoipa::IntoParams;

use super::{grammar, job_visible, Ctx};
use crate::auth::Principal;
use crate::error::{doc as errors, WebError};
use crate::metrics::{Metrics, CONTENT_TYPE};
use crate::views::{
    alert_view, job_view, plan_view, rfc3339, AlertView, Health, Overview, Ready, RepositoryView,
    POINT_STATES, PROTECTIONS,
};

/// The version reported by `/healthz` and `vouch_build_info`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The process is up and answering.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, body = Health)))]
pub(crate) async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health {
        status: "ok".into(),
        version: VERSION.into(),
    })
}

/// Ready to serve the API: 503 while starting or stopping, and while the
/// event log refuses appends (status `log_not_writable`, with the reason).
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, body = Ready), (status = 503, body = Ready)))]
pub(crate) async fn readyz(ctx: web::Data<Ctx>) -> HttpResponse {
    match &ctx.service {
        None => HttpResponse::ServiceUnavailable().json(Ready {
            status: "starting".into(),
            seq: None,
            reason: None,
        }),
        Some(h) if h.is_stopping() => HttpResponse::ServiceUnavailable().json(Ready {
            status: "stopping".into(),
            seq: None,
            reason: None,
        }),
        Some(h) => {
            let append = h.append_status();
            if !append.healthy {
                return HttpResponse::ServiceUnavailable().json(Ready {
                    status: "log_not_writable".into(),
                    seq: Some(h.last_seq()),
                    reason: Some(format!(
                        "the event log refuses appends ({} in a row): {}",
                        append.consecutive_failures,
                        append.reason.unwrap_or_default()
                    )),
                });
            }
            if let Some(why) = h.read_model_unavailable() {
                return HttpResponse::ServiceUnavailable().json(Ready {
                    status: "read_model_unavailable".into(),
                    seq: Some(h.last_seq()),
                    reason: Some(format!("the read model refuses queries: {why}")),
                });
            }
            HttpResponse::Ok().json(Ready {
                status: "ready".into(),
                seq: Some(h.last_seq()),
                reason: None,
            })
        }
    }
}

/// The caller's token name and role.
#[utoipa::path(get, path = "/api/v1/whoami", tag = "auth",
    responses((status = 200, body = Principal)),
    security(("bearer" = [])))]
pub(crate) async fn whoami(principal: Principal) -> HttpResponse {
    HttpResponse::Ok().json(principal)
}

/// Prometheus text format (every role but agents; a `metrics` token can
/// read nothing else).
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, content_type = "text/plain; version=0.0.4", body = String),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn metrics(
    metrics: web::Data<Metrics>,
    ctx: web::Data<Ctx>,
    who: Principal,
) -> Result<HttpResponse, WebError> {
    who.require_metrics()?;
    let text = metrics.scrape(&ctx).await?;
    Ok(HttpResponse::Ok().content_type(CONTENT_TYPE).body(text))
}

/// Protection, plans, open alerts and running jobs in one answer.
#[utoipa::path(get, path = "/api/v1/overview", tag = "overview",
    responses((status = 200, body = Overview), (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn overview(
    ctx: web::Data<Ctx>,
    who: Principal,
) -> Result<HttpResponse, WebError> {
    let handle = ctx.service()?.clone();
    let h = handle.clone();
    let view = handle
        .query(0, move |p| {
            let now = h.now_unix_ns();
            let plans: Vec<_> = p
                .plans
                .plans
                .values()
                .filter(|pl| pl.removed.is_none() && who.sees_source(&pl.definition.source))
                .collect();
            let statuses: Vec<_> = plans
                .iter()
                .map(|pl| p.plan_protection(&pl.id, now).status)
                .collect();
            let mut protection: BTreeMap<String, u64> = PROTECTIONS
                .iter()
                .map(|s| (s.as_str().to_owned(), 0))
                .collect();
            for s in &statuses {
                *protection.entry(s.as_str().to_owned()).or_default() += 1;
            }
            let overall = vouch_events::rollup(statuses.iter().copied());
            let mut running: Vec<_> = p
                .jobs
                .jobs
                .values()
                .filter(|j| !j.state.is_terminal() && job_visible(p, &who, j))
                .collect();
            running.sort_by_key(|j| std::cmp::Reverse(j.scheduled.seq));
            let open_alerts = if who.role == crate::Role::Agent {
                Vec::new()
            } else {
                let mut a: Vec<_> = p.alerts.open().collect();
                a.sort_by_key(|a| std::cmp::Reverse(a.raised.seq));
                a.into_iter().map(alert_view).collect()
            };
            Overview {
                now: rfc3339(now),
                protection,
                overall: overall.as_str().to_owned(),
                plans: plans
                    .iter()
                    .map(|pl| plan_view(p, pl, now, h.next_run(&pl.id, &pl.definition)))
                    .collect(),
                open_alerts,
                running_jobs: running.into_iter().map(job_view).collect(),
            }
        })
        .await?;
    Ok(HttpResponse::Ok().json(view))
}

/// Filter of `GET /api/v1/alerts`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct AlertsQuery {
    /// `open` or `resolved` (default: both).
    #[param(schema_with = alert_state_schema, required = false)]
    state: Option<String>,
}

fn alert_state_schema() -> utoipa::openapi::Object {
    grammar::enum_schema(
        "Only open or only resolved alerts (default: both).",
        &["open", "resolved"],
    )
}

/// Alerts, newest first.
#[utoipa::path(get, path = "/api/v1/alerts", tag = "alerts", params(AlertsQuery),
    responses((status = 200, body = [AlertView]), (status = 400, response = errors::BadRequest),
        (status = 403, response = errors::Forbidden), (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn alerts(
    ctx: web::Data<Ctx>,
    who: Principal,
    q: web::Query<AlertsQuery>,
) -> Result<HttpResponse, WebError> {
    who.require_not_agent()?;
    let want_open = match q.state.as_deref() {
        None => None,
        Some("open") => Some(true),
        Some("resolved") => Some(false),
        Some(s) => {
            return Err(WebError::BadRequest(format!(
                "state {s:?}: expected open or resolved"
            )))
        }
    };
    let alerts = ctx
        .service()?
        .query(0, move |p| {
            let mut a: Vec<_> = p
                .alerts
                .alerts
                .values()
                .filter(|a| want_open.is_none_or(|o| a.resolved.is_none() == o))
                .collect();
            a.sort_by_key(|a| std::cmp::Reverse(a.raised.seq));
            a.into_iter().map(alert_view).collect::<Vec<_>>()
        })
        .await?;
    Ok(HttpResponse::Ok().json(alerts))
}

/// Repositories with their statistics and points by state.
#[utoipa::path(get, path = "/api/v1/repositories", tag = "repositories",
    responses((status = 200, body = [RepositoryView]), (status = 403, response = errors::Forbidden),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn repositories(
    ctx: web::Data<Ctx>,
    who: Principal,
) -> Result<HttpResponse, WebError> {
    who.require_not_agent()?;
    let handle = ctx.service()?;
    let browse = ctx.browse()?;
    let permit = ctx.limits.browse().await?;
    let stats = web::block(move || {
        let _permit = permit;
        browse.repositories()
    })
    .await
    .map_err(|e| WebError::Internal(e.to_string()))??;
    let counts = handle
        .query(0, |p| {
            let mut by_repo: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
            for pt in p.points.points.values() {
                *by_repo
                    .entry(pt.repository.to_string())
                    .or_default()
                    .entry(pt.state.as_str().to_owned())
                    .or_default() += 1;
            }
            by_repo
        })
        .await?;
    let views: Vec<_> = stats
        .into_iter()
        .map(|s| {
            let mut points: BTreeMap<String, u64> = POINT_STATES
                .iter()
                .map(|st| (st.as_str().to_owned(), 0))
                .collect();
            if let Some(c) = counts.get(&s.id) {
                points.extend(c.iter().map(|(k, v)| (k.clone(), *v)));
            }
            RepositoryView {
                id: s.id,
                location: (who.role == crate::Role::Admin).then_some(s.location),
                snapshots: s.snapshots,
                packs: s.packs,
                size_bytes: s.size_bytes,
                free_bytes: s.free_bytes,
                log_mirrored_seq: s.log_mirrored_seq,
                points,
            }
        })
        .collect();
    Ok(HttpResponse::Ok().json(views))
}
