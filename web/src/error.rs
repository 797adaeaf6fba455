//! The one error type of the HTTP layer, rendered as JSON.

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

/// Errors a request can end with. Every variant documents its HTTP status
/// and the stable `code` of its JSON body `{"code": ..., "message": ...}`.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// 401 `unauthorized`: no bearer token, a malformed `Authorization`
    /// header, or a token that matches no stored hash. Carries a
    /// `WWW-Authenticate: Bearer` header. Retrying with the same token will
    /// not help.
    #[error("{0}")]
    Unauthorized(&'static str),
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
            WebError::Unauthorized(_) => "unauthorized",
            WebError::Metrics(_) => "metrics_encoding",
            WebError::Misconfigured(_) => "misconfigured",
        }
    }
}

/// The JSON body of every error response.
#[derive(Debug, Serialize)]
struct ErrorBody<'a> {
    code: &'a str,
    message: String,
}

impl ResponseError for WebError {
    fn status_code(&self) -> StatusCode {
        match self {
            WebError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            WebError::Metrics(_) | WebError::Misconfigured(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.status_code());
        if matches!(self, WebError::Unauthorized(_)) {
            res.insert_header((
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"vouch\""),
            ));
        }
        res.json(ErrorBody {
            code: self.code(),
            message: self.to_string(),
        })
    }
}
