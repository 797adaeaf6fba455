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
    /// 405 `method_not_allowed`: the path exists but not with this method.
    /// Carries an `Allow` header listing the methods it has.
    #[error("{method} is not allowed here; use {allow}")]
    MethodNotAllowed {
        /// The method the request used.
        method: String,
        /// The methods the path answers, as in the `Allow` header.
        allow: String,
    },
    /// 409 `conflict`: plan id taken, job already ended, plan already
    /// running.
    #[error("{0}")]
    Conflict(String),
    /// 413 `payload_too_large`: the body is larger than the route accepts.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 415 `unsupported_media_type`: the body is not `application/json`.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422 `invalid`: the input does not validate; `fields` says what is
    /// wrong with each field.
    #[error("{message}")]
    Invalid {
        /// For humans.
        message: String,
        /// Per field: what is wrong.
        fields: BTreeMap<String, String>,
    },
    /// 429 `too_many_requests`: this token holds as many event streams as
    /// it may; close one. Carries `Retry-After`.
    #[error("{0}")]
    TooManyRequests(String),
    /// 503 `unavailable`: the service is starting or stopping; retry soon.
    #[error("{0}")]
    Unavailable(String),
    /// 503 `busy`: the server runs as many downloads, browse calls or event
    /// streams as it allows; retry after the `Retry-After` seconds.
    #[error("{0}")]
    Busy(String),
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
            WebError::MethodNotAllowed { .. } => "method_not_allowed",
            WebError::Conflict(_) => "conflict",
            WebError::PayloadTooLarge(_) => "payload_too_large",
            WebError::UnsupportedMediaType(_) => "unsupported_media_type",
            WebError::Invalid { .. } => "invalid",
            WebError::TooManyRequests(_) => "too_many_requests",
            WebError::Unavailable(_) => "unavailable",
            WebError::Busy(_) => "busy",
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
            ServiceError::NoSuchPlan(_)
            | ServiceError::NoSuchJob(_)
            | ServiceError::NoSuchRepository(_) => WebError::NotFound(e.to_string()),
            ServiceError::Mismatch(_) => WebError::Conflict(e.to_string()),
            ServiceError::AlreadyRunning(_) | ServiceError::AlreadyEnded(_) => {
                WebError::Conflict(e.to_string())
            }
            ServiceError::Unavailable(_) | ServiceError::ShuttingDown => {
                WebError::Unavailable(e.to_string())
            }
            ServiceError::Log(_) | ServiceError::LogUnreadable(_) => {
                WebError::Internal(e.to_string())
            }
        }
    }
}

/// The `Retry-After` of 429 `too_many_requests` and 503 `busy`, seconds.
pub(crate) const RETRY_AFTER_SECS: &str = "5";

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
            WebError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            WebError::Conflict(_) => StatusCode::CONFLICT,
            WebError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            WebError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            WebError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            WebError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            WebError::Unavailable(_) | WebError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
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
        // Also on errors that middleware answers before the app's default
        // headers apply (a 401 from the token check).
        res.insert_header((
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ));
        match self {
            WebError::Unauthorized(_) => {
                res.insert_header((
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"vouch\""),
                ));
            }
            WebError::TooManyRequests(_) | WebError::Busy(_) => {
                res.insert_header((
                    header::RETRY_AFTER,
                    HeaderValue::from_static(RETRY_AFTER_SECS),
                ));
            }
            WebError::MethodNotAllowed { allow, .. } => {
                if let Ok(v) = HeaderValue::from_str(allow) {
                    res.insert_header((header::ALLOW, v));
                }
            }
            _ => {}
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

