//! The `data` of each event kind (docs/events.md), one struct per kind.
//!
//! Event data is hashed into the run's chain (as canonical JSON) and served as written, so serialising
//! one of these gives exactly the JSON Tollgate has always written for it: the keys in the order of the
//! fields below, and `null` for an empty optional value (never an absent key). The frozen v1 events are
//! read and written back byte for byte by this crate's tests.
//!
//! `[privacy] level = "metadata"` writes the content fields (the run's input, a result, a decision's
//! arguments, reason or result, …) as `null`, and `redacted` writes them as strings describing their
//! shape, so every content field here reads `null` (an `Option`, or a JSON [`Value`]): the data of every
//! kind reads at every privacy level.
//!
//! Reading ignores keys a kind does not know (a newer writer may add optional ones), so a value read and
//! written again can lose such keys: code that must keep stored data intact (verify, export) keeps the
//! original JSON and uses these types only to read it.

use crate::event::EventKind;
use crate::ids::{Actor, CallId, GrantId};
use crate::run::{Decision, Gate, RunError, TerminationReason, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// `run_started`: a run began.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RunStarted {
    /// The agent's name.
    pub agent: String,
    /// The run's input (null under `[privacy] level = "metadata"`).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub input: Option<String>,
    /// Who started it.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub actor: Actor,
}

/// `model_request`: a model call is about to be made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ModelRequest {
    /// How many messages are sent.
    pub messages: u64,
    /// The names of the tools offered (empty for the closing completion at the iteration cap).
    pub tools: Vec<String>,
}

/// One tool call as the model asked for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ModelToolCall {
    /// The model's id for the call.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub call_id: CallId,
    /// The tool named.
    pub tool: String,
    /// The model's arguments.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub arguments: Value,
}

/// `model_response`: a model call answered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ModelResponse {
    /// The model's text, if any.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub text: Option<String>,
    /// The tool calls, in the model's order.
    pub tool_calls: Vec<ModelToolCall>,
    /// Tokens used by this call.
    pub usage: Usage,
}

/// `tool_started`: a call is about to run (for an ask-gated call, committed before it runs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ToolStarted {
    /// The model's id for the call.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub call_id: CallId,
    /// The tool.
    pub tool: String,
    /// The arguments it runs with (the approver's, after an edit).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub arguments: Value,
    /// The call's gate.
    pub gate: Gate,
    /// `RUN_ID:CALL_ID`, the same for every attempt at this call.
    pub idempotency_key: String,
    /// The grant that allowed the call, or null (written by Tollgate since grants; absent in events
    /// stored before, so they read back byte for byte: `None` is absent, `Some(None)` null).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, required = true))]
    pub grant: Option<Option<GrantId>>,
}

/// A field that may be absent, null or set, told apart: present (null or not) reads as `Some`.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(deserializer).map(Some)
}

/// `tool_finished`: a call ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ToolFinished {
    /// The model's id for the call.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub call_id: CallId,
    /// The tool.
    pub tool: String,
    /// True when the tool failed.
    pub is_error: bool,
    /// What the model reads (null under `[privacy] level = "metadata"`).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub result: Option<String>,
}

/// One call of a turn held at the gate, as `approval_requested` lists it (the run object's
/// [`Call`](crate::Call) without the decision).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct GatedCall {
    /// The model's id for the call.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub call_id: CallId,
    /// The tool named.
    pub tool: String,
    /// The model's arguments.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub arguments: Value,
    /// The gate's verdict.
    pub gate: Gate,
    /// What the approver sees.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub preview: Option<String>,
    /// Started before a crash and never finished.
    pub in_doubt: bool,
    /// On a quorum call (`approvals = N`): how many distinct people must approve it, and who has
    /// already (`[]` for a turn just held). Absent for a call one decision settles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<crate::Approvals>,
}

/// `approval_requested`: a turn is held at the gate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ApprovalRequested {
    /// The digest decisions must name.
    pub turn_digest: String,
    /// Every call of the turn.
    pub calls: Vec<GatedCall>,
    /// The approval deadline (RFC 3339 UTC), if any.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub expires_at: Option<String>,
}

/// `approval_escalated`: the held turn whose digest is `turn_digest` waited `after` without being
/// settled, and the notifiers named in `notified` were told (V2.md section 4; once per held turn).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ApprovalEscalated {
    /// The digest of the held turn, as `approval_requested` gave it.
    pub turn_digest: String,
    /// How long it had waited: the agent's `escalate_after`, the text as configured (`1h`, `90m`).
    pub after: String,
    /// The notifiers told (their configured names): the agent's `escalate_to`, then every notifier
    /// covering the agent whose `on` lists `escalation`.
    pub notified: Vec<String>,
}

