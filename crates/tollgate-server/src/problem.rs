//! Errors as `application/problem+json` (RFC 9457), each with a stable `type` URI.
//!
//! The `type` of every problem is `https://tollgate.dev/problems/` followed by one slug of
//! [`ProblemKind`]; clients branch on it (or on `status`), never on `title` or `detail`, which are for
//! people. A `5xx` detail never carries a store's message: that goes to the log.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tollgate_core::StoreError;
use tollgate_runtime::RuntimeError;

/// The prefix of every problem `type`.
pub const PROBLEM_BASE: &str = "https://tollgate.dev/problems/";

/// The media type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The kinds of problem the API answers with; each has one HTTP status and one slug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// 400 `malformed-json`: the body is not JSON.
    MalformedJson,
    /// 401 `unauthorized`: a missing or unknown bearer token.
    Unauthorized,
    /// 403 `forbidden`: the caller lacks the role, or may not act on this run.
    Forbidden,
    /// 404 `not-found`: no such run, agent or path.
    NotFound,
    /// 405 `method-not-allowed`: the path exists, the method does not.
    MethodNotAllowed,
    /// 409 `conflict`: the run is not in a state that allows this (not waiting, stale digest, already
    /// decided, already terminal, or another request acted first).
    Conflict,
    /// 413 `payload-too-large`: the body is over the configured limit.
    PayloadTooLarge,
    /// 415 `unsupported-media-type`: a body that is declared as something other than JSON.
    UnsupportedMediaType,
    /// 422 `invalid-request`: well-formed JSON with wrong types, missing or unknown fields, a value
    /// that breaks a rule of API.md, or a bad query parameter.
    InvalidRequest,
    /// 422 `invalid-decision`: a decision that does not fit the held turn (unknown call id, a call that
    /// takes no decision, edited arguments failing the tool's schema).
    InvalidDecision,
    /// 500 `internal`: the server failed; nothing about it is disclosed beyond this.
    Internal,
    /// 503 `unavailable`: the store cannot be reached right now; retry later.
    Unavailable,
}

impl ProblemKind {
    /// Every kind, for documentation and tests.
    pub const ALL: [ProblemKind; 12] = [
        ProblemKind::MalformedJson,
        ProblemKind::Unauthorized,
        ProblemKind::Forbidden,
        ProblemKind::NotFound,
        ProblemKind::MethodNotAllowed,
        ProblemKind::Conflict,
        ProblemKind::PayloadTooLarge,
        ProblemKind::UnsupportedMediaType,
        ProblemKind::InvalidRequest,
        ProblemKind::InvalidDecision,
        ProblemKind::Internal,
        ProblemKind::Unavailable,
    ];

    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            ProblemKind::MalformedJson => StatusCode::BAD_REQUEST,
            ProblemKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ProblemKind::Forbidden => StatusCode::FORBIDDEN,
            ProblemKind::NotFound => StatusCode::NOT_FOUND,
            ProblemKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ProblemKind::Conflict => StatusCode::CONFLICT,
            ProblemKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ProblemKind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ProblemKind::InvalidRequest | ProblemKind::InvalidDecision => StatusCode::UNPROCESSABLE_ENTITY,
            ProblemKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ProblemKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The slug after [`PROBLEM_BASE`].
    pub fn slug(self) -> &'static str {
        match self {
            ProblemKind::MalformedJson => "malformed-json",
            ProblemKind::Unauthorized => "unauthorized",
            ProblemKind::Forbidden => "forbidden",
            ProblemKind::NotFound => "not-found",
            ProblemKind::MethodNotAllowed => "method-not-allowed",
            ProblemKind::Conflict => "conflict",
            ProblemKind::PayloadTooLarge => "payload-too-large",
            ProblemKind::UnsupportedMediaType => "unsupported-media-type",
            ProblemKind::InvalidRequest => "invalid-request",
            ProblemKind::InvalidDecision => "invalid-decision",
            ProblemKind::Internal => "internal",
            ProblemKind::Unavailable => "unavailable",
        }
    }

    /// The full `type` URI.
    pub fn type_uri(self) -> String {
        format!("{PROBLEM_BASE}{}", self.slug())
    }

    /// A short, fixed summary.
    pub fn title(self) -> &'static str {
        match self {
            ProblemKind::MalformedJson => "Malformed JSON",
            ProblemKind::Unauthorized => "Unauthorized",
            ProblemKind::Forbidden => "Forbidden",
            ProblemKind::NotFound => "Not found",
            ProblemKind::MethodNotAllowed => "Method not allowed",
            ProblemKind::Conflict => "Conflict",
            ProblemKind::PayloadTooLarge => "Payload too large",
            ProblemKind::UnsupportedMediaType => "Unsupported media type",
            ProblemKind::InvalidRequest => "Invalid request",
            ProblemKind::InvalidDecision => "Invalid decision",
            ProblemKind::Internal => "Internal error",
            ProblemKind::Unavailable => "Service unavailable",
        }
    }
}

