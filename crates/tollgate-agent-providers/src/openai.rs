//! The OpenAI-compatible Chat Completions adapter (`kind = "openai"`): OpenAI, Ollama, vLLM, llama.cpp
//! server, LM Studio, OpenRouter, Groq, Mistral.
//!
//! Requests go to `POST {base_url}/chat/completions` with `Authorization: Bearer KEY` when a key is set.
//! Our transcript maps onto the wire one to one: the system prompt first, each assistant turn with its
//! `tool_calls` (arguments re-encoded as the JSON string the API expects, or the model's raw text for
//! arguments that were not valid JSON), and each result as a `role: "tool"` message carrying its
//! `tool_call_id`, in the order the loop recorded them — the call order. A tool message carries text
//! only: a result's images go as the lines its text already has for them (`[image: image/png, 12 KB]`,
//! [`tollgate_agent_core::image`]); compatible servers differ too much in what they see to send more.

use crate::answer::{RawArguments, assign_call_ids, empty_answer, tool_call};
use crate::http::{Endpoint, FixedHeader, ProviderError, ProviderFailure, ProviderSettings};
use crate::stream::{Assembler, Flow, event_json};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::fmt;
use tollgate_agent_core::{
    BoxFuture, CallId, FinishReason, Message, ModelClient, ModelDelta, ModelDeltas, ModelError, ModelRequest,
    ModelResponse, NoDeltas, ToolCall, ToolSpec, Usage,
};

/// OpenAI's own endpoint, used when the settings name no `base_url`.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A model behind an OpenAI-compatible Chat Completions API.
pub struct OpenAiModel {
    endpoint: Endpoint,
}

impl fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiModel").field("endpoint", &self.endpoint).finish()
    }
}

impl OpenAiModel {
    /// An adapter for the server the settings describe ([`OPENAI_DEFAULT_BASE_URL`] when they name none).
    pub fn new(settings: ProviderSettings) -> Result<Self, ProviderError> {
        let headers = settings
            .api_key
            .iter()
            .map(|key| FixedHeader { name: "authorization", value: format!("Bearer {}", key.expose()), secret: true })
            .collect();
        let endpoint = Endpoint::new(
            "openai",
            &settings,
            OPENAI_DEFAULT_BASE_URL,
            "/chat/completions",
            headers,
            is_context_length,
        )?;
        Ok(Self { endpoint })
    }

    /// The address requests go to.
    pub fn url(&self) -> &str {
        self.endpoint.url()
    }

    async fn call(&self, request: ModelRequest<'_>, deltas: &dyn ModelDeltas) -> Result<ModelResponse, ModelError> {
        let answer = self.endpoint.answer::<StreamedCompletion>(request.model, request_body(&request), deltas).await?;
        self.response(answer, request.messages)
    }

    /// Our response from the provider's JSON answer; anything an error quotes from it is redacted.
    fn response(&self, answer: Value, transcript: &[Message]) -> Result<ModelResponse, ModelError> {
        parse_response(answer, transcript).map_err(|e| self.endpoint.redact_error(e))
    }

    /// What a streamed call makes of a whole event-stream body (the entry point of the stream fuzz
    /// target, [`crate::fuzzing`]).
    pub(crate) fn read_stream(
        &self,
        body: &[u8],
        transcript: &[Message],
        deltas: &dyn ModelDeltas,
    ) -> Result<ModelResponse, ModelError> {
        let answer =
            crate::stream::assemble::<StreamedCompletion>(body, deltas).map_err(|e| self.endpoint.redact_error(e))?;
        self.response(answer, transcript)
    }

    /// What [`ModelClient::complete`] makes of one HTTP answer, its status and body as received (the
    /// entry point of the fuzz targets, [`crate::fuzzing`]).
    pub(crate) fn read_answer(
        &self,
        status: u16,
        body: &[u8],
        transcript: &[Message],
    ) -> Result<ModelResponse, ModelError> {
        let answer = self.endpoint.read_answer(status, body, None)?;
        self.response(answer, transcript)
    }
}

impl ModelClient for OpenAiModel {
    fn system(&self) -> &str {
        "openai"
    }

    fn server(&self) -> Option<(&str, u16)> {
        Some(self.endpoint.server())
    }

