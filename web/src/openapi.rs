//! The OpenAPI 3 document, generated from the handlers' annotations.

use actix_web::HttpResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::{events, jobs, misc, plans, points};

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
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
        points::list, points::get, points::lock, points::files, points::file,
        events::list, events::stream,
        misc::alerts, misc::repositories,
    ),
    components(schemas(crate::error::ErrorBody))
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
