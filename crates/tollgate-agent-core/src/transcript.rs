//! The provider-neutral transcript: what the loop sends to a model and what it keeps in a suspension.
//!
//! These types are persisted (inside suspensions) and are ours: provider adapters translate them to and
//! from their wire formats, never the other way round.

use crate::image::ToolImage;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tollgate_agent_protocol::CallId;

/// One entry of a run's transcript.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// The agent's system prompt; at most one, first.
    System {
        /// The prompt text.
        content: String,
    },
    /// The run's input (or a later user message).
    User {
        /// The user's text.
        content: String,
    },
    /// One model response: text, tool calls, or both.
    Assistant {
        /// Text the model produced, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// The calls the model asked for, in the model's order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one call of the preceding assistant turn.
    Tool(ToolResult),
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System { content: content.into() }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User { content: content.into() }
    }
}

/// One tool call inside an assistant turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The model's id for the call; results and decisions are keyed by it.
    pub call_id: CallId,
    /// The tool the model asked for.
    pub name: String,
    /// The arguments as JSON (an object for every well-formed call).
    pub arguments: Value,
    /// Set by a provider adapter when the model's arguments were not valid JSON: the parser's message.
    /// Such a call is refused with an error result naming the problem; it never runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub malformed_arguments: Option<String>,
}

impl ToolCall {
    /// A well-formed call.
    pub fn new(call_id: impl Into<CallId>, name: impl Into<String>, arguments: Value) -> Self {
        Self { call_id: call_id.into(), name: name.into(), arguments, malformed_arguments: None }
    }
}

/// The one result a call receives in the transcript.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call this answers.
    pub call_id: CallId,
    /// The tool the call named.
    pub tool: String,
    /// What the model reads: the tool's output, an error message, or a substituted answer.
    pub content: String,
    /// True when the call did not produce a normal result (refused, denied, failed, not executed).
    #[serde(default)]
    pub is_error: bool,
    /// True when a person denied the call (the content carries their reason).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub denied: bool,
    /// The images the tool returned, each also described in `content` ([`crate::image`]); sent to the
    /// providers that read images. Kept in suspensions, never in events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ToolImage>,
}

/// Token counters as the provider reports them: the wire's type, so a model client's and a run's compare.
pub use tollgate_agent_protocol::Usage;

/// What a run has consumed so far, folded over every segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Model calls made (the closing completion at the iteration cap is not counted).
    pub iterations: u32,
    /// Tokens over every model call, the closing completion included.
    pub usage: Usage,
    /// Tool invocations that actually ran.
    pub tool_invocations: u32,
}

/// One tool invocation that actually ran, kept across segments so a finished run shows every one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Invocation {
    /// The model call (round) whose turn held the call.
    pub round: u32,
    /// The call's id.
    pub call_id: CallId,
    /// The tool that ran.
    pub tool: String,
    /// The arguments it ran with (the approver's, after an edit).
    pub arguments: Value,
    /// Whether its result was an error.
    pub is_error: bool,
}
