//! The handlers. Thin: parse, authorise, ask, render.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{web, Error, HttpResponse};
use serde::Serialize;

use crate::auth::Principal;
use crate::error::WebError;
use crate::metrics::{Metrics, CONTENT_TYPE, UNMATCHED_ROUTE};

/// The version reported by `/healthz` and `vouch_build_info`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Body of `GET /healthz`.
#[derive(Debug, Serialize)]
struct Health {
    status: &'static str,
    version: &'static str,
}

/// `GET /healthz`: the process is up and answering (no auth).
pub(crate) async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health {
        status: "ok",
        version: VERSION,
    })
}

/// `GET /metrics`: Prometheus text format (no auth).
pub(crate) async fn metrics(metrics: web::Data<Metrics>) -> Result<HttpResponse, WebError> {
    let text = metrics.render()?;
    Ok(HttpResponse::Ok().content_type(CONTENT_TYPE).body(text))
}

/// `GET /api/v1/whoami`: the caller's token name and role.
pub(crate) async fn whoami(principal: Principal) -> HttpResponse {
    HttpResponse::Ok().json(principal)
}

/// Middleware (for `middleware::from_fn`) counting every answered request
/// in [`crate::metrics::HTTP_REQUESTS_TOTAL`], by route pattern and status.
pub(crate) async fn count_requests(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let metrics = req.app_data::<web::Data<Metrics>>().cloned();
    // The pattern comes from the route table, not from routing having run,
    // so it is known even when a middleware answers early (e.g. a 401).
    let route = req.match_pattern();
    let res = next.call(req).await;
    if let Some(metrics) = metrics {
        let status = match &res {
            Ok(res) => res.status(),
            Err(e) => e.as_response_error().status_code(),
        };
        let route = route.as_deref().unwrap_or(UNMATCHED_ROUTE);
        metrics.observe_request(route, status.as_u16());
    }
    res
}
