//! Turning a provider's answer into ours, the same way for every adapter.
//!
//! Promises: an answer with neither text nor tool calls is a typed error, never an empty success;
//! arguments that are not a JSON object never fail the model call — the call is kept with its raw text and
//! [`ToolCall::malformed_arguments`] set, so the loop answers it with an error result the model can act on;
//! and every call id of a response is non-empty and unique in the whole transcript, because results and
//! decisions are keyed by it.

use serde_json::Value;
use std::collections::HashSet;
use tollgate_agent_core::{CallId, FinishReason, Message, ModelError, ToolCall};

/// A call's arguments as the model sent them: JSON text (OpenAI) or an already parsed value (Anthropic).
pub(crate) enum RawArguments {
    /// JSON text, to be parsed.
    #[cfg_attr(not(feature = "openai"), allow(dead_code))]
    Text(String),
    /// A parsed value.
    Value(Value),
}

/// Builds a call from the model's id, name and arguments; the id is fixed later by [`assign_call_ids`].
pub(crate) fn tool_call(call_id: Option<CallId>, name: String, arguments: RawArguments) -> ToolCall {
    let (arguments, malformed_arguments) = match arguments {
        // Local models often send "" (or nothing) for a tool that takes no arguments.
        RawArguments::Text(text) if text.trim().is_empty() => (Value::Object(serde_json::Map::new()), None),
        RawArguments::Text(text) => match serde_json::from_str::<Value>(&text) {
            Ok(value) if value.is_object() => (value, None),
            Ok(value) => (Value::String(text), Some(format!("expected a JSON object, got {}", kind_of(&value)))),
            Err(error) => (Value::String(text), Some(error.to_string())),
        },
        RawArguments::Value(Value::Null) => (Value::Object(serde_json::Map::new()), None),
        RawArguments::Value(value) if value.is_object() => (value, None),
        RawArguments::Value(value) => {
            let problem = format!("expected a JSON object, got {}", kind_of(&value));
            (value, Some(problem))
        }
    };
    ToolCall { call_id: call_id.unwrap_or_default(), name, arguments, malformed_arguments }
}

/// Gives every call without an id, or with an id already used in the transcript or earlier in this turn,
/// a fresh `call_N` (N counted from the calls already in the transcript, skipping ids in use).
pub(crate) fn assign_call_ids(calls: &mut [ToolCall], transcript: &[Message]) {
    let mut used: HashSet<CallId> = transcript
        .iter()
        .flat_map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls.iter().map(|c| c.call_id.clone()).collect(),
            _ => Vec::new(),
        })
        .collect();
    // A generated id must not take the id a later call of this turn brought along.
    let this_turn: HashSet<CallId> = calls.iter().map(|c| c.call_id.clone()).collect();
    let mut next = used.len();
    for call in calls.iter_mut() {
        if call.call_id.is_empty() || used.contains(&call.call_id) {
            let fresh = loop {
                next += 1;
                let candidate = CallId::from(format!("call_{next}"));
                if !used.contains(&candidate) && !this_turn.contains(&candidate) {
                    break candidate;
                }
            };
            tracing::debug!(tool = %call.name, given = %call.call_id, assigned = %fresh, "tool call id replaced");
            call.call_id = fresh;
        }
        used.insert(call.call_id.clone());
    }
}

/// An answer without text or calls is no answer: say why, as precisely as the finish reason allows.
pub(crate) fn empty_answer(reason: &FinishReason) -> ModelError {
    match reason {
        FinishReason::ContentFilter => {
            ModelError::Refusal("the provider's content filter stopped the answer before any output".into())
        }
        FinishReason::Length => {
            ModelError::InvalidResponse("the answer hit the output token limit before any text or tool call".into())
        }
        FinishReason::Other(name) => {
            ModelError::InvalidResponse(format!("the answer is empty (unknown finish reason `{name}`)"))
        }
        FinishReason::Stop | FinishReason::ToolCalls => {
            ModelError::InvalidResponse("the answer has neither text nor tool calls".into())
        }
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_are_parsed_or_kept_raw_with_the_problem() {
        let call = |text: &str| tool_call(Some("c".into()), "t".into(), RawArguments::Text(text.into()));
        assert_eq!(call(r#"{"a": 1}"#).arguments, json!({"a": 1}));
        assert_eq!(call("").arguments, json!({}));
        let broken = call(r#"{"a": 1"#);
        assert_eq!(broken.arguments, json!(r#"{"a": 1"#));
        assert!(broken.malformed_arguments.is_some());
        let array = call("[1]");
        assert_eq!(array.malformed_arguments.as_deref(), Some("expected a JSON object, got an array"));
        let parsed = tool_call(None, "t".into(), RawArguments::Value(json!("x")));
        assert_eq!(parsed.malformed_arguments.as_deref(), Some("expected a JSON object, got a string"));
    }

    #[test]
    fn missing_and_duplicate_ids_get_fresh_unique_ones() {
        let earlier = Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall::new("call_2", "t", json!({})), ToolCall::new("x", "t", json!({}))],
        };
        let mut calls = vec![
            ToolCall::new("", "t", json!({})),
            ToolCall::new("x", "t", json!({})),
            ToolCall::new("y", "t", json!({})),
            ToolCall::new("y", "t", json!({})),
            ToolCall::new("call_5", "t", json!({})),
        ];
        assign_call_ids(&mut calls, &[earlier]);
        let ids: Vec<&str> = calls.iter().map(|c| c.call_id.as_str()).collect();
        assert_eq!(ids, ["call_3", "call_4", "y", "call_6", "call_5"]);
    }
}
