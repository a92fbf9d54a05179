//! The JSON shapes of API.md as Rust types: request bodies (deserialised, unknown fields rejected) and
//! the documented shapes of responses (for the OpenAPI document; the run object itself is built by
//! [`tollgate_runtime::view::run_json`], and a test checks that what it builds fits [`RunView`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// `POST /v1/runs`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    /// The agent; the first configured agent when absent or null.
    #[serde(default)]
    pub agent: Option<String>,
    /// What the agent is asked to do: a non-empty string.
    pub input: String,
    /// Answer once the run waits for approval or has ended (default false: answer at once).
    #[serde(default)]
    pub wait: Option<bool>,
}

/// One decision for one held call, by `call_id`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum DecisionItem {
    /// Run the call as the model asked.
    Approve {
        /// The held call.
        call_id: String,
    },
    /// Run the call with these arguments instead (checked against the tool's schema).
    Edit {
        /// The held call.
        call_id: String,
        /// The approver's arguments.
        #[schema(value_type = Object)]
        arguments: Value,
    },
    /// Do not run the call; the model is told the reason.
    Deny {
        /// The held call.
        call_id: String,
        /// The reason given to the model.
        #[serde(default)]
        reason: Option<String>,
    },
    /// Do not run the call; this text is its result.
    Respond {
        /// The held call.
        call_id: String,
        /// The result given in the tool's place.
        result: String,
    },
}

/// `POST /v1/runs/{id}/decisions`: either `decisions`, or `approve_all`, or `deny_all` (with `reason`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    /// The digest of the held turn the decisions were made on (`pending.turn_digest`).
    pub turn_digest: String,
    /// Decisions for some or all held calls; not empty.
    #[serde(default)]
    pub decisions: Option<Vec<DecisionItem>>,
    /// Approve every held call not yet decided.
    #[serde(default)]
    pub approve_all: Option<bool>,
    /// Deny every held call not yet decided.
    #[serde(default)]
    pub deny_all: Option<bool>,
    /// The reason for `deny_all`.
    #[serde(default)]
    pub reason: Option<String>,
    /// Answer once the run waits again or has ended.
    #[serde(default)]
    pub wait: Option<bool>,
}

/// `POST /v1/runs/{id}/cancel`; the body may be empty.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Why, recorded on the `run_cancelled` event.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `POST /v1/purge`; an empty body means the configured retention windows.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PurgeRequest {
    /// Terminal runs finished longer ago than this go (`30s`, `15m`, `24h`, `30d`); waiting runs go by
    /// the configured `retention.waiting_after`.
    #[serde(default)]
    pub older_than: Option<String>,
}

