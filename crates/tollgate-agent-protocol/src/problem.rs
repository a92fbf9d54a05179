//! Errors as `application/problem+json` (RFC 9457), each with a stable `type` URI.
//!
//! Clients branch on `type` (or `status`), never on `title` or `detail`, which are for people. A
//! [`Problem`] keeps `type` as text so that a client still reads a problem whose type a newer server
//! added; [`Problem::problem_type`] gives the known ones.

use serde::{Deserialize, Serialize};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// The prefix of every problem `type`.
pub const PROBLEM_BASE: &str = "https://tollgate.dev/problems/";

/// The media type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The kinds of problem the API answers with; each has one HTTP status, one slug and one title.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemType {
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
    /// 408 `request-timeout`: the request body did not arrive within `[server] body_timeout`; the
    /// connection is closed. Send the body again, faster.
    RequestTimeout,
    /// 409 `conflict`: the run is not in a state that allows this (not waiting, stale digest, already
    /// decided, already terminal, or another request acted first).
    Conflict,
    /// 413 `payload-too-large`: the body is over the configured limit.
    PayloadTooLarge,
    /// 415 `unsupported-media-type`: a body declared as something other than JSON.
    UnsupportedMediaType,
    /// 422 `invalid-request`: wrong types, missing or unknown fields, a broken rule, a bad query parameter.
    InvalidRequest,
    /// 422 `invalid-decision`: a decision that does not fit the held turn.
    InvalidDecision,
    /// 429 `too-many-requests`: the caller holds as many live-event streams as it may
    /// (`[server] max_streams_per_client`); retry once one has ended.
    TooManyRequests,
    /// 500 `internal`: the server failed; nothing about it is disclosed beyond this.
    Internal,
    /// 503 `unavailable`: the store cannot be reached right now; retry later.
    Unavailable,
    /// 507 `disk-full`: the store has no room left to write; reads still work. An operator frees space.
    DiskFull,
    /// 503 `read-only`: the store refuses writes (a read-only file or mount, a standby); reads still work.
    ReadOnly,
    /// 500 `corrupt-run`: the stored data of the run named in `detail` is damaged; other runs still work.
    CorruptRun,
    /// 500 `corrupt-database`: the store's database is damaged (`tollgate doctor` says where).
    CorruptDatabase,
}

impl ProblemType {
    /// Every type.
    pub const ALL: [ProblemType; 18] = [
        ProblemType::MalformedJson,
        ProblemType::Unauthorized,
        ProblemType::Forbidden,
        ProblemType::NotFound,
        ProblemType::MethodNotAllowed,
        ProblemType::RequestTimeout,
        ProblemType::Conflict,
        ProblemType::PayloadTooLarge,
        ProblemType::UnsupportedMediaType,
        ProblemType::InvalidRequest,
        ProblemType::InvalidDecision,
        ProblemType::TooManyRequests,
        ProblemType::Internal,
        ProblemType::Unavailable,
        ProblemType::DiskFull,
        ProblemType::ReadOnly,
        ProblemType::CorruptRun,
        ProblemType::CorruptDatabase,
    ];

    /// The HTTP status.
    pub fn status(self) -> u16 {
        match self {
            ProblemType::MalformedJson => 400,
            ProblemType::Unauthorized => 401,
            ProblemType::Forbidden => 403,
            ProblemType::NotFound => 404,
            ProblemType::MethodNotAllowed => 405,
            ProblemType::RequestTimeout => 408,
            ProblemType::Conflict => 409,
            ProblemType::PayloadTooLarge => 413,
            ProblemType::UnsupportedMediaType => 415,
            ProblemType::InvalidRequest | ProblemType::InvalidDecision => 422,
            ProblemType::TooManyRequests => 429,
            ProblemType::Internal | ProblemType::CorruptRun | ProblemType::CorruptDatabase => 500,
            ProblemType::Unavailable | ProblemType::ReadOnly => 503,
            ProblemType::DiskFull => 507,
        }
    }

