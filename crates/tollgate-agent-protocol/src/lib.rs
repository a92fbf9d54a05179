//! Tollgate's wire format: the JSON of the HTTP API (docs/api.md) and the `data` of every event kind, as plain
//! serde types that a server, the CLI and third-party clients share.
//!
//! ```rust
//! use tollgate_agent_protocol::{CallDecision, DecisionRequest, DenyDecision, Run, RunStatus};
//!
//! # let body = r#"{"id":"0193b0c6-0000-7000-8000-000000000001","agent":"demo","status":"waiting_for_approval",
//! # "input":"hello","iterations":1,"usage":{"input_tokens":3,"output_tokens":4},"version":2,"created_by":"local",
//! # "created_at":"2026-11-29T10:00:00.000Z","updated_at":"2026-11-29T10:00:01.000Z",
//! # "pending":{"turn_digest":"sha256:00","calls":[{"call_id":"call_1","tool":"write_note",
//! # "arguments":{"text":"hello"},"gate":"ask","in_doubt":false,"state":"waiting","takes_decision":true}]}}"#;
//! // A waiting run, as `GET /v1/runs/{id}` answers it.
//! let run: Run = serde_json::from_str(body)?;
//! assert_eq!(run.status, RunStatus::WaitingForApproval);
//!
//! // Deny every call that takes a decision: the body of `POST /v1/runs/{id}/decisions`.
//! let deny = |call_id: &str| DenyDecision { call_id: call_id.into(), reason: Some("not today".into()) };
//! let decisions = run.awaiting_decision().map(|call| CallDecision::Deny(deny(&call.call_id))).collect();
//! let turn = run.pending.as_ref().map(|held| held.turn_digest.as_str()).unwrap_or_default();
//! let request = DecisionRequest::each(turn, decisions);
//! assert_eq!(
//!     serde_json::to_string(&request)?,
//!     r#"{"turn_digest":"sha256:00","decisions":[{"action":"deny","call_id":"call_1","reason":"not today"}]}"#
//! );
//! # Ok::<(), serde_json::Error>(())
//! ```
//!
//! What it owns: the run object ([`Run`]), the list and event answers, the request bodies, problem+json
//! ([`Problem`], [`ProblemType`]) and the typed event data ([`EventData`]). With the `openapi` feature
//! (the server's), every type derives `utoipa::ToSchema`, under the component name the OpenAPI document
//! already uses, so a client generator gets one named schema per shape (each decision action included);
//! without it no utoipa is compiled.
//!
//! What it promises:
//! - **Byte for byte.** Serialising a value gives the JSON the API and the event log have always carried:
//!   the same keys, in the same order (the workspace builds serde_json with `preserve_order`), with the
//!   same explicit `null`s. Event data feeds the hash chain, so this is checked against the frozen v1 events
//!   (`fixtures/v1/events.jsonl`), and the run object against the stored API snapshots.
//! - **Compatible growth.** Adding an optional field is compatible; renaming or removing a field, or
//!   changing its type or its null-ness, is not, and neither is a new value of a closed set (`status`,
//!   `termination_reason`, `gate`, an event `kind`, a decision `action`), which an older client cannot
//!   read. Answers (runs, events, event data, problems) therefore ignore fields they do not know, so an
//!   older client reads a newer server; request bodies reject them (docs/api.md: unknown request fields are a
//!   422). A problem's `type` stays text, so a new one is readable too.
//! - **A leaf.** No dependency on any other Tollgate crate: the runtime's own types convert into these at
//!   the edge, never the other way round.

mod catalog;
mod duration;
mod event;
pub mod event_data;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod glob;
mod grant;
mod ids;
mod problem;
mod request;
mod run;

pub use catalog::{Agent, AgentList, Health, PurgeResult, Tool, ToolList};
pub use duration::{DurationError, EXPECTED_DURATION, format_duration, parse_duration};
pub use event::{Event, EventKind, EventPage};
pub use event_data::{EventData, EventDataError};
pub use glob::Glob;
pub use grant::{CreateGrantRequest, Grant, GrantPage, GrantScope, MatchError, Remember, check_match, is_json_pointer};
pub use ids::{Actor, ApprovalId, CallId, GrantId, RunId};
pub use problem::{PROBLEM_BASE, PROBLEM_JSON, Problem, ProblemType};
pub use request::{
    ApproveDecision, CallDecision, CancelRequest, DecisionRequest, DenyDecision, EditDecision, PurgeRequest,
    RespondDecision, StartRunRequest, decide_forms,
};
pub use run::{
    Approvals, Call, CallResult, CallState, Decision, Escalated, Gate, Pending, RecordedDecision, Run, RunError,
    RunErrorKind, RunPage, RunStatus, TerminationReason, Usage,
};