/// A run's status.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code, reason = "documents the JSON shape; the values come from tollgate-core's own types")]
#[schema(as = RunStatus)]
pub enum RunStatusView {
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

/// Why a run ended.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code, reason = "documents the JSON shape; the values come from tollgate-core's own types")]
#[schema(as = TerminationReason)]
pub enum TerminationReasonView {
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

/// A gate verdict.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code, reason = "documents the JSON shape; the values come from tollgate-core's own types")]
#[schema(as = Gate)]
pub enum GateView {
    /// Runs without asking.
    Allow,
    /// Waits for a decision.
    Ask,
    /// Never runs.
    Forbid,
}

/// Tokens used so far.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Usage)]
pub struct UsageView {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

/// Why a run failed: never a secret, never a stack.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RunError)]
pub struct RunErrorView {
    /// A stable short name.
    pub kind: String,
    /// A sentence for people.
    pub message: String,
}

/// A decision already recorded for a held call: the decision's own fields plus who and when.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RecordedDecision)]
pub struct RecordedDecisionView {
    /// `approve`, `edit`, `deny` or `respond`.
    pub action: String,
    /// For `edit`.
    #[schema(value_type = Option<Object>)]
    pub arguments: Option<Value>,
    /// For `deny`.
    pub reason: Option<String>,
    /// For `respond`.
    pub result: Option<String>,
    /// Who decided.
    pub actor: String,
    /// When (RFC 3339 UTC).
    pub at: String,
}

/// One call of the held turn.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = HeldCall)]
pub struct HeldCallView {
    /// The model's id for the call.
    pub call_id: String,
    /// The tool named.
    pub tool: String,
    /// The model's arguments.
    #[schema(value_type = Object)]
    pub arguments: Value,
    /// The gate's verdict (`forbid` also for calls refused before the gate).
    pub gate: GateView,
    /// What the approver sees.
    #[schema(required = true)]
    pub preview: Option<String>,
    /// Started but never finished (a crash): it may or may not have taken effect.
    pub in_doubt: bool,
    /// The decision recorded for this call, if any.
    #[schema(required = true)]
    pub decision: Option<RecordedDecisionView>,
}

/// The held turn of a waiting run.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Pending)]
pub struct PendingView {
    /// `sha256:` + 64 lowercase hex digits; decisions name it.
    pub turn_digest: String,
    /// The approval deadline (RFC 3339 UTC), if the agent has one.
    #[schema(required = true)]
    pub expires_at: Option<String>,
    /// Every call of the held turn, allow-gated ones too.
    pub calls: Vec<HeldCallView>,
}

/// A run (API.md, "Run").
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Run)]
pub struct RunView {
    /// UUIDv7, lowercase, hyphenated.
    pub id: String,
    /// The agent's name.
    pub agent: String,
    /// Current status.
    pub status: RunStatusView,
    /// The run's input.
    pub input: String,
    /// The final output.
    #[schema(required = true)]
    pub output: Option<String>,
    /// Why it ended.
    #[schema(required = true)]
    pub termination_reason: Option<TerminationReasonView>,
    /// Model calls so far (not counting a closing completion at the cap).
    pub iterations: u32,
    /// Tokens so far.
    pub usage: UsageView,
    /// Bumped by every change.
    pub version: u64,
    /// The actor who started it.
    pub created_by: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC.
    pub updated_at: String,
    /// RFC 3339 UTC, once terminal.
    #[schema(required = true)]
    pub finished_at: Option<String>,
    /// For failed runs.
    #[schema(required = true)]
    pub error: Option<RunErrorView>,
    /// The held turn, while waiting for approval.
    #[schema(required = true)]
    pub pending: Option<PendingView>,
}

/// `GET /v1/runs`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunList {
    /// Newest first.
    pub runs: Vec<RunView>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[schema(required = true)]
    pub next_cursor: Option<String>,
}

/// One event of a run's log (API.md, "Events").
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Event)]
pub struct EventView {
    /// 1, 2, … per run.
    pub seq: u64,
    /// RFC 3339 UTC, exactly as hashed.
    pub at: String,
    /// `run_started`, `model_request`, `model_response`, `tool_started`, `tool_finished`,
    /// `approval_requested`, `decision`, `run_resumed`, `run_completed`, `run_failed`, `run_cancelled`,
    /// `run_expired`.
    pub kind: String,
    /// The model call it belongs to (0 before the first).
    pub round: u32,
    /// Details per kind.
    #[schema(value_type = Object)]
    pub data: Value,
    /// Lowercase hex sha256 chaining this event to the previous one.
    pub hash: String,
}

/// `GET /v1/runs/{id}/events`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventList {
    /// In order.
    pub events: Vec<EventView>,
}

/// A configured agent.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Agent)]
pub struct AgentView {
    /// Its name.
    pub name: String,
    /// Its model.
    pub model: String,
    /// The names of the tools it is offered.
    pub tools: Vec<String>,
    /// The actor who started a run may not decide its calls.
    pub forbid_self_approval: bool,
}

/// `GET /v1/agents`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentList {
    /// The default agent first.
    pub agents: Vec<AgentView>,
}

/// A tool with its gate.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Tool)]
pub struct ToolView {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of its arguments.
    #[schema(value_type = Object)]
    pub parameters: Value,
    /// For `?agent=`: the effective gate for that agent; without: the tool's own default gate.
    pub gate: GateView,
    /// Why that gate: `default`, an annotation, or the policy rule that decided.
    pub why: String,
}

/// `GET /v1/tools`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolList {
    /// The tools.
    pub tools: Vec<ToolView>,
}

/// `POST /v1/purge`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PurgeResult {
    /// How many runs went, with their events.
    pub deleted_runs: u64,
}

/// `GET /healthz`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// An error (`application/problem+json`, RFC 9457).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Problem {
    /// `https://tollgate.dev/problems/SLUG`: `malformed-json` (400), `unauthorized` (401), `forbidden`
    /// (403), `not-found` (404), `method-not-allowed` (405), `conflict` (409), `payload-too-large` (413),
    /// `unsupported-media-type` (415), `invalid-request` (422), `invalid-decision` (422), `internal`
    /// (500), `unavailable` (503).
    #[serde(rename = "type")]
    pub problem_type: String,
    /// A fixed summary of the type.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What exactly went wrong, for people.
    pub detail: String,
}
