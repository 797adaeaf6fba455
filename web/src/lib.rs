//! Vouch's HTTP face: health, metrics, the versioned API (`/api/v1`) and
//! its OpenAPI document. The contract is `docs/api.md`.
//!
//! [`configure`] is the route table, shared by the binary and the tests;
//! [`app`] wraps it with the shared state and middleware; [`serve`] runs it
//! on a listener the caller bound (tests bind `127.0.0.1:0`).
//!
//! | route | auth |
//! |---|---|
//! | `GET /healthz`, `GET /readyz`, `GET /api/v1/openapi.json`, console assets | none |
//! | `GET /metrics`, everything else under `/api/v1` | `Authorization: Bearer <token>` |
//!
//! Without a [`ServiceHandle`] (see [`AppState::with_service`]) only health,
//! metrics and whoami answer; the API answers 503 `unavailable`.

#![warn(missing_docs)]

mod api;
mod auth;
mod browse;
mod error;
mod limits;
mod metrics;
mod openapi;
mod plan_files;
mod repo_store;
mod routes;
pub mod token_usage;
mod validate;
mod views;

mod console;
pub use console::configure_console;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{Server, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::middleware::from_fn;
use actix_web::{web, App, HttpServer};

/// How long a stopping server waits for requests still running (the live
/// event stream ends at once: it does not count).
pub const HTTP_SHUTDOWN_TIMEOUT_SECS: u64 = 5;
use vouch_actors::service::{AgentBoard, ServiceHandle};
use vouch_events::sources::SourcePolicy;

pub use api::agent::{
    LeasedJob, AGENT_CLOCK_HEADER, AGENT_FEATURES_HEADER, AGENT_VERSION_HEADER, FEATURE_HOOKS,
    HOOK_REASON_MAX, LEASE_TTL, MAX_WAIT, RESULT_ERROR_KIND_MAX, RESULT_ERROR_MAX, SEEN_EVERY,
};
pub use api::misc::VERSION;
pub use auth::{
    require_token, FailedAuth, LiveTokens, Principal, Role, TokenEntry, TokenError, TokenHash,
    TokenStore, FAILED_AUTH_LIMIT, FAILED_AUTH_WINDOW, TOKEN_PREFIX,
};
pub use browse::{
    ArchiveWriter, Browse, BrowseEntry, BrowseError, EntryKind, FileDownload, FileReader,
    RepoStats, StoredLock,
};
pub use error::WebError;
pub use limits::{MAX_BROWSE_CALLS, MAX_DOWNLOADS, MAX_STREAMS, MAX_STREAMS_PER_TOKEN};
pub use metrics::{
    Metrics, BACKUP_BYTES_ADDED, BACKUP_BYTES_READ, BUILD_INFO, CONTENT_TYPE, EVENT_LOG_BYTES,
    EVENT_LOG_LAST_SEQ, HTTP_REQUESTS_TOTAL, JOB_DURATION, PLAN_LAST_RECOVERABLE, PLAN_PROTECTION,
    RECOVERY_POINTS, SECURITY_CHECK, UNMATCHED_ROUTE, VERIFICATION_COVERAGE, WEBHOOK_DELIVERIES,
};
pub use openapi::openapi_json_text;
pub use plan_files::leased_options;
pub use repo_store::{
    FileStat, NewAgentRepository, PutOutcome, PutRules, RepoFile, RepoStore, RepoStoreError,
    SnapshotFacts,
};

use api::{
    agent, events, jobs, log_head, misc, plans, points, repo, reports, security, verify_reports,
    Ctx,
};

/// What every worker of the HTTP server shares.
#[derive(Clone)]
pub struct AppState {
    metrics: web::Data<Metrics>,
    tokens: web::Data<LiveTokens>,
    service: Option<ServiceHandle>,
    browse: Option<Arc<dyn Browse>>,
    log_dir: Option<PathBuf>,
    ctx: Option<web::Data<Ctx>>,
    hsts: bool,
    sources: Arc<SourcePolicy>,
    min_every: std::time::Duration,
    repo_store: Option<Arc<dyn RepoStore>>,
    agents: Option<Arc<AgentBoard>>,
    lease_ttl: std::time::Duration,
    seen_every: std::time::Duration,
    chromium: PathBuf,
}

/// The shortest `verification.every`, `restore_test.every` and
/// `restore_test.full_every` a plan may set unless the administrator sets
/// another ([`AppState::with_min_every`]): shorter intervals keep
/// verification and restore-test jobs running back to back.
pub const MIN_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

impl AppState {
    /// State with fresh metrics for this build and the given tokens, and no
    /// service yet.
    pub fn new(tokens: TokenStore) -> Result<Self, WebError> {
        Self::with_tokens(LiveTokens::fixed(tokens))
    }

    /// State whose tokens follow their file (see [`LiveTokens`]).
    pub fn with_tokens(tokens: LiveTokens) -> Result<Self, WebError> {
        Ok(AppState {
            metrics: web::Data::new(Metrics::new(VERSION)?),
            tokens: web::Data::new(tokens),
            service: None,
            browse: None,
            log_dir: None,
            ctx: None,
            hsts: false,
            sources: Arc::new(SourcePolicy::unrestricted()),
            min_every: MIN_EVERY,
            repo_store: None,
            agents: None,
            lease_ttl: api::agent::LEASE_TTL,
            seen_every: api::agent::SEEN_EVERY,
            chromium: vouch_actors::report::pdf::default_chromium(),
        })
    }

    /// The running service the API answers from.
    pub fn with_service(mut self, service: ServiceHandle) -> Self {
        self.service = Some(service);
        self.ctx = None;
        self
    }

    /// The engine's file browser and repository statistics.
    pub fn with_browse(mut self, browse: Arc<dyn Browse>) -> Self {
        self.browse = Some(browse);
        self.ctx = None;
        self
    }

    /// Serves the repository protocol (`/repo/v1/`) over `store`.
    pub fn with_repo_store(mut self, store: Arc<dyn RepoStore>) -> Self {
        self.repo_store = Some(store);
        self.ctx = None;
        self
    }

    /// Takes agents: their long-polls and leases go through `board`, which
    /// the backup worker offers their jobs on.
    pub fn with_agents(mut self, board: Arc<AgentBoard>) -> Self {
        self.agents = Some(board);
        self.ctx = None;
        self
    }

    /// How long an agent's lease lasts unless renewed (default
    /// [`LEASE_TTL`]).
    pub fn with_lease_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.lease_ttl = ttl;
        self.ctx = None;
        self
    }

    /// How often an agent's calls are recorded as `agent.seen` at most
    /// (default [`SEEN_EVERY`]); keep it well below the `AgentLost`
    /// threshold.
    pub fn with_agent_seen_every(mut self, every: std::time::Duration) -> Self {
        self.seen_every = every;
        self.ctx = None;
        self
    }

    /// The administrator's rules over plan sources, checked when a plan is
    /// created or changed (unrestricted unless set: `vouch serve` always
    /// sets it from its configuration).
    pub fn with_source_policy(mut self, policy: SourcePolicy) -> Self {
        self.sources = Arc::new(policy);
        self.ctx = None;
        self
    }

    /// The shortest proof interval a plan may set (default [`MIN_EVERY`]).
    pub fn with_min_every(mut self, min: std::time::Duration) -> Self {
        self.min_every = min;
        self.ctx = None;
        self
    }

    /// The event log's directory, measured for `vouch_event_log_bytes`.
    pub fn with_log_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.log_dir = Some(dir.into());
        self.ctx = None;
        self
    }

    /// The Chromium that prints PDF reports (default: the first of
    /// `chromium`, `chromium-browser`, `google-chrome` on `PATH`).
    pub fn with_chromium(mut self, chromium: impl Into<PathBuf>) -> Self {
        self.chromium = chromium.into();
        self.ctx = None;
        self
    }

    /// The metrics, to register more or to observe from outside HTTP.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Rebuilds the event-derived metrics from the log and follows the live
    /// stream; runs until the service stops. [`serve`] spawns it.
    pub async fn follow_events(&self) {
        if let Some(h) = &self.service {
            self.metrics.clone().into_inner().follow(h.clone()).await;
        }
    }

    fn ctx(&self) -> web::Data<Ctx> {
        self.ctx.clone().unwrap_or_else(|| {
            web::Data::new(Ctx {
                service: self.service.clone(),
                browse: self.browse.clone(),
                log_dir: self.log_dir.clone(),
                sources: self.sources.clone(),
                min_every: self.min_every,
                limits: limits::Limits::default(),
                repo_store: self.repo_store.clone(),
                agents: self.agents.clone(),
                refusals: api::repo::RefusalLimiter::default(),
                agent_seen: api::agent::SeenLimiter::new(self.seen_every),
                head_exports: api::agent::SeenLimiter::new(api::log_head::RECORD_EVERY),
                lease_ttl: self.lease_ttl,
                chromium: self.chromium.clone(),
            })
        })
    }

    /// Shares one context between every worker.
    /// Every answer carries `Strict-Transport-Security` ([`HSTS`]):
    /// [`serve`] sets it when it serves TLS.
    pub fn with_hsts(mut self) -> Self {
        self.hsts = true;
        self
    }

    fn sealed(mut self) -> Self {
        self.ctx = Some(self.ctx());
        self
    }
}