/// Maps a JSON body that could not be read to the error the client can act
/// on: 413 (too large), 415 (not JSON), 400 (not valid JSON for the route).
pub(crate) fn json_payload_error(e: actix_web::error::JsonPayloadError) -> WebError {
    use actix_web::error::JsonPayloadError as J;
    match e {
        J::OverflowKnownLength { length, limit } => {
            WebError::PayloadTooLarge(format!("the body has {length} bytes; send at most {limit}"))
        }
        J::Overflow { limit } => {
            WebError::PayloadTooLarge(format!("the body is too large; send at most {limit} bytes"))
        }
        J::ContentType => WebError::UnsupportedMediaType(
            "send the body as JSON, with Content-Type: application/json".into(),
        ),
        J::Deserialize(e) => {
            WebError::BadRequest(format!("the body is not valid JSON for this route: {e}"))
        }
        other => WebError::BadRequest(format!("the body could not be read: {other}")),
    }
}

/// The error responses of the OpenAPI document: one component per status,
/// each with the JSON [`ErrorBody`]. Handlers list the ones they can
/// answer (`(status = 404, response = NotFound)`); 401 is added to every
/// operation behind a token by the document itself (`openapi.rs`), since
/// the middleware answers it before any handler runs.
pub(crate) mod doc {
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::{Content, Ref, RefOr, Response, ResponseBuilder};

    fn error_response(description: &str) -> ResponseBuilder {
        ResponseBuilder::new().description(description).content(
            "application/json",
            Content::new(Some(Ref::from_schema_name("ErrorBody"))),
        )
    }

    macro_rules! error_responses {
        ($($(#[$doc:meta])* $name:ident => $description:literal;)*) => {$(
            $(#[$doc])*
            pub(crate) enum $name {}

            impl<'r> utoipa::ToResponse<'r> for $name {
                fn response() -> (&'r str, RefOr<Response>) {
                    (stringify!($name), error_response($description).build().into())
                }
            }
        )*};
    }

    error_responses! {
        /// 400 `bad_request`.
        BadRequest => "`bad_request`: malformed JSON, query or header; fix the request";
        /// 403 `forbidden`.
        Forbidden => "`forbidden`: the token's role may not do this";
        /// 404 `not_found`.
        NotFound => "`not_found`: no such plan, job, point or file (or not one this token may see)";
        /// 409 `conflict`.
        Conflict => "`conflict`: the thing exists already, has ended, or is running";
        /// 413 `payload_too_large`.
        PayloadTooLarge => "`payload_too_large`: the body is larger than the route accepts";
        /// 415 `unsupported_media_type`.
        UnsupportedMediaType => "`unsupported_media_type`: send the body as `application/json`";
        /// 422 `invalid`.
        Invalid => "`invalid`: the input does not validate; `fields` says what is wrong with each field";
        /// 500 `internal`.
        Internal => "`internal`: a bug or an I/O failure on the server (logged)";
        /// 503 `unavailable`.
        Unavailable => "`unavailable`: the service is starting or stopping, or no repository is open; retry soon";
        /// 429 `too_many_requests` (with `Retry-After`).
        TooManyRequests => "`too_many_requests`: this token holds as many event streams as it may (4); close one, or retry after `Retry-After` seconds";
        /// 503 `unavailable` or `busy` (with `Retry-After`).
        Busy => "`busy`: the server runs as many downloads, browse calls or event streams as it allows; retry after `Retry-After` seconds (`unavailable`: the service is starting or stopping)";
    }

    /// 401 `unauthorized`, with its `WWW-Authenticate` header.
    pub(crate) enum Unauthorized {}

    impl<'r> utoipa::ToResponse<'r> for Unauthorized {
        fn response() -> (&'r str, RefOr<Response>) {
            let response = error_response(
                "`unauthorized`: no bearer token, or one that is unknown or revoked",
            )
            .header(
                "WWW-Authenticate",
                HeaderBuilder::new()
                    .schema(utoipa::openapi::schema::Object::with_type(
                        utoipa::openapi::schema::Type::String,
                    ))
                    .description(Some("`Bearer realm=\"vouch\"`"))
                    .build(),
            )
            .build();
            ("Unauthorized", response.into())
        }
    }
}