    fn complete<'a>(&'a self, request: ModelRequest<'a>) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(self.call(request, &NoDeltas))
    }

    fn complete_streaming<'a>(
        &'a self,
        request: ModelRequest<'a>,
        deltas: &'a dyn ModelDeltas,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(self.call(request, deltas))
    }
}

/// The most tool calls one streamed turn may name (by `index`).
const MAX_STREAMED_CALLS: usize = 256;

/// A streamed chat completion (`stream: true`, usage included), built back into the plain answer:
/// `choices[0].delta` pieces concatenated (`content`, `refusal`, each tool call's `id`, `function.name`
/// and `function.arguments` by its `index`), the last `finish_reason`, and the final chunk's `usage`.
/// The stream ends with `data: [DONE]`.
#[derive(Default)]
struct StreamedCompletion {
    /// A choice chunk arrived.
    choice: bool,
    content: Option<String>,
    refusal: Option<String>,
    calls: Vec<StreamedCall>,
    finish_reason: Option<String>,
    usage: Option<Value>,
}

#[derive(Default)]
struct StreamedCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

impl Assembler for StreamedCompletion {
    fn ask_for_stream(body: &mut Map<String, Value>) {
        body.insert("stream".into(), Value::Bool(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }

    fn event(&mut self, _name: Option<&str>, data: &str, deltas: &dyn ModelDeltas) -> Result<Flow, ModelError> {
        if data.trim() == "[DONE]" {
            return Ok(Flow::Done);
        }
        let chunk = event_json(data)?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(error_in_body(error));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(usage.clone());
        }
        let Some(choice) = chunk.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
            return Ok(Flow::More);
        };
        self.choice = true;
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta") else { return Ok(Flow::More) };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            deltas.delta(ModelDelta::Text(text));
            self.content.get_or_insert_with(String::new).push_str(text);
        }
        if let Some(refusal) = delta.get("refusal").and_then(Value::as_str) {
            self.refusal.get_or_insert_with(String::new).push_str(refusal);
        }
        for (position, call) in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let index = match call.get("index").and_then(Value::as_u64) {
                Some(index) => usize::try_from(index).unwrap_or(usize::MAX),
                None => position,
            };
            if index >= MAX_STREAMED_CALLS {
                return Err(ModelError::InvalidResponse(format!(
                    "a streamed tool call has index {index}; at most {MAX_STREAMED_CALLS} calls are read"
                )));
            }
            if self.calls.len() <= index {
                self.calls.resize_with(index + 1, StreamedCall::default);
            }
            let streamed = &mut self.calls[index];
            if let Some(id) = call.get("id").and_then(Value::as_str).filter(|id| !id.is_empty()) {
                streamed.id = Some(id.to_owned());
            }
            let function = call.get("function");
            if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
                streamed.name.push_str(name);
            }
            if let Some(arguments) = function.and_then(|f| f.get("arguments")).and_then(Value::as_str) {
                streamed.arguments.push_str(arguments);
            }
        }
        Ok(Flow::More)
    }

    fn finish(self) -> Result<Value, ModelError> {
        if !self.choice {
            return Err(ModelError::InvalidResponse("the stream has no choices".into()));
        }
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (index, call) in self.calls.into_iter().enumerate() {
            // Streamed arguments must be whole JSON: a gap means pieces were lost.
            if !call.arguments.trim().is_empty() && serde_json::from_str::<Value>(&call.arguments).is_err() {
                return Err(ModelError::InvalidResponse(format!(
                    "the streamed arguments of tool call {} are not JSON",
                    index + 1
                )));
            }
            tool_calls.push(json!({
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }));
        }
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), json!(self.content));
        message.insert("refusal".into(), json!(self.refusal));
        if !tool_calls.is_empty() {
            message.insert("tool_calls".into(), Value::Array(tool_calls));
        }
        Ok(json!({
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        }))
    }
}

/// OpenAI names the problem `context_length_exceeded`; compatible servers say it in words.
fn is_context_length(failure: &ProviderFailure) -> bool {
    if failure.code.as_deref() == Some("context_length_exceeded") {
        return true;
    }
    let message = failure.message.to_lowercase();
    ["context length", "context_length", "context window", "context size", "maximum context"]
        .iter()
        .any(|phrase| message.contains(phrase))
}