/// A decision as a `decision` event keeps it: a [`Decision`] whose texts `[privacy] level = "metadata"`
/// writes as null (so a `deny` may carry `"reason": null`, a `respond` `"result": null`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum LoggedDecision {
    /// Run the call as the model asked.
    Approve,
    /// Run the call with these arguments instead.
    Edit {
        /// The approver's arguments (null under `metadata`).
        #[cfg_attr(feature = "openapi", schema(value_type = Object))]
        arguments: Value,
    },
    /// Do not run it; the model is told why.
    Deny {
        /// The reason passed to the model (null under `metadata`).
        #[cfg_attr(feature = "openapi", schema(required = true))]
        reason: Option<String>,
    },
    /// Do not run it; this text is the call's result.
    Respond {
        /// The result given in the tool's place (null under `metadata`).
        #[cfg_attr(feature = "openapi", schema(required = true))]
        result: Option<String>,
    },
}

impl LoggedDecision {
    /// The action's name: `approve`, `edit`, `deny` or `respond`.
    pub fn action(&self) -> &'static str {
        match self {
            LoggedDecision::Approve => "approve",
            LoggedDecision::Edit { .. } => "edit",
            LoggedDecision::Deny { .. } => "deny",
            LoggedDecision::Respond { .. } => "respond",
        }
    }
}

impl From<Decision> for LoggedDecision {
    fn from(decision: Decision) -> Self {
        match decision {
            Decision::Approve => LoggedDecision::Approve,
            Decision::Edit { arguments } => LoggedDecision::Edit { arguments },
            Decision::Deny { reason } => LoggedDecision::Deny { reason: Some(reason) },
            Decision::Respond { result } => LoggedDecision::Respond { result: Some(result) },
        }
    }
}

/// `decision`: a person (or the system, on expiry) decided one call. The decision's own fields come
/// first (`action`, then `arguments` / `reason` / `result`), then `call_id` and `actor`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct DecisionMade {
    /// The decision.
    #[serde(flatten)]
    pub decision: LoggedDecision,
    /// The call decided.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub call_id: CallId,
    /// Who decided (`system` for expiry).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub actor: Actor,
    /// On a quorum call (`approvals = N`): its approvals after this vote. Absent for a call one
    /// decision settles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<crate::Approvals>,
    /// The grant this approval made (`remember`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub grant: Option<GrantId>,
    /// The id of the signed link this decision was made through (V2.md section 4: 32 lowercase hex
    /// digits, the start of the SHA-256 of the link's token), so that a second use of the link is
    /// recognised; absent for a decision made any other way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// `run_resumed`: a waiting run resumed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RunResumed {
    /// Whose decision completed the set.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub actor: Actor,
}

/// `run_taken_over`: a process took over a running run whose lease had expired (the process driving it
/// stopped or stalled), to continue it from its last committed step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RunTakenOver {
    /// The process that took the run over (its lease owner id).
    pub owner: String,
    /// The process whose lease had expired.
    pub previous_owner: String,
    /// How many takeovers in a row this is without the run reaching a new step (1 for the first). At
    /// `[runtime] max_takeovers` the run is failed instead of driven again: the segment keeps stopping
    /// the process that drives it.
    pub takeovers: u32,
}

/// `run_completed`: the run completed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RunCompleted {
    /// The final output, if any.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub output: Option<String>,
    /// Why it ended.
    pub termination_reason: TerminationReason,
}

/// `run_failed`: the run failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RunFailed {
    /// Why.
    pub error: RunError,
}

/// `run_cancelled`: the run was cancelled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RunCancelled {
    /// Who cancelled it.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub actor: Actor,
    /// Why, if they said.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub reason: Option<String>,
}

/// `run_expired`: the run's approval deadline passed with `on_expiry = "cancel"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RunExpired {
    /// The deadline that passed (RFC 3339 UTC).
    pub deadline: String,
}

/// The data of one event, typed by its kind. The kind itself is not part of the JSON (it is the
/// event's `kind`), so this serialises as the inner struct alone.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum EventData {
    /// `run_started`.
    RunStarted(RunStarted),
    /// `model_request`.
    ModelRequest(ModelRequest),
    /// `model_response`.
    ModelResponse(ModelResponse),
    /// `tool_started`.
    ToolStarted(ToolStarted),
    /// `tool_finished`.
    ToolFinished(ToolFinished),
    /// `approval_requested`.
    ApprovalRequested(ApprovalRequested),
    /// `decision`.
    Decision(DecisionMade),
    /// `approval_escalated`.
    ApprovalEscalated(ApprovalEscalated),
    /// `run_resumed`.
    RunResumed(RunResumed),
    /// `run_taken_over`.
    RunTakenOver(RunTakenOver),
    /// `run_completed`.
    RunCompleted(RunCompleted),
    /// `run_failed`.
    RunFailed(RunFailed),
    /// `run_cancelled`.
    RunCancelled(RunCancelled),
    /// `run_expired`.
    RunExpired(RunExpired),
}

