//! Errors as `application/problem+json` (RFC 9457), each with a stable `type` URI.
//!
//! The `type` of every problem is `https://tollgate.dev/problems/` followed by one slug of
//! [`ProblemKind`]; clients branch on it (or on `status`), never on `title` or `detail`, which are for
//! people. A `5xx` detail never carries a store's message: that goes to the log.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tollgate_core::{Conflict, StoreError};
use tollgate_runtime::{CancelError, DecideError, ReadError, ResolveError, StartError};

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
    /// that breaks a rule of docs/api.md, or a bad query parameter.
    InvalidRequest,
    /// 422 `invalid-decision`: a decision that does not fit the held turn (unknown call id, a call that
    /// takes no decision, edited arguments failing the tool's schema).
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
    /// 500 `corrupt-run`: the stored data of the run named in the detail is damaged; other runs still
    /// work.
    CorruptRun,
    /// 500 `corrupt-database`: the store's database is damaged (`tollgate doctor` says where).
    CorruptDatabase,
}

impl ProblemKind {
    /// Every kind, for documentation and tests.
    pub const ALL: [ProblemKind; 17] = [
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
        ProblemKind::TooManyRequests,
        ProblemKind::Internal,
        ProblemKind::Unavailable,
        ProblemKind::DiskFull,
        ProblemKind::ReadOnly,
        ProblemKind::CorruptRun,
        ProblemKind::CorruptDatabase,
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
            ProblemKind::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            ProblemKind::Internal | ProblemKind::CorruptRun | ProblemKind::CorruptDatabase => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ProblemKind::Unavailable | ProblemKind::ReadOnly => StatusCode::SERVICE_UNAVAILABLE,
            ProblemKind::DiskFull => StatusCode::INSUFFICIENT_STORAGE,
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
            ProblemKind::TooManyRequests => "too-many-requests",
            ProblemKind::Internal => "internal",
            ProblemKind::Unavailable => "unavailable",
            ProblemKind::DiskFull => "disk-full",
            ProblemKind::ReadOnly => "read-only",
            ProblemKind::CorruptRun => "corrupt-run",
            ProblemKind::CorruptDatabase => "corrupt-database",
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
            ProblemKind::TooManyRequests => "Too many requests",
            ProblemKind::Internal => "Internal error",
            ProblemKind::Unavailable => "Service unavailable",
            ProblemKind::DiskFull => "Store full",
            ProblemKind::ReadOnly => "Store read-only",
            ProblemKind::CorruptRun => "Run data corrupt",
            ProblemKind::CorruptDatabase => "Database corrupt",
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
        self.body_with_status(self.kind.status())
    }

    fn body_with_status(&self, status: StatusCode) -> serde_json::Value {
        serde_json::json!({
            "type": self.kind.type_uri(),
            "title": self.kind.title(),
            "status": status.as_u16(),
            "detail": self.detail,
        })
    }