/// The JSON body for one request.
pub(crate) fn request_body(request: &ModelRequest<'_>) -> Value {
    let messages: Vec<Value> = request.messages.iter().map(wire_message).collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages));
    // OpenAI rejects an empty `tools` array; no tools means the key is left out.
    if !request.tools.is_empty() {
        body.insert("tools".into(), Value::Array(request.tools.iter().map(wire_tool).collect()));
    }
    Value::Object(body)
}

fn wire_message(message: &Message) -> Value {
    match message {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant { content, tool_calls } if tool_calls.is_empty() => {
            json!({"role": "assistant", "content": content.as_deref().unwrap_or_default()})
        }
        Message::Assistant { content, tool_calls } => json!({
            "role": "assistant",
            "content": content,
            "tool_calls": tool_calls.iter().map(wire_call).collect::<Vec<_>>(),
        }),
        Message::Tool(result) => {
            json!({"role": "tool", "tool_call_id": result.call_id, "content": result.content})
        }
    }
}

fn wire_call(call: &ToolCall) -> Value {
    // A malformed call keeps the model's raw text, so the model sees exactly what it sent.
    let arguments = match &call.arguments {
        Value::String(raw) if call.malformed_arguments.is_some() => raw.clone(),
        arguments => arguments.to_string(),
    };
    json!({
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    })
}

fn wire_tool(tool: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    })
}

#[derive(Deserialize)]
struct ChatCompletion {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<ChoiceMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: Option<CallId>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Deserialize)]
struct ChatUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

/// Reads a Chat Completions answer into our response.
pub(crate) fn parse_response(answer: Value, transcript: &[Message]) -> Result<ModelResponse, ModelError> {
    let completion: ChatCompletion = serde_json::from_value(answer)
        .map_err(|e| ModelError::InvalidResponse(format!("not a chat completion: {e}")))?;
    let choice = match (completion.choices, completion.error) {
        (Some(choices), _) if !choices.is_empty() => choices.into_iter().next(),
        // Some compatible servers answer an error with HTTP 200.
        (_, Some(error)) => return Err(error_in_body(&error)),
        _ => None,
    };
    let choice = choice.ok_or_else(|| ModelError::InvalidResponse("the answer has no choices".into()))?;
    let message =
        choice.message.ok_or_else(|| ModelError::InvalidResponse("the first choice has no message".into()))?;
    if let Some(refusal) = message.refusal.filter(|r| !r.trim().is_empty()) {
        return Err(ModelError::Refusal(refusal));
    }
    let text = message.content.as_ref().and_then(content_text).filter(|t| !t.is_empty());
    let mut tool_calls = Vec::new();
    for (index, call) in message.tool_calls.unwrap_or_default().into_iter().enumerate() {
        let function = call
            .function
            .ok_or_else(|| ModelError::InvalidResponse(format!("tool call {} has no function", index + 1)))?;
        let name = function
            .name
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ModelError::InvalidResponse(format!("tool call {} names no function", index + 1)))?;
        let arguments = match function.arguments {
            Some(Value::String(text)) => RawArguments::Text(text),
            Some(value) => RawArguments::Value(value),
            None => RawArguments::Value(Value::Null),
        };
        tool_calls.push(tool_call(call.id, name, arguments));
    }
    assign_call_ids(&mut tool_calls, transcript);
    let finish_reason = finish_reason(choice.finish_reason.as_deref(), !tool_calls.is_empty());
    if text.is_none() && tool_calls.is_empty() {
        return Err(empty_answer(&finish_reason));
    }
    let usage = completion.usage.map_or_else(Usage::default, |u| Usage {
        input_tokens: u.prompt_tokens.unwrap_or_default(),
        output_tokens: u.completion_tokens.unwrap_or_default(),
    });
    Ok(ModelResponse { text, tool_calls, usage, finish_reason })
}

/// `content` is a string, or on some servers an array of `{"type": "text", "text": ...}` parts.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect();
            (!texts.is_empty()).then(|| texts.concat())
        }
        _ => None,
    }
}

fn finish_reason(reason: Option<&str>, has_calls: bool) -> FinishReason {
    match reason {
        Some("stop") => FinishReason::Stop,
        // `function_call` is the legacy name.
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        Some(other) => {
            tracing::warn!(provider = "openai", finish_reason = other, "unknown finish reason");
            FinishReason::Other(other.to_owned())
        }
        None if has_calls => FinishReason::ToolCalls,
        None => FinishReason::Stop,
    }
}