fn bad_request(message: String) -> actix_web::Error {
    WebError::BadRequest(message).into()
}

/// The route table: health, readiness, the OpenAPI document and the
/// console open; `/metrics` and `/api/v1` behind [`require_token`]. Needs
/// the app data [`app`] installs.
pub fn configure(cfg: &mut web::ServiceConfig) {
    use routes::resource;
    cfg.app_data(
        web::JsonConfig::default().error_handler(|e, _| error::json_payload_error(e).into()),
    )
    .app_data(web::QueryConfig::default().error_handler(|e, _| bad_request(e.to_string())))
    .app_data(web::PathConfig::default().error_handler(|e, _| bad_request(e.to_string())))
    .service(resource!("/healthz", get => misc::healthz))
    .service(resource!("/readyz", get => misc::readyz))
    .service(resource!("/metrics", get => misc::metrics).wrap(from_fn(require_token)))
    .service(resource!("/api/v1/openapi.json", get => openapi::openapi_json))
    .service(
        web::scope("/api/v1")
            .wrap(from_fn(require_token))
            .service(resource!("/whoami", get => misc::whoami))
            .service(resource!("/agent/register", post => agent::register))
            .service(resource!("/agent/jobs", get => agent::next_job))
            .service(resource!("/agent/leases/{lease}/renew", post => agent::renew))
            .service(resource!("/agent/leases/{lease}/result", post => agent::result))
            .service(resource!("/agents", get => agent::list))
            .service(resource!("/overview", get => misc::overview))
            .service(resource!("/plans", get => plans::list, post => plans::create))
            .service(resource!("/plans/defaults", get => plans::defaults))
            .service(resource!("/plans/{id}",
                    get => plans::get, put => plans::put, delete => plans::delete))
            .service(resource!("/plans/{id}/run", post => plans::run))
            .service(resource!("/plans/{id}/pause", post => plans::pause))
            .service(resource!("/plans/{id}/resume", post => plans::resume))
            .service(resource!("/jobs", get => jobs::list))
            .service(resource!("/jobs/{id}", get => jobs::get))
            .service(resource!("/jobs/{id}/cancel", post => jobs::cancel))
            .service(resource!("/points", get => points::list))
            .service(resource!("/points/{id}", get => points::get))
            .service(resource!("/points/{id}/lock", post => points::lock))
            .service(resource!("/points/{id}/unlock", post => points::unlock))
            .service(resource!("/points/{id}/restore", post => points::restore))
            .service(resource!("/points/{id}/files", get => points::files))
            .service(resource!("/points/{id}/file", get => points::file))
            .service(resource!("/points/{id}/archive", get => points::archive))
            .service(resource!("/events", get => events::list))
            .service(resource!("/events/stream", get => events::stream))
            .service(resource!("/log/head", get => log_head::head))
            .service(resource!("/security", get => security::get))
            .service(resource!("/security/key-exports", post => security::confirm_key_export))
            .service(resource!("/alerts", get => misc::alerts))
            .service(resource!("/reports", get => reports::get))
            .service(resource!("/repositories", get => misc::repositories))
            .service(resource!("/repositories/{id}/verify-reports",
                    post => verify_reports::create))
            .default_service(web::to(routes::no_route)),
    )
    .service(
        web::scope("/repo/v1")
            .wrap(from_fn(require_token))
            .service(resource!("/{repo}/missing", post => repo::missing))
            .service(resource!("/{repo}/sync", post => repo::sync))
            .service(resource!("/{repo}/{kind}", get => repo::get_kind, head => repo::head_kind))
            .service(resource!("/{repo}/{kind}/{name}",
                    get => repo::get_file, head => repo::head_file,
                    put => repo::put_file, delete => repo::delete_file))
            .default_service(web::to(routes::no_route)),
    );
    crate::configure_console(cfg);
}

