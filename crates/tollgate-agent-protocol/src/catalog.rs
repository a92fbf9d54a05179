//! The smaller answers: agents, tools, purge and health.

use crate::run::Gate;
use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// A configured agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Agent {
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct AgentList {
    /// The default agent first.
    pub agents: Vec<Agent>,
}

/// A tool with its gate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Tool {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of its arguments.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub parameters: Value,
    /// For `?agent=`: the effective gate for that agent; without: the tool's own default gate.
    pub gate: Gate,
    /// Why that gate: `default`, an annotation, or the policy rule that decided.
    pub why: String,
}

/// `GET /v1/tools`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ToolList {
    /// The tools.
    pub tools: Vec<Tool>,
}

/// `POST /v1/purge`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PurgeResult {
    /// How many runs went, with their events.
    pub deleted_runs: u64,
}

/// `GET /healthz`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Health {
    /// `ok`.
    pub status: String,
}