/// Event data that cannot be read. Not retryable: the same input fails the same way.
#[derive(Debug, thiserror::Error)]
pub enum EventDataError {
    /// The kind is none this build knows.
    #[error("unknown event kind `{0}`")]
    UnknownKind(String),
    /// The data does not fit its kind.
    #[error("the data of a `{}` event does not fit: {source}", kind.as_str())]
    Invalid {
        /// The event's kind.
        kind: EventKind,
        /// What serde found wrong.
        #[source]
        source: serde_json::Error,
    },
}

impl EventData {
    /// The event kind this data belongs to.
    pub fn kind(&self) -> EventKind {
        match self {
            EventData::RunStarted(_) => EventKind::RunStarted,
            EventData::ModelRequest(_) => EventKind::ModelRequest,
            EventData::ModelResponse(_) => EventKind::ModelResponse,
            EventData::ToolStarted(_) => EventKind::ToolStarted,
            EventData::ToolFinished(_) => EventKind::ToolFinished,
            EventData::ApprovalRequested(_) => EventKind::ApprovalRequested,
            EventData::Decision(_) => EventKind::Decision,
            EventData::ApprovalEscalated(_) => EventKind::ApprovalEscalated,
            EventData::RunResumed(_) => EventKind::RunResumed,
            EventData::RunTakenOver(_) => EventKind::RunTakenOver,
            EventData::RunCompleted(_) => EventKind::RunCompleted,
            EventData::RunFailed(_) => EventKind::RunFailed,
            EventData::RunCancelled(_) => EventKind::RunCancelled,
            EventData::RunExpired(_) => EventKind::RunExpired,
        }
    }

    /// The JSON written as the event's `data`.
    pub fn to_value(&self) -> Value {
        // Cannot fail: every type here is string-keyed maps, strings, numbers, booleans and JSON values,
        // which serde_json always represents. `Null` would only mark a broken build, and the fixture
        // round-trip test would catch it.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Reads the `data` of an event of kind `kind` (its snake_case name).
    pub fn from_kind_and_value(kind: &str, value: Value) -> Result<EventData, EventDataError> {
        let kind = EventKind::parse(kind).ok_or_else(|| EventDataError::UnknownKind(kind.to_owned()))?;
        Self::from_kind(kind, value)
    }

    /// Reads the `data` of an event of kind `kind`.
    pub fn from_kind(kind: EventKind, value: Value) -> Result<EventData, EventDataError> {
        fn read<T: serde::de::DeserializeOwned>(kind: EventKind, value: Value) -> Result<T, EventDataError> {
            serde_json::from_value(value).map_err(|source| EventDataError::Invalid { kind, source })
        }
        Ok(match kind {
            EventKind::RunStarted => EventData::RunStarted(read(kind, value)?),
            EventKind::ModelRequest => EventData::ModelRequest(read(kind, value)?),
            EventKind::ModelResponse => EventData::ModelResponse(read(kind, value)?),
            EventKind::ToolStarted => EventData::ToolStarted(read(kind, value)?),
            EventKind::ToolFinished => EventData::ToolFinished(read(kind, value)?),
            EventKind::ApprovalRequested => EventData::ApprovalRequested(read(kind, value)?),
            EventKind::Decision => EventData::Decision(read(kind, value)?),
            EventKind::ApprovalEscalated => EventData::ApprovalEscalated(read(kind, value)?),
            EventKind::RunResumed => EventData::RunResumed(read(kind, value)?),
            EventKind::RunTakenOver => EventData::RunTakenOver(read(kind, value)?),
            EventKind::RunCompleted => EventData::RunCompleted(read(kind, value)?),
            EventKind::RunFailed => EventData::RunFailed(read(kind, value)?),
            EventKind::RunCancelled => EventData::RunCancelled(read(kind, value)?),
            EventKind::RunExpired => EventData::RunExpired(read(kind, value)?),
        })
    }
}

macro_rules! from_struct {
    ($($variant:ident($data:ident)),* $(,)?) => {
        $(impl From<$data> for EventData {
            fn from(data: $data) -> Self {
                EventData::$variant(data)
            }
        })*
    };
}

from_struct!(
    RunStarted(RunStarted),
    ModelRequest(ModelRequest),
    ModelResponse(ModelResponse),
    ToolStarted(ToolStarted),
    ToolFinished(ToolFinished),
    ApprovalRequested(ApprovalRequested),
    Decision(DecisionMade),
    ApprovalEscalated(ApprovalEscalated),
    RunResumed(RunResumed),
    RunTakenOver(RunTakenOver),
    RunCompleted(RunCompleted),
    RunFailed(RunFailed),
    RunCancelled(RunCancelled),
    RunExpired(RunExpired),
);
