//! Middleware shared by every route: a tracing span and request counting.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{web, Error};
use tracing::Instrument;

use crate::metrics::{Metrics, UNMATCHED_ROUTE};

/// Middleware (for `middleware::from_fn`) that runs each request in a
/// `http` span (method and route pattern, never the token or raw ids) and
/// counts every answered request in
/// [`crate::metrics::HTTP_REQUESTS_TOTAL`], by route pattern and status.
pub(crate) async fn count_requests(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let metrics = req.app_data::<web::Data<Metrics>>().cloned();
    // The pattern comes from the route table, not from routing having run,
    // so it is known even when a middleware answers early (e.g. a 401).
    let route = req.match_pattern();
    let label = route.as_deref().unwrap_or(UNMATCHED_ROUTE).to_owned();
    let span = tracing::info_span!("http", method = %req.method(), route = %label);
    let res = next.call(req).instrument(span.clone()).await;
    let status = match &res {
        Ok(res) => res.status(),
        Err(e) => e.as_response_error().status_code(),
    };
    span.in_scope(|| tracing::debug!(status = status.as_u16(), "answered"));
    if let Some(metrics) = metrics {
        metrics.observe_request(&label, status.as_u16());
    }
    res
}