/// An error answer: a kind and a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {detail}", kind.title())]
pub struct ApiError {
    /// What kind of problem.
    pub kind: ProblemKind,
    /// What exactly went wrong.
    pub detail: String,
}

impl ApiError {
    /// A problem of this kind.
    pub fn new(kind: ProblemKind, detail: impl Into<String>) -> Self {
        Self { kind, detail: detail.into() }
    }

    /// 422 `invalid-request`.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(ProblemKind::InvalidRequest, detail)
    }

    /// 404 `not-found`.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(ProblemKind::NotFound, detail)
    }

    /// 403 `forbidden`.
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(ProblemKind::Forbidden, detail)
    }

    /// The problem document.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "type": self.kind.type_uri(),
            "title": self.kind.title(),
            "status": self.kind.status().as_u16(),
            "detail": self.detail,
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.kind.status(), self.body().to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.kind == ProblemKind::Unauthorized {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<RuntimeError> for ApiError {
    fn from(error: RuntimeError) -> Self {
        match error {
            RuntimeError::UnknownAgent(name) => ApiError::not_found(format!("no agent is named `{name}`")),
            RuntimeError::NotFound(id) => ApiError::not_found(format!("no run has id `{id}`")),
            RuntimeError::Invalid(detail) => ApiError::invalid(detail),
            RuntimeError::Decision(e) => ApiError::new(ProblemKind::InvalidDecision, e.to_string()),
            RuntimeError::Conflict(detail) => ApiError::new(ProblemKind::Conflict, detail),
            RuntimeError::Forbidden(detail) => ApiError::forbidden(detail),
            RuntimeError::Store(e) => ApiError::from(e),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound(id) => ApiError::not_found(format!("no run has id `{id}`")),
            StoreError::Conflict { detail, .. } => ApiError::new(ProblemKind::Conflict, detail),
            StoreError::Transition(t) => ApiError::new(ProblemKind::Conflict, t.to_string()),
            // Names the run and the key id (never key material), so an operator knows which key to add.
            StoreError::Undecryptable { id, detail } => {
                tracing::error!(run = %id, %detail, "run cannot be decrypted");
                ApiError::new(
                    ProblemKind::Internal,
                    format!("run {id} cannot be decrypted with the configured keys: {detail}"),
                )
            }
            other if other.is_retryable() => {
                tracing::warn!(error = %other, "store unavailable");
                ApiError::new(ProblemKind::Unavailable, "the run store cannot be reached right now; try again")
            }
            other => {
                tracing::error!(error = %other, "store failure");
                ApiError::new(ProblemKind::Internal, "the server failed; see its log")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_unique_and_types_are_stable() {
        let mut slugs: Vec<&str> = ProblemKind::ALL.iter().map(|k| k.slug()).collect();
        slugs.sort_unstable();
        slugs.dedup();
        assert_eq!(slugs.len(), ProblemKind::ALL.len());
        assert_eq!(ProblemKind::Conflict.type_uri(), "https://tollgate.dev/problems/conflict");
    }

    #[test]
    fn a_store_failure_discloses_nothing() {
        let error = ApiError::from(StoreError::Corrupt { id: "r".into(), detail: "secret row text".into() });
        assert_eq!(error.kind, ProblemKind::Internal);
        assert!(!error.detail.contains("secret"));
    }
}
