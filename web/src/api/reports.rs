//! `GET /api/v1/reports`: a protection report of one period, folded from
//! the event log up to the period's end (`vouch_actors::report`), as JSON,
//! CSV, HTML or PDF.

use actix_web::http::header;
use actix_web::{web, HttpResponse};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use vouch_actors::report::{self, Format, Period, PeriodKind, ReportError, Scope};
use vouch_events::PlanId;

use super::Ctx;
use crate::auth::Principal;
use crate::error::{doc as errors, WebError};

/// How long after a period's end its report is first given (the
/// reporter's [`SETTLE`](vouch_actors::service::SETTLE)): events recorded
/// just before the end may still be on their way to the disk.
const SETTLE_SECS: i64 = vouch_actors::service::SETTLE.as_secs() as i64;

/// The parameters of `GET /api/v1/reports`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ReportQuery {
    /// `daily` (a UTC day), `weekly` (an ISO week, from Monday) or
    /// `monthly`.
    #[param(value_type = String, pattern = "^(daily|weekly|monthly)$")]
    period: String,
    /// A date (`2026-12-06`) or an RFC 3339 time inside the period wanted
    /// (default: the newest period that has ended).
    #[param(schema_with = at_schema, required = false)]
    at: Option<String>,
    /// Only this plan (default: the whole installation).
    #[param(value_type = String, required = false)]
    plan: Option<String>,
    /// `json` (default), `csv` (the plans' table), `html` (a
    /// self-contained page with SVG charts) or `pdf` (that page printed by
    /// headless Chromium).
    #[param(value_type = String, required = false, pattern = "^(json|csv|html|pdf)$")]
    format: Option<String>,
}

/// `at`: a date or an RFC 3339 time.
fn at_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, OneOfBuilder, SchemaFormat, Type};
    let string = |f: KnownFormat| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(f)))
            .build()
    };
    utoipa::openapi::schema::Schema::OneOf(
        OneOfBuilder::new()
            .description(Some(
                "A date (`2026-12-06`, midnight UTC) or an RFC 3339 time inside the period wanted \
             (default: the newest period that has ended).",
            ))
            .item(string(KnownFormat::Date))
            .item(string(KnownFormat::DateTime))
            .build(),
    )
}

/// The JSON form of a report (its fields are described in docs/api.md).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ReportBody {
    /// The report format's version (1).
    format: u32,
    /// `kind`, `label`, `start`, `end`.
    #[schema(value_type = Object)]
    period: (),
    /// `{"kind": "installation"}` or `{"kind": "plan", "plan": id}`.
    #[schema(value_type = Object)]
    scope: (),
    /// `last_seq`, `last_hash`, `events_in_period`.
    #[schema(value_type = Object)]
    log: (),
    /// Figures over every plan in scope.
    #[schema(value_type = Object)]
    totals: (),
    /// One line per plan.
    #[schema(value_type = Vec<Object>)]
    plans: (),
    /// Failed jobs, verifications and restore tests.
    #[schema(value_type = Vec<Object>)]
    failures: (),
    /// Restore tests that ended in the period.
    #[schema(value_type = Vec<Object>)]
    restore_tests: (),
    /// Points the ransomware heuristic flagged.
    #[schema(value_type = Vec<Object>)]
    anomalies: (),
    /// Activity per hour or day (the charts').
    #[schema(value_type = Vec<Object>)]
    series: (),
}

fn bad(e: ReportError) -> WebError {
    match e {
        ReportError::BadPeriod(m) => WebError::BadRequest(m),
        e @ ReportError::NoChromium { .. } => WebError::Unavailable(e.to_string()),
        e => WebError::Internal(e.to_string()),
    }
}

/// The protection report of one period (a UTC day, an ISO week or a
/// month), for the whole installation or one plan: points made and
/// recoverable, RPO met or missed and for how long, failures with their
/// reasons, restore-test evidence and coverage, anomalies, storage and its
/// growth. Folded from the event log up to the period's end only, so the
/// same period always gives the same report (byte for byte); a period is
/// given from 60 s after its end. Any role but `agent`.
#[utoipa::path(get, path = "/api/v1/reports", tag = "reports", params(ReportQuery),
    responses(
        (status = 200, description = "The report, in the format asked for", content(
            (ReportBody = "application/json"), (String = "text/csv"), (String = "text/html"),
            (Vec<u8> = "application/pdf"))),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 404, response = errors::NotFound), (status = 409, response = errors::Conflict),
        (status = 503, response = errors::Busy), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn get(
    ctx: web::Data<Ctx>,
    who: Principal,
    q: web::Query<ReportQuery>,
) -> Result<HttpResponse, WebError> {
    who.require_not_agent()?;
    let q = q.into_inner();
    let kind: PeriodKind = q.period.parse().map_err(bad)?;
    let format = Format::parse(q.format.as_deref().unwrap_or("json")).map_err(bad)?;
    let handle = ctx.service()?;
    let now = handle.now_unix_ns();
    let settle = SETTLE_SECS * 1_000_000_000;
    let period = match q.at.as_deref() {
        Some(at) => Period::containing(kind, report::parse_instant(at).map_err(bad)?),
        None => Period::last_ended(kind, now.saturating_sub(settle)),
    };
    if period.end_unix_ns.saturating_add(settle) > now {
        return Err(WebError::Conflict(format!(
            "the {kind} period {} has not ended (or ended less than {SETTLE_SECS} s ago): its report is given from {} on",
            period.label(),
            report::rfc3339(period.end_unix_ns.saturating_add(settle))
        )));
    }
    let scope = match q.plan {
        Some(p) => Scope::Plan(PlanId::new(p)),
        None => Scope::Installation,
    };
    let permit = ctx.limits.report()?;
    let built = {
        let scope = scope.clone();
        handle
            .scan_events(1, move |it| report::build(period, &scope, it))
            .await?
    };
    let Some(built) = built else {
        return Err(WebError::NotFound(format!(
            "no plan {} by the end of {}",
            scope.name(),
            period.label()
        )));
    };
    let chromium = ctx.chromium.clone();
    let body = web::block(move || {
        let _permit = permit;
        report::render(&built, format, &chromium).map(|b| (b, report::file_name(&built, format)))
    })
    .await
    .map_err(|e| WebError::Internal(e.to_string()))?;
    let (body, name) = body.map_err(|e| {
        tracing::warn!(error = %e, "a report could not be rendered");
        bad(e)
    })?;
    tracing::info!(period = %period.label(), kind = %kind, scope = scope.name(),
        format = format.extension(), bytes = body.len(), "report made");
    let disposition = if matches!(format, Format::Csv | Format::Pdf) {
        "attachment"
    } else {
        "inline"
    };
    Ok(HttpResponse::Ok()
        .content_type(format.content_type())
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!("{disposition}; filename=\"{name}\""),
        ))
        .body(body))
}
