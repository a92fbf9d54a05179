//! Tollgate's wire format: the JSON of the HTTP API (docs/api.md) and the `data` of every event kind, as plain
//! serde types that a server, the CLI and third-party clients share.
//!
//! What it owns: the run object ([`Run`]), the list and event answers, the request bodies, problem+json
//! ([`Problem`], [`ProblemType`]) and the typed event data ([`EventData`]). Every type derives
//! `utoipa::ToSchema`, under the component name the OpenAPI document already uses, so a client generator
//! gets one named schema per shape (each decision action included).
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
mod event;
pub mod event_data;
#[doc(hidden)]
pub mod fuzzing;
mod problem;
mod request;
mod run;

pub use catalog::{Agent, AgentList, Health, PurgeResult, Tool, ToolList};
pub use event::{Event, EventKind, EventPage};
pub use event_data::{EventData, EventDataError};
pub use problem::{PROBLEM_BASE, PROBLEM_JSON, Problem, ProblemType};
pub use request::{
    ApproveDecision, CallDecision, CancelRequest, DecisionRequest, DenyDecision, EditDecision, PurgeRequest,
    RespondDecision, StartRunRequest, decide_forms,
};
pub use run::{
    Call, CallResult, CallState, Decision, Gate, HeldTurn, RecordedDecision, Run, RunError, RunPage, RunStatus,
    TerminationReason, Usage,
};
