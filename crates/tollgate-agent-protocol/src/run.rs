//! The run object of docs/api.md ("Run") and the list answer.
//!
//! Field order is the wire order: serde writes struct fields in declaration order, so do not reorder them.
//! A field that the API always writes, `null` when empty, is an `Option` without `skip_serializing_if`
//! and is marked `required` in the schema (present, nullable).

use crate::ids::{Actor, CallId, GrantId, RunId};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

// One type for the run object and for the runtime and the store (core uses this one). Its doc comments
// are the OpenAPI document's descriptions.
/// A run's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Created, not yet picked up.
    Queued,
    /// Being driven.
    Running,
    /// Held at the gate.
    WaitingForApproval,
    /// Finished (also at the iteration cap or the token budget).
    Completed,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Its approval deadline passed with `on_expiry = "cancel"`.
    Expired,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::WaitingForApproval,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Expired,
    ];

    /// The snake_case name used in JSON, SQL and on screen.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::WaitingForApproval => "waiting_for_approval",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Expired => "expired",
        }
    }

    /// Parses the snake_case name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Completed, failed, cancelled and expired runs never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled | RunStatus::Expired)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TerminationReason {
    /// The model answered without calls.
    Completed,
    /// The iteration cap was reached.
    MaxIterations,
    /// The token budget was used up.
    BudgetExhausted,
    /// The run failed.
    Error,
    /// Someone cancelled it.
    Cancelled,
    /// Its approval deadline passed.
    Expired,
}

impl TerminationReason {
    /// The snake_case name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            TerminationReason::Completed => "completed",
            TerminationReason::MaxIterations => "max_iterations",
            TerminationReason::BudgetExhausted => "budget_exhausted",
            TerminationReason::Error => "error",
            TerminationReason::Cancelled => "cancelled",
            TerminationReason::Expired => "expired",
        }
    }
}

// One type for what a tool's gate answers (`Allow` by default) and what a held call carries (core uses
// this one). Its doc comments are the OpenAPI document's descriptions.
/// A gate verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    /// Runs without asking.
    #[default]
    Allow,
    /// Waits for a decision.
    Ask,
    /// Never runs.
    Forbid,
}

impl Gate {
    /// The lowercase name used in JSON and on screen.
    pub fn as_str(self) -> &'static str {
        match self {
            Gate::Allow => "allow",
            Gate::Ask => "ask",
            Gate::Forbid => "forbid",
        }
    }
}

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// One type for the wire and for what a model client reports (core uses this one). Its doc comments are
// the OpenAPI document's descriptions.
/// Tokens used (by a run so far, or by one model call in a `model_response` event).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Usage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Adds another usage to this one.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
    }
}

/// Why a run failed: never a secret, never a stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RunError {
    /// A stable short name, e.g. `model_timeout` (one of `RunErrorKind`'s; docs/api.md lists them).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub kind: RunErrorKind,
    /// A sentence for people.
    pub message: String,
}

impl RunError {
    /// An error of this kind, with its sentence for people.
    pub fn new(kind: RunErrorKind, message: impl Into<String>) -> RunError {
        RunError { kind, message: message.into() }
    }
}

/// The kind of a run's error (`error.kind`), on the wire as its snake_case name. Every error Tollgate
/// writes has one of the named kinds; [`RunErrorKind::Other`] keeps a name this build does not know (a
/// stored run written by another build) as it was, so such a run still reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RunErrorKind {
    /// The model could not be reached, or its stream was cut, after the retries.
    ModelConnection,
    /// The model did not answer in time, after the retries.
    ModelTimeout,
    /// The provider kept refusing for rate limits, after the retries.
    ModelRateLimited,
    /// The provider answered 5xx, after the retries.
    ModelServerError,
    /// The provider refused the credentials.
    ModelAuth,
    /// The conversation no longer fits the model's context.
    ModelContextLength,
    /// The provider refused the request as malformed.
    ModelBadRequest,
    /// The model's answer could not be read.
    ModelInvalidResponse,
    /// The model refused to answer.
    ModelRefusal,
    /// The scripted model ran out of turns or its script does not fit.
    Script,
    /// A resume named a call the held turn does not have.
    UnknownCall,
    /// A resume decided a call that takes no decision.
    NotDecidable,
    /// A resume decided a call that already ran before a crash.
    AlreadyRan,
    /// A resume lacked a decision for a call that needs one.
    MissingDecisions,
    /// A resume's edited arguments fail the tool's schema or checks.
    InvalidArguments,
    /// The run's progress could not be stored.
    Store,
    /// The held turn could not be stored as JSON.
    UnstorableSuspension,
    /// The stored held turn cannot be read (corrupt, or from an unknown version).
    CorruptSuspension,
    /// The run was taken over again and again without a new step.
    CrashLoop,
    /// A kind this build does not know, as stored.
    Other(String),
}

