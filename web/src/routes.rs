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
    let started = std::time::Instant::now();
    let res = next.call(req).instrument(span.clone()).await;
    let status = match &res {
        Ok(res) => res.status(),
        Err(e) => e.as_response_error().status_code(),
    };
    span.in_scope(|| tracing::debug!(status = status.as_u16(), "answered"));
    if let Some(metrics) = metrics {
        metrics.observe_request(&label, status.as_u16(), started.elapsed());
    }
    res
}

/// The default service of a resource answering `methods` (e.g. `["GET",
/// "POST"]`): any other method gets 405 `method_not_allowed` with an
/// `Allow` header naming them.
pub(crate) fn method_not_allowed(methods: &[&str]) -> actix_web::Route {
    let allow = methods
        .iter()
        .map(|m| m.to_ascii_uppercase())
        .collect::<Vec<_>>()
        .join(", ");
    web::route().to(move |req: actix_web::HttpRequest| {
        let allow = allow.clone();
        async move {
            Err::<actix_web::HttpResponse, _>(crate::error::WebError::MethodNotAllowed {
                method: req.method().to_string(),
                allow,
            })
        }
    })
}

/// A resource at `$path` with one route per `method => handler` (`get`,
/// `post`, `put`, `delete`) and 405 with `Allow` for every other method.
macro_rules! resource {
    ($path:expr, $($method:ident => $handler:expr),+ $(,)?) => {
        actix_web::web::resource($path)
            $(.route(actix_web::web::$method().to($handler)))+
            .default_service($crate::routes::method_not_allowed(&[$(stringify!($method)),+]))
    };
}
pub(crate) use resource;

/// 404 `not_found` (JSON) for a path under `/api/v1` that no route has.
pub(crate) async fn no_route(
    req: actix_web::HttpRequest,
) -> Result<actix_web::HttpResponse, crate::error::WebError> {
    Err(crate::error::WebError::NotFound(format!(
        "no route {}; the routes are listed in /api/v1/openapi.json",
        req.path()
    )))
}
