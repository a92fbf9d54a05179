//! Suspensions (a run held at the gate) and the decisions that resume them.
//!
//! A suspension is persisted and may be resumed by another process or another version of Tollgate, so it
//! carries `schema_version` and is read only through [`Suspension::from_json`] / [`Suspension::from_value`],
//! which refuse a version they do not know rather than guess.

use crate::canonical::canonical_sha256;
use crate::tool::{Gate, ToolPin};
use crate::transcript::{Counters, Invocation, Message, ToolResult};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The suspension format this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// `sha256:` + 64 lowercase hex digits over the held calls and the schemas they were checked against.
/// A decision names the digest it was made on; a different digest means the person saw another turn.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TurnDigest(pub String);

impl std::fmt::Display for TurnDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TurnDigest {
    /// The digest as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One call of the held turn, as the approver sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeldCall {
    /// The model's id for the call.
    pub call_id: String,
    /// The tool named.
    pub tool: String,
    /// The model's arguments.
    pub arguments: Value,
    /// The gate's verdict (`forbid` also for calls refused before the gate).
    pub gate: Gate,
    /// What the approver sees, if the tool gives a preview.
    #[serde(default)]
    pub preview: Option<String>,
    /// A side-effecting call that started but whose end was never recorded (a crash): it may or may not
    /// have taken effect, so it runs again only on a person's decision.
    #[serde(default)]
    pub in_doubt: bool,
    /// The call's result when it is already settled and will neither run nor take a decision: a refusal
    /// (unknown tool, bad arguments, forbidden) or a result recorded before a crash.
    #[serde(default)]
    pub settled: Option<ToolResult>,
}

impl HeldCall {
    /// True when this call needs a person's decision before the run can resume.
    pub fn takes_decision(&self) -> bool {
        self.settled.is_none() && (self.gate == Gate::Ask || self.in_doubt)
    }
}

/// A run waiting at the gate. Everything needed to resume it, in any process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Suspension {
    /// Always [`SCHEMA_VERSION`] when written by this build.
    pub schema_version: u32,
    /// The model call (1-based) whose turn is held.
    pub round: u32,
    /// The transcript up to and including the held assistant turn.
    pub transcript: Vec<Message>,
    /// Every call of the held turn, in the model's order.
    pub calls: Vec<HeldCall>,
    /// What the run has consumed so far.
    pub counters: Counters,
    /// Every tool invocation that ran in earlier segments.
    pub trace: Vec<Invocation>,
    /// Name and schema hash of every tool offered when the turn was held.
    pub tools: Vec<ToolPin>,
    /// Digest of the held calls and their schemas.
    pub turn_digest: TurnDigest,
}

/// A suspension that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SuspensionError {
    /// The text is not JSON or not a suspension.
    #[error("stored suspension is not valid: {0}")]
    Invalid(String),
    /// Written by a version of Tollgate this build does not understand.
    #[error("stored suspension has schema_version {found}; this build of Tollgate reads version {supported} only")]
    UnsupportedVersion {
        /// The version found.
        found: u64,
        /// The version this build reads.
        supported: u32,
    },
}

impl Suspension {
    /// Builds a suspension and computes its digest.
    pub(crate) fn new(
        round: u32,
        transcript: Vec<Message>,
        calls: Vec<HeldCall>,
        counters: Counters,
        trace: Vec<Invocation>,
        tools: Vec<ToolPin>,
    ) -> Self {
        let turn_digest = compute_digest(&calls, &tools);
        Self { schema_version: SCHEMA_VERSION, round, transcript, calls, counters, trace, tools, turn_digest }
    }

    /// Reads a stored suspension, refusing unknown versions.
    pub fn from_json(text: &str) -> Result<Self, SuspensionError> {
        let value: Value = serde_json::from_str(text).map_err(|e| SuspensionError::Invalid(e.to_string()))?;
        Self::from_value(value)
    }

    /// Reads a stored suspension from a JSON value, refusing unknown versions.
    pub fn from_value(value: Value) -> Result<Self, SuspensionError> {
        let found = value
            .get("schema_version")
            .and_then(Value::as_u64)
            .ok_or_else(|| SuspensionError::Invalid("schema_version is missing or not a number".into()))?;
        if found != u64::from(SCHEMA_VERSION) {
            return Err(SuspensionError::UnsupportedVersion { found, supported: SCHEMA_VERSION });
        }
        let suspension: Suspension =
            serde_json::from_value(value).map_err(|e| SuspensionError::Invalid(e.to_string()))?;
        if suspension.turn_digest != compute_digest(&suspension.calls, &suspension.tools) {
            return Err(SuspensionError::Invalid("turn_digest does not match the held calls".into()));
        }
        Ok(suspension)
    }

