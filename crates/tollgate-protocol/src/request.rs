//! Request bodies (docs/api.md, "Endpoints" and "Decisions").
//!
//! Every body rejects fields it does not know (docs/api.md: a 422), and leaves an absent optional field out
//! when a client serialises it, so what a client sends is the smallest body that says what it means.
//! Rules that span fields (`decisions` not empty, not together with `approve_all`, …) are the server's
//! to check: it answers each with its own 422 detail.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// `POST /v1/runs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateRun)]
pub struct StartRunRequest {
    /// The agent; the first configured agent when absent or null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// What the agent is asked to do: a non-empty string.
    pub input: String,
    /// Answer once the run waits for approval or has ended (default false: answer at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,
}

/// `approve`: run the call as the model asked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveDecision {
    /// The held call.
    pub call_id: String,
}

/// `edit`: run the call with these arguments instead (checked against the tool's schema).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditDecision {
    /// The held call.
    pub call_id: String,
    /// The approver's arguments.
    #[schema(value_type = Object)]
    pub arguments: Value,
}

/// `deny`: do not run the call; the model is told the reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DenyDecision {
    /// The held call.
    pub call_id: String,
    /// The reason given to the model (the server records `no reason given` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `respond`: do not run the call; this text is its result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RespondDecision {
    /// The held call.
    pub call_id: String,
    /// The result given in the tool's place.
    pub result: String,
}

/// One decision for one held call, by `call_id`, tagged by `action`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "action", rename_all = "snake_case")]
#[schema(as = DecisionItem)]
pub enum CallDecision {
    /// Run the call as the model asked.
    Approve(ApproveDecision),
    /// Run the call with other arguments.
    Edit(EditDecision),
    /// Do not run the call; tell the model why.
    Deny(DenyDecision),
    /// Do not run the call; give this result instead.
    Respond(RespondDecision),
}

impl CallDecision {
    /// The held call this decision is for.
    pub fn call_id(&self) -> &str {
        match self {
            CallDecision::Approve(d) => &d.call_id,
            CallDecision::Edit(d) => &d.call_id,
            CallDecision::Deny(d) => &d.call_id,
            CallDecision::Respond(d) => &d.call_id,
        }
    }
}

/// `POST /v1/runs/{id}/decisions`: either `decisions`, or `approve_all`, or `deny_all` (with `reason`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = DecideRequest)]
pub struct DecisionRequest {
    /// The digest of the held turn the decisions were made on (`pending.turn_digest`).
    pub turn_digest: String,
    /// Decisions for some or all held calls; not empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decisions: Option<Vec<CallDecision>>,
    /// Approve every held call not yet decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve_all: Option<bool>,
    /// Deny every held call not yet decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_all: Option<bool>,
    /// The reason for `deny_all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Answer once the run waits again or has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,
}

impl DecisionRequest {
    /// Decisions for some or all held calls of the turn `turn_digest`.
    pub fn each(turn_digest: impl Into<String>, decisions: Vec<CallDecision>) -> Self {
        Self { turn_digest: turn_digest.into(), decisions: Some(decisions), ..Self::default() }
    }

    /// Approve every held call not yet decided.
    pub fn approve_all(turn_digest: impl Into<String>) -> Self {
        Self { turn_digest: turn_digest.into(), approve_all: Some(true), ..Self::default() }
    }

    /// Deny every held call not yet decided, for `reason`.
    pub fn deny_all(turn_digest: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { turn_digest: turn_digest.into(), deny_all: Some(true), reason: Some(reason.into()), ..Self::default() }
    }
}

/// `POST /v1/runs/{id}/cancel`; the body may be empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Why, recorded on the `run_cancelled` event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `POST /v1/purge`; an empty body means the configured retention windows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PurgeRequest {
    /// Terminal runs finished longer ago than this go (`30s`, `15m`, `24h`, `30d`); waiting runs go by
    /// the configured `retention.waiting_after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than: Option<String>,
}
