//! Reading requests: bodies, query strings and run ids, with docs/api.md's answers for bad input.
//!
//! The promise: bad input is a 4xx problem and never reaches the runtime, so nothing is written.
//! - a body over the limit is 413 (checked on `Content-Length` first, then while reading);
//! - a body that takes longer than `[server] body_timeout` to arrive is 408, and its connection is closed
//!   (the rest of the body is never read);
//! - a body declared as something other than JSON is 415 (a browser's cross-site form post cannot
//!   forge a JSON body, so this also shuts out cross-site requests against a local server);
//! - a body that is not JSON is 400; JSON with wrong types, missing or unknown fields is 422;
//! - a bad query parameter is 422; an id that is not a UUID names no run: 404.

use crate::AppState;
use crate::problem::{ApiError, ProblemKind};
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use std::time::Duration;

/// A request body, read up to the configured limit.
pub(crate) struct RawBody(pub Bytes);

impl FromRequest<AppState> for RawBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let declared_json = json_media_type(request.headers());
        let body = read_limited(request, state.max_body_bytes, state.body_timeout).await?;
        if !body.is_empty() && declared_json == Some(false) {
            return Err(ApiError::new(
                ProblemKind::UnsupportedMediaType,
                "the body must be JSON, sent with `Content-Type: application/json`",
            ));
        }
        Ok(RawBody(body))
    }
}

/// The body of `request`, at most `limit` bytes (413 past it: on `Content-Length` first, then while
/// reading), arriving within `timeout` (else 408); a body that cannot be read is 400.
pub(crate) async fn read_limited(request: Request, limit: usize, timeout: Duration) -> Result<Bytes, ApiError> {
    let too_large =
        || ApiError::new(ProblemKind::PayloadTooLarge, format!("the request body is larger than {limit} bytes"));
    let declared =
        request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut stream = request.into_body().into_data_stream();
    let mut body = Vec::new();
    let read = async {
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::new(ProblemKind::MalformedJson, format!("cannot read the body: {e}")))?;
            if body.len() + chunk.len() > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(())
    };
    tokio::time::timeout(timeout, read).await.map_err(|_elapsed| {
        ApiError::new(
            ProblemKind::RequestTimeout,
            format!("the request body did not arrive within {} ms", timeout.as_millis()),
        )
    })??;
    Ok(Bytes::from(body))
}

/// `Some(true)` for a JSON media type, `Some(false)` for another one, `None` when none is declared.
fn json_media_type(headers: &HeaderMap) -> Option<bool> {
    let value = headers.get(header::CONTENT_TYPE)?;
    let essence = value.to_str().ok().and_then(|v| v.split(';').next()).unwrap_or_default().trim().to_ascii_lowercase();
    Some(essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json")))
}

/// Parses a JSON body: 400 when it is not JSON, 422 when it does not fit `T`.
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::new(ProblemKind::MalformedJson, format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::invalid("the body must be a JSON object"));
    }
    serde_json::from_value(value).map_err(|e| ApiError::invalid(format!("the body does not fit: {e}")))
}

/// Like [`parse_json`], but an empty (or blank) body, or a JSON `null`, is `T::default()`: the document
/// declares these bodies optional and nullable, as generated clients send them.
pub(crate) fn parse_optional_json<T: DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    if serde_json::from_slice::<serde_json::Value>(bytes).is_ok_and(|v| v.is_null()) {
        return Ok(T::default());
    }
    parse_json(bytes)
}

/// Parses the query string into `T` (which denies unknown fields): 422 when it does not fit.
pub(crate) fn parse_query<T: DeserializeOwned>(uri: &axum::http::Uri) -> Result<T, ApiError> {
    axum::extract::Query::<T>::try_from_uri(uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::invalid(format!("bad query parameters: {}", e.body_text())))
}

/// A run id from the path: a lowercase, hyphenated UUID, else 404.
pub(crate) struct RunPath(pub tollgate_agent_core::RunId);

impl FromRequestParts<AppState> for RunPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        uuid_path(parts, state, "run").await.map(|id| RunPath(id.into()))
    }
}

/// The `{id}` of the path when it is a lowercase, hyphenated UUID (a run's or a grant's id), else 404
/// naming what `kind` of id was expected.
pub(crate) async fn uuid_path(parts: &mut Parts, state: &AppState, kind: &str) -> Result<String, ApiError> {
    let Path(id) = Path::<String>::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError::not_found(format!("bad {kind} id in the path: {}", e.body_text())))?;
    if !is_run_id(&id) {
        return Err(ApiError::not_found(format!("no {kind} has id `{id}` ({kind} ids are UUIDs)")));
    }
    Ok(id)
}

/// True for a lowercase, hyphenated UUID.
pub(crate) fn is_run_id(text: &str) -> bool {
    uuid::Uuid::try_parse(text).is_ok_and(|u| u.hyphenated().to_string() == text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        #[allow(dead_code)]
        name: Option<String>,
    }

    #[test]
    fn bad_json_is_400_and_bad_shape_is_422() {
        let kind = |body: &str| parse_json::<Sample>(body.as_bytes()).err().map(|e| e.kind);
        assert_eq!(kind("{"), Some(ProblemKind::MalformedJson));
        assert_eq!(kind("nope"), Some(ProblemKind::MalformedJson));
        assert_eq!(kind("[]"), Some(ProblemKind::InvalidRequest));
        assert_eq!(kind(r#"{"name": 3}"#), Some(ProblemKind::InvalidRequest));
        assert_eq!(kind(r#"{"other": 3}"#), Some(ProblemKind::InvalidRequest));
        assert_eq!(kind(r#"{"name": null}"#), None);
        assert!(parse_optional_json::<Sample>(b"  \n").is_ok());
        assert!(parse_optional_json::<Sample>(b" null ").is_ok());
        assert_eq!(parse_json::<Sample>(b"null").err().map(|e| e.kind), Some(ProblemKind::InvalidRequest));
    }

    #[test]
    fn run_ids_are_lowercase_hyphenated_uuids() {
        assert!(is_run_id("0193b0c6-0000-7000-8000-000000000001"));
        assert!(!is_run_id("0193B0C6-0000-7000-8000-000000000001"));
        assert!(!is_run_id("0193b0c600007000800000000000000001"));
        assert!(!is_run_id("../etc"));
    }
}
