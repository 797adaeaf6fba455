//! Vouch's HTTP face: health, metrics and the versioned API (`/api/v1`).
//!
//! [`configure`] is the route table, shared by the binary and the tests;
//! [`app`] wraps it with the shared state and middleware; [`serve`] runs it
//! on a listener the caller bound (tests bind `127.0.0.1:0`).
//!
//! | route | auth | answer |
//! |---|---|---|
//! | `GET /healthz` | none | `{"status":"ok","version":...}` |
//! | `GET /metrics` | none | Prometheus text format |
//! | `/api/v1/...` | `Authorization: Bearer <token>` | JSON; 401 JSON error without a valid token |
//! | `GET /api/v1/whoami` | bearer | `{"name":...,"role":...}` |

#![warn(missing_docs)]

mod auth;
mod error;
mod metrics;
mod routes;

use std::net::TcpListener;

use actix_web::body::MessageBody;
use actix_web::dev::{Server, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::middleware::from_fn;
use actix_web::{web, App, HttpServer};

pub use auth::{require_token, Principal, Role, TokenHash, TokenStore};
pub use error::WebError;
pub use metrics::{Metrics, BUILD_INFO, CONTENT_TYPE, HTTP_REQUESTS_TOTAL, UNMATCHED_ROUTE};
pub use routes::VERSION;

/// What every worker of the HTTP server shares.
#[derive(Clone)]
pub struct AppState {
    metrics: web::Data<Metrics>,
    tokens: web::Data<TokenStore>,
}

impl AppState {
    /// State with fresh metrics for this build and the given tokens.
    pub fn new(tokens: TokenStore) -> Result<Self, WebError> {
        Ok(AppState {
            metrics: web::Data::new(Metrics::new(VERSION)?),
            tokens: web::Data::new(tokens),
        })
    }

    /// The metrics, to register more or to observe from outside HTTP.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// The route table: health and metrics open, `/api/v1` behind
/// [`require_token`]. Needs [`Metrics`] and [`TokenStore`] as app data
/// (see [`app`]).
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(routes::healthz))
        .route("/metrics", web::get().to(routes::metrics))
        .service(
            web::scope("/api/v1")
                .wrap(from_fn(require_token))
                .route("/whoami", web::get().to(routes::whoami)),
        );
}

/// The whole application: state, request counting and [`configure`].
pub fn app(
    state: AppState,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    App::new()
        .app_data(state.metrics)
        .app_data(state.tokens)
        .wrap(from_fn(routes::count_requests))
        .configure(configure)
}

/// Serves [`app`] on `listener` until the returned server is stopped
/// (through its handle) or the process gets SIGINT/SIGTERM.
///
/// The caller binds the listener, so `127.0.0.1:0` picks a free port and
/// `listener.local_addr()` tells which.
pub fn serve(listener: TcpListener, state: AppState) -> std::io::Result<Server> {
    Ok(HttpServer::new(move || app(state.clone()))
        .listen(listener)?
        .run())
}