/// The `Strict-Transport-Security` value sent over TLS: a year, so a
/// browser that once reached the console over HTTPS never falls back to
/// plain HTTP (no `includeSubDomains`: the host's other names are not ours).
pub const HSTS: &str = "max-age=31536000";

/// The whole application: state, request spans and counting, [`configure`].
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
    let ctx = state.ctx();
    let mut headers = actix_web::middleware::DefaultHeaders::new();
    // Every answer, API and downloads included: never sniffed as another type.
    headers = headers.add((actix_web::http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"));
    if state.hsts {
        headers = headers.add((actix_web::http::header::STRICT_TRANSPORT_SECURITY, HSTS));
    }
    App::new()
        .app_data(state.metrics)
        .app_data(state.tokens)
        .app_data(ctx)
        .wrap(headers)
        .wrap(from_fn(routes::count_requests))
        .configure(configure)
}

/// Serves [`app`] on `listener` until the returned server is stopped
/// (through its handle) or the process gets SIGINT/SIGTERM. With a service,
/// it also starts the metrics' event follower ([`AppState::follow_events`]),
/// so it must be called inside a Tokio runtime (the actix system).
///
/// The caller binds the listener, so `127.0.0.1:0` picks a free port and
/// `listener.local_addr()` tells which. With `tls`, the listener speaks
/// HTTPS only (rustls); the caller builds the configuration, so a bad
/// certificate is refused before anything listens.
pub fn serve(
    listener: TcpListener,
    state: AppState,
    tls: Option<rustls::ServerConfig>,
) -> std::io::Result<Server> {
    let state = if tls.is_some() {
        state.with_hsts()
    } else {
        state
    }
    .sealed();
    if tokio::runtime::Handle::try_current().is_ok() {
        if state.service.is_some() {
            let follower = state.clone();
            tokio::spawn(async move { follower.follow_events().await });
        }
        // Weak: the writer ends with the server (whose token store writes
        // what is left when it is dropped).
        let tokens = std::sync::Arc::downgrade(&state.tokens.clone().into_inner());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(token_usage::USAGE_FLUSH_EVERY);
            loop {
                tick.tick().await;
                let Some(t) = tokens.upgrade() else { break };
                t.flush_usage();
            }
        });
    }
    // The binary owns the signals (SIGTERM drains jobs first, SIGHUP
    // reloads): the server stops when its handle says so, and gives
    // requests still running a few seconds.
    let server = HttpServer::new(move || app(state.clone()))
        .disable_signals()
        .shutdown_timeout(HTTP_SHUTDOWN_TIMEOUT_SECS);
    let server = match tls {
        Some(config) => server.listen_rustls_0_23(listener, config)?,
        None => server.listen(listener)?,
    };
    Ok(server.run())
}