    /// The JSON text to store.
    pub fn to_json(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The calls that still need a decision.
    pub fn decidable_calls(&self) -> impl Iterator<Item = &HeldCall> {
        self.calls.iter().filter(|c| c.takes_decision())
    }

    /// The held call with this id.
    pub fn call(&self, call_id: &str) -> Option<&HeldCall> {
        self.calls.iter().find(|c| c.call_id == call_id)
    }

    /// Marks a call in doubt (started, never finished) and recomputes the digest, so a decision made on
    /// the earlier view of the turn is stale. Returns false when there is no such call.
    pub fn mark_in_doubt(&mut self, call_id: &str) -> bool {
        let Some(call) = self.calls.iter_mut().find(|c| c.call_id == call_id) else { return false };
        call.in_doubt = true;
        self.turn_digest = compute_digest(&self.calls, &self.tools);
        true
    }

    /// Records a call's result as settled (it finished before a crash) and recomputes the digest.
    /// Returns false when there is no such call.
    pub fn settle(&mut self, result: ToolResult) -> bool {
        let Some(call) = self.calls.iter_mut().find(|c| c.call_id == result.call_id) else { return false };
        call.settled = Some(result);
        call.in_doubt = false;
        self.turn_digest = compute_digest(&self.calls, &self.tools);
        true
    }
}

fn compute_digest(calls: &[HeldCall], tools: &[ToolPin]) -> TurnDigest {
    let schemas: BTreeMap<&str, &str> = tools
        .iter()
        .filter(|t| calls.iter().any(|c| c.tool == t.name))
        .map(|t| (t.name.as_str(), t.schema_hash.as_str()))
        .collect();
    let calls: Vec<Value> = calls
        .iter()
        .map(|c| {
            json!({
                "call_id": c.call_id,
                "tool": c.tool,
                "arguments": c.arguments,
                "gate": c.gate,
                "in_doubt": c.in_doubt,
                "settled": c.settled.as_ref().map(|r| json!({"content": r.content, "is_error": r.is_error})),
            })
        })
        .collect();
    TurnDigest(format!("sha256:{}", canonical_sha256(&json!({"calls": calls, "schemas": schemas}))))
}

/// A person's answer for one held call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum Decision {
    /// Run the call as the model asked.
    Approve,
    /// Run the call with these arguments instead (validated against the tool's schema).
    Edit {
        /// The approver's arguments.
        arguments: Value,
    },
    /// Do not run it; the model is told why.
    Deny {
        /// The approver's reason, passed to the model.
        reason: String,
    },
    /// Do not run it; this text is the call's result.
    Respond {
        /// The substituted result.
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

/// Decisions keyed by `call_id` (never by position).
pub type Decisions = BTreeMap<String, Decision>;

/// A set of decisions that cannot resume a suspension. Nothing ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    /// No held call has this id.
    #[error("no held call has id `{0}`")]
    UnknownCall(String),
    /// The call runs or is refused without a person's decision.
    #[error("call `{call_id}` has gate `{gate}` and takes no decision")]
    NotDecidable {
        /// The call.
        call_id: String,
        /// Its gate.
        gate: Gate,
    },
    /// Some held calls have no decision yet.
    #[error("held calls without a decision: {}", .0.join(", "))]
    Missing(Vec<String>),
    /// Edited arguments fail the tool's schema or checks.
    #[error("edited arguments for call `{call_id}` are invalid: {message}")]
    InvalidEdit {
        /// The call.
        call_id: String,
        /// What is wrong with them.
        message: String,
    },
}

impl DecisionError {
    /// A stable short name for the error kind.
    pub fn kind(&self) -> &'static str {
        match self {
            DecisionError::UnknownCall(_) => "unknown_call",
            DecisionError::NotDecidable { .. } => "not_decidable",
            DecisionError::Missing(_) => "missing_decisions",
            DecisionError::InvalidEdit { .. } => "invalid_arguments",
        }
    }
}