impl RunErrorKind {
    /// Every named kind.
    pub const NAMED: [RunErrorKind; 19] = [
        RunErrorKind::ModelConnection,
        RunErrorKind::ModelTimeout,
        RunErrorKind::ModelRateLimited,
        RunErrorKind::ModelServerError,
        RunErrorKind::ModelAuth,
        RunErrorKind::ModelContextLength,
        RunErrorKind::ModelBadRequest,
        RunErrorKind::ModelInvalidResponse,
        RunErrorKind::ModelRefusal,
        RunErrorKind::Script,
        RunErrorKind::UnknownCall,
        RunErrorKind::NotDecidable,
        RunErrorKind::AlreadyRan,
        RunErrorKind::MissingDecisions,
        RunErrorKind::InvalidArguments,
        RunErrorKind::Store,
        RunErrorKind::UnstorableSuspension,
        RunErrorKind::CorruptSuspension,
        RunErrorKind::CrashLoop,
    ];

    /// The snake_case name on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            RunErrorKind::ModelConnection => "model_connection",
            RunErrorKind::ModelTimeout => "model_timeout",
            RunErrorKind::ModelRateLimited => "model_rate_limited",
            RunErrorKind::ModelServerError => "model_server_error",
            RunErrorKind::ModelAuth => "model_auth",
            RunErrorKind::ModelContextLength => "model_context_length",
            RunErrorKind::ModelBadRequest => "model_bad_request",
            RunErrorKind::ModelInvalidResponse => "model_invalid_response",
            RunErrorKind::ModelRefusal => "model_refusal",
            RunErrorKind::Script => "script",
            RunErrorKind::UnknownCall => "unknown_call",
            RunErrorKind::NotDecidable => "not_decidable",
            RunErrorKind::AlreadyRan => "already_ran",
            RunErrorKind::MissingDecisions => "missing_decisions",
            RunErrorKind::InvalidArguments => "invalid_arguments",
            RunErrorKind::Store => "store",
            RunErrorKind::UnstorableSuspension => "unstorable_suspension",
            RunErrorKind::CorruptSuspension => "corrupt_suspension",
            RunErrorKind::CrashLoop => "crash_loop",
            RunErrorKind::Other(name) => name,
        }
    }

    /// The kind named `name`: a named kind, or [`RunErrorKind::Other`].
    pub fn parse(name: &str) -> RunErrorKind {
        RunErrorKind::NAMED.into_iter().find(|k| k.as_str() == name).unwrap_or_else(|| RunErrorKind::Other(name.into()))
    }
}

impl From<&str> for RunErrorKind {
    fn from(name: &str) -> RunErrorKind {
        RunErrorKind::parse(name)
    }
}

impl std::fmt::Display for RunErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RunErrorKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RunErrorKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(RunErrorKind::parse(&name))
    }
}

/// A person's answer for one call, without who or when: the `action` and its own fields. A recorded
/// decision and a `decision` event's data carry these first, then their own fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Decision {
    /// Run the call as the model asked.
    Approve,
    /// Run the call with these arguments instead.
    Edit {
        /// The approver's arguments.
        #[cfg_attr(feature = "openapi", schema(value_type = Object))]
        arguments: Value,
    },
    /// Do not run it; the model is told why.
    Deny {
        /// The reason passed to the model.
        reason: String,
    },
    /// Do not run it; this text is the call's result.
    Respond {
        /// The result given in the tool's place.
        result: String,
    },
}