    /// The answer of `/readyz` when the store cannot write: always 503 (what a load balancer reads),
    /// with this problem's `type` saying what failed (`disk-full`, `read-only`, ...).
    pub(crate) fn not_ready(&self) -> Response {
        let status = StatusCode::SERVICE_UNAVAILABLE;
        let mut response = (status, self.body_with_status(status).to_string()).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        response
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

/// `?` on each runtime operation answers its problem; every variant is named, so a new one does not
/// compile until its status is chosen here (and in the table test below).
impl From<StartError> for ApiError {
    fn from(error: StartError) -> Self {
        match error {
            StartError::UnknownAgent(name) => ApiError::not_found(format!("no agent is named `{name}`")),
            StartError::EmptyInput => ApiError::invalid(error.to_string()),
            StartError::Vanished(id) => ApiError::not_found(format!("no run has id `{id}`")),
            StartError::Store(e) => ApiError::from(e),
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::NotFound(id) => ApiError::not_found(format!("no run has id `{id}`")),
            ReadError::Store(e) => ApiError::from(e),
        }
    }
}

impl From<ResolveError> for ApiError {
    fn from(error: ResolveError) -> Self {
        match error {
            ResolveError::NotFound(_) => ApiError::not_found(error.to_string()),
            ResolveError::Ambiguous { .. } => ApiError::invalid(error.to_string()),
            ResolveError::InvalidPrefix(_) => ApiError::invalid(error.to_string()),
            ResolveError::Store(e) => ApiError::from(e),
        }
    }
}

impl From<DecideError> for ApiError {
    fn from(error: DecideError) -> Self {
        match error {
            DecideError::NotFound(id) => ApiError::not_found(format!("no run has id `{id}`")),
            DecideError::UnknownAgent(name) => ApiError::not_found(format!("no agent is named `{name}`")),
            DecideError::NotWaiting { .. }
            | DecideError::StaleDigest { .. }
            | DecideError::AlreadyDecided { .. }
            | DecideError::NothingToDecide
            | DecideError::CorruptSuspension { .. }
            | DecideError::LostRace { .. } => ApiError::new(ProblemKind::Conflict, error.to_string()),
            DecideError::SelfApprovalForbidden { .. } => ApiError::forbidden(error.to_string()),
            DecideError::NoDecisions | DecideError::DecidedTwice { .. } => ApiError::invalid(error.to_string()),
            DecideError::Invalid(e) => ApiError::new(ProblemKind::InvalidDecision, e.to_string()),
            DecideError::Store(e) => ApiError::from(e),
        }
    }
}

impl From<CancelError> for ApiError {
    fn from(error: CancelError) -> Self {
        match error {
            CancelError::NotFound(id) => ApiError::not_found(format!("no run has id `{id}`")),
            CancelError::AlreadyTerminal { .. } | CancelError::LostRace { .. } => {
                ApiError::new(ProblemKind::Conflict, error.to_string())
            }
            CancelError::Store(e) => ApiError::from(e),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound(id) => ApiError::not_found(format!("no run has id `{id}`")),
            StoreError::Conflict { conflict, .. } => match conflict {
                Conflict::StaleVersion { .. }
                | Conflict::NotRunning { .. }
                | Conflict::LeaseLost { .. }
                | Conflict::LeaseHeld { .. }
                | Conflict::ConcurrentUpdate
                | Conflict::AmbiguousPrefix { .. } => ApiError::new(ProblemKind::Conflict, conflict.to_string()),
            },
            StoreError::Transition(t) => ApiError::new(ProblemKind::Conflict, t.to_string()),
            // Names the run and the key id (never key material), so an operator knows which key to add.
            StoreError::Undecryptable { id, detail } => {
                tracing::error!(run = %id, %detail, "run cannot be decrypted");
                ApiError::new(
                    ProblemKind::Internal,
                    format!("run {id} cannot be decrypted with the configured keys: {detail}"),
                )
            }
            // Each names what failed without the store's message (it goes to the log).
            StoreError::DiskFull(_) => {
                tracing::error!(%error, "the store is full");
                ApiError::new(
                    ProblemKind::DiskFull,
                    "the run store is full: nothing can be written until space is freed; reads still work",
                )
            }
            StoreError::ReadOnly(_) => {
                tracing::error!(%error, "the store is read-only");
                ApiError::new(
                    ProblemKind::ReadOnly,
                    "the run store is read-only: nothing can be written; reads still work",
                )
            }
            StoreError::Corrupt { ref id, .. } => {
                tracing::error!(%error, "a run's stored data is corrupt");
                ApiError::new(
                    ProblemKind::CorruptRun,
                    format!(
                        "the stored data of run {id} is damaged and cannot be read; other runs are not affected \
                         (`tollgate doctor` checks every run)"
                    ),
                )
            }
            StoreError::CorruptDatabase(_) => {
                tracing::error!(%error, "the store's database is corrupt");
                ApiError::new(
                    ProblemKind::CorruptDatabase,
                    "the run store's database is damaged; see the server log (`tollgate doctor` checks it)",
                )
            }
            StoreError::Unreachable(_) => {
                tracing::warn!(%error, "store unreachable");
                ApiError::new(ProblemKind::Unavailable, "the run store cannot be reached right now; try again")
            }
            StoreError::Database(_) => {
                tracing::warn!(%error, "store failure");
                ApiError::new(ProblemKind::Unavailable, "the run store failed to answer; try again")
            }
            StoreError::Duplicate(_) | StoreError::NewerSchema { .. } => {
                tracing::error!(%error, "store failure");
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
    fn a_store_failure_discloses_nothing_but_the_run() {
        let error = ApiError::from(StoreError::Corrupt { id: "r-17".into(), detail: "secret row text".into() });
        assert_eq!(error.kind, ProblemKind::CorruptRun);
        assert!(error.detail.contains("run r-17") && !error.detail.contains("secret"), "{}", error.detail);
        for error in [
            StoreError::DiskFull("secret".into()),
            StoreError::ReadOnly("secret".into()),
            StoreError::CorruptDatabase("secret".into()),
            StoreError::Unreachable("secret".into()),
            StoreError::Database("secret".into()),
        ] {
            assert!(!ApiError::from(error).detail.contains("secret"));
        }
    }

    /// The server's kinds are the protocol's types: the same slugs, statuses and titles.
    #[test]
    fn every_kind_is_a_protocol_type() {
        use tollgate_protocol::ProblemType;
        assert_eq!(ProblemKind::ALL.len(), ProblemType::ALL.len());
        for kind in ProblemKind::ALL {
            let Some(known) = ProblemType::from_uri(&kind.type_uri()) else {
                panic!("{kind:?} is not in the protocol")
            };
            assert_eq!((known.status(), known.title()), (kind.status().as_u16(), kind.title()), "{kind:?}");
        }
    }

    /// `/readyz` answers 503 whatever failed; the type says what.
    #[test]
    fn not_ready_is_503_with_the_type_of_the_failure() {
        let error = ApiError::from(StoreError::DiskFull("no space".into()));
        assert_eq!(error.not_ready().status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = error.body_with_status(StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            (body["type"].as_str(), body["status"].as_u64()),
            (Some(ProblemKind::DiskFull.type_uri().as_str()), Some(503))
        );
    }

    /// Every variant of every runtime error and of the store's, with the status and problem type it
    /// answers (docs/api.md). A variant added without a row here still compiles in `From`, so this table is
    /// what keeps the contract visible: extend it with the new variant.
    #[test]
    fn every_runtime_and_store_error_has_its_status_and_type() {
        use tollgate_core::{DecisionError, Gate, RunStatus, TransitionError, TurnDigest};
        let store = || StoreError::Database("down".into());
        let conflict = |conflict: Conflict| StoreError::Conflict { id: "r".into(), conflict };
        let cases: Vec<(ApiError, u16, &str)> = vec![
            // start
            (StartError::UnknownAgent("x".into()).into(), 404, "not-found"),
            (StartError::EmptyInput.into(), 422, "invalid-request"),
            (StartError::Vanished("r".into()).into(), 404, "not-found"),
            (StartError::Store(store()).into(), 503, "unavailable"),
            // get, events, verify, wait
            (ReadError::NotFound("r".into()).into(), 404, "not-found"),
            (ReadError::Store(store()).into(), 503, "unavailable"),
            // resolve
            (ResolveError::NotFound("ab".into()).into(), 404, "not-found"),
            (ResolveError::Ambiguous { prefix: "a".into(), matches: 2, more: false }.into(), 422, "invalid-request"),
            (ResolveError::InvalidPrefix("Z".into()).into(), 422, "invalid-request"),
            (ResolveError::Store(store()).into(), 503, "unavailable"),
            // decide
            (DecideError::NotFound("r".into()).into(), 404, "not-found"),
            (DecideError::UnknownAgent("x".into()).into(), 404, "not-found"),
            (DecideError::NotWaiting { id: "r".into(), status: RunStatus::Completed }.into(), 409, "conflict"),
            (DecideError::StaleDigest { current: TurnDigest("sha256:1".into()) }.into(), 409, "conflict"),
            (DecideError::AlreadyDecided { call_id: "c".into() }.into(), 409, "conflict"),
            (DecideError::SelfApprovalForbidden { agent: "a".into(), actor: "x".into() }.into(), 403, "forbidden"),
            (DecideError::NothingToDecide.into(), 409, "conflict"),
            (DecideError::NoDecisions.into(), 422, "invalid-request"),
            (DecideError::DecidedTwice { call_id: "c".into() }.into(), 422, "invalid-request"),
            (DecideError::Invalid(DecisionError::UnknownCall("c".into())).into(), 422, "invalid-decision"),
            (
                DecideError::Invalid(DecisionError::NotDecidable { call_id: "c".into(), gate: Gate::Allow }).into(),
                422,
                "invalid-decision",
            ),
            (DecideError::Invalid(DecisionError::AlreadyRan { call_id: "c".into() }).into(), 422, "invalid-decision"),
            (DecideError::Invalid(DecisionError::Missing(vec!["c".into()])).into(), 422, "invalid-decision"),
            (
                DecideError::Invalid(DecisionError::InvalidEdit { call_id: "c".into(), message: "no".into() }).into(),
                422,
                "invalid-decision",
            ),
            (DecideError::CorruptSuspension { id: "r".into(), detail: "bad".into() }.into(), 409, "conflict"),
            (DecideError::LostRace { id: "r".into() }.into(), 409, "conflict"),
            (DecideError::Store(store()).into(), 503, "unavailable"),
            // cancel
            (CancelError::NotFound("r".into()).into(), 404, "not-found"),
            (CancelError::AlreadyTerminal { id: "r".into(), status: RunStatus::Cancelled }.into(), 409, "conflict"),
            (CancelError::LostRace { id: "r".into() }.into(), 409, "conflict"),
            (CancelError::Store(store()).into(), 503, "unavailable"),
            // the store, directly (list, purge, metrics) and inside every error above
            (StoreError::NotFound("r".into()).into(), 404, "not-found"),
            (conflict(Conflict::StaleVersion { expected: 1, found: 2 }).into(), 409, "conflict"),
            (conflict(Conflict::NotRunning { status: RunStatus::Cancelled }).into(), 409, "conflict"),
            (conflict(Conflict::LeaseLost { holder: None }).into(), 409, "conflict"),
            (conflict(Conflict::LeaseHeld { owner: "n".into(), expires_at: 0 }).into(), 409, "conflict"),
            (conflict(Conflict::ConcurrentUpdate).into(), 409, "conflict"),
            (
                conflict(Conflict::AmbiguousPrefix { prefix: "a".into(), matches: 2, more: true }).into(),
                409,
                "conflict",
            ),
            (
                StoreError::Transition(TransitionError::NotAllowed {
                    from: RunStatus::Completed,
                    transition: "cancel",
                })
                .into(),
                409,
                "conflict",
            ),
            (StoreError::Duplicate("r".into()).into(), 500, "internal"),
            (StoreError::Corrupt { id: "r".into(), detail: "row".into() }.into(), 500, "corrupt-run"),
            (StoreError::CorruptDatabase("page 7".into()).into(), 500, "corrupt-database"),
            (StoreError::DiskFull("SQLITE_FULL".into()).into(), 507, "disk-full"),
            (StoreError::ReadOnly("SQLITE_READONLY".into()).into(), 503, "read-only"),
            (StoreError::Unreachable("connection refused".into()).into(), 503, "unavailable"),
            (StoreError::Undecryptable { id: "r".into(), detail: "key k1".into() }.into(), 500, "internal"),
            (StoreError::NewerSchema { found: 9, supported: 1 }.into(), 500, "internal"),
            (store().into(), 503, "unavailable"),
        ];
        for (error, status, slug) in cases {
            assert_eq!(
                (error.kind.status().as_u16(), error.kind.type_uri()),
                (status, format!("{PROBLEM_BASE}{slug}")),
                "{error}"
            );
        }
    }
}
