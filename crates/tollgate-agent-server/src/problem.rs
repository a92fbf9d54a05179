//! Errors as `application/problem+json` (RFC 9457), each with a stable `type` URI.
//!
//! The `type` of every problem is `https://tollgate.dev/problems/` followed by one slug of
//! [`ProblemKind`]; clients branch on it (or on `status`), never on `title` or `detail`, which are for
//! people. A `5xx` detail never carries a store's message: that goes to the log.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tollgate_agent_core::{Conflict, StoreError};
use tollgate_agent_runtime::{CancelError, DecideError, GrantError, ReadError, ResolveError, StartError};

/// The kinds of problem the API answers with — the protocol's [`ProblemType`](tollgate_agent_protocol::ProblemType):
/// one slug, one HTTP status and one title each, defined once for the server and its clients.
pub use tollgate_agent_protocol::{PROBLEM_BASE, PROBLEM_JSON, ProblemType as ProblemKind};

/// The HTTP status of a kind of problem.
pub(crate) fn http_status(kind: ProblemKind) -> StatusCode {
    StatusCode::from_u16(kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
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
        self.body_with_status(http_status(self.kind))
    }

    fn body_with_status(&self, status: StatusCode) -> serde_json::Value {
        serde_json::json!({
            "type": self.kind.uri(),
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
        let mut response = (http_status(self.kind), self.body().to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.kind == ProblemKind::Unauthorized {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        // The rest of a body too slow to arrive is never read: the connection cannot carry another request.
        if self.kind == ProblemKind::RequestTimeout {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
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
            StartError::EmptyInput | StartError::InvalidMetadata(_) => ApiError::invalid(error.to_string()),
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
            DecideError::Vote(refused) if refused.is_conflict() => {
                ApiError::new(ProblemKind::Conflict, refused.to_string())
            }
            DecideError::Vote(refused) => ApiError::new(ProblemKind::InvalidDecision, refused.to_string()),
            // A `remember` that cannot make its grant refuses the whole request (V2.md: 422, nothing
            // recorded); grants switched off are the operator's refusal.
            DecideError::Remember { refused: GrantError::Disabled, .. } => ApiError::forbidden(error.to_string()),
            DecideError::Remember { refused: GrantError::Store(e), .. } => ApiError::from(e),
            DecideError::Remember { .. } => ApiError::new(ProblemKind::InvalidDecision, error.to_string()),
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
            StoreError::GrantNotFound(id) => ApiError::not_found(format!("no grant has id `{id}`")),
            StoreError::GrantClosed { .. } => ApiError::new(ProblemKind::Conflict, error.to_string()),
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
    use tollgate_agent_core::{ApprovalError, MetadataError};

    #[test]
    fn slugs_are_unique_and_types_are_stable() {
        let mut slugs: Vec<&str> = ProblemKind::ALL.iter().map(|k| k.slug()).collect();
        slugs.sort_unstable();
        slugs.dedup();
        assert_eq!(slugs.len(), ProblemKind::ALL.len());
        assert_eq!(ProblemKind::Conflict.uri(), "https://tollgate.dev/problems/conflict");
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

    /// Every kind's status is a real HTTP status (the fallback to 500 is never taken).
    #[test]
    fn every_kind_has_a_real_http_status() {
        for kind in ProblemKind::ALL {
            assert_eq!(http_status(kind).as_u16(), kind.status(), "{kind:?}");
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
            (Some(ProblemKind::DiskFull.uri().as_str()), Some(503))
        );
    }

    /// Every variant of every runtime error and of the store's, with the status and problem type it
    /// answers (docs/api.md). A variant added without a row here still compiles in `From`, so this table is
    /// what keeps the contract visible: extend it with the new variant.
    #[test]
    fn every_runtime_and_store_error_has_its_status_and_type() {
        use tollgate_agent_core::{DecisionError, Gate, RunStatus, TransitionError, TurnDigest};
        let store = || StoreError::Database("down".into());
        let conflict = |conflict: Conflict| StoreError::Conflict { id: "r".into(), conflict };
        let cases: Vec<(ApiError, u16, &str)> = vec![
            // start
            (StartError::UnknownAgent("x".into()).into(), 404, "not-found"),
            (StartError::EmptyInput.into(), 422, "invalid-request"),
            (StartError::InvalidMetadata(MetadataError::TooDeep { limit: 16 }).into(), 422, "invalid-request"),
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
            (
                DecideError::Vote(ApprovalError::AlreadyApproved { call_id: "c".into(), actor: "a".into() }).into(),
                409,
                "conflict",
            ),
            (
                DecideError::Vote(ApprovalError::QuorumAction { call_id: "c".into(), action: "edit", required: 2 })
                    .into(),
                422,
                "invalid-decision",
            ),
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
                (http_status(error.kind).as_u16(), error.kind.uri()),
                (status, format!("{PROBLEM_BASE}{slug}")),
                "{error}"
            );
        }
    }
}