impl Decision {
    /// The action's name: `approve`, `edit`, `deny` or `respond`.
    pub fn action(&self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Edit { .. } => "edit",
            Decision::Deny { .. } => "deny",
            Decision::Respond { .. } => "respond",
        }
    }
}

/// A decision already recorded for a held call: the decision's own fields, then who and when.
///
/// Its schema is written by hand, one flat object: an `allOf` of the tagged [`Decision`] and these
/// fields is what utoipa derives, and client generators (openapi-python-client) drop it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedDecision {
    /// The decision (`action` and its fields).
    #[serde(flatten)]
    pub decision: Decision,
    /// Who decided (a token's name, `local`, or `system` for expiry).
    pub actor: Actor,
    /// When (RFC 3339 UTC).
    pub at: String,
}

/// One call of the held turn, as the approver sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = HeldCall))]
pub struct Call {
    /// The model's id for the call.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub call_id: CallId,
    /// The tool named.
    pub tool: String,
    /// The model's arguments.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub arguments: Value,
    /// The gate's verdict (`forbid` also for calls refused before the gate).
    pub gate: Gate,
    /// What the approver sees.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub preview: Option<String>,
    /// Started but never finished (a crash): it may or may not have taken effect.
    pub in_doubt: bool,
    /// The decision recorded for this call, if any.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub decision: Option<RecordedDecision>,
    /// Where the call stands, as the runtime sees it (the fields above stay for older clients; this
    /// one says what they cannot, e.g. that a call already ran before a crash).
    pub state: CallState,
    /// True exactly when a decision for this call would be accepted now (`state` is `waiting` or
    /// `in_doubt`). Clients offer decisions on these calls and no others.
    pub takes_decision: bool,
    /// The call's recorded result when it already ran before a crash (`state` is `finished`); null
    /// otherwise.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub result: Option<CallResult>,
    /// For a call a policy rule gives `approvals = N` (N ≥ 2, a quorum): how many distinct people must
    /// approve it and who has so far, in the order they approved. Null for a call one decision settles.
    /// (Absent for such a call, so a run without quorum calls reads exactly as v1 wrote it.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<Approvals>,
    /// For a call that takes a decision and may be remembered: the narrowest useful grant `match` its
    /// tool proposes (V2.md, grants); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub suggested_match: Option<Map<String, Value>>,
    /// For a call a grant allowed: the grant; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub grant: Option<GrantId>,
}

/// A quorum call's approvals (`calls[].approvals`, and `approvals` in a `decision` event's data).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Approvals {
    /// How many distinct actors must approve the call (2 or more).
    pub required: u32,
    /// The actors who approved it, in the order they did (`[]` before the first approval).
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub given: Vec<Actor>,
}

impl Approvals {
    /// How many approvals are still missing (0 once the call is approved).
    pub fn missing(&self) -> u32 {
        let given = u32::try_from(self.given.len()).unwrap_or(u32::MAX);
        self.required.saturating_sub(given)
    }
}

impl Call {
    /// True when the call still needs a person's decision (the runtime's `takes_decision`).
    pub fn awaits_decision(&self) -> bool {
        self.takes_decision
    }
}

/// Where a held call stands (`calls[].state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CallState {
    /// Gated `ask`, no decision yet: it takes one.
    Waiting,
    /// Started before a crash and never finished, no decision yet: it may or may not have taken effect,
    /// and it takes a decision.
    InDoubt,
    /// Ran to its end before a crash: its `result` stands, it neither runs again nor takes a decision.
    Finished,
    /// A decision is recorded for it (`decision`).
    Decided,
    /// Allowed by its gate: it runs, without a decision, once the turn resumes.
    Allowed,
    /// Refused before the gate or by it (unknown tool, invalid arguments, forbidden): it never runs and
    /// takes no decision.
    Refused,
}

impl CallState {
    /// The snake_case name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            CallState::Waiting => "waiting",
            CallState::InDoubt => "in_doubt",
            CallState::Finished => "finished",
            CallState::Decided => "decided",
            CallState::Allowed => "allowed",
            CallState::Refused => "refused",
        }
    }
}

/// The result a held call already has (`calls[].result`): what the model reads for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CallResult {
    /// The result text, as the event log kept it (empty under `[privacy] level = "metadata"`).
    pub content: String,
    /// True when the tool failed.
    pub is_error: bool,
}

