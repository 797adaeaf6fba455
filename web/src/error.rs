//! The one error type of the HTTP layer, rendered as JSON.

use std::collections::BTreeMap;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use vouch_actors::service::ServiceError;

/// Errors a request can end with. Every variant documents its HTTP status
/// and the stable `code` of its JSON body `{"code": ..., "message": ...}`
/// (the table in `docs/api.md`).
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// 400 `bad_request`: malformed JSON, query or path. Fix the request.
    #[error("{0}")]
    BadRequest(String),
    /// 401 `unauthorized`: no bearer token, a malformed `Authorization`
    /// header, or a token that matches no stored hash. Carries a
    /// `WWW-Authenticate: Bearer` header. Retrying with the same token will
    /// not help.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// 403 `forbidden`: the token's role may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// 404 `not_found`: no such plan, job, point or file.
    #[error("{0}")]
    NotFound(String),
    /// 409 `conflict`: plan id taken, job already ended, plan already
    /// running.
    #[error("{0}")]
    Conflict(String),
    /// 422 `invalid`: the input does not validate; `fields` says what is
    /// wrong with each field.
    #[error("{message}")]
    Invalid {
        /// For humans.
        message: String,
        /// Per field: what is wrong.
        fields: BTreeMap<String, String>,
    },
    /// 503 `unavailable`: the service is starting or stopping; retry soon.
    #[error("{0}")]
    Unavailable(String),
    /// 500 `internal`: a bug or an I/O failure on the server (logged).
    #[error("{0}")]
    Internal(String),
    /// 500 `metrics_encoding`: the metrics registry could not be encoded.
    #[error("metrics could not be encoded: {0}")]
    Metrics(#[from] prometheus::Error),
    /// 500 `misconfigured`: the application was assembled without a piece
    /// it needs (a bug in the server's setup, not in the request).
    #[error("server misconfigured: {0}")]
    Misconfigured(&'static str),
}

impl WebError {
    /// The stable machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            WebError::BadRequest(_) => "bad_request",
            WebError::Unauthorized(_) => "unauthorized",
            WebError::Forbidden(_) => "forbidden",
            WebError::NotFound(_) => "not_found",
            WebError::Conflict(_) => "conflict",
            WebError::Invalid { .. } => "invalid",
            WebError::Unavailable(_) => "unavailable",
            WebError::Internal(_) => "internal",
            WebError::Metrics(_) => "metrics_encoding",
            WebError::Misconfigured(_) => "misconfigured",
        }
    }

    /// 404 for a thing of `kind` named `id`.
    pub(crate) fn not_found(kind: &str, id: impl std::fmt::Display) -> Self {
        WebError::NotFound(format!("no {kind} {id}"))
    }
}

impl From<ServiceError> for WebError {
    fn from(e: ServiceError) -> Self {
        match &e {
            ServiceError::NoSuchPlan(_) | ServiceError::NoSuchJob(_) => {
                WebError::NotFound(e.to_string())
            }
            ServiceError::AlreadyRunning(_) | ServiceError::AlreadyEnded(_) => {
                WebError::Conflict(e.to_string())
            }
            ServiceError::Unavailable(_) | ServiceError::ShuttingDown => {
                WebError::Unavailable(e.to_string())
            }
            ServiceError::Log(_) => WebError::Internal(e.to_string()),
        }
    }
}

/// The JSON body of every error response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Stable machine-readable code (`not_found`, `invalid`, ...).
    pub code: String,
    /// For humans.
    pub message: String,
    /// Per field, what is wrong (only with `invalid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<BTreeMap<String, String>>,
}

impl ResponseError for WebError {
    fn status_code(&self) -> StatusCode {
        match self {
            WebError::BadRequest(_) => StatusCode::BAD_REQUEST,
            WebError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            WebError::Forbidden(_) => StatusCode::FORBIDDEN,
            WebError::NotFound(_) => StatusCode::NOT_FOUND,
            WebError::Conflict(_) => StatusCode::CONFLICT,
            WebError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            WebError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            WebError::Internal(_) | WebError::Metrics(_) | WebError::Misconfigured(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        if status.is_server_error() {
            tracing::error!(code = self.code(), error = %self, "request failed");
        }
        let mut res = HttpResponse::build(status);
        if matches!(self, WebError::Unauthorized(_)) {
            res.insert_header((
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"vouch\""),
            ));
        }
        let fields = match self {
            WebError::Invalid { fields, .. } => Some(fields.clone()),
            _ => None,
        };
        res.json(ErrorBody {
            code: self.code().to_owned(),
            message: self.to_string(),
            fields,
        })
    }
}