    /// The slug after [`PROBLEM_BASE`].
    pub fn slug(self) -> &'static str {
        match self {
            ProblemType::MalformedJson => "malformed-json",
            ProblemType::Unauthorized => "unauthorized",
            ProblemType::Forbidden => "forbidden",
            ProblemType::NotFound => "not-found",
            ProblemType::MethodNotAllowed => "method-not-allowed",
            ProblemType::Conflict => "conflict",
            ProblemType::RequestTimeout => "request-timeout",
            ProblemType::PayloadTooLarge => "payload-too-large",
            ProblemType::UnsupportedMediaType => "unsupported-media-type",
            ProblemType::InvalidRequest => "invalid-request",
            ProblemType::InvalidDecision => "invalid-decision",
            ProblemType::TooManyRequests => "too-many-requests",
            ProblemType::Internal => "internal",
            ProblemType::Unavailable => "unavailable",
            ProblemType::DiskFull => "disk-full",
            ProblemType::ReadOnly => "read-only",
            ProblemType::CorruptRun => "corrupt-run",
            ProblemType::CorruptDatabase => "corrupt-database",
        }
    }

    /// The full `type` URI.
    pub fn uri(self) -> String {
        format!("{PROBLEM_BASE}{}", self.slug())
    }

    /// The type whose full URI this is.
    pub fn from_uri(uri: &str) -> Option<Self> {
        let slug = uri.strip_prefix(PROBLEM_BASE)?;
        Self::ALL.into_iter().find(|t| t.slug() == slug)
    }

    /// A short, fixed summary.
    pub fn title(self) -> &'static str {
        match self {
            ProblemType::MalformedJson => "Malformed JSON",
            ProblemType::Unauthorized => "Unauthorized",
            ProblemType::Forbidden => "Forbidden",
            ProblemType::NotFound => "Not found",
            ProblemType::MethodNotAllowed => "Method not allowed",
            ProblemType::Conflict => "Conflict",
            ProblemType::RequestTimeout => "Request timeout",
            ProblemType::PayloadTooLarge => "Payload too large",
            ProblemType::UnsupportedMediaType => "Unsupported media type",
            ProblemType::InvalidRequest => "Invalid request",
            ProblemType::InvalidDecision => "Invalid decision",
            ProblemType::TooManyRequests => "Too many requests",
            ProblemType::Internal => "Internal error",
            ProblemType::Unavailable => "Service unavailable",
            ProblemType::DiskFull => "Store full",
            ProblemType::ReadOnly => "Store read-only",
            ProblemType::CorruptRun => "Run data corrupt",
            ProblemType::CorruptDatabase => "Database corrupt",
        }
    }
}

/// An error answer (`application/problem+json`, RFC 9457).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Problem {
    /// `https://tollgate.dev/problems/SLUG`: `malformed-json` (400), `unauthorized` (401), `forbidden`
    /// (403), `not-found` (404), `method-not-allowed` (405), `request-timeout` (408), `conflict` (409),
    /// `payload-too-large` (413), `unsupported-media-type` (415), `invalid-request` (422), `invalid-decision`
    /// (422), `too-many-requests` (429), `internal` (500), `corrupt-run` (500), `corrupt-database` (500),
    /// `unavailable` (503), `read-only` (503), `disk-full` (507).
    #[serde(rename = "type")]
    pub problem_type: String,
    /// A fixed summary of the type.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What exactly went wrong, for people.
    pub detail: String,
}

impl Problem {
    /// A problem of a known type: its URI, title and status, and this detail.
    pub fn new(problem_type: ProblemType, detail: impl Into<String>) -> Self {
        Self {
            problem_type: problem_type.uri(),
            title: problem_type.title().to_owned(),
            status: problem_type.status(),
            detail: detail.into(),
        }
    }

    /// The known type of this problem; `None` for a type this build does not know.
    pub fn known_type(&self) -> Option<ProblemType> {
        ProblemType::from_uri(&self.problem_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_unique_and_uris_read_back() {
        let mut slugs: Vec<&str> = ProblemType::ALL.iter().map(|t| t.slug()).collect();
        slugs.sort_unstable();
        slugs.dedup();
        assert_eq!(slugs.len(), ProblemType::ALL.len());
        for t in ProblemType::ALL {
            assert_eq!(ProblemType::from_uri(&t.uri()), Some(t));
        }
        assert_eq!(ProblemType::Conflict.uri(), "https://tollgate.dev/problems/conflict");
        assert_eq!(ProblemType::from_uri("https://tollgate.dev/problems/unheard-of"), None);
        assert_eq!(ProblemType::from_uri("conflict"), None);
    }

    #[test]
    fn a_problem_is_written_in_the_documented_order() {
        let problem = Problem::new(ProblemType::InvalidDecision, "no held call has id `x`");
        assert_eq!(
            serde_json::to_string(&problem).ok().as_deref(),
            Some(
                r#"{"type":"https://tollgate.dev/problems/invalid-decision","title":"Invalid decision","status":422,"detail":"no held call has id `x`"}"#
            )
        );
        assert_eq!(problem.known_type(), Some(ProblemType::InvalidDecision));
    }
}
