//! The OpenAPI 3 document, generated from the handlers' annotations.

use actix_web::HttpResponse;
use utoipa::openapi::path::ParameterIn;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Ref, RefOr, Required};
use utoipa::{Modify, OpenApi, ToResponse};

use crate::api::{
    agent, events, jobs, log_head, misc, plans, points, repo, reports, security, verify_reports,
};
use crate::error::doc as errors;

struct BearerAuth;

impl Modify for BearerAuth {
    /// Declares the bearer scheme, and 401 and 403 on every operation that
    /// needs it: `require_token` answers 401 before any handler runs, and
    /// 403 to a `metrics` token anywhere but `/metrics`, so the handlers'
    /// own annotations do not list them. Marks path parameters required.
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        let (name, response) = <errors::Unauthorized as ToResponse>::response();
        components.responses.insert(name.to_owned(), response);
        let (forbidden, response) = <errors::Forbidden as ToResponse>::response();
        components.responses.insert(forbidden.to_owned(), response);
        for item in openapi.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
                &mut item.head,
                &mut item.options,
                &mut item.trace,
            ]
            .into_iter()
            .flatten()
            {
                // OpenAPI requires path parameters to be required; the
                // derive leaves `schema_with` ones optional.
                for param in op.parameters.iter_mut().flatten() {
                    if param.parameter_in == ParameterIn::Path {
                        param.required = Required::True;
                    }
                }
                if op.security.as_ref().is_some_and(|s| !s.is_empty()) {
                    op.responses
                        .responses
                        .insert("401".to_owned(), RefOr::Ref(Ref::from_response_name(name)));
                    op.responses
                        .responses
                        .entry("403".to_owned())
                        .or_insert_with(|| RefOr::Ref(Ref::from_response_name(forbidden)));
                }
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Vouch API", description = "Backups proven restorable: plans, jobs, recovery points, events, alerts. See docs/api.md."),
    modifiers(&BearerAuth),
    paths(
        misc::healthz, misc::readyz, misc::metrics, openapi_json, misc::whoami, misc::overview,
        plans::list, plans::defaults, plans::create, plans::get, plans::put, plans::delete,
        plans::run, plans::pause, plans::resume,
        jobs::list, jobs::get, jobs::cancel,
        points::list, points::get, points::lock, points::unlock, points::restore, points::files, points::file, points::archive,
        repo::get_kind, repo::head_kind, repo::get_file, repo::head_file, repo::put_file, repo::delete_file,
        repo::missing, repo::sync,
        agent::register, agent::next_job, agent::renew, agent::result, agent::list,
        events::list, events::stream, log_head::head,
        security::get, security::confirm_key_export,
        misc::alerts, misc::repositories, verify_reports::create, reports::get,
    ),
    components(
        schemas(crate::error::ErrorBody, verify_reports::PointReport, reports::ReportBody),
        responses(
            errors::BadRequest, errors::Forbidden, errors::NotFound, errors::Conflict,
            errors::PayloadTooLarge, errors::UnsupportedMediaType, errors::Invalid,
            errors::Internal, errors::Unavailable, errors::Busy, errors::TooManyRequests,
        )
    )
)]
struct ApiDoc;

/// The OpenAPI document as pretty JSON (what `docs/openapi.json` holds).
pub fn openapi_json_text() -> String {
    let mut doc = ApiDoc::openapi();
    doc.info.version = crate::VERSION.to_owned();
    doc.to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()))
        + "\n"
}

/// This API as OpenAPI 3 (no auth).
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "health",
    responses((status = 200, description = "this API as OpenAPI 3", content_type = "application/json")))]
pub(crate) async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(openapi_json_text())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    /// OpenAPI: an operationId identifies one operation of the document.
    #[test]
    fn operation_ids_are_unique() {
        let doc: serde_json::Value =
            serde_json::from_str(&super::openapi_json_text()).unwrap_or_default();
        let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (path, ops) in doc["paths"].as_object().into_iter().flatten() {
            for (method, op) in ops.as_object().into_iter().flatten() {
                if let Some(id) = op["operationId"].as_str() {
                    seen.entry(id.to_owned())
                        .or_default()
                        .push(format!("{method} {path}"));
                }
            }
        }
        assert!(seen.len() > 20, "{seen:?}");
        let doubled: Vec<_> = seen.iter().filter(|(_, v)| v.len() > 1).collect();
        assert!(doubled.is_empty(), "{doubled:?}");
    }
}