/// The held turn of a waiting run (`pending`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Pending {
    /// `sha256:` + 64 lowercase hex digits; decisions name it.
    pub turn_digest: String,
    /// The approval deadline (RFC 3339 UTC), if the agent has one.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub expires_at: Option<String>,
    /// Every call of the held turn, allow-gated ones too.
    pub calls: Vec<Call>,
    /// Set once the held turn was escalated (waited its agent's `escalate_after`; an
    /// `approval_escalated` event); absent before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalated: Option<Escalated>,
}

/// When a held turn was escalated and who was told (`pending.escalated`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Escalated {
    /// When (RFC 3339 UTC).
    pub at: String,
    /// The notifiers told, by their configured names.
    pub notified: Vec<String>,
}

/// A run (docs/api.md, "Run"): the answer of `POST /v1/runs`, `GET /v1/runs/{id}`, decisions and cancel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Run {
    /// UUIDv7, lowercase, hyphenated.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub id: RunId,
    /// The agent's name.
    pub agent: String,
    /// Current status.
    pub status: RunStatus,
    /// The run's input.
    pub input: String,
    /// What its starter gave the run's tools (`metadata` of `POST /v1/runs`): a JSON object, `{}` when
    /// none was given. Never in the run's events.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true, value_type = Object))]
    pub metadata: Map<String, Value>,
    /// The final output.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub output: Option<String>,
    /// Why it ended.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub termination_reason: Option<TerminationReason>,
    /// Model calls so far (not counting a closing completion at the cap).
    pub iterations: u32,
    /// Tokens so far.
    pub usage: Usage,
    /// Bumped by every change.
    pub version: u64,
    /// The actor who started it.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub created_by: Actor,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC.
    pub updated_at: String,
    /// RFC 3339 UTC, once terminal.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub finished_at: Option<String>,
    /// For failed runs.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub error: Option<RunError>,
    /// The held turn, while waiting for approval (null otherwise).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub pending: Option<Pending>,
}

impl Run {
    /// The calls of the held turn that still need a decision.
    pub fn awaiting_decision(&self) -> impl Iterator<Item = &Call> {
        self.pending.iter().flat_map(|p| p.calls.iter()).filter(|c| c.awaits_decision())
    }
}

/// `GET /v1/runs`: one page of runs, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = RunList))]
pub struct RunPage {
    /// Newest first.
    pub runs: Vec<Run>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub next_cursor: Option<String>,
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for RecordedDecision {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        serde_json::from_value(serde_json::json!({
            "type": "object",
            "description": "A decision already recorded for a held call: the decision's own fields (`action`, and \
`arguments` for edit, `reason` for deny, `result` for respond), then who and when.",
            "required": ["action", "actor", "at"],
            "properties": {
                "action": {"type": "string", "enum": ["approve", "edit", "deny", "respond"], "description": "The action."},
                "arguments": {"type": "object", "description": "`edit`: the approver's arguments."},
                "reason": {"type": "string", "description": "`deny`: the reason passed to the model."},
                "result": {"type": "string", "description": "`respond`: the result given in the tool's place."},
                "actor": {"type": "string", "description": "Who decided (a token's name, `local`, or `system` for expiry)."},
                "at": {"type": "string", "description": "When (RFC 3339 UTC)."},
            },
        }))
        .unwrap_or_default()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for RecordedDecision {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_error_kind_is_its_name_and_an_unknown_name_is_kept() -> Result<(), serde_json::Error> {
        for kind in RunErrorKind::NAMED {
            let text = serde_json::to_string(&kind)?;
            assert_eq!(text, format!("\"{kind}\""));
            assert_eq!(serde_json::from_str::<RunErrorKind>(&text)?, kind);
        }
        let newer: RunError = serde_json::from_str(r#"{"kind":"tool_exploded","message":"m"}"#)?;
        assert_eq!(newer.kind, RunErrorKind::Other("tool_exploded".into()));
        assert_eq!(serde_json::to_string(&newer)?, r#"{"kind":"tool_exploded","message":"m"}"#);
        assert_eq!(RunErrorKind::from("crash_loop"), RunErrorKind::CrashLoop);
        Ok(())
    }
}
