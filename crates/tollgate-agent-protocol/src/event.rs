//! One event of a run's log as served (`GET /v1/runs/{id}/events`, and each SSE `data:` line).

use crate::event_data::{EventData, EventDataError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// The kinds of event (docs/events.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A run began.
    RunStarted,
    /// A model call is about to be made.
    ModelRequest,
    /// A model call answered.
    ModelResponse,
    /// A call is about to run (committed first for ask-gated calls).
    ToolStarted,
    /// A call ran.
    ToolFinished,
    /// A turn is held at the gate.
    ApprovalRequested,
    /// A person (or the system) decided one call.
    Decision,
    /// A held turn waited `escalate_after` without being settled: more people were notified (once
    /// per held turn).
    ApprovalEscalated,
    /// A waiting run resumed.
    RunResumed,
    /// Another process took over a running run whose lease expired.
    RunTakenOver,
    /// The run completed.
    RunCompleted,
    /// The run failed.
    RunFailed,
    /// The run was cancelled.
    RunCancelled,
    /// The run's approval deadline passed.
    RunExpired,
}

impl EventKind {
    /// Every kind.
    pub const ALL: [EventKind; 14] = [
        EventKind::RunStarted,
        EventKind::ModelRequest,
        EventKind::ModelResponse,
        EventKind::ToolStarted,
        EventKind::ToolFinished,
        EventKind::ApprovalRequested,
        EventKind::Decision,
        EventKind::ApprovalEscalated,
        EventKind::RunResumed,
        EventKind::RunTakenOver,
        EventKind::RunCompleted,
        EventKind::RunFailed,
        EventKind::RunCancelled,
        EventKind::RunExpired,
    ];

    /// The snake_case name on the wire (the SSE `event:` field).
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::RunStarted => "run_started",
            EventKind::ModelRequest => "model_request",
            EventKind::ModelResponse => "model_response",
            EventKind::ToolStarted => "tool_started",
            EventKind::ToolFinished => "tool_finished",
            EventKind::ApprovalRequested => "approval_requested",
            EventKind::Decision => "decision",
            EventKind::ApprovalEscalated => "approval_escalated",
            EventKind::RunResumed => "run_resumed",
            EventKind::RunTakenOver => "run_taken_over",
            EventKind::RunCompleted => "run_completed",
            EventKind::RunFailed => "run_failed",
            EventKind::RunCancelled => "run_cancelled",
            EventKind::RunExpired => "run_expired",
        }
    }

    /// Parses the snake_case name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// True for the kinds that end a run.
    pub fn is_terminal(self) -> bool {
        matches!(self, EventKind::RunCompleted | EventKind::RunFailed | EventKind::RunCancelled | EventKind::RunExpired)
    }
}

/// One event of a run's log (docs/events.md). `data` is kept as the JSON served: the `hash` covers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Event {
    /// 1, 2, … per run.
    pub seq: u64,
    /// RFC 3339 UTC, exactly as hashed.
    pub at: String,
    /// What happened.
    pub kind: EventKind,
    /// The model call it belongs to (0 before the first).
    pub round: u32,
    /// Details per kind.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub data: Value,
    /// Lowercase hex sha256 chaining this event to the previous one.
    pub hash: String,
}

impl Event {
    /// The event's data, typed by its kind (the JSON itself stays in `data`, for a client that verifies
    /// the hash chain).
    pub fn typed_data(&self) -> Result<EventData, EventDataError> {
        EventData::from_kind(self.kind, self.data.clone())
    }
}

/// `GET /v1/runs/{id}/events`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = EventList))]
pub struct EventPage {
    /// In order.
    pub events: Vec<Event>,
}
