//! `GET /api/v1/security`: the security center's checks; `POST
//! /api/v1/security/key-exports`: confirm that a repository's key was
//! exported (docs/security.md).

use std::time::Duration;

use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use vouch_actors::service::security::{rollup, SecurityReport};
use vouch_events::RepositoryId;

use super::Ctx;
use crate::auth::Principal;
use crate::error::{doc as errors, WebError};
use crate::views::rfc3339;

/// A report younger than this is answered as is; an older one is
/// evaluated again first.
const FRESH_WITHIN: Duration = Duration::from_secs(30);

/// The security center.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SecurityView {
    /// When the checks were evaluated (RFC 3339).
    pub evaluated_at: String,
    /// The worst status of any check: `failed`, else `warning`, else
    /// `unknown`, else `ok` (unknown is never ok).
    #[schema(pattern = "^(ok|warning|failed|unknown)$")]
    pub status: String,
    /// How many checks have each status.
    pub counts: SecurityCounts,
    /// Every check, by id.
    pub checks: Vec<SecurityCheckView>,
}

/// Checks by status.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SecurityCounts {
    /// `ok`.
    pub ok: usize,
    /// `warning`.
    pub warning: usize,
    /// `failed`.
    pub failed: usize,
    /// `unknown`.
    pub unknown: usize,
}

/// One check.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SecurityCheckView {
    /// Stable id, `KIND` or `KIND/SUBJECT` (the metrics' `check` label).
    pub id: String,
    /// What it checks: `encryption`, `key-location`, `key-export`, `tls`,
    /// `immutability`, `agent-credentials`, `restore-tests`, `read-back`,
    /// `open-damage`, `copies`, `tokens-admins`, `tokens-unused`,
    /// `tokens-expiry`, `log-chain`, `log-head-export`, `agent`,
    /// `server-version`, `installation`.
    pub kind: String,
    /// What it is about (a repository, a plan, a listener, an agent);
    /// empty: the installation.
    pub subject: String,
    /// `ok`, `warning`, `failed` or `unknown`.
    #[schema(pattern = "^(ok|warning|failed|unknown)$")]
    pub status: String,
    /// Why, in words.
    pub reason: String,
    /// What to do (empty: nothing).
    pub action: String,
    /// Since when it has had this status, as the log recorded it (RFC
    /// 3339; none until recorded).
    pub since: Option<String>,
}

fn view(report: &SecurityReport) -> SecurityView {
    let (worst, counts) = rollup(&report.checks);
    let n = |s: &str| counts.get(s).copied().unwrap_or(0);
    SecurityView {
        evaluated_at: rfc3339(report.evaluated_at_unix_ns),
        status: worst.as_str().to_owned(),
        counts: SecurityCounts {
            ok: n("ok"),
            warning: n("warning"),
            failed: n("failed"),
            unknown: n("unknown"),
        },
        checks: report
            .checks
            .iter()
            .map(|c| SecurityCheckView {
                id: c.id.clone(),
                kind: c.kind.clone(),
                subject: c.subject.clone(),
                status: c.status.as_str().to_owned(),
                reason: c.reason.clone(),
                action: c.action.clone(),
                since: report.since_unix_ns.get(&c.id).map(|&t| rfc3339(t)),
            })
            .collect(),
    }
}

/// The security center: every check with its status, reason and what to
/// do, evaluated from the log, the configuration and the repositories
/// (at most 30 seconds old). Any role but `agent`.
#[utoipa::path(get, path = "/api/v1/security", operation_id = "get_security", tag = "security",
    responses((status = 200, body = SecurityView), (status = 403, response = errors::Forbidden),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn get(ctx: web::Data<Ctx>, who: Principal) -> Result<HttpResponse, WebError> {
    who.require_not_agent()?;
    let report = ctx.service()?.security(FRESH_WITHIN).await?;
    Ok(HttpResponse::Ok().json(view(&report)))
}

/// The body of `POST /api/v1/security/key-exports`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyExportInput {
    /// The repository whose key was exported.
    #[schema(pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub repository: String,
    /// The check code `vouch key export` printed (16 hex digits; dashes
    /// and spaces are ignored).
    #[schema(pattern = "^[ -]*([0-9A-Fa-f][ -]*){16}$", max_length = 40)]
    pub check: String,
}

/// Confirms that the repository's key was exported and is kept: the check
/// code `vouch key export` printed must match the repository's key
/// (compared in constant time; 409 when it does not). Records
/// `key.export_confirmed` and answers
/// with the security center evaluated again. Admin only.
#[utoipa::path(post, path = "/api/v1/security/key-exports", operation_id = "confirm_key_export",
    tag = "security", request_body = KeyExportInput,
    responses((status = 200, body = SecurityView), (status = 400, response = errors::BadRequest),
        (status = 403, response = errors::Forbidden), (status = 404, response = errors::NotFound),
        (status = 409, response = errors::Conflict),
        (status = 413, response = errors::PayloadTooLarge),
        (status = 415, response = errors::UnsupportedMediaType), (status = 422, response = errors::Invalid),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn confirm_key_export(
    ctx: web::Data<Ctx>,
    who: Principal,
    body: web::Json<KeyExportInput>,
) -> Result<HttpResponse, WebError> {
    who.require_admin("confirming a key export")?;
    let input = body.into_inner();
    let mut fields = std::collections::BTreeMap::new();
    let name_ok = !input.repository.is_empty()
        && input.repository.len() <= 64
        && input
            .repository
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !name_ok {
        fields.insert(
            "repository".to_owned(),
            "1-64 of A-Z a-z 0-9 . _ -".to_owned(),
        );
    }
    let digits = input.check.chars().filter(char::is_ascii_hexdigit).count();
    let shape_ok = input.check.len() <= 40
        && input
            .check
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == '-' || c == ' ');
    if digits != 16 || !shape_ok {
        fields.insert(
            "check".to_owned(),
            "16 hex digits, as `vouch key export` printed them".to_owned(),
        );
    }
    if !fields.is_empty() {
        return Err(WebError::Invalid {
            message: "the key export confirmation does not validate".into(),
            fields,
        });
    }
    let report = ctx
        .service()?
        .confirm_key_export(
            RepositoryId::new(input.repository.as_str()),
            input.check,
            who.name.clone(),
        )
        .await?;
    Ok(HttpResponse::Ok().json(view(&report)))
}