fn error_in_body(error: &Value) -> ModelError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .map_or_else(|| error.to_string(), str::to_owned);
    let code = error.get("code").and_then(Value::as_str).map(str::to_owned);
    let failure = ProviderFailure { status: 200, message, code };
    if is_context_length(&failure) {
        ModelError::ContextLength(failure.message)
    } else {
        ModelError::InvalidResponse(format!("the provider answered with an error: {}", failure.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_agent_core::ToolResult;

    fn parse(answer: Value) -> Result<ModelResponse, ModelError> {
        parse_response(answer, &[])
    }

    fn with_message(message: Value, finish_reason: &str) -> Value {
        json!({"choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]})
    }

    #[test]
    fn a_malformed_call_is_sent_back_with_the_models_raw_text() {
        let mut call = ToolCall::new("c1", "fs_write", Value::String("{\"path\": ".into()));
        call.malformed_arguments = Some("EOF while parsing".into());
        let messages = [
            Message::Assistant { content: None, tool_calls: vec![call] },
            Message::Tool(ToolResult {
                call_id: "c1".into(),
                tool: "fs_write".into(),
                content: "Tool fs_write was not run: its arguments are not valid JSON (EOF while parsing).".into(),
                is_error: true,
                denied: false,
                images: Vec::new(),
            }),
        ];
        let body = request_body(&ModelRequest { model: "m", messages: &messages, tools: &[] });
        assert_eq!(body["messages"][0]["tool_calls"][0]["function"]["arguments"], json!("{\"path\": "));
        assert_eq!(body["messages"][1]["tool_call_id"], json!("c1"));
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn finish_reasons_are_typed() {
        let text = |reason| parse(with_message(json!({"content": "hi"}), reason)).map(|r| r.finish_reason);
        assert_eq!(text("stop"), Ok(FinishReason::Stop));
        assert_eq!(text("length"), Ok(FinishReason::Length));
        assert_eq!(text("content_filter"), Ok(FinishReason::ContentFilter));
        assert_eq!(text("eos"), Ok(FinishReason::Other("eos".into())));
    }

    #[test]
    fn empty_and_odd_answers_are_typed_errors() {
        assert!(matches!(parse(json!({"choices": []})), Err(ModelError::InvalidResponse(_))));
        assert!(matches!(parse(json!({"choices": [{"finish_reason": "stop"}]})), Err(ModelError::InvalidResponse(_))));
        assert!(matches!(parse(json!([1, 2])), Err(ModelError::InvalidResponse(_))));
        assert!(matches!(
            parse(with_message(json!({"content": null}), "length")),
            Err(ModelError::InvalidResponse(m)) if m.contains("output token limit")
        ));
        assert!(matches!(parse(with_message(json!({"content": ""}), "content_filter")), Err(ModelError::Refusal(_))));
        assert_eq!(
            parse(with_message(json!({"content": null, "refusal": "I can't help with that."}), "stop")),
            Err(ModelError::Refusal("I can't help with that.".into()))
        );
        assert!(matches!(
            parse(json!({"error": {"message": "This model's maximum context length is 8192 tokens"}})),
            Err(ModelError::ContextLength(_))
        ));
    }

    #[test]
    fn content_parts_and_object_arguments_are_accepted() {
        let answer = with_message(
            json!({
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                "tool_calls": [{"id": "x", "type": "function", "function": {"name": "t", "arguments": {"k": 1}}}],
            }),
            "tool_calls",
        );
        let response = parse(answer).unwrap_or_default();
        assert_eq!(response.text.as_deref(), Some("ab"));
        assert_eq!(response.tool_calls, vec![ToolCall::new("x", "t", json!({"k": 1}))]);
    }

    #[test]
    fn context_length_is_recognised_by_code_or_words() {
        let failure = |code: Option<&str>, message: &str| ProviderFailure {
            status: 400,
            message: message.into(),
            code: code.map(str::to_owned),
        };
        assert!(is_context_length(&failure(Some("context_length_exceeded"), "too long")));
        assert!(is_context_length(&failure(None, "the request exceeds the available context size")));
        assert!(!is_context_length(&failure(Some("invalid_value"), "temperature must be below 2")));
    }
}
